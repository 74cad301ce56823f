"""Crash recovery and graceful shutdown: nobody is left without an answer when a process stops."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from bot.delivery import Notice, Notifiers
from bot.helpdesk import Helpdesk
from bot.pending import PendingActions
from bot.runtime import THIS_PROCESS, ProcessId, Sweeper
from bot.store import PendingRecord, Place, Store, utcnow
from bot.types import GaveUp, TerminationReason, UserRef
from bot.wiring import sweep_policy
from tests.bot.helpers import ask, eventually, left_executing_by_a_crash, service, settings_for
from tests.databases import Database
from tests.fakes.openai_server import delay, text, tool_calls

pytestmark = pytest.mark.asyncio

KEY = "slack:T1:C1:1700000000.000100"
PLACE = Place(KEY, "slack", "T1", "C1", "1700000000.000100", None)
TICKET = {"category": "network_vpn", "summary": "VPN fails with NG-809", "urgency": "high"}


class NoPassages:
    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Any]:
        return []


class RecordingNotifier:
    def __init__(self) -> None:
        self.notices: list[tuple[Place, Notice]] = []
        self.expired: list[PendingRecord] = []

    async def notify(self, place: Place, notice: Notice) -> bool:
        self.notices.append((place, notice))
        return True

    async def card_expired(self, record: PendingRecord) -> bool:
        self.expired.append(record)
        return True


class FailsOnce:
    """``Helpdesk.open_case`` as it behaves when the database drops one write: the first call fails."""

    def __init__(self, open_case: Any) -> None:
        self._open_case = open_case
        self.calls = 0

    async def __call__(self, **fields: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise OperationalError("INSERT INTO handoffs", {}, ConnectionResetError("connection lost"))
        return await self._open_case(**fields)


def dead_process() -> ProcessId:
    """A process of this host that has exited: its pid is free."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return replace(THIS_PROCESS, pid=child.pid, boot="gone")


def sweeper(svc: Any, notifier: RecordingNotifier, **kwargs: Any) -> Sweeper:
    notifiers = Notifiers(svc.store)
    notifiers.register("slack", notifier)
    return Sweeper(svc, notifiers, **kwargs)


async def start_run(store: Store, run_id: str, owner: ProcessId | str) -> None:
    await store.threads.remember_place(PLACE)
    await store.runs.start(run_id, KEY, "slack", "U_ALICE", "Can I work abroad?", "gpt-4o-mini", str(owner))


async def test_a_run_whose_process_died_is_handed_off_and_its_user_told_exactly_once(tmp_path, fake_openai):
    notifier = RecordingNotifier()
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        await start_run(svc.store, "run_dead", dead_process())
        other_replica = replace(THIS_PROCESS, pid=os.getppid(), boot="other")  # alive, same host
        replicas = [sweeper(svc, notifier), sweeper(svc, notifier, me=other_replica)]
        reports = await asyncio.gather(*(replica.sweep_once() for replica in replicas))
        run = await svc.store.runs.get("run_dead")
        (case,) = await svc.store.cases.recent()
        history = await svc.store.threads.load_history(KEY)
    assert sorted(len(r.recovered_runs) for r in reports) == [0, 1]
    ((place, notice),) = notifier.notices
    assert place == PLACE and notice.run_id == "run_dead" and notice.case_id == "HD-1001"
    assert notice.text.startswith("This request was stopped before it finished.") and "HD-1001" in notice.text
    assert (run.status, run.reason) == ("finished", "cancelled")
    assert (case.reason, case.run_id, case.question) == ("cancelled", "run_dead", "Can I work abroad?")
    assert history == [
        {"role": "user", "content": "Can I work abroad?"},
        {"role": "assistant", "content": notice.text},
    ]


async def test_another_replicas_run_is_left_alone_until_its_heartbeat_goes_stale(tmp_path, fake_openai):
    elsewhere = ProcessId("other-host", "4026531836", 7, "live")
    notifier = RecordingNotifier()
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        await svc.store.workers.heartbeat(str(elsewhere), utcnow())
        await start_run(svc.store, "run_live", elsewhere)
        now = await sweeper(svc, notifier).sweep_once()
        later = await sweeper(svc, notifier, clock=lambda: utcnow() + timedelta(seconds=45)).sweep_once()
    assert now.recovered_runs == [] and later.recovered_runs == ["run_live"]


