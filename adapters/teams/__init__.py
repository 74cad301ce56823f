"""Microsoft Teams on botbuilder: a CloudAdapter at /api/messages in the shared aiohttp app.

Activities -> the inbox -> ``Inbound`` -> service; its outbox rows -> messages and Adaptive Cards
(Universal Actions for Confirm and Cancel) through ``sender``; the helpdesk channel as a handoff
destination; the app package an admin uploads. Only ``app`` imports the Bot Framework SDK.
"""

from adapters.teams.app import TEAMS, add_teams_routes, auth_mode, connector_for
from adapters.teams.helpdesk import TeamsChannelDestination, teams_destination
from adapters.teams.package import write_package
from adapters.teams.sender import TeamsSender

__all__ = [
    "TEAMS",
    "TeamsChannelDestination",
    "TeamsSender",
    "add_teams_routes",
    "auth_mode",
    "connector_for",
    "teams_destination",
    "write_package",
]
