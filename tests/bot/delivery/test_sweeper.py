"""Crash recovery and graceful shutdown: nobody is left without an answer when a process stops.

The sweeper hands what dead processes left behind to a live one: their inbox items are worked on again
(the person gets the answer, once), their outbox rows are sent again, their confirmed calls are marked
unknown (never re-run), and runs an earlier release recorded as running get the give-up. What it tells
people goes through the outbox, like every other post.
"""

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

from bot.delivery import Address, Post, Sweeper, post_destination
from bot.helpdesk import Helpdesk
from bot.pending import PendingActions
from bot.runtime import THIS_PROCESS, ProcessId
from bot.store import NewPost, Place, Store, utcnow
from bot.types import GaveUp, Inbound, TerminationReason, UserRef
from bot.wiring import sweep_policy
from tests.bot.helpers import (
    ALICE,
    MESSAGE,
    RecordingSender,
    answer_messages,
    ask,
    deliver,
    eventually,
    inbound_json,
    left_executing_by_a_crash,
    service,
    settings_for,
)
from tests.databases import Database
from tests.fakes.openai_server import delay, text, tool_calls

pytestmark = pytest.mark.asyncio

KEY = "slack:T1:C1:1700000000.000100"
PLACE = Place(KEY, "slack", "T1", "C1", "1700000000.000100", None)
THREAD = Address("slack", "C1", "1700000000.000100", None, "")
TICKET = {"category": "network_vpn", "summary": "VPN fails with NG-809", "urgency": "high"}


class NoPassages:
    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Any]:
        return []


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


def posted(svc: Any, platform: str = "slack") -> RecordingSender:
    """What ``svc`` posts on ``platform`` through its outbox, as that platform's sender would send it."""
    sender = RecordingSender(platform)
    svc.outbox.register(sender)
    return sender


async def settled(svc: Any) -> None:
    """Let the work a pass started (inbox items, rows sent now) finish."""
    await svc.inbox.drain(10)
    await svc.outbox.drain(5)


async def start_run(store: Store, run_id: str, owner: ProcessId | str) -> None:
    """A run as an earlier release recorded it: running, before it started."""
    await store.threads.remember_place(PLACE)
    await store.runs.start(run_id, KEY, "slack", "U_ALICE", "Can I work abroad?", "gpt-4o-mini", str(owner))


def slack_message(text: str, event_id: str = "Ev1") -> Inbound:
    return Inbound("slack", "C1", "1700000000.000100", ALICE, text, event_id=event_id, tenant="T1")


# -- inbox items and outbox rows of dead processes -------------------------------------------------


async def test_an_event_a_dead_process_acknowledged_is_answered_here_exactly_once(tmp_path, fake_openai):
    fake_openai.script(text("Yes, for up to four weeks a year."))
    gone = dead_process()
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        sender = posted(svc)
        answered = answer_messages(svc)
        inbound = slack_message("Can I work abroad?")
        await svc.store.workers.heartbeat(str(gone), utcnow())
        await svc.store.inbox.accept("slack:Ev1", "slack", MESSAGE, inbound_json(inbound), str(gone))  # then killed
        other_replica = replace(THIS_PROCESS, pid=os.getppid(), boot="other")  # alive, same host
        reports = await asyncio.gather(Sweeper(svc).sweep_once(), Sweeper(svc, me=other_replica).sweep_once())
        await settled(svc)
        again = await Sweeper(svc).sweep_once()
        await settled(svc)
        ((record, reply),) = answered
        run = await svc.store.runs.get(reply.run_id)
        metrics = svc.metrics.render().decode()
    assert sorted(r.taken_over for r in reports) == [[], ["slack:Ev1"]] and again.taken_over == []
    assert (record.epoch, record.owner) == (2, str(THIS_PROCESS))
    assert run is not None and run.inbox_id == "slack:Ev1" and len(fake_openai.requests) == 1
    (post,) = sender.posts
    assert post.kind == "reply" and post.reply_outcome().text == "Yes, for up to four weeks a year."
    assert post.address == Address("slack", "C1", "1700000000.000100", None, ALICE.id, ALICE.name)
    assert 'policypal_recovered_total{kind="event"} 1.0' in metrics