async def test_a_run_with_no_heartbeat_is_recovered_once_it_is_older_than_any_run_can_be(tmp_path, fake_openai):
    notifier = RecordingNotifier()
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        await start_run(svc.store, "run_cli", "laptop:12345")  # an older release's owner, or a CLI process
        soon = await sweeper(svc, notifier).sweep_once()
        later = await sweeper(svc, notifier, clock=lambda: utcnow() + timedelta(minutes=2)).sweep_once()
    assert soon.recovered_runs == [] and later.recovered_runs == ["run_cli"]


async def test_our_own_runs_in_flight_are_never_recovered(tmp_path, fake_openai):
    fake_openai.script(delay(0.5, text("Done.")))
    notifier = RecordingNotifier()
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        asking = asyncio.create_task(ask(svc, "slow"))
        await eventually(lambda: fake_openai.requests)
        report = await sweeper(svc, notifier, clock=lambda: utcnow() + timedelta(hours=1)).sweep_once()
        reply = await asking
    assert report.recovered_runs == [] and reply.reason == TerminationReason.ANSWERED


async def test_an_expired_card_is_updated_once_to_say_so(tmp_path, fake_openai):
    notifier = RecordingNotifier()
    async with service(tmp_path, fake_openai, NoPassages(), pending_ttl_s=0) as svc:
        action = await svc.pending.propose(
            run_id="r1", conversation_key=KEY, requester="U_ALICE", tool="create_it_ticket", call_id="c1",
            arguments={"summary": "VPN"}, text="Confirm?", run_state={},
        )  # fmt: skip
        await svc.pending.set_platform_message(action.id, {"platform": "slack", "channel": "C1", "ts": "1.2"})
        first = await sweeper(svc, notifier).sweep_once()
        second = await sweeper(svc, notifier).sweep_once()
    assert first.expired_cards == [action.id] and second.expired_cards == []
    ((record,),) = [notifier.expired]
    assert record.state == "expired" and record.platform_message["ts"] == "1.2"


async def test_a_clean_stop_removes_the_heartbeat(database: Database):
    store = await database.open()
    await store.workers.heartbeat("host:1:2:abc", utcnow())
    await store.workers.forget("host:1:2:abc")
    assert await store.workers.heartbeats() == {}


async def test_only_one_replica_takes_over_a_dead_run(store: Store, second_store: Store):
    await store.runs.start("r1", KEY, "slack", "U1", "q", "m", "dead:1:2:x")
    won = await asyncio.gather(
        store.runs.take_over("r1", "dead:1:2:x", "a:1:3:y"), second_store.runs.take_over("r1", "dead:1:2:x", "b:1:4:z")
    )
    assert sorted(won) == [False, True]


async def test_shutdown_lets_quick_runs_finish_and_slow_ones_give_up_with_a_case(tmp_path, fake_openai):
    fake_openai.script(delay(0.3, text("Quick answer.")), delay(30, text("Never sent.")))
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        quick = asyncio.create_task(ask(svc, "quick one", thread="q"))
        await eventually(lambda: len(fake_openai.requests) == 1)
        slow = asyncio.create_task(ask(svc, "slow one", thread="s"))
        await eventually(lambda: len(fake_openai.requests) == 2)
        cancelled = await svc.inflight.drain(grace_s=1.0)
        quick_reply, slow_reply = await quick, await slow
        (case,) = await svc.store.cases.recent()
    assert cancelled == 1 and quick_reply.reason == TerminationReason.ANSWERED
    assert slow_reply.reason == TerminationReason.CANCELLED and isinstance(slow_reply.outcome, GaveUp)
    assert slow_reply.outcome.case_id == "HD-1001" and case.run_id == slow_reply.run_id
    assert "stopped before it finished" in slow_reply.outcome.text


