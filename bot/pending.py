"""Frozen pending actions: propose, decide, finish, expire, each exactly once.

A write tool call (say, create an IT ticket) is not run when the model asks for it. It is frozen:
the tool name, the validated arguments and their hash are stored with the run state needed to
resume, and the requester sees a card with Confirm and Cancel.

States::

    open --confirm--> executing --finish(ok)--> done
                                \\--finish(not ok)--> failed
                                \\--found stale after a crash--> unknown
    open --cancel--> cancelled
    open --past expires_at--> expired

What "exactly once" means here:

* **One decision wins.** Every transition is a single conditional ``UPDATE ... WHERE state IN
  (...)`` in the shared database, and only the caller whose update changed the row acts on it. A
  double click, a platform retry, a second replica or a process restarted in between all see
  ``already_decided`` (or ``expired``), never a second ``confirmed``. Nothing that decides this lives
  in process memory.
* **The frozen call, and only it, runs.** The decision carries the stored arguments; the card
  carries only their hash, and a click whose hash does not match what is stored is refused (fail
  closed). No model runs between Confirm and the call. A click must also come from the action's own
  card: a button value carried to another card's message (same call, same hash) is refused.
* **At most once, never silently twice.** The caller runs the call after a ``confirmed`` decision,
  passing the pending id as the backend's idempotency key, then calls ``finish``. If the process dies
  in between, the action stays ``executing``; ``mark_stale_executing_unknown`` later moves it to
  ``unknown`` and a human is told. It is never re-run automatically, because we cannot know whether
  the side effect happened.

Only the requester may decide. Expiry is checked on every decision and by ``expire_due``. This
module never calls tools; the service does.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncConnection

from bot import cards
from bot.agent import args_hash as compute_args_hash
from bot.agent import canonical_json
from bot.runtime import THIS_PROCESS
from bot.store import PendingRecord, PendingState, Store, utcnow
from bot.types import PendingAction

__all__ = ["Decision", "DecisionStatus", "PendingActions", "PendingRecord", "PendingState"]

log = logging.getLogger(__name__)

DEFAULT_TTL = timedelta(hours=24)
HASH_MISMATCH = "This button does not match the stored request, so nothing was done."
WRONG_CARD = "This button belongs to another card."

DecisionStatus = Literal[
    "confirmed", "cancelled", "not_found", "expired", "not_requester", "hash_mismatch", "already_decided",
    "wrong_card",
]

_TARGET_STATE: dict[str, PendingState] = {"confirm": "executing", "cancel": "cancelled"}

@dataclass(frozen=True)
class Decision:
    """The outcome of a Confirm or Cancel click, with a sentence the adapter can show as is."""

    status: DecisionStatus
    action: PendingRecord | None
    message: str

    @property
    def confirmed(self) -> bool:
        return self.status == "confirmed"


_NOT_FOUND = Decision("not_found", None, "This request no longer exists.")


def _freeze(arguments: dict[str, Any]) -> dict[str, Any]:
    # A JSON round trip gives the caller exactly what a later process will read back.
    frozen: dict[str, Any] = json.loads(canonical_json(arguments))
    return frozen


class PendingActions:
    """The rules of pending actions over a Store; safe to use from any number of processes."""

    def __init__(self, store: Store, ttl: timedelta = DEFAULT_TTL, clock: Callable[[], datetime] = utcnow) -> None:
        self._store = store
        self._ttl = ttl
        self._clock = clock

    async def propose(
        self,
        *,
        run_id: str,
        conversation_key: str,
        requester: str,
        tool: str,
        call_id: str,
        arguments: dict[str, Any],
        text: str,
        run_state: dict[str, Any],
        conn: AsyncConnection | None = None,
    ) -> PendingAction:
        """Freeze a write call and store it as open until its requester decides or it expires."""
        now = self._clock()
        frozen = _freeze(arguments)
        record = PendingRecord(
            id=uuid.uuid4().hex,
            run_id=run_id,
            conversation_key=conversation_key,
            requester=requester,
            tool=tool,
            call_id=call_id,
            arguments=frozen,
            args_hash=compute_args_hash(tool, frozen),
            text=text,
            state="open",
            created_at=now,
            expires_at=now + self._ttl,
            decided_at=None,
            decider=None,
            executor=None,
            finished_at=None,
            result=None,
            platform_message=None,
            run_state=run_state,
        )
        await self._store.pending.insert(record, conn=conn)
        return record.as_action()

    async def decide(
        self,
        pending_id: str,
        actor: str,
        decision: Literal["confirm", "cancel"],
        args_hash: str,
        *,
        item_id: str | None = None,
        card: cards.ClickedCard | None = None,
    ) -> Decision:
        """Apply a click: the requester's click on an open, matching, unexpired action wins in one UPDATE;
        anything else is refused, or loses to what happened first, and says why.

        ``item_id`` is the inbox item of the click, kept on the winner so a retry of that click, and of no
        other, can tell it is the one that decided. ``card``: the card the click came from (None from the
        terminal, which has no card); a click from another card is refused before anything is decided
        (``ClickedCard.belongs_to``).
        """
        if decision not in _TARGET_STATE:
            raise ValueError(f"decision must be 'confirm' or 'cancel', not {decision!r}")
        if card is not None and (refused := await self._off_its_card(pending_id, actor, card)) is not None:
            return refused
        now = self._clock()
        target = _TARGET_STATE[decision]
        fields: dict[str, Any] = {"decider": actor, "decided_at": now, "decided_item": item_id}
        fields |= {"finished_at": now} if target == "cancelled" else {"executor": str(THIS_PROCESS)}
        won = await self._store.pending.decide(pending_id, actor, target, now, args_hash=args_hash, **fields)
        if won is None:
            return await self._refused(pending_id, actor, decision, args_hash, now)
        # Against a fresh hash of the stored call, so a row altered since proposal fails closed too.
        if compute_args_hash(won.tool, won.arguments) != won.args_hash:
            await self.finish(won.id, state="failed", result={"error": "the stored request was altered"})
            return Decision("hash_mismatch", won, HASH_MISMATCH)
        if decision == "confirm":
            return Decision("confirmed", won, f"Confirmed by {actor}.")
        return Decision("cancelled", won, f"Cancelled by {actor}.")

    async def finish(self, pending_id: str, *, state: PendingState, result: dict[str, Any]) -> None:
        """Record the outcome of the confirmed call: executing (or unknown) -> done | failed | unknown."""
        # A slow call swept to "unknown" still reports its real result: known beats unknown.
        won = await self._store.pending.transition(
            pending_id, ("executing", "unknown"), state, result=result, finished_at=self._clock()
        )
        if not won:
            log.warning("finish(%s): not executing; result not recorded: %r", pending_id, result)

    async def expire_due(self) -> list[PendingRecord]:
        """Expire open actions past their time; returns only those this call expired."""
        now = self._clock()
        due = await self._store.pending.find("open", expires_by=now)
        return await self._move_all(due, "open", "expired", now)

    async def withdraw(self, pending_id: str) -> PendingRecord | None:
        """Expire an open action now, because its card never reached the requester.

        Left open, it would sit unseen until it expired a day later with nobody told. Expiring
        (rather than cancelling) means a card that did arrive after all, despite the error, answers a
        click with "expired" and runs nothing. None when it was decided or gone meanwhile.
        """
        record = await self._store.pending.get(pending_id)
        if record is None or record.state != "open":
            return None
        now = self._clock()
        if not await self._store.pending.transition(record.id, ("open",), "expired", finished_at=now, expires_at=now):
            return None
        return dataclasses.replace(record, state="expired", finished_at=now, expires_at=now)

    async def mark_dead_executing_unknown(self, dead: Sequence[str]) -> list[PendingRecord]:
        """Calls executing in processes known dead: never re-run, -> unknown at once."""
        stale = await self._store.pending.executing_by(dead)
        return await self._move_all(stale, "executing", "unknown", self._clock())

    async def mark_stale_executing_unknown(self, older_than: timedelta) -> list[PendingRecord]:
        """Give up on calls executing longer than ``older_than`` (their process died): -> unknown."""
        now = self._clock()
        stale = await self._store.pending.find("executing", decided_by=now - older_than)
        return await self._move_all(stale, "executing", "unknown", now)

    async def set_platform_message(self, pending_id: str, ref: dict[str, Any]) -> None:
        """Remember where the card was posted so it can be updated in place later."""
        if not await self._store.pending.update(pending_id, platform_message=ref):
            log.warning("set_platform_message: no pending action %s", pending_id)

    async def get(self, pending_id: str) -> PendingRecord | None:
        """The pending action as currently stored."""
        return await self._store.pending.get(pending_id)

    async def _off_its_card(self, pending_id: str, actor: str, card: cards.ClickedCard) -> Decision | None:
        """A click that did not come from the action's own card, refused; None when it did."""
        record = await self._store.pending.get(pending_id)
        if record is None:
            return _NOT_FOUND
        if card.belongs_to(record.id, record.platform_message):
            return None
        posted = card.located(record.platform_message) if record.platform_message else None
        log.warning(
            "pending %s: a click by %s came from message %s (card id %s), not from its own card (message %s); "
            "refused", record.id, actor, card.message, card.card_id, posted,
        )
        return Decision("wrong_card", record, WRONG_CARD)

    async def _refused(
        self, pending_id: str, actor: str, decision: Literal["confirm", "cancel"], args_hash: str, now: datetime
    ) -> Decision:
        """Why a click did not win: no such action, expired, not the requester, another call, or decided."""
        record = await self._store.pending.get(pending_id)
        if record is None:
            return _NOT_FOUND
        if record.state == "expired" or (record.state == "open" and now >= record.expires_at):
            return await self._expired(record, now)
        if actor != record.requester:
            return Decision("not_requester", record, f"Only {record.requester} can {decision} this.")
        if record.state == "open" and args_hash != record.args_hash:
            return Decision("hash_mismatch", record, HASH_MISMATCH)
        return await self._lost(record.id, now)

    async def _lost(self, pending_id: str, now: datetime) -> Decision:
        current = await self._store.pending.get(pending_id)
        if current is None:
            return _NOT_FOUND
        if current.state in ("open", "expired"):  # still open: it expired while this click was on its way
            return await self._expired(current, now)
        return _already_decided(current)

    async def _expired(self, record: PendingRecord, now: datetime) -> Decision:
        if record.state == "open":
            moved = await self._move(record, ("open",), "expired", now)
            if moved is None:  # someone else moved it first; report what they did
                return await self._lost(record.id, now)
            record = moved
        message = cards.expired(record.expires_at)
        return Decision("expired", record, message)

    async def _move_all(
        self, records: list[PendingRecord], from_state: str, to_state: PendingState, now: datetime
    ) -> list[PendingRecord]:
        moved = []
        for record in records:  # one conditional UPDATE each: another sweeper may win some
            if (done := await self._move(record, (from_state,), to_state, now)) is not None:
                moved.append(done)
        return moved

    async def _move(
        self, record: PendingRecord, from_states: tuple[str, ...], to_state: PendingState, now: datetime
    ) -> PendingRecord | None:
        if not await self._store.pending.transition(record.id, from_states, to_state, finished_at=now):
            return None
        return dataclasses.replace(record, state=to_state, finished_at=now)


def _already_decided(record: PendingRecord) -> Decision:
    message = cards.already_decided(record.state, record.decider or "someone", record.decided_at)
    return Decision("already_decided", record, message)
