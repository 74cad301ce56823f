"""Slack end to end: a reply whose post may have gone through on a failed attempt is never posted twice.

Slack can carry out a write and still answer it with a 5xx, drop the connection before its answer, or
answer after the session's deadline (``FakeSlackAPI.lose_answer``): the write must not be repeated
blindly, within the call (slack_sdk's retry handlers) or after it (the outbox). In the thread, and in
the person's DM (a reply the thread could not take, the private part of an answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from adapters.slack import app as slack_app
from adapters.slack.post import slack_session
from bot.delivery import OutboxPolicy
from tests.adapters.slack.test_app import ALICE, SlackRig, answer, running_slack, search
from tests.adapters.slack.test_audience import HANA, AudienceSearcher
from tests.adapters.slack.test_audience import rig as audience_rig
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import dm_event, event_envelope, mention_event

pytestmark = pytest.mark.asyncio

RETRY_AT_ONCE = OutboxPolicy(max_attempts=4, backoff_s=0.05, max_backoff_s=0.05, stale_after_s=60.0)
TICKET = {"category": "hardware", "summary": "Laptop screen broken", "urgency": "normal"}
DEADLINE_S = 2.0  # each Web API call's, here: an answer later than this is lost to a timeout
LOST_ANSWERS = {
    "a 500": {"status": 500},
    "a 503": {"status": 503, "error": "service_unavailable"},
    "a dropped connection": {"drop": True},
    "a timeout": {"late_s": 60},
}


@pytest_asyncio.fixture
async def slack(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SlackRig]:
    monkeypatch.setattr(slack_app, "slack_session", lambda: slack_session(DEADLINE_S))
    async for rig in running_slack(tmp_path, fake_openai, monkeypatch):
        rig.service.outbox.post_policy = RETRY_AT_ONCE
        yield rig


@pytest_asyncio.fixture
async def ai_slack(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SlackRig]:
    """A workspace where answers are streamed."""
    async for rig in running_slack(tmp_path, fake_openai, monkeypatch, streaming=True):
        rig.service.outbox.post_policy = RETRY_AT_ONCE
        yield rig


async def settled(rig: SlackRig, thread_ts: str, channel: str = "D0ALICE", *, rows: int = 1) -> list[str]:
    """The states of the thread's outbox rows, once there are ``rows`` and none is waiting for another attempt."""
    key = f"slack:T0TEAM:{channel}:{thread_ts}"
    async with asyncio.timeout(15):  # a hang guard, not a measure
        while True:
            found = await rig.service.store.outbox.of_conversation(key)
            if len(found) >= rows and all(row.state in ("delivered", "failed") for row in found):
                return [row.state for row in found]
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("lost", LOST_ANSWERS.values(), ids=LOST_ANSWERS.keys())
async def test_an_answer_slack_took_whose_response_was_lost_is_not_posted_again(
    slack: SlackRig, lost: dict[str, Any]
) -> None:
    slack.slack.lose_answer("chat.postMessage", **lost)  # Slack posted it, and its answer is lost
    slack.model.script(answer())
    event = dm_event(ALICE, "Can I work from abroad?")
    await slack.send(event_envelope(event))
    assert await settled(slack, event["ts"]) == ["delivered"]
    assert len(slack.slack.threads[("D0ALICE", event["ts"])]) == 1  # the answer once, not twice
    assert slack.slack.calls_to("conversations.replies")  # the retry looked before posting


async def test_a_card_whose_place_was_not_recorded_is_not_posted_again(
    slack: SlackRig, monkeypatch: pytest.MonkeyPatch
):
    real_card_posted, failed = slack.service.card_posted, []

    async def fails_once(*args: Any, **kwargs: Any) -> Any:
        if not failed:
            failed.append(args)
            raise ConnectionError("database went away")  # after chat.postMessage took the card
        return await real_card_posted(*args, **kwargs)

    monkeypatch.setattr(slack.service, "card_posted", fails_once)
    slack.model.script(tool_calls(("create_it_ticket", TICKET)))
    event = dm_event(ALICE, "My laptop screen is broken, please open a ticket")
    await slack.send(event_envelope(event))
    assert await settled(slack, event["ts"]) == ["delivered"]
    cards = [m for m in slack.slack.threads[("D0ALICE", event["ts"])] if m["text"].startswith("Please confirm")]
    assert len(cards) == 1  # one card with Confirm and Cancel, not two


