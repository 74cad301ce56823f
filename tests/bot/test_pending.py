from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update

from bot.agent import args_hash
from bot.pending import PendingActions
from bot.runtime import THIS_PROCESS
from bot.store import Store
from bot.store.tables import PendingActionRow
from bot.types import PendingAction
from tests.databases import Database

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TTL = timedelta(hours=1)
TICKET_ARGS: dict[str, Any] = {
    "title": "VPN access for Zoë",
    "priority": "high",
    "details": {"laptop": "MBP-14", "days": 3, "cost": 12.5, "urgent": True, "manager": None},
    "tags": ["vpn", "remote"],
}
RUN_STATE = {"messages": [{"role": "user", "content": "I need VPN"}], "usage": {"steps": 2, "tokens": 900}}


class Clock:
    """A clock tests move by hand."""

    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pending(store: Store, clock: Clock) -> PendingActions:
    return PendingActions(store, ttl=TTL, clock=clock)


async def _propose(pending: PendingActions, requester: str = "U1") -> PendingAction:
    return await pending.propose(
        run_id="run-1",
        conversation_key="slack:T1:C1:1.0",
        requester=requester,
        tool="create_it_ticket",
        call_id="call-7",
        arguments=TICKET_ARGS,
        text="Shall I open this ticket?",
        run_state=RUN_STATE,
    )


async def test_propose_freezes_the_call_as_open(pending: PendingActions) -> None:
    action = await _propose(pending)
    assert action.state == "open"
    assert action.arguments == TICKET_ARGS
    assert action.args_hash == args_hash("create_it_ticket", TICKET_ARGS)
    assert action.expires_at == START + TTL
    assert len(action.id) >= 32
    record = await pending.get(action.id)
    assert record is not None
    assert (record.run_id, record.call_id, record.conversation_key) == ("run-1", "call-7", "slack:T1:C1:1.0")
    assert record.run_state == RUN_STATE
    assert (record.decider, record.decided_at, record.result, record.platform_message) == (None,) * 4


async def test_confirm_by_requester_moves_to_executing(pending: PendingActions) -> None:
    action = await _propose(pending)
    decision = await pending.decide(action.id, "U1", "confirm", action.args_hash)
    assert decision.status == "confirmed" and decision.confirmed
    assert decision.action is not None
    assert decision.action.arguments == TICKET_ARGS
    assert (decision.action.state, decision.action.decider, decision.action.decided_at) == ("executing", "U1", START)
    assert decision.action.executor == str(THIS_PROCESS)  # who runs the call: the sweeper knows when it died
    stored = await pending.get(action.id)
    assert stored == decision.action


async def test_cancel_ends_the_action_without_an_executor(pending: PendingActions) -> None:
    action = await _propose(pending)
    decision = await pending.decide(action.id, "U1", "cancel", action.args_hash)
    assert decision.action is not None
    assert (decision.action.state, decision.action.executor, decision.action.finished_at) == ("cancelled", None, START)
    assert await pending.get(action.id) == decision.action


async def test_double_confirm_from_two_processes_confirms_exactly_once(
    store: Store, second_store: Store, clock: Clock
) -> None:
    replicas = [PendingActions(store, ttl=TTL, clock=clock), PendingActions(second_store, ttl=TTL, clock=clock)]
    action = await _propose(replicas[0])
    clicks = [replicas[i % 2].decide(action.id, "U1", "confirm", action.args_hash) for i in range(6)]
    decisions = await asyncio.gather(*clicks)
    statuses = [decision.status for decision in decisions]
    assert statuses.count("confirmed") == 1
    assert statuses.count("already_decided") == 5
    loser = next(d for d in decisions if d.status == "already_decided")
    assert loser.message == "Already confirmed by U1 at 2026-03-02 09:00 UTC."


async def test_concurrent_confirm_and_cancel_have_one_winner(store: Store, second_store: Store, clock: Clock) -> None:
    first, second = PendingActions(store, clock=clock), PendingActions(second_store, clock=clock)
    action = await _propose(first)
    decisions = await asyncio.gather(
        first.decide(action.id, "U1", "confirm", action.args_hash),
        second.decide(action.id, "U1", "cancel", action.args_hash),
    )
    assert sorted(d.status for d in decisions) in (["already_decided", "confirmed"], ["already_decided", "cancelled"])


async def test_only_the_requester_can_decide(pending: PendingActions) -> None:
    action = await _propose(pending, requester="U1")
    refused = await pending.decide(action.id, "U2", "confirm", action.args_hash)
    assert refused.status == "not_requester"
    assert refused.message == "Only U1 can confirm this."
    assert (await pending.decide(action.id, "U2", "cancel", action.args_hash)).message == "Only U1 can cancel this."
    stored = await pending.get(action.id)
    assert stored is not None and stored.state == "open" and stored.decider is None
    assert (await pending.decide(action.id, "U1", "confirm", action.args_hash)).status == "confirmed"