async def test_another_replicas_event_is_left_alone_until_its_heartbeat_goes_stale(tmp_path, fake_openai):
    fake_openai.script(text("Answer."))
    elsewhere = ProcessId("other-host", "4026531836", 7, "live")
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        answered = answer_messages(svc)
        await svc.store.workers.heartbeat(str(elsewhere), utcnow())
        payload = inbound_json(slack_message("Can I work abroad?"))
        await svc.store.inbox.accept("slack:Ev1", "slack", MESSAGE, payload, str(elsewhere))  # it is working on it
        now = await Sweeper(svc).sweep_once()
        await settled(svc)
        later = await Sweeper(svc, clock=lambda: utcnow() + timedelta(seconds=45)).sweep_once()
        await settled(svc)
    assert now.taken_over == [] and later.taken_over == ["slack:Ev1"]
    assert len(answered) == 1


async def test_our_own_event_in_flight_is_never_taken_over(tmp_path, fake_openai):
    fake_openai.script(delay(0.5, text("Done.")))
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        answered = answer_messages(svc)
        await deliver(svc, slack_message("slow"))
        await eventually(lambda: fake_openai.requests)
        report = await Sweeper(svc, clock=lambda: utcnow() + timedelta(hours=1)).sweep_once()
        await settled(svc)
    ((_, reply),) = answered
    assert report.taken_over == [] and reply is not None and reply.reason == TerminationReason.ANSWERED
    assert len(fake_openai.requests) == 1


async def test_posts_a_dead_process_was_sending_are_sent_again_looking_for_the_earlier_attempt(
    tmp_path, fake_openai
):
    gone = dead_process()
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        sender = posted(svc)
        await svc.store.workers.heartbeat(str(gone), utcnow())
        post = Post("notice", THREAD, text="Your answer.")
        (row,) = await svc.store.outbox.add_posts([NewPost(post_destination("slack"), post.to_json(), KEY)],
                                                  claimed_by=str(gone))  # fmt: skip
        report = await Sweeper(svc).sweep_once()
        results = await svc.outbox.run_once()
    assert report.resent == 1 and [r.status for r in results] == ["delivered"]
    ((sent, delivery),) = sender.sent
    assert sent.id == row.id and delivery.uncertain  # it may have gone through: the sender looks first


async def test_an_action_a_dead_process_was_executing_is_unknown_at_the_next_pass_not_minutes_later(
    tmp_path, fake_openai
):
    gone = dead_process()
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        sender = posted(svc)
        await svc.store.threads.remember_place(PLACE)
        await svc.store.workers.heartbeat(str(gone), utcnow())
        pending = PendingActions(svc.store)
        dead, live = [await pending.propose(
            run_id="r1", conversation_key=KEY, requester="U_ALICE", tool="create_it_ticket", call_id=f"c{n}",
            arguments={"summary": "VPN"}, text="Confirm?", run_state={},
        ) for n in range(2)]  # fmt: skip
        await svc.store.pending.transition(dead.id, ("open",), "executing", executor=str(gone), decided_at=utcnow())
        await pending.decide(live.id, "U_ALICE", "confirm", live.args_hash)  # executing here, just now
        report = await Sweeper(svc).sweep_once()
        await settled(svc)
        states = [(await svc.pending.get(a.id)).state for a in (dead, live)]  # type: ignore[union-attr]
    assert report.unknown_actions == [dead.id] and states == ["unknown", "executing"]
    (notice,) = sender.posts  # the card was never posted here: only the requester's notice
    assert (notice.kind, notice.case_id, notice.run_id) == ("notice", "HD-1001", "r1")
    assert notice.text.startswith("I couldn't tell whether your confirmed request went through.")


