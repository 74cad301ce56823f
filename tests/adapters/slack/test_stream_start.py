"""A stream Slack began though chat.startStream failed: found in the thread and finished, never left beside
a second reply; and an answer Slack refused to stream is posted, with nothing looked for.

Through the real SlackWriter and slack_sdk client against the fake Web API, whose streams are messages in
their threads (the bot's, the text so far, no metadata until stopStream) and which can carry out a call and
lose its answer (``lose_answer``): late past the writer's deadline, a dropped connection, or a 500.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from adapters.slack.inbound import BotIdentity
from adapters.slack.post import METADATA_TYPE, SlackWriter, slack_session, web_client
from adapters.slack.streaming import SlackStreams, chunks
from bot.delivery import Delivery
from tests.adapters.slack.test_app import ALICE
from tests.adapters.slack.test_native_ai import streamed
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.asyncio

CHANNEL = "D0ALICE"
TEXT = "Yes, book it through the travel desk [Travel › Flights]. " * 20  # three chunks
BOT = BotIdentity("UBOT", "BBOT", "T0TEAM")


class Clock:
    """Slack's clock for the fake's ts: now, or set back to seed older messages."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@asynccontextmanager
async def slack_and_streams(timeout_s: float = 0.3) -> AsyncIterator[tuple[FakeSlackAPI, SlackStreams, Clock]]:
    """The fake (its ts from ``Clock``) and the streams of a writer whose calls' deadline is ``timeout_s``."""
    clock = Clock()
    async with FakeSlackAPI(streaming=True, clock=clock) as slack, slack_session(timeout_s) as session:
        writer = SlackWriter(web_client(slack.token, session, slack.base_url), BOT)
        yield slack, SlackStreams(writer, pace_s=0), clock


async def begin(slack: FakeSlackAPI, thread: str, text: str) -> str:
    """A stream begun in the thread by another writer of this bot (another row's, another process's)."""
    async with aiohttp.ClientSession() as session:
        writer = SlackWriter(web_client(slack.token, session, slack.base_url), BOT)
        return await writer.start_stream(CHANNEL, thread, ALICE, text)


def question(clock: Clock) -> str:
    """The ts of the question the reply answers: the thread's first message, asked before the row exists."""
    return f"{clock() - 5:.6f}"


def record(row_id: int, last_error: str | None = None) -> Any:
    return SimpleNamespace(id=row_id, last_error=last_error, created_at=datetime.now(UTC))


def delivery(row_id: int, saved: list[dict[str, Any]], *, progress: str | None = None, uncertain: bool = False):
    async def save(value: str) -> None:
        saved.append(json.loads(value))

    return Delivery(row_id, "k", progress, save, uncertain)


def assert_one_finished_reply(slack: FakeSlackAPI, thread: str, ts: str, row_id: int, text: str) -> None:
    """The thread holds one reply: that stream, stopped with the row's metadata, replaced by the whole answer."""
    (reply,) = slack.threads[(CHANNEL, thread)]
    assert reply["ts"] == ts and reply["metadata"]["event_type"] == METADATA_TYPE
    assert reply["metadata"]["event_payload"] == {"row": row_id, "part": 0}
    assert slack.streams[ts].stopped and [s.stopped for s in slack.streams.values()] == [True]
    (update,) = slack.delivered("chat.update")
    assert update["ts"] == ts and update.blocks[0]["text"] == streamed(text).markdown
    assert slack.delivered("chat.postMessage") == []


LOST = {
    "late": {"late_s": 60},  # past the writer's deadline: a timeout
    "5xx": {"status": 500},  # slack_sdk would retry a 500 and begin a second stream
    "dropped": {"drop": True},  # the connection closed before the answer: slack_sdk would retry that too
}


@pytest.mark.parametrize("lost", LOST.values(), ids=LOST.keys())
async def test_a_stream_slack_began_though_its_start_failed_is_finished_not_posted_beside(lost: dict[str, Any]):
    async with slack_and_streams() as (slack, streams, clock):
        thread = question(clock)
        slack.lose_answer("chat.startStream", **lost)
        saved: list[dict[str, Any]] = []
        ts = await streams.deliver(record(11), delivery(11, saved), (CHANNEL, thread, ALICE), streamed(TEXT))
        (start,) = slack.calls_to("chat.startStream")  # tried once: a second try would begin a second stream
        assert ts == start.answer["ts"] and saved == [{"stream": ts}]  # a retry finishes it, as after any start
        assert_one_finished_reply(slack, thread, ts, 11, TEXT)


