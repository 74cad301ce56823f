"""The Slack helpdesk channel, through the fake Slack Web API: what the helpdesk reads of a long question,
and each message of a case posted once though Slack took a post whose answer was lost."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError

from adapters.slack.helpdesk import CHUNK_CHARS, SlackChannelDestination, transcript_chunks
from bot.helpdesk import HandoffCase
from bot.store import utcnow
from bot.types import UserRef
from tests.bot.helpdesk.test_destinations import RETRY_SOON, case_outbox, queued
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.asyncio

HELPDESK = "C0HELPDESK"
LOST_ANSWERS = {
    "a 500": {"status": 500},
    "a 503": {"status": 503, "error": "service_unavailable"},
    "a dropped connection": {"drop": True},
}
# One line, as a pasted error log or a long paragraph arrives: longer than a transcript part.
QUESTION = " ".join(f"line{n:04d} <failed> & retried" for n in range(300))


def long_question_case() -> HandoffCase:
    return HandoffCase(
        case_id="HD-2001",
        created_at=datetime(2025, 3, 4, 9, 30, tzinfo=UTC),
        reason="step_budget",
        user=UserRef("U_ALICE", "Alice", "alice@example.com"),
        platform="slack",
        channel="C0GENERAL",
        thread="1711000000.000100",
        link="https://acme.slack.com/archives/C0GENERAL/p1711000000000100",
        question=QUESTION,
        transcript={"runs": [{"run_id": "run_1", "reason": "step_budget", "question": QUESTION, "trace": []}]},
    )


async def test_a_question_longer_than_a_transcript_part_reaches_the_helpdesk_whole():
    assert len(QUESTION) > CHUNK_CHARS
    async with FakeSlackAPI() as slack:
        destination = SlackChannelDestination.from_token(slack.token, "C0HELPDESK", base_url=slack.base_url)
        await destination.deliver(long_question_case())
    summary, *thread = slack.calls_to("chat.postMessage")
    transcript = html.unescape("".join(call["text"].removeprefix("```\n").removesuffix("\n```") for call in thread))
    assert "".join(transcript.split("\n")).count(QUESTION) == 1  # every word of it, in order, across the parts
    shown = summary.block_text
    assert "line0000 &lt;failed&gt; &amp; retried" in shown and "line0299" not in shown
    assert "cut here" in shown  # the summary says it shows only the start


async def deliver_until_done(destination: SlackChannelDestination, case: HandoffCase) -> str | None:
    """Deliver as the outbox does: a failed attempt is tried again (here at once, in this process)."""
    for _ in range(2):
        try:
            return await destination.deliver(case)
        except (SlackApiError, aiohttp.ClientError):
            continue
    return await destination.deliver(case)


def summaries(slack: FakeSlackAPI) -> list[dict[str, Any]]:
    """The messages in the helpdesk channel itself (each case's summary), not in the threads under them."""
    threads = slack.threads.items()
    return [m for (channel, ts), thread in threads if channel == HELPDESK for m in thread if m["ts"] == ts]


def transcript(slack: FakeSlackAPI, summary_ts: str) -> list[str]:
    """The texts in a summary's thread, in order."""
    return [m["text"] for m in slack.threads[(HELPDESK, summary_ts)] if m["ts"] != summary_ts]


@pytest.mark.parametrize("lost", LOST_ANSWERS.values(), ids=LOST_ANSWERS.keys())
async def test_a_summary_slack_took_whose_answer_was_lost_is_posted_once(lost: dict[str, Any]):
    case = long_question_case()
    async with FakeSlackAPI() as slack:
        slack.lose_answer("chat.postMessage", **lost, where=lambda params: "thread_ts" not in params)
        destination = SlackChannelDestination.from_token(slack.token, HELPDESK, base_url=slack.base_url)
        ref = await deliver_until_done(destination, case)
    (summary,) = summaries(slack)  # one summary, not one per attempt
    assert ref == f"{HELPDESK}/{summary['ts']}"
    assert transcript(slack, summary["ts"]) == transcript_chunks(case)  # the transcript under it, once
    assert slack.calls_to("conversations.history")  # the retry looked in the channel before posting


@pytest.mark.parametrize("lost", LOST_ANSWERS.values(), ids=LOST_ANSWERS.keys())
async def test_a_transcript_part_slack_took_whose_answer_was_lost_is_posted_once(lost: dict[str, Any]):
    case = long_question_case()
    assert len(transcript_chunks(case)) > 2
    async with FakeSlackAPI() as slack:
        slack.lose_answer("chat.postMessage", **lost, where=lambda params: "thread_ts" in params)  # the first part
        destination = SlackChannelDestination.from_token(slack.token, HELPDESK, base_url=slack.base_url)
        await deliver_until_done(destination, case)
    (summary,) = summaries(slack)
    assert transcript(slack, summary["ts"]) == transcript_chunks(case)  # each part once, in order


async def test_a_summary_whose_answer_was_lost_is_not_posted_again_by_another_process(tmp_path: Path):
    store = await queued(tmp_path, "slack")
    async with FakeSlackAPI() as slack:
        slack.lose_answer("chat.postMessage", status=500)  # the summary: Slack posted it, and answered 500
        first = SlackChannelDestination.from_token(slack.token, HELPDESK, base_url=slack.base_url)
        (tried,) = await case_outbox(store, [first], RETRY_SOON).run_once()
        fresh = SlackChannelDestination.from_token(slack.token, HELPDESK, base_url=slack.base_url)
        later = case_outbox(store, [fresh], RETRY_SOON, clock=lambda: utcnow() + timedelta(seconds=31))
        (retried,) = await later.run_once()
    await store.close()
    assert (tried.status, retried.status) == ("retrying", "delivered")
    (summary,) = summaries(slack)
    assert transcript(slack, summary["ts"])  # the retry went on under the summary it found


@pytest.mark.parametrize("lost", LOST_ANSWERS.values(), ids=LOST_ANSWERS.keys())
async def test_a_lost_summary_is_posted_once_in_a_channel_set_by_name(lost: dict[str, Any]):
    case = long_question_case()
    async with FakeSlackAPI() as slack:
        for n in range(250):  # the channel is on conversations.list's second page
            slack.add_channel(f"C0TEAM{n:03d}", f"team-{n:03d}", private=n % 2 == 1)
        slack.add_channel(HELPDESK, "it-helpdesk", private=True)
        slack.lose_answer("chat.postMessage", **lost, where=lambda params: "thread_ts" not in params)
        destination = SlackChannelDestination.from_token(slack.token, "#it-helpdesk", base_url=slack.base_url)
        ref = await deliver_until_done(destination, case)
    (summary,) = summaries(slack)  # one summary, not one per attempt
    assert ref == f"{HELPDESK}/{summary['ts']}"
    assert transcript(slack, summary["ts"]) == transcript_chunks(case)
    assert {call["channel"] for call in slack.calls_to("conversations.history")} == {HELPDESK}  # looked by id


async def test_a_channel_name_the_bot_cannot_see_is_warned_about_once(caplog: pytest.LogCaptureFixture):
    case = long_question_case()
    async with FakeSlackAPI() as slack:
        slack.add_channel("C0OTHER", "general")
        destination = SlackChannelDestination.from_token(slack.token, "it-helpdesk", base_url=slack.base_url)
        for _ in range(2):  # two deliveries, each with a summary whose answer was lost: two looks
            slack.lose_answer("chat.postMessage", status=500, where=lambda params: "thread_ts" not in params)
            assert await deliver_until_done(destination, case)
    assert len(slack.calls_to("conversations.list")) == 1  # not listed again once it was not there
    warned = [r.getMessage() for r in caplog.records if "not among the channels" in r.getMessage()]
    assert len(warned) == 1 and "it-helpdesk" in warned[0]