async def test_hash_mismatch_is_refused_and_leaves_the_action_open(pending: PendingActions) -> None:
    action = await _propose(pending)
    other_hash = args_hash("create_it_ticket", {**TICKET_ARGS, "priority": "low"})
    refused = await pending.decide(action.id, "U1", "confirm", other_hash)
    assert refused.status == "hash_mismatch"
    stored = await pending.get(action.id)
    assert stored is not None and stored.state == "open"


async def test_cancel_then_confirm_reports_already_cancelled(pending: PendingActions) -> None:
    action = await _propose(pending)
    cancelled = await pending.decide(action.id, "U1", "cancel", action.args_hash)
    assert cancelled.status == "cancelled"
    assert cancelled.message == "Cancelled by U1."
    late = await pending.decide(action.id, "U1", "confirm", action.args_hash)
    assert late.status == "already_decided"
    assert late.message == "Already cancelled by U1 at 2026-03-02 09:00 UTC."
    stored = await pending.get(action.id)
    assert stored is not None and stored.state == "cancelled"


async def test_unknown_id_is_not_found(pending: PendingActions) -> None:
    decision = await pending.decide("no-such-id", "U1", "confirm", "0" * 32)
    assert (decision.status, decision.action) == ("not_found", None)


async def test_decision_at_expiry_expires_the_action(pending: PendingActions, clock: Clock) -> None:
    action = await _propose(pending)
    clock.advance(TTL)
    decision = await pending.decide(action.id, "U1", "confirm", action.args_hash)
    assert decision.status == "expired"
    assert decision.message.startswith("This request expired at 2026-03-02 10:00 UTC.")
    stored = await pending.get(action.id)
    assert stored is not None and stored.state == "expired"
    assert (await pending.decide(action.id, "U1", "cancel", action.args_hash)).status == "expired"


async def test_a_withdrawn_action_expires_now_and_a_late_click_runs_nothing(pending: PendingActions) -> None:
    action = await _propose(pending)
    withdrawn = await pending.withdraw(action.id)
    assert withdrawn is not None and (withdrawn.state, withdrawn.expires_at) == ("expired", START)
    assert await pending.get(action.id) == withdrawn
    decision = await pending.decide(action.id, "U1", "confirm", action.args_hash)
    assert decision.status == "expired" and decision.message.startswith("This request expired at 2026-03-02 09:00 UTC.")
    assert await pending.withdraw(action.id) is None  # once


async def test_a_decided_action_is_not_withdrawn(pending: PendingActions) -> None:
    action = await _propose(pending)
    await pending.decide(action.id, "U1", "confirm", action.args_hash)
    assert await pending.withdraw(action.id) is None
    assert await pending.withdraw("no-such-id") is None
    stored = await pending.get(action.id)
    assert stored is not None and stored.state == "executing"


async def test_expire_due_expires_each_due_action_once(pending: PendingActions, clock: Clock) -> None:
    due = await _propose(pending)
    clock.advance(timedelta(minutes=30))
    fresh = await _propose(pending)
    clock.advance(timedelta(minutes=31))
    expired = await pending.expire_due()
    assert [record.id for record in expired] == [due.id]
    assert expired[0].state == "expired"
    assert await pending.expire_due() == []
    still_open = await pending.get(fresh.id)
    assert still_open is not None and still_open.state == "open"


async def test_expire_due_from_two_processes_expires_once(store: Store, second_store: Store, clock: Clock) -> None:
    first, second = PendingActions(store, ttl=TTL, clock=clock), PendingActions(second_store, ttl=TTL, clock=clock)
    ids = {(await _propose(first)).id for _ in range(3)}
    clock.advance(TTL)
    a, b = await asyncio.gather(first.expire_due(), second.expire_due())
    assert sorted(record.id for record in a + b) == sorted(ids)


async def test_confirm_survives_a_restart_with_identical_frozen_arguments(database: Database, clock: Clock) -> None:
    before = await database.open()
    action = await _propose(PendingActions(before, ttl=TTL, clock=clock))
    await before.close()

    after = await database.open()
    decision = await PendingActions(after, ttl=TTL, clock=clock).decide(action.id, "U1", "confirm", action.args_hash)
    assert decision.status == "confirmed"
    assert decision.action is not None
    assert decision.action.arguments == TICKET_ARGS
    assert args_hash(decision.action.tool, decision.action.arguments) == action.args_hash
    assert decision.action.run_state == RUN_STATE


async def test_finish_records_the_result(pending: PendingActions) -> None:
    ok_action, failed_action = await _propose(pending), await _propose(pending)
    for action in (ok_action, failed_action):
        await pending.decide(action.id, "U1", "confirm", action.args_hash)
    await pending.finish(ok_action.id, state="done", result={"ticket_id": "IT-42"})
    await pending.finish(failed_action.id, state="failed", result={"error": "backend down"})
    done, failed = await pending.get(ok_action.id), await pending.get(failed_action.id)
    assert done is not None and (done.state, done.result) == ("done", {"ticket_id": "IT-42"})
    assert failed is not None and (failed.state, failed.result) == ("failed", {"error": "backend down"})
    assert done.finished_at == START


