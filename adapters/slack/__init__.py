"""Slack: slack-bolt's AsyncApp at /slack/events on the shared aiohttp app (and Socket Mode).

Slack event -> ``Inbound`` -> service -> Block Kit in the thread; ticket cards with Confirm and
Cancel; the helpdesk channel as a handoff destination; notices after a request ended.
"""

from adapters.slack.app import EVENTS_PATH, SLACK, SlackCredentials, add_slack_routes, slack_credentials, verify_token
from adapters.slack.helpdesk import SlackChannelDestination
from adapters.slack.notify import SlackNotifier
from adapters.slack.post import web_client

__all__ = [
    "EVENTS_PATH",
    "SLACK",
    "SlackChannelDestination",
    "SlackCredentials",
    "SlackNotifier",
    "add_slack_routes",
    "slack_credentials",
    "verify_token",
    "web_client",
]
