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
saved on the outbox row before the final message, so a retry ends that same stream, and a retry that
finds it already ended by a final that got no answer (or whose sender died) does not post it again.

Teams shows a Stop button on a stream; once pressed, Teams refuses the stream's next request (403
``ContentStreamNotAllowed``, "Content stream was cancelled by user."), and the person's choice is kept,
as Slack's Stop is: seen on an informative update, the run is stopped (``PolicyPal.stop``: it ends
``cancelled``, with the usual give-up and handoff, posted as a plain message) and no more updates are
sent; seen while the answer is written out, the rest of it is not posted and the delivery is done. Any
other stream Teams will not continue (it timed out: "... exceeded streaming time.") never costs the
person the answer: it goes out as a plain message.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from adapters.teams.connector import Connector, ConnectorError, Json, remote_error
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
    unanswered: bool = False  # its final was sent and no answer came back: it may have landed
    stopped: bool = False  # the person pressed Stop: Teams takes nothing more on it

    def saved(self) -> str:
        """What an outbox row keeps so that a retry ends this same stream."""
        return json.dumps({"stream": self.id, "sequence": self.sequence, "unanswered": self.unanswered})

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

    def __init__(
        self,
        connector: Connector,
        *,
        pace_s: float | None = None,
        stop: Callable[[str], Awaitable[object]] | None = None,
    ) -> None:
        """``stop``: cancels a conversation's run on any replica (``PolicyPal.stop``), for Teams' Stop button."""
        self._connector = connector
        self._pace_s = PACE_S if pace_s is None else pace_s
        self._stop = stop
        self._open: dict[str, Stream] = {}  # conversation key -> the stream its run began

    def progress(self, key: str, reference: Json) -> Progress:
        """A run's status hook for a personal chat: each line an informative update of the chat's stream;
        the person's Stop, refusing one, stops the run."""

        async def inform(text: str) -> None:
            stream = self._open.setdefault(key, Stream())
            if stream.stopped:
                return
            update = {"type": "typing", "text": text[:INFORMATIVE_CHARS], "entities": [stream.info("informative")]}
            try:
                sent = await _send(self._connector, reference, update)
            except RemoteError as exc:
                if not stopped_by_user(exc):
                    raise
                stream.stopped = True
                await self._stop_run(key, stream)
                return
            stream.id, stream.sequence = stream.id or sent or None, stream.sequence + 1

        return inform

    async def _stop_run(self, key: str, stream: Stream) -> None:
        """The person pressed Stop while the run works: stop it, as Slack's Stop does."""
        log.info("teams stream %s in %s: the person pressed Stop; stopping the run", stream.id, key)
        if self._stop is None:
            log.warning("teams stream %s in %s: Stop pressed, but nothing here can stop the run", stream.id, key)
            return
        try:
            await self._stop(key)
        except Exception:  # this process's run is stopped already; other replicas are told through the store
            log.warning("teams: the Stop in %s could not be recorded for other replicas", key, exc_info=True)

    def forget(self, key: str) -> None:
        """The run ended without a reply from here (another process answered): nothing to continue."""
        self._open.pop(key, None)

    async def deliver(self, key: str, reference: Json, delivery: Delivery, final: Json, *, grow: bool) -> str:
        """Send ``final`` as the end of the chat's stream (``grow``: written out first); its activity id.

        Exactly one answer is what counts: a final that may already have landed (an earlier attempt died,
        or got no answer) and that Teams now refuses as a closed stream was delivered, so it is not posted
        again; a final refused for now is retried by the outbox on the same stream; an answer the person
        stopped is done (they chose to stop reading); only a stream Teams will not continue for another
        reason (it timed out) has the answer posted as a plain message.
        """
        saved = _saved(delivery.progress)
        stream = saved or self._open.pop(key, None) or Stream()
        if grow and not delivery.progress and not stream.stopped:
            await self._grow(stream, reference, str(final.get("text") or ""))
        if stream.stopped:
            return _stopped_reading(stream, key)
        if stream.id is None:  # nothing streamed: a plain message
            return await _send(self._connector, reference, final)
        await delivery.save(stream.saved())  # a retry ends this same stream
        try:
            return await self._end(stream, reference, final)
        except RemoteError as exc:
            if exc.status == 403 and saved is not None and (saved.unanswered or delivery.uncertain):
                log.info("teams stream %s in %s was ended by an earlier attempt; not posted again", stream.id, key)
                return stream.id
            if stopped_by_user(exc):
                return _stopped_reading(stream, key)
            if exc.retryable:
                if exc.status is None:  # no answer at all: the final may have landed
                    await delivery.save(replace(stream, unanswered=True).saved())
                raise
            log.warning("teams stream %s in %s failed (%s); the answer is posted as a message", stream.id, key, exc)
            return await self._connector.send(reference, final)

    async def finish(self, key: str, reference: Json, activity: Json) -> str:
        """Post ``activity``; where this chat's run began a stream, as that stream's end (never left open).

        As ``deliver``, but kept here (a card's row keeps its own progress): a final refused for now, or
        that may have landed (no answer), is left for the outbox's retry from this process to end the
        same stream; Teams then refusing it as ended means it was delivered. Posted beside the stream
        instead, it would show twice or leave the progress line spinning. Only a stream Teams will not
        continue (the person's Stop included: this is the give-up that follows it) has ``activity`` posted
        as a message.
        """
        stream = self._open.pop(key, None) or Stream()
        if stream.stopped:  # Teams takes nothing more on it: no final that is sure to be refused
            log.info("teams stream %s in %s was stopped by the person; the reply goes out as a message", stream.id, key)
            return await self._connector.send(reference, activity)
        try:
            return await self._end(stream, reference, activity)
        except RemoteError as exc:
            if stream.id is None:  # a plain message: the outbox retries it as any other
                raise
            if exc.status == 403 and stream.unanswered:
                log.info("teams stream %s in %s was ended by an earlier attempt; not posted again", stream.id, key)
                return stream.id
            if exc.retryable:
                unanswered = stream.unanswered or exc.status is None
                self._open.setdefault(key, replace(stream, unanswered=unanswered))  # for the retry
                raise
            log.warning("teams stream %s in %s could not be ended (%s); posted as a message", stream.id, key, exc)
            return await self._connector.send(reference, activity)

    async def _end(self, stream: Stream, reference: Json, activity: Json) -> str:
        if stream.id is None:  # nothing streamed: a plain message
            return await _send(self._connector, reference, activity)
        ended = {**activity, "entities": [*activity.get("entities", []), stream.info("final")]}
        await _send(self._connector, reference, ended)
        return stream.id  # the message the stream wrote: what Teams' feedback and updates name

    async def _grow(self, stream: Stream, reference: Json, text: str) -> None:
        """Write the answer out; a refused update ends the writing (the final still carries all of it)."""
        for so_far in growing(text):
            update = {"type": "typing", "text": so_far, "entities": [stream.info("streaming")]}
            try:
                sent = await _send(self._connector, reference, update)
            except RemoteError as exc:
                if stopped_by_user(exc):
                    stream.stopped = True
                    return
                log.warning("teams stream %s: an update was refused (%s); ending it with the answer", stream.id, exc)
                return
            stream.id, stream.sequence = stream.id or sent or None, stream.sequence + 1
            await asyncio.sleep(self._pace_s)


def stopped_by_user(exc: RemoteError) -> bool:
    """Whether Teams refused a stream because the person pressed Stop ("cancelled" or "canceled" by user),
    not because it timed out ("exceeded streaming time") or for any other reason."""
    return exc.status == 403 and isinstance(exc, ConnectorError) and "cancel" in exc.said.lower()


def _stopped_reading(stream: Stream, key: str) -> str:
    """An answer whose stream the person stopped: delivered as far as they wanted it, the rest not posted."""
    log.info("teams stream %s in %s: the person pressed Stop; the rest of the answer is not posted", stream.id, key)
    return stream.id or ""


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
    return Stream(str(saved["stream"]), int(saved.get("sequence") or 0), bool(saved.get("unanswered")))
