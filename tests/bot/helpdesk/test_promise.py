"""The handoff reply promises what the helpdesk can do in that place: a reply in the thread only where
staff can post (a channel's thread); in a DM, a personal chat or a group chat, how they will reach the person."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from adapters.slack.inbound import BotIdentity
from adapters.slack.inbound import to_inbound as slack_inbound
from adapters.teams.activity import to_inbound as teams_inbound
from bot.helpdesk import HandoffCase
from bot.helpdesk.case import staff_can_post
from bot.types import GaveUp, Inbound, UserRef
from tests.bot.helpers import ALICE, BOB, service, two_searches
from tests.fakes.bot_connector import ALICE as TEAMS_ALICE
from tests.fakes.bot_connector import FakeBotConnector
from tests.fakes.openai_server import text
from tests.fakes.slack_api import dm_event, event_envelope, mention_event

IN_THREAD = "someone will reply in this thread"
BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T0TEAM")
_events = itertools.count()


def case(platform: str, channel: str, thread: str, user: UserRef = ALICE, reason: str = "step_budget") -> HandoffCase:
    return HandoffCase("HD-1001", datetime(2026, 1, 5, tzinfo=UTC), reason, user, platform, channel, thread, None, "q?")


# --- where staff can post -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "channel", "thread", "reachable"),
    [
        ("slack", "C0GENERAL", "1711000000.000100", True),  # a channel's thread
        ("slack", "D0ALICE", "1711000000.000100", False),  # a DM with the app (assistant threads too)
        ("slack", "G0GROUP", "1711000000.000100", False),  # a group DM
        ("teams", "19:general@thread.tacv2", "1700001", True),  # a channel's reply chain
        ("teams", "a:personal-29:alice", "a:personal-29:alice", False),  # a personal chat with the bot
        ("teams", "19:chat@thread.v2", "19:chat@thread.v2", False),  # a group chat
        ("console", "terminal", "t1", False),
    ],
)
def test_staff_can_post_only_in_a_channels_thread(platform, channel, thread, reachable):
    assert staff_can_post(platform, channel, thread) is reachable


def test_a_channel_thread_is_promised_a_reply_there():
    assert case("slack", "C0GENERAL", "1711000000.000100").message == (
        "I've passed this to the helpdesk as case HD-1001; someone will reply in this thread within one working day."
    )
    assert IN_THREAD in case("teams", "19:general@thread.tacv2", "1700001").message


@pytest.mark.parametrize(
    ("platform", "channel", "thread"),
    [("slack", "D0ALICE", "1711000000.000100"), ("teams", "a:personal-29:alice", "a:personal-29:alice")],
)
def test_a_dm_or_personal_chat_is_promised_email_when_the_address_is_known(platform, channel, thread):
    message = case(platform, channel, thread).message
    assert IN_THREAD not in message
    assert "someone will reply by email to alice@example.com within one working day" in message


@pytest.mark.parametrize(
    ("platform", "channel", "thread", "name"),
    [
        ("slack", "D0BOB", "1711000000.000100", "Slack"),
        ("teams", "a:personal-29:bob", "a:personal-29:bob", "Teams"),
        ("teams", "19:chat@thread.v2", "19:chat@thread.v2", "Teams"),
    ],
)
def test_without_an_address_the_promise_is_a_direct_message_on_the_platform(platform, channel, thread, name):
    message = case(platform, channel, thread, user=BOB).message
    assert IN_THREAD not in message
    assert f"someone will contact you directly in {name} within one working day" in message


# --- through the service, from what each adapter makes of a real event --------------------------------


def slack_place(kind: str, user: UserRef = ALICE) -> Inbound:
    if kind == "channel":
        event = mention_event("U_ALICE", "<@UBOT> do I need receipts?", channel="C0GENERAL")
    else:
        event = dm_event("U_ALICE", "do I need receipts?", channel="D0ALICE")
    return slack_inbound(event, event_envelope(event), user, BOT, None)


def teams_place(kind: str, user: UserRef = ALICE) -> Inbound:
    channel = FakeBotConnector()  # only its activity builders: nothing is served
    activity = (
        channel.channel_message("do I need receipts?")
        if kind == "channel"
        else channel.personal_message("do I need receipts?", sender=TEAMS_ALICE)
    )
    return teams_inbound(activity, user)


PLACES = {"slack": slack_place, "teams": teams_place}


@pytest.mark.asyncio
@pytest.mark.parametrize("platform", ["slack", "teams"])
@pytest.mark.parametrize(("kind", "promise"), [("channel", IN_THREAD), ("private", "reply by email to alice@")])
async def test_a_give_up_promises_what_the_helpdesk_can_do_in_that_place(
    tmp_path, fake_openai, sample_index, platform, kind, promise
):
    fake_openai.script(*two_searches())
    async with service(tmp_path, fake_openai, sample_index, max_steps=2) as svc:
        reply = await svc.handle_message(PLACES[platform](kind))
    assert isinstance(reply.outcome, GaveUp) and reply.outcome.case_id == "HD-1001"
    assert promise in reply.outcome.text
    if kind == "private":
        assert IN_THREAD not in reply.outcome.text


@pytest.mark.asyncio
@pytest.mark.parametrize("platform", ["slack", "teams"])
async def test_still_need_help_in_a_private_chat_promises_a_direct_message(
    tmp_path, fake_openai, sample_index, platform
):
    inbound = PLACES[platform]("private", BOB)  # no email address known
    fake_openai.script(text("Economy class for flights under 6 hours."))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        await svc.handle_message(inbound)
        handed = await svc.request_handoff(inbound.conversation_key, BOB)
    assert IN_THREAD not in handed.message
    assert f"someone will contact you directly in {platform.title()}" in handed.message