async def test_only_a_stream_this_row_began_is_taken_for_its_own():
    async with slack_and_streams() as (slack, streams, clock):
        clock.offset = -600
        thread = question(clock)
        first = chunks(streamed(TEXT).markdown)[0]
        old = await begin(slack, thread, first)  # an earlier answer's, the same words, left unfinished
        clock.offset = 0
        other = await begin(slack, thread, "Another answer. " * 30)  # not this text
        slack.lose_answer("chat.startStream", status=500)
        ts = await streams.deliver(record(12), delivery(12, []), (CHANNEL, thread, ALICE), streamed(TEXT))
        assert ts not in (old, other) and ts == slack.calls_to("chat.startStream")[-1].answer["ts"]
        assert slack.streams[ts].stopped and not slack.streams[old].stopped and not slack.streams[other].stopped
        assert {c["ts"] for c in slack.delivered("chat.update")} == {ts}
        assert slack.delivered("chat.postMessage") == []


REFUSED = {"not an AI app": "feature_not_enabled", "down, said so": "service_unavailable"}


@pytest.mark.parametrize("error", REFUSED.values(), ids=REFUSED.keys())
async def test_a_start_slack_refused_with_an_error_code_is_posted_whole_and_nothing_is_looked_for(error: str):
    async with slack_and_streams() as (slack, streams, clock):
        thread = question(clock)
        first = chunks(streamed(TEXT).markdown)[0]
        other = await begin(slack, thread, first)  # not this row's: left alone
        (shown,) = [m for m in slack.threads[(CHANNEL, thread)] if m["ts"] == other]
        assert shown["user"] == "UBOT" and "metadata" not in shown and shown["text"] == first  # as Slack shows it
        slack.fail("chat.startStream", error)
        ts = await streams.deliver(record(13), delivery(13, []), (CHANNEL, thread, ALICE), streamed(TEXT))
        (post,) = slack.delivered("chat.postMessage")
        assert ts == post.answer["ts"] and post["metadata"]["event_payload"] == {"row": 13, "part": 0}
        assert slack.calls_to("conversations.replies") == []  # an answer with an error code: nothing began
        assert not slack.streams[other].stopped and slack.calls_to("chat.update") == []
        assert streams.available is (error != "feature_not_enabled")


async def cut_off(slack: FakeSlackAPI, streams: SlackStreams, thread: str, row: Any) -> None:
    """An attempt the outbox's deadline ends while startStream is unanswered (Slack has begun the stream)."""
    slack.lose_answer("chat.startStream", late_s=60)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await streams.deliver(row, delivery(row.id, []), (CHANNEL, thread, ALICE), streamed(TEXT))


async def crashed(slack: FakeSlackAPI, streams: SlackStreams, thread: str, row: Any) -> None:
    """A process that died between startStream's answer and saving its ts on the row."""
    await begin(slack, thread, chunks(streamed(TEXT).markdown)[0])


FIRST_TRY: dict[str, tuple[Callable[..., Any], str | None, bool]] = {
    "cut off": (cut_off, "TimeoutError", False),
    "crashed": (crashed, None, True),
}


@pytest.mark.parametrize(("first_try", "last_error", "uncertain"), FIRST_TRY.values(), ids=FIRST_TRY.keys())
async def test_a_retry_finishes_the_stream_an_earlier_try_began_instead_of_starting_another(
    first_try: Callable[..., Any], last_error: str | None, uncertain: bool
):
    async with slack_and_streams(timeout_s=15) as (slack, streams, clock):
        thread = question(clock)
        row = record(14)
        await first_try(slack, streams, thread, row)
        (begun,) = slack.streams  # begun, its ts never saved on the row
        retried = SimpleNamespace(**{**vars(row), "last_error": last_error})
        saved: list[dict[str, Any]] = []
        retry = delivery(14, saved, uncertain=uncertain)
        ts = await streams.deliver(retried, retry, (CHANNEL, thread, ALICE), streamed(TEXT))
        assert ts == begun and saved == [{"stream": ts}] and len(slack.calls_to("chat.startStream")) == 1
        assert_one_finished_reply(slack, thread, ts, 14, TEXT)