async def test_a_call_that_reached_the_system_without_an_answer_finishes_unknown(pending: PendingActions) -> None:
    action = await _propose(pending)
    await pending.decide(action.id, "U1", "confirm", action.args_hash)
    await pending.finish(action.id, state="unknown", result={"status": "unknown", "error": "no answer in time"})
    stored = await pending.get(action.id)
    assert stored is not None and (stored.state, stored.result["status"]) == ("unknown", "unknown")
    again = await pending.decide(action.id, "U1", "confirm", action.args_hash)
    assert again.status == "already_decided"  # never re-run: a person checks


async def test_finish_twice_keeps_the_first_result(pending: PendingActions) -> None:
    action = await _propose(pending)
    await pending.decide(action.id, "U1", "confirm", action.args_hash)
    await pending.finish(action.id, state="done", result={"ticket_id": "IT-42"})
    await pending.finish(action.id, state="failed", result={"error": "late"})
    stored = await pending.get(action.id)
    assert stored is not None and (stored.state, stored.result) == ("done", {"ticket_id": "IT-42"})


async def test_finish_of_an_open_action_does_nothing(pending: PendingActions) -> None:
    action = await _propose(pending)
    await pending.finish(action.id, state="done", result={"ticket_id": "IT-42"})
    stored = await pending.get(action.id)
    assert stored is not None and (stored.state, stored.result) == ("open", None)


async def test_stale_executing_becomes_unknown_and_is_never_rerun(pending: PendingActions, clock: Clock) -> None:
    stale = await _propose(pending)
    await pending.decide(stale.id, "U1", "confirm", stale.args_hash)
    clock.advance(timedelta(minutes=10))
    recent = await _propose(pending)
    await pending.decide(recent.id, "U1", "confirm", recent.args_hash)
    clock.advance(timedelta(minutes=1))

    unknown = await pending.mark_stale_executing_unknown(timedelta(minutes=5))
    assert [(record.id, record.state) for record in unknown] == [(stale.id, "unknown")]
    assert await pending.mark_stale_executing_unknown(timedelta(minutes=5)) == []
    again = await pending.decide(stale.id, "U1", "confirm", stale.args_hash)
    assert again.status == "already_decided"
    still = await pending.get(recent.id)
    assert still is not None and still.state == "executing"


async def test_calls_executing_in_a_dead_process_become_unknown_at_once(
    store: Store, second_store: Store, clock: Clock
) -> None:
    pending = PendingActions(store, ttl=TTL, clock=clock)
    dead, alive, other = [await _propose(pending) for _ in range(3)]
    for action, executor in ((dead, "host:ns:1:gone"), (alive, "host:ns:2:live")):
        assert await store.pending.transition(action.id, ("open",), "executing", executor=executor, decided_at=START)
    marked = await asyncio.gather(
        pending.mark_dead_executing_unknown(["host:ns:1:gone"]),
        PendingActions(second_store, ttl=TTL, clock=clock).mark_dead_executing_unknown(["host:ns:1:gone"]),
    )
    assert sorted(len(m) for m in marked) == [0, 1]  # one replica marks it
    ((record,),) = [m for m in marked if m]
    assert (record.id, record.state) == (dead.id, "unknown")
    assert await pending.mark_dead_executing_unknown([]) == []
    states = [(await pending.get(a.id)).state for a in (dead, alive, other)]  # type: ignore[union-attr]
    assert states == ["unknown", "executing", "open"]


async def test_a_stored_call_altered_since_it_was_proposed_fails_closed(pending: PendingActions, store: Store) -> None:
    action = await _propose(pending)
    altered = {**TICKET_ARGS, "priority": "low"}  # the row changed under the card; the hash did not
    async with store.transaction() as tx:
        await tx.execute(update(PendingActionRow).where(PendingActionRow.id == action.id).values(arguments=altered))
    decision = await pending.decide(action.id, "U1", "confirm", action.args_hash)
    assert decision.status == "hash_mismatch" and not decision.confirmed
    stored = await pending.get(action.id)
    assert stored is not None and stored.state == "failed" and "altered" in stored.result["error"]
    assert (await pending.decide(action.id, "U1", "confirm", action.args_hash)).status == "already_decided"


async def test_a_late_result_replaces_unknown(pending: PendingActions, clock: Clock) -> None:
    action = await _propose(pending)
    await pending.decide(action.id, "U1", "confirm", action.args_hash)
    clock.advance(timedelta(minutes=10))
    await pending.mark_stale_executing_unknown(timedelta(minutes=5))
    await pending.finish(action.id, state="done", result={"ticket_id": "IT-42"})
    stored = await pending.get(action.id)
    assert stored is not None and stored.state == "done"


async def test_platform_message_is_remembered(pending: PendingActions) -> None:
    action = await _propose(pending)
    ref = {"platform": "slack", "channel": "C1", "ts": "1712.0001"}
    await pending.set_platform_message(action.id, ref)
    stored = await pending.get(action.id)
    assert stored is not None and stored.platform_message == ref


async def test_transition_refuses_unknown_columns(store: Store) -> None:
    with pytest.raises(TypeError, match="not pending_actions columns"):
        await store.pending.transition("x", ("open",), "cancelled", decidr="U1")
