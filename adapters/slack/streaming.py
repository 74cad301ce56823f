"""A committed answer delivered as a Slack stream: chat.startStream, appendStream in chunks, stopStream.

Why stream an answer that is already whole: the outbox's promise (every platform write committed with
its run and delivered exactly once) needs the answer committed before anything is sent, so the model's
tokens cannot go to Slack as they come. What the person gets is Slack's native streaming message: the
status line while the run works, then the answer written out in chunks, the sources and thumbs under
it. Every model (the offline and scripted ones too) streams the same way.

Exactly once, as a post is: the stream's ts is saved on the outbox row (``Delivery.save``) as soon as
startStream answers, so a retry in any process finishes that same message with chat.update instead of
starting another; stopStream puts the row's metadata on the message, so ``SlackWriter.find`` sees it
after a crash like any post. Only a crash between startStream's answer and that save can leave an
unfinished stream beside the retried reply.

On any stream error the answer still arrives whole: the stream the message began is stopped (so Slack
stops showing it as being written) and the message replaced by chat.update (Slack ends a stream that ran
too long, python-slack-sdk #1859), or, when none was started, a plain post. A workspace where streaming
is not available (not an AI app) is remembered, so the process stops trying.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from adapters.slack.blocks import Block, SlackMessage
from adapters.slack.post import SlackWriter, may_have_posted
from bot.delivery import Delivery
from bot.errors import RemoteError
from bot.store import DeliveryRecord

log = logging.getLogger(__name__)

CHUNK_CHARS = 320  # about a sentence or two: enough to read as it appears, few calls for a whole answer
PACE_S = 0.08  # between appends, so the answer is seen being written; ~1 s for a 4,000-character answer
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
        if may_have_posted(row, delivery) and (found := await self._writer.find(channel, thread, row=row.id, part=0)):
            return found
        pieces = chunks(answer.markdown)
        try:
            ts = await self._writer.start_stream(channel, thread, user, pieces[0])
        except RemoteError as exc:
            self._unavailable(exc)
            return await self._writer.post(channel, thread, answer.whole, row=row.id, part=0)
        await delivery.save(json.dumps({"stream": ts}))
        try:
            await self._write(channel, ts, pieces[1:], answer.tail, row.id)
        except RemoteError as exc:
            log.warning("slack post %s: the stream failed (%s); the answer replaces it whole", row.id, exc)
            await self._replace(channel, ts, answer, row.id)
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


def _started(progress: str | None) -> str | None:
    """The ts of the stream an earlier attempt started, from what it saved on the row."""
    try:
        saved = json.loads(progress) if progress else None
    except ValueError:
        return None
    return str(saved["stream"]) if isinstance(saved, dict) and saved.get("stream") else None
