"""A committed answer delivered as a Slack stream: chat.startStream, appendStream in chunks, stopStream.

Why stream an answer that is already whole: the outbox's promise (every platform write committed with
its run and delivered exactly once) needs the answer committed before anything is sent, so the model's
tokens cannot go to Slack as they come. What the person gets is Slack's native streaming message: the
status line while the run works, then the answer written out in chunks, the sources and thumbs under
it. Every model (the offline and scripted ones too) streams the same way.

Exactly once, as a post is: the stream's ts is saved on the outbox row (``Delivery.save``) as soon as
startStream answers, so a retry in any process finishes that same message with chat.update instead of
starting another; stopStream puts the row's metadata on the message, so ``SlackWriter.find`` sees it
after a crash like any post. A stream Slack began without its ts reaching the row (startStream's answer
lost to a timeout, a dropped connection or a 5xx; a crash before the save) has no metadata yet, so it is
looked for as what it is: a message of this bot in the thread without metadata, its text the first
chunk, after the thread's first message and posted since the row was committed (conversations.replies
from ``CLOCK_SKEW_S`` before it, for clocks that differ). The look comes right after such a failure (only
an answer with an error code proves nothing was begun), and in any later attempt that may follow one
(``may_have_posted``) with no stream saved, after ``find``; a stream found is saved on the row and
finished like one that broke off. startStream is tried once (slack_sdk's retry handlers do not repeat
it, rate limits aside), so an attempt begins one stream at most. Still left unfinished beside a reply
posted whole: a stream Slack shows only after the look (it was still starting it), or one in a thread
that cannot be read then (conversations.replies failing).

On any stream error the answer still arrives whole: the stream the message began is stopped (so Slack
stops showing it as being written) and the message replaced by chat.update (Slack ends a stream that ran
too long, python-slack-sdk #1859), or, when none was started (Slack refused startStream with an error
code, or none is in the thread), a plain post. A workspace where streaming is not available (not an AI
app) is remembered, so the process stops trying.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from adapters.slack.blocks import Block, SlackMessage
from adapters.slack.post import SlackWriter, UncertainWrite, may_have_posted, row_part
from bot.delivery import Delivery
from bot.errors import RemoteError
from bot.store import DeliveryRecord

log = logging.getLogger(__name__)

CHUNK_CHARS = 320  # about a sentence or two: enough to read as it appears, few calls for a whole answer
PACE_S = 0.08  # between appends, so the answer is seen being written; ~1 s for a 4,000-character answer
# How far Slack's clock (a message's ts) may be behind ours (the row's created_at) when looking for a stream.
CLOCK_SKEW_S = 60.0
# What startStream answers where streaming cannot work at all: stop trying in this process.
NOT_AVAILABLE = frozenset(
    {
        "feature_not_enabled",
        "not_allowed",
        "not_allowed_token_type",
        "unknown_method",
        "missing_scope",
        "method_deprecated",
        "invalid_arguments",
    }
)


@dataclass(frozen=True)
class StreamedAnswer:
    """An answer as a stream: its Markdown (streamed), the blocks under it, and the same as one message."""

    markdown: str
    tail: list[Block]
    whole: SlackMessage  # the fallback: chat.update of the started stream, or a plain post


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """``text`` in pieces of about ``size`` characters, cut after a line or a space; joined, exactly ``text``."""
    pieces: list[str] = []
    while len(text) > size:
        cut = max(text.rfind("\n", 0, size), text.rfind(" ", 0, size))
        cut = cut + 1 if cut > 0 else size
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text] if text else pieces


class SlackStreams:
    """Streams answers for the Slack sender; one per process (it remembers when streaming is off)."""

    def __init__(self, writer: SlackWriter, *, pace_s: float = PACE_S) -> None:
        self._writer = writer
        self._pace_s = pace_s
        self.available = True

    async def deliver(
        self, row: DeliveryRecord, delivery: Delivery, where: tuple[str, str, str], answer: StreamedAnswer
    ) -> str:
        """Stream the answer to (channel, thread, recipient); the message's ts. Raises only what a plain
        post of it would (the outbox retries, or hands it to a person)."""
        channel, thread, user = where
        started = _started(delivery.progress)
        if started is not None:  # an earlier attempt began this message: finish it, never start another
            await self._replace(channel, started, answer, row.id)
            return started
        pieces = chunks(answer.markdown)
        if may_have_posted(row, delivery):
            if found := await self._writer.find(channel, thread, row=row.id, part=0):
                return found  # finished (stopped, or posted whole) by an earlier attempt
            if begun := await self._begun(channel, thread, row, pieces[0]):
                return await self._finish(channel, begun, answer, row.id, delivery)
        try:
            ts = await self._writer.start_stream(channel, thread, user, pieces[0])
        except UncertainWrite as exc:  # Slack may have begun it: finish that one rather than post beside it
            log.warning("slack post %s: %s; looking in the thread for a stream it began", row.id, exc)
            if begun := await self._begun(channel, thread, row, pieces[0]):
                return await self._finish(channel, begun, answer, row.id, delivery)
            return await self._writer.post(channel, thread, answer.whole, row=row.id, part=0)
        except RemoteError as exc:  # refused, with Slack's error code: nothing was started
            self._unavailable(exc)
            return await self._writer.post(channel, thread, answer.whole, row=row.id, part=0)
        await delivery.save(json.dumps({"stream": ts}))
        try:
            await self._write(channel, ts, pieces[1:], answer.tail, row.id)
        except RemoteError as exc:
            log.warning("slack post %s: the stream failed (%s); the answer replaces it whole", row.id, exc)
            await self._replace(channel, ts, answer, row.id)
        return ts

    async def _begun(self, channel: str, thread: str, row: DeliveryRecord, first: str) -> str | None:
        """The ts of a stream this row began and never finished, if the thread shows one: this bot's message,
        without outbox metadata (stopStream puts it on), its text ``first`` (the first chunk), after the
        thread's first message and posted since the row was committed (after the question it answers).
        The newest, were there ever more than one; None when there is none, or the thread cannot be read."""
        since = row.created_at.timestamp() - CLOCK_SKEW_S
        messages = await self._writer.replies(channel, thread, oldest=f"{since:.6f}")  # the newest only
        first = _words(first)
        begun = [
            str(m["ts"])
            for m in messages or []
            if self._writer.is_ours(m)
            and row_part(m) is None
            and _after(str(m.get("ts") or ""), thread)
            and first in {_words(str(m.get("text") or "")), *_markdown(m)}
        ]
        return begun[-1] if begun else None

    async def _finish(self, channel: str, ts: str, answer: StreamedAnswer, row: int, delivery: Delivery) -> str:
        """A stream found unfinished, made this row's: saved on it (as a stream that answered is), then
        stopped and replaced by the whole answer, as one that broke off is."""
        log.warning("slack post %s: finishing the stream %s a try began (its start went unanswered)", row, ts)
        await delivery.save(json.dumps({"stream": ts}))
        await self._replace(channel, ts, answer, row)
        return ts

    async def _replace(self, channel: str, ts: str, answer: StreamedAnswer, row: int) -> None:
        """The whole answer over a stream that broke off: stopped first, or Slack would go on showing it as
        being written; stopping also puts the row's metadata on it. Slack may have ended it already (it
        ends streams that run too long), so a refused stop changes nothing."""
        try:
            await self._writer.stop_stream(channel, ts, answer.tail, row=row, part=0)
        except RemoteError as exc:
            log.info("slack post %s: stopping the broken stream %s failed (%s); replacing it anyway", row, ts, exc)
        await self._writer.update(channel, ts, answer.whole)

    async def _write(self, channel: str, ts: str, pieces: list[str], tail: list[Block], row: int) -> None:
        for piece in pieces:
            await asyncio.sleep(self._pace_s)
            await self._writer.append_stream(channel, ts, piece)
        await self._writer.stop_stream(channel, ts, tail, row=row, part=0)

    def _unavailable(self, exc: RemoteError) -> None:
        error = str(exc).rpartition(": ")[2]
        if error in NOT_AVAILABLE:
            log.info("Slack streaming is not available here (%s): answers are posted whole from now on", error)
            self.available = False
        else:
            log.warning("chat.startStream failed (%s): this answer is posted whole", exc)


def _words(text: str) -> str:
    """Text compared as words: Slack may trim what ends a chunk (a space, a line break)."""
    return " ".join(text.split())


def _markdown(message: dict[str, Any]) -> set[str]:
    """The text of a message's markdown blocks, as words (Slack may show a stream's text as one)."""
    blocks = message.get("blocks") or []
    return {_words(str(b.get("text") or "")) for b in blocks if isinstance(b, dict) and b.get("type") == "markdown"}


def _after(ts: str, thread: str) -> bool:
    """Whether ``ts`` is later than the thread's ``thread`` (the question, or the thread's first message)."""
    try:
        return float(ts) > float(thread)
    except ValueError:
        return False


def _started(progress: str | None) -> str | None:
    """The ts of the stream an earlier attempt started, from what it saved on the row."""
    try:
        saved = json.loads(progress) if progress else None
    except ValueError:
        return None
    return str(saved["stream"]) if isinstance(saved, dict) and saved.get("stream") else None