async def test_an_action_cut_off_by_a_crash_is_told_to_its_requester_after_a_restart(
    tmp_path, fake_openai, sample_index
):
    fake_openai.script(tool_calls(("create_it_ticket", TICKET), content="Shall I raise this ticket?"))
    async with service(tmp_path, fake_openai, sample_index) as crashed:
        action = await left_executing_by_a_crash(crashed)
    notifier = RecordingNotifier()
    async with service(tmp_path, fake_openai, sample_index) as restarted:  # opening it recovers nothing
        notifiers = Notifiers(restarted.store)
        notifiers.register("console", notifier)
        report = await Sweeper(restarted, notifiers).sweep_once()
        record = await restarted.pending.get(action.id)
    assert report.unknown_actions == [action.id] and record.state == "unknown"
    ((place, notice),) = notifier.notices
    assert place.key == record.conversation_key and notice.case_id == "HD-1001"


async def test_an_action_whose_case_failed_to_open_is_handed_off_and_told_once_on_a_later_pass(
    tmp_path, fake_openai, sample_index, monkeypatch
):
    fake_openai.script(*[tool_calls(("create_it_ticket", TICKET), content="Shall I raise this ticket?")] * 2)
    async with service(tmp_path, fake_openai, sample_index) as crashed:
        first = await left_executing_by_a_crash(crashed)
        second = await left_executing_by_a_crash(crashed, "Printer jammed on floor 2")
    notifier = RecordingNotifier()
    async with service(tmp_path, fake_openai, sample_index) as restarted:
        monkeypatch.setattr(restarted.helpdesk, "open_case", FailsOnce(restarted.helpdesk.open_case))
        notifiers = Notifiers(restarted.store)
        notifiers.register("console", notifier)
        passes = Sweeper(restarted, notifiers)
        cut_short = await passes.sweep_once()  # the first action's case fails; it is unknown all the same
        minutes_later = utcnow() - timedelta(minutes=2)  # as if the next passes ran minutes later
        await restarted.store.pending.update(first.id, finished_at=minutes_later)
        retried, after = await passes.sweep_once(), await passes.sweep_once()
        record = await restarted.pending.get(first.id)
        cases = await restarted.store.cases.recent()
    assert cut_short.unknown_actions == [second.id] and record.state == "unknown"
    assert retried.unknown_actions == [first.id] and after.unknown_actions == []
    assert [notice.case_id for _, notice in notifier.notices] == ["HD-1001", "HD-1002"]
    assert sorted(case.question for case in cases) == ["Printer jammed on floor 2", "VPN broken with NG-809"]


async def test_only_one_replica_retries_an_unknown_action_left_without_a_case(store: Store, second_store: Store):
    action = await PendingActions(store).propose(
        run_id="r1", conversation_key=KEY, requester="U_ALICE", tool="create_it_ticket", call_id="c1",
        arguments={"summary": "VPN"}, text="Confirm?", run_state={},
    )  # fmt: skip
    marked = utcnow() - timedelta(minutes=5)  # by a pass that died before it opened the case
    assert await store.pending.transition(action.id, ("open",), "unknown", decided_at=marked, finished_at=marked)
    now = utcnow()
    claims = await asyncio.gather(
        store.pending.claim_caseless_unknown(now - timedelta(minutes=1), now),
        second_store.pending.claim_caseless_unknown(now - timedelta(minutes=1), now),
    )
    await Helpdesk(store).open_case(
        origin=f"action:{action.id}", reason="action_unknown", user=UserRef("U_ALICE"), conversation_key=KEY,
        question="VPN",
    )  # fmt: skip
    much_later = utcnow() + timedelta(hours=1)
    assert sorted(len(claimed) for claimed in claims) == [0, 1]
    assert await store.pending.claim_caseless_unknown(much_later, much_later) == []


async def test_a_run_of_ours_that_waited_long_for_a_slot_is_not_taken_for_dead(tmp_path, fake_openai):
    settings = settings_for(tmp_path, fake_openai, busy_wait_s=90.0, deadline_s=20.0)
    notifier = RecordingNotifier()
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        await start_run(svc.store, "run_queued", THIS_PROCESS)  # recorded, waiting for a slot: not in flight yet
        waited = utcnow() + timedelta(seconds=90 + 20)  # past deadline + margin alone, within wait + deadline
        report = await sweeper(svc, notifier, policy=sweep_policy(settings), clock=lambda: waited).sweep_once()
    assert report.recovered_runs == [] and notifier.notices == []
