"""Which Slack events start a run, and the Inbound they become."""

from __future__ import annotations

import pytest

from adapters.slack.inbound import BotIdentity, question_text, skip_reason, to_inbound
from bot.types import UserRef

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T0TEAM")


def message(**fields):
    return {"type": "message", "channel_type": "im", "channel": "D1", "user": "U1", "text": "hi", "ts": "1.1", **fields}


@pytest.mark.parametrize(
    "event",
    [
        message(),
        message(subtype="file_share"),
        message(subtype="thread_broadcast", thread_ts="1.0"),
        {"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT> hi", "ts": "1.1"},
    ],
)
def test_people_asking_start_runs(event):
    assert skip_reason(event, BOT) is None


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (message(bot_id="B2"), "bot"),
        (message(subtype="bot_message"), "bot"),
        (message(user="UBOT"), "not from a person"),
        (message(subtype="message_changed"), "subtype"),
        (message(subtype="message_deleted"), "subtype"),
        (message(edited={"user": "U1", "ts": "1.2"}), "edit"),
        (message(channel_type="channel", channel="C1"), "without a mention"),
        ({"type": "app_mention", "channel": "D1", "user": "U1", "text": "<@UBOT>", "ts": "1"}, "in a DM"),
    ],
)
def test_bots_edits_deletions_and_unmentioned_messages_do_not(event, why):
    assert why in skip_reason(event, BOT)


def test_the_question_loses_the_bot_mention_and_slack_markup():
    text = "<@UBOT|policypal>  can <@U2> see <#C9|finance> &amp; <https://x.example/a|this doc>? <!here>"
    assert question_text(text, "UBOT") == "can @U2 see #finance & this doc (https://x.example/a)? @here"


def test_a_user_group_mention_reads_as_its_name_once() -> None:
    assert question_text("<@UBOT> can <!subteam^S0HR|@hr-team> approve this?", "UBOT") == "can @hr-team approve this?"


def test_inbound_keys_a_conversation_by_team_channel_and_thread_root():
    user = UserRef("U1")
    body = {"team_id": "T0TEAM", "event_id": "Ev1"}
    reply = to_inbound(message(thread_ts="1.0", ts="1.5"), body, user, BOT, "https://acme.slack.com/x")
    assert reply.conversation_key == "slack:T0TEAM:D1:1.0"
    assert (reply.event_id, reply.link, reply.platform) == ("Ev1", "https://acme.slack.com/x", "slack")
    assert to_inbound(message(ts="2.0"), body, user, BOT, None).thread == "2.0"