async def test_an_action_a_terminal_process_was_executing_when_killed_is_unknown_at_the_next_pass(
    tmp_path, fake_openai
):
    # `policypal decide ... confirm` runs the call in a process with no heartbeat of its own; killed
    # mid-call, its pid is gone, which the sweeper can tell at once (see the module docstring).
    gone = dead_process()
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        action = await PendingActions(svc.store).propose(
            run_id="r1", conversation_key=KEY, requester="U_ALICE", tool="create_it_ticket", call_id="c1",
            arguments={"summary": "VPN"}, text="Confirm?", run_state={},
        )  # fmt: skip
        await svc.store.pending.transition(action.id, ("open",), "executing", executor=str(gone), decided_at=utcnow())
        report = await Sweeper(svc).sweep_once()
    assert report.unknown_actions == [action.id]


# -- runs an earlier release recorded as running ---------------------------------------------------


async def test_a_run_whose_process_died_is_handed_off_and_its_user_told_exactly_once(tmp_path, fake_openai):
    gone = dead_process()
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        sender = posted(svc)
        await svc.store.workers.heartbeat(str(gone), utcnow())  # it served, then it was killed
        await start_run(svc.store, "run_dead", gone)
        other_replica = replace(THIS_PROCESS, pid=os.getppid(), boot="other")  # alive, same host
        replicas = [Sweeper(svc), Sweeper(svc, me=other_replica)]
        reports = await asyncio.gather(*(replica.sweep_once() for replica in replicas))
        await settled(svc)
        run = await svc.store.runs.get("run_dead")
        (case,) = await svc.store.cases.recent()
        history = await svc.store.threads.load_history(KEY)
    assert sorted(len(r.recovered_runs) for r in reports) == [0, 1]
    (notice,) = sender.posts
    assert notice.kind == "notice" and notice.address == THREAD
    assert (notice.run_id, notice.case_id) == ("run_dead", "HD-1001")
    assert notice.text.startswith("This request was stopped before it finished.") and "HD-1001" in notice.text
    assert (run.status, run.reason) == ("finished", "cancelled")
    assert (case.reason, case.run_id, case.question) == ("cancelled", "run_dead", "Can I work abroad?")
    assert history == [
        {"role": "user", "content": "Can I work abroad?"},
        {"role": "assistant", "content": notice.text},
    ]


async def test_another_replicas_run_is_left_alone_until_its_heartbeat_goes_stale(tmp_path, fake_openai):
    elsewhere = ProcessId("other-host", "4026531836", 7, "live")
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        await svc.store.workers.heartbeat(str(elsewhere), utcnow())
        await start_run(svc.store, "run_live", elsewhere)
        now = await Sweeper(svc).sweep_once()
        later = await Sweeper(svc, clock=lambda: utcnow() + timedelta(seconds=45)).sweep_once()
    assert now.recovered_runs == [] and later.recovered_runs == ["run_live"]


async def test_a_run_with_no_heartbeat_is_recovered_once_it_is_older_than_any_run_can_be(tmp_path, fake_openai):
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        await start_run(svc.store, "run_cli", "laptop:12345")  # an older release's owner, or a CLI process
        soon = await Sweeper(svc).sweep_once()
        later = await Sweeper(svc, clock=lambda: utcnow() + timedelta(minutes=2)).sweep_once()
    assert soon.recovered_runs == [] and later.recovered_runs == ["run_cli"]


async def test_a_run_of_ours_recorded_as_running_is_not_taken_for_dead(tmp_path, fake_openai):
    settings = settings_for(tmp_path, fake_openai, queue_wait_s=90.0, deadline_s=20.0)
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        sender = posted(svc)
        await start_run(svc.store, "run_queued", THIS_PROCESS)
        waited = utcnow() + timedelta(seconds=90 + 20)  # past deadline + margin alone, within wait + deadline
        report = await Sweeper(svc, sweep_policy(settings), clock=lambda: waited).sweep_once()
        await settled(svc)
    assert report.recovered_runs == [] and sender.sent == []


async def test_only_one_replica_takes_over_a_dead_run(store: Store, second_store: Store):
    await store.runs.start("r1", KEY, "slack", "U1", "q", "m", "dead:1:2:x")
    won = await asyncio.gather(
        store.runs.take_over("r1", "dead:1:2:x", "a:1:3:y"), second_store.runs.take_over("r1", "dead:1:2:x", "b:1:4:z")
    )
    assert sorted(won) == [False, True]