async def test_a_streamed_answer_whose_append_answer_was_lost_shows_each_passage_once(ai_slack: SlackRig) -> None:
    words = " ".join(f"Passage {n} of the travel policy applies here." for n in range(40))
    ai_slack.slack.lose_answer("chat.appendStream", status=500)  # appended, and Slack answered 500
    ai_slack.model.script(text(words))
    event = dm_event(ALICE, "What does the travel policy say?", thread_ts="1690000000.000031")
    await ai_slack.send(event_envelope(event))
    assert await settled(ai_slack, event["thread_ts"]) == ["delivered"]
    (ts,) = ai_slack.slack.streams
    assert shown(ai_slack, ts) == words


def shown(rig: SlackRig, ts: str) -> str:
    """What a streamed message shows at the end: the last update's markdown, or else the stream's own text."""
    updates = [c for c in rig.slack.delivered("chat.update") if c["ts"] == ts]
    if not updates:
        return rig.slack.streams[ts].text
    return "".join(b["text"] for b in updates[-1].blocks if b["type"] == "markdown")


async def test_an_answer_slack_took_in_a_thread_of_hundreds_of_messages_is_found_not_posted_again(
    slack: SlackRig,
) -> None:
    root = "1690000000.000050"
    earlier = [{"type": "message", "ts": f"{1_690_000_100 + n}.000100", "user": ALICE, "text": f"note {n}",
                "thread_ts": root} for n in range(450)]  # fmt: skip
    slack.slack.threads[("D0ALICE", root)].extend(earlier)  # more than one page of conversations.replies
    slack.slack.lose_answer("chat.postMessage", status=500)
    slack.model.script(answer())
    await slack.send(event_envelope(dm_event(ALICE, "Can I work from abroad?", thread_ts=root)))
    assert await settled(slack, root) == ["delivered"]
    ours = [m for m in slack.slack.threads[("D0ALICE", root)] if m.get("user") == "UBOT"]
    assert len(ours) == 1  # the answer once, found on the thread's last page


def in_dm(rig: SlackRig, user: str) -> list[dict[str, Any]]:
    """The bot's messages in the person's DM with the app (where a post to their user id lands)."""
    dm = "D" + user[1:]
    return [m for (channel, _), thread in rig.slack.threads.items() if channel == dm for m in thread]


@pytest.mark.parametrize("lost", LOST_ANSWERS.values(), ids=LOST_ANSWERS.keys())
async def test_a_reply_sent_to_the_dm_that_slack_took_whose_response_was_lost_is_not_posted_again(
    slack: SlackRig, lost: dict[str, Any]
) -> None:
    slack.slack.fail("chat.postMessage", "channel_not_found", times=2)  # the reply, then the note in its place
    slack.slack.lose_answer("chat.postMessage", **lost, where=lambda params: params.get("channel") == ALICE)
    slack.model.script(answer())
    event = mention_event(ALICE, "<@UBOT> can I work abroad?", channel="C0PRIVATE")
    await slack.send(event_envelope(event))
    states = await settled(slack, event["ts"], "C0PRIVATE", rows=3)  # the reply, the note, the note to her DM
    assert states == ["failed", "failed", "delivered"]
    (note,) = in_dm(slack, ALICE)  # told once in her DM, not twice
    assert "<#C0PRIVATE>" in note["text"]
    assert slack.slack.calls_to("conversations.history")  # the retry looked in the DM before posting


@pytest.mark.parametrize("lost", [{"status": 500}, {"drop": True}], ids=["a 500", "a dropped connection"])
async def test_the_private_part_of_an_answer_slack_took_whose_response_was_lost_is_sent_once(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, lost: dict[str, Any]
) -> None:
    fake_openai.script(
        search(),
        text("Announced on the intranet [Leave Policy › Team changes]."),
        search(),
        text("They merge into one Operations team [Reorg Plan › Team changes]."),
    )
    started, hr = await audience_rig(tmp_path, fake_openai, monkeypatch, AudienceSearcher())
    hr.service.outbox.post_policy = RETRY_AT_ONCE
    hr.slack.lose_answer("chat.postMessage", **lost, where=lambda params: params.get("channel") == HANA)
    try:
        event = mention_event(HANA, "<@UBOT> what team changes are planned?")
        await hr.send(event_envelope(event))
        states = await settled(hr, event["ts"], "C0GENERAL", rows=2)
    finally:
        await anext(started, None)
    assert states == ["delivered", "delivered"]  # the thread's answer, and the private part
    (private,) = in_dm(hr, HANA)  # once, though the first try's answer was lost
    assert "Operations team" in private["text"]
    assert hr.slack.calls_to("conversations.history")  # the retry looked in her DM before posting
