"""Teams streaming in personal chats: what the run is doing while it works, then the answer written out.

Teams streams with typing activities carrying a ``streaminfo`` entity: ``informative`` updates (the
blue progress line: "Searching the policies…"), then ``streaming`` ones whose text grows (each holds
everything so far), each with the next ``streamSequence`` and, after the first, the ``streamId`` Teams
answered the first with; a ``message`` with ``streamType: final`` ends it and is what stays in the chat
(with its AI label, citations and feedback loop). Teams streams only in personal chats, one stream per
chat, about one update a second.

The informative updates come from the run (``progress``: the core's hook, bot.agent.progress); the
answer comes from the outbox, like any reply (``deliver``). The stream a run began is kept here, in
this process, by conversation, so the reply sent from here continues it; a reply sent by another
process (this one died) starts its own. Exactly once as a post is: the stream's id and sequence are
saved on the outbox row before the final message, so a retry ends that same stream. On any error the
answer goes out as a plain message: a stream Teams will not continue (the person pressed Stop, or it
timed out) never costs them the answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from adapters.teams.connector import Connector, Json, remote_error
from bot.agent import Progress
from bot.delivery import Delivery
from bot.errors import RemoteError

log = logging.getLogger(__name__)

STREAM_INFO = "streaminfo"
INFORMATIVE_CHARS = 1_000  # Teams' limit for an informative update
UPDATES = 3  # streaming updates before the final message: Teams takes about one a second
PACE_S = 1.0
CHUNK_CHARS = 200  # no update adds less than this


@dataclass
class Stream:
    """One stream in a chat: its id (Teams' answer to the first update) and the last sequence number sent."""

    id: str | None = None
    sequence: int = 0

    def info(self, kind: str) -> Json:
        entity: Json = {"type": STREAM_INFO, "streamType": kind}
        if kind != "final":
            entity["streamSequence"] = self.sequence + 1
        if self.id:
            entity["streamId"] = self.id
        return entity


def growing(text: str, updates: int = UPDATES, least: int = CHUNK_CHARS) -> list[str]:
    """The texts of the streaming updates: each a longer start of ``text``, cut after a space or a line."""
    step = max(least, len(text) // (updates + 1))
    cuts: list[str] = []
    end = step
    while end < len(text) and len(cuts) < updates:
        cut = max(text.rfind(" ", 0, end), text.rfind("\n", 0, end))
        if cut <= (len(cuts[-1]) if cuts else 0):  # no space in this stretch: cut inside a word
            cut = end
        cuts.append(text[:cut])
        end = cut + step
    return cuts


class TeamsStreams:
    """The streams of this process's personal chats: begun by a run's progress, ended by its reply."""

    def __init__(self, connector: Connector, *, pace_s: float | None = None) -> None:
        self._connector = connector
        self._pace_s = PACE_S if pace_s is None else pace_s
        self._open: dict[str, Stream] = {}  # conversation key -> the stream its run began

    def progress(self, key: str, reference: Json) -> Progress:
        """A run's status hook for a personal chat: each line an informative update of the chat's stream."""

        async def inform(text: str) -> None:
            stream = self._open.setdefault(key, Stream())
            update = {"type": "typing", "text": text[:INFORMATIVE_CHARS], "entities": [stream.info("informative")]}
            sent = await _send(self._connector, reference, update)
            stream.id, stream.sequence = stream.id or sent or None, stream.sequence + 1

        return inform

    def forget(self, key: str) -> None:
        """The run ended without a reply from here (another process answered): nothing to continue."""
        self._open.pop(key, None)

    async def deliver(self, key: str, reference: Json, delivery: Delivery, final: Json, *, grow: bool) -> str:
        """Send ``final`` as the end of the chat's stream (``grow``: written out first); its activity id."""
        stream = _saved(delivery.progress) or self._open.pop(key, None) or Stream()
        try:
            if grow and not delivery.progress:
                await self._grow(stream, reference, str(final.get("text") or ""))
            if stream.id is not None:  # a retry ends this same stream
                await delivery.save(json.dumps({"stream": stream.id, "sequence": stream.sequence}))
            return await self._end(stream, reference, final)
        except RemoteError as exc:  # Stop pressed, the stream timed out, Teams refused an update: post it whole
            log.warning("teams stream %s in %s failed (%s); the answer is posted as a message", stream.id, key, exc)
            return await self._connector.send(reference, final)

    async def finish(self, key: str, reference: Json, activity: Json) -> str:
        """Post ``activity``; where this chat's run began a stream, as that stream's end (never left open)."""
        stream = self._open.pop(key, None) or Stream()
        try:
            return await self._end(stream, reference, activity)
        except RemoteError as exc:
            log.warning("teams stream %s in %s could not be ended (%s); posted as a message", stream.id, key, exc)
            return await self._connector.send(reference, activity)

    async def _end(self, stream: Stream, reference: Json, activity: Json) -> str:
        if stream.id is None:  # nothing streamed: a plain message
            return await _send(self._connector, reference, activity)
        ended = {**activity, "entities": [*activity.get("entities", []), stream.info("final")]}
        await _send(self._connector, reference, ended)
        return stream.id  # the message the stream wrote: what Teams' feedback and updates name

    async def _grow(self, stream: Stream, reference: Json, text: str) -> None:
        for so_far in growing(text):
            update = {"type": "typing", "text": so_far, "entities": [stream.info("streaming")]}
            sent = await _send(self._connector, reference, update)
            stream.id, stream.sequence = stream.id or sent or None, stream.sequence + 1
            await asyncio.sleep(self._pace_s)


async def _send(connector: Connector, reference: Json, activity: Json) -> str:
    """Post through the connector; what fails as a ``RemoteError`` (so a stream's failure can be told apart)."""
    try:
        return await connector.send(reference, activity)
    except RemoteError:
        raise
    except Exception as exc:
        raise remote_error(exc, "a streamed reply") from exc


def _saved(progress: str | None) -> Stream | None:
    """The stream an earlier attempt of this row had reached, from what it saved."""
    try:
        saved = json.loads(progress) if progress else None
    except ValueError:
        return None
    if not isinstance(saved, dict) or not saved.get("stream"):
        return None
    return Stream(str(saved["stream"]), int(saved.get("sequence") or 0))
