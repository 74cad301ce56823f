"""Slack: slack-bolt's AsyncApp at /slack/events on the shared aiohttp app (and Socket Mode).

Slack event -> ``Inbound`` -> service -> Block Kit in the thread; ticket cards with Confirm and
Cancel; the helpdesk channel as a handoff destination; the outbox's sender for Slack.
"""

from adapters.slack.app import EVENTS_PATH, SLACK, SlackCredentials, add_slack_routes, slack_credentials, verify_token
from adapters.slack.helpdesk import SlackChannelDestination
from adapters.slack.post import web_client
from adapters.slack.sender import SlackSender

__all__ = [
    "EVENTS_PATH",
    "SLACK",
    "SlackChannelDestination",
    "SlackCredentials",
    "SlackSender",
    "add_slack_routes",
    "slack_credentials",
    "verify_token",
    "web_client",
]
