"""Microsoft Teams on botbuilder: a CloudAdapter at /api/messages in the shared aiohttp app.

Activities -> ``Inbound`` -> service -> messages and Adaptive Cards (Universal Actions for Confirm
and Cancel); the helpdesk channel as a handoff destination; proactive notices; the app package an
admin uploads. Only ``app`` imports the Bot Framework SDK.
"""

from adapters.teams.app import TEAMS, add_teams_routes, auth_mode, connector_for
from adapters.teams.helpdesk import TeamsChannelDestination, teams_destination
from adapters.teams.notify import TeamsNotifier
from adapters.teams.package import write_package

__all__ = [
    "TEAMS",
    "TeamsChannelDestination",
    "TeamsNotifier",
    "add_teams_routes",
    "auth_mode",
    "connector_for",
    "teams_destination",
    "write_package",
]
