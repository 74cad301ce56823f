"""Conversation updates and Teams' own invokes at their edges, end to end on the fake connector."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.teams.activity import conversation_type
from tests.adapters.teams.test_app import Teams, install
from tests.fakes.bot_connector import ALICE, BOT_ID

pytestmark = pytest.mark.asyncio


async def test_an_install_that_adds_someone_the_roster_cannot_find_still_welcomes_once(teams: Teams):
    """Teams may list the user beside the bot; the SDK looked each one up and a refusal lost the welcome."""
    activity = install(teams)
    activity["membersAdded"] = [{"id": "29:newcomer", "aadObjectId": "aad-new"}, {"id": BOT_ID}]
    status, _ = await teams.post(activity)
    welcome = await teams.reply()
    await teams.settle()
    assert status in (200, 201)
    assert welcome.text.startswith("Hi, I'm **PolicyPal**") and len(teams.channel.messages()) == 1
    assert teams.channel.member_lookups == []  # nobody's profile is needed to greet or to stay quiet


async def test_someone_joining_a_team_during_a_roster_outage_is_acknowledged_quietly(teams: Teams):
    activity = install(teams, member_id="29:someone-else", conversation_type="channel")
    teams.channel.fail_for(30, 503, roster=True)
    status, _ = await teams.post(activity)
    teams.channel.fail_for(0)
    await teams.settle()
    assert status in (200, 201) and teams.channel.messages() == [] and teams.channel.member_lookups == []


def feedback_invoke(teams: Teams, value: Any) -> dict[str, Any]:
    conversation = {"id": f"a:personal-{ALICE['id']}", "conversationType": "personal"}
    return teams.channel.activity(conversation, ALICE, type="invoke", name="message/submitAction", value=value,
                                  replyToId="out-1")


@pytest.mark.parametrize(
    "value",
    [
        "not an object",
        {"actionName": "feedback", "actionValue": "like"},
    ],
)
async def test_a_malformed_feedback_vote_is_answered_200_and_stores_nothing(teams: Teams, value: Any):
    """Anything but a 200 makes Teams show the voter an error; a vote we cannot read is ignored (and logged)."""
    status, _ = await teams.post(feedback_invoke(teams, value))
    assert status == 200
    assert teams.model.requests == []


@pytest.mark.parametrize(
    ("conversation", "channel_data", "kind"),
    [
        ({"id": "a:1", "conversationType": "personal"}, {}, "personal"),
        ({"id": "19:x@thread.tacv2"}, {"channel": {"id": "19:x@thread.tacv2"}}, "channel"),
        ({"id": "a:1", "isGroup": False}, {}, "personal"),
        ({"id": "19:chat@thread.v2", "isGroup": True}, {}, "groupChat"),
        ({"id": "19:chat@thread.v2"}, {}, "groupChat"),  # says nothing: shared, never the asker's own groups
    ],
)
async def test_a_conversation_that_does_not_say_its_type_is_taken_as_shared(
    conversation: dict[str, object], channel_data: dict[str, object], kind: str
) -> None:
    assert conversation_type({"conversation": conversation, "channelData": channel_data}) == kind
