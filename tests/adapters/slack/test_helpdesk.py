"""The Slack helpdesk channel: what the helpdesk reads of a long question, through the fake Slack Web API."""

from __future__ import annotations

import html
from datetime import UTC, datetime

import pytest

from adapters.slack.helpdesk import CHUNK_CHARS, SlackChannelDestination
from bot.helpdesk import HandoffCase
from bot.types import UserRef
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.asyncio

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
