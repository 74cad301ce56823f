"""Who counts as a guest: Slack's restricted users, and people of another organisation (Slack Connect)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.slack.inbound import BotIdentity
from adapters.slack.users import user_ref
from bot.identity import GroupMap

HOME = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T0ACME")
GRID_HOME = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T0ACME", enterprise_id="E0ACME")


def member(**fields: Any) -> dict[str, Any]:
    return {"id": "U1", "name": "pat", "team_id": "T0ACME", "profile": {"email": "pat@example.com"}, **fields}


@pytest.mark.parametrize(
    ("user", "home", "guest"),
    [
        (member(), HOME, False),
        (member(is_restricted=True), HOME, True),
        (member(is_ultra_restricted=True), HOME, True),
        (member(team_id="T0VENDOR"), HOME, True),  # Slack Connect: the vendor's own workspace
        (member(is_stranger=True), HOME, True),  # Slack's word for it
        (member(team_id="T0ACME2", enterprise_user={"enterprise_id": "E0ACME"}), GRID_HOME, False),  # one company
        (member(team_id="T0VENDOR", enterprise_user={"enterprise_id": "E0VENDOR"}), GRID_HOME, True),
        (member(team_id="T0VENDOR", enterprise_user={"enterprise_id": "E0ACME"}), HOME, True),  # no Grid here
        (member(team_id=None), HOME, False),  # no team: nothing says they are from elsewhere
    ],
    ids=["member", "guest", "single-channel guest", "other org", "stranger", "same grid", "other grid",
         "bot not on grid", "no team"],
)
def test_guests_are_the_restricted_and_other_organisations_people(user: dict[str, Any], home: BotIdentity,
                                                                   guest: bool) -> None:
    assert user_ref(user, GroupMap(), home).is_guest is guest