# -- cards, unknown actions, heartbeats, shutdown --------------------------------------------------


async def test_an_expired_card_is_updated_once_to_say_so(tmp_path, fake_openai):
    async with service(tmp_path, fake_openai, NoPassages(), pending_ttl_s=60) as svc:
        sender = posted(svc)
        await svc.store.threads.remember_place(PLACE)
        action = await svc.pending.propose(
            run_id="r1", conversation_key=KEY, requester="U_ALICE", tool="create_it_ticket", call_id="c1",
            arguments={"summary": "VPN"}, text="Confirm?", run_state={},
        )  # fmt: skip
        svc.pending._clock = lambda: utcnow() + timedelta(seconds=61)  # the card's minute has passed
        await svc.pending.set_platform_message(action.id, {"platform": "slack", "channel": "C1", "ts": "1.2"})
        first = await Sweeper(svc).sweep_once()
        second = await Sweeper(svc).sweep_once()
        await settled(svc)
    assert first.expired_cards == [action.id] and second.expired_cards == []
    (card,) = sender.posts
    assert card.kind == "card" and card.target == {"platform": "slack", "channel": "C1", "ts": "1.2"}
    assert card.card is not None and (card.card["pending_id"], card.card["state"]) == (action.id, "expired")


async def test_a_clean_stop_removes_the_heartbeat(database: Database):
    store = await database.open()
    await store.workers.heartbeat("host:1:2:abc", utcnow())
    await store.workers.forget("host:1:2:abc")
    assert await store.workers.heartbeats() == {}


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
    async with service(tmp_path, fake_openai, sample_index) as restarted:  # opening it recovers nothing
        sender = posted(restarted, "console")
        report = await Sweeper(restarted).sweep_once()
        await settled(restarted)
        record = await restarted.pending.get(action.id)
    assert report.unknown_actions == [action.id] and record.state == "unknown"
    (notice,) = sender.posts
    assert notice.kind == "notice" and notice.case_id == "HD-1001" and "HD-1001" in notice.text
    assert (notice.address.platform, notice.address.channel) == ("console", "terminal")


async def test_an_action_whose_case_failed_to_open_is_handed_off_and_told_once_on_a_later_pass(
    tmp_path, fake_openai, sample_index, monkeypatch
):
    fake_openai.script(*[tool_calls(("create_it_ticket", TICKET), content="Shall I raise this ticket?")] * 2)
    async with service(tmp_path, fake_openai, sample_index) as crashed:
        first = await left_executing_by_a_crash(crashed)
        second = await left_executing_by_a_crash(crashed, "Printer jammed on floor 2")
    async with service(tmp_path, fake_openai, sample_index) as restarted:
        sender = posted(restarted, "console")
        monkeypatch.setattr(restarted.helpdesk, "open_case", FailsOnce(restarted.helpdesk.open_case))
        passes = Sweeper(restarted)
        cut_short = await passes.sweep_once()  # the first action's case fails; it is unknown all the same
        minutes_later = utcnow() - timedelta(minutes=2)  # as if the next passes ran minutes later
        await restarted.store.pending.update(first.id, finished_at=minutes_later)
        retried, after = await passes.sweep_once(), await passes.sweep_once()
        await settled(restarted)
        record = await restarted.pending.get(first.id)
        cases = await restarted.store.cases.recent()
    assert cut_short.unknown_actions == [second.id] and record.state == "unknown"
    assert retried.unknown_actions == [first.id] and after.unknown_actions == []
    assert [notice.case_id for notice in sender.posts] == ["HD-1001", "HD-1002"]
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


async def test_old_inbox_items_are_pruned_by_a_pass(tmp_path, fake_openai):
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        assert await svc.store.inbox.remember("slack:Ev-old")
        await Sweeper(svc, clock=lambda: utcnow() + timedelta(days=2)).sweep_once()
        assert await svc.store.inbox.get("slack:Ev-old") is None
