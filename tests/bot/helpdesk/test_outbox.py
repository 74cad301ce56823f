"""The handoff outbox on SQLite and PostgreSQL: retries, restarts, several workers, and nothing lost."""

from __future__ import annotations

import asyncio
import io
from datetime import timedelta
from typing import Any

from sqlalchemy import delete

from adapters.cli.handoffs import show_handoffs
from bot.config import Settings
from bot.delivery import DeliveryResult, Outbox, OutboxPolicy
from bot.helpdesk import CaseDeliveries, Destination, HandoffCase, Helpdesk, case_number
from bot.runtime import Metrics
from bot.store import Store, utcnow
from bot.store.tables import Handoff
from bot.types import UserRef
from bot.wiring import delivery_counter
from tests.databases import Database

ALICE = UserRef("U_ALICE", "Alice", "alice@example.com")
QUICK = OutboxPolicy(max_attempts=3, backoff_s=60, deliver_timeout_s=1.0, stale_after_s=60)


class Recorder:
    """A destination that records what it delivered and fails its first ``failures`` attempts."""

    def __init__(self, name: str = "hook", *, failures: int = 0, delay_s: float = 0.0) -> None:
        self.name = name
        self.failures = failures
        self.delay_s = delay_s
        self.delivered: list[str] = []

    async def deliver(self, case: HandoffCase) -> str | None:
        await asyncio.sleep(self.delay_s)
        if self.failures:
            self.failures -= 1
            raise ConnectionError("helpdesk endpoint unreachable")
        self.delivered.append(case.case_id)
        return f"ref-{case.case_id}"


def later(seconds: float):  # a clock that has moved on, for backoff without sleeping
    return lambda: utcnow() + timedelta(seconds=seconds)


def case_outbox(store: Store, destinations: list[Destination], policy: OutboxPolicy, **kwargs: Any) -> Outbox:
    """The outbox as the wiring builds it: case rows sent through ``CaseDeliveries`` to these destinations."""
    return Outbox(store, [CaseDeliveries(store, destinations)], policy, **kwargs)


async def open_case(store: Store, origin: str = "run:r1", destinations=("hook",)) -> HandoffCase:
    helpdesk = Helpdesk(store, destinations)
    return await helpdesk.open_case(
        origin=origin, reason="step_budget", user=ALICE, conversation_key="slack:T1:C1:171.1", question="VPN?"
    )


async def test_failure_then_restart_then_success_delivers_exactly_once(database: Database) -> None:
    first_process = await database.open()
    case = await open_case(first_process)
    flaky = Recorder(failures=1)
    (result,) = await case_outbox(first_process, [flaky], QUICK).run_once()
    assert result.status == "retrying" and "unreachable" in result.detail
    assert await case_outbox(first_process, [flaky], QUICK).run_once() == []  # backing off, not due yet
    await first_process.close()

    restarted = await database.open()
    healthy = Recorder()
    outbox = case_outbox(restarted, [healthy], QUICK, clock=later(61))
    (result,) = await outbox.run_once()
    assert (result.case_id, result.status, result.detail) == (case.case_id, "delivered", f"ref-{case.case_id}")
    assert await outbox.run_once() == []
    (row,) = await restarted.outbox.deliveries([1])
    assert (row.state, row.attempts, row.external_ref) == ("delivered", 2, f"ref-{case.case_id}")
    assert flaky.delivered + healthy.delivered == [case.case_id]


async def test_two_workers_deliver_each_case_once(store: Store, second_store: Store) -> None:
    cases = [await open_case(store, f"run:r{n}") for n in range(6)]
    shared = Recorder(delay_s=0.02)
    workers = [case_outbox(store, [shared], QUICK), case_outbox(second_store, [shared], QUICK)]
    for _ in range(3):
        await asyncio.gather(*(worker.run_once() for worker in workers))
    assert sorted(shared.delivered) == sorted(c.case_id for c in cases)


async def test_a_delivery_that_keeps_failing_is_listed_as_failed_and_retried_on_demand(
    database: Database, tmp_path
) -> None:
    store = await database.open()
    case = await open_case(store)
    broken = Recorder(failures=10)
    policy = OutboxPolicy(max_attempts=2, backoff_s=0)
    outbox = case_outbox(store, [broken], policy)
    assert [r.status for r in await outbox.run_once()] == ["retrying"]
    assert [r.status for r in await outbox.run_once()] == ["failed"]
    assert await outbox.run_once() == []  # given up: no more automatic attempts
    (failed,) = await store.cases.recent(failed_only=True)
    assert failed.number == 1

    assert await outbox.retry_failed(case_number(case.case_id)) == 1
    broken.failures = 0
    (result,) = await outbox.run_once()
    assert result.status == "delivered" and broken.delivered == [case.case_id]
    assert await store.cases.recent(failed_only=True) == []


async def test_a_claim_left_by_a_dead_worker_is_taken_over_and_its_late_result_ignored(store: Store) -> None:
    case = await open_case(store)
    (row,) = await store.outbox.deliveries([1])
    now = utcnow()
    attempt = await store.outbox.claim(row.id, "dead-worker", now, now - timedelta(seconds=60))
    assert attempt == 1
    assert await case_outbox(store, [Recorder()], QUICK).run_once() == []  # still claimed, not yet stale

    survivor = Recorder()
    (result,) = await case_outbox(store, [survivor], QUICK, clock=later(61)).run_once()
    assert result.status == "delivered" and survivor.delivered == [case.case_id]
    assert not await store.outbox.settle(row.id, "dead-worker", attempt, "failed", last_error="late")
    (row,) = await store.outbox.deliveries([1])
    assert row.state == "delivered"


async def test_a_destination_that_hangs_is_a_timed_out_attempt(store: Store) -> None:
    await open_case(store)
    slow = Recorder(delay_s=2)
    (result,) = await case_outbox(store, [slow], QUICK).run_once(timeout_s=0.1)
    assert (result.status, result.detail) == ("retrying", "timed out")


async def test_one_case_per_origin_and_one_delivery_per_destination(store: Store) -> None:
    first = await open_case(store, destinations=("hook", "email"))
    again = await open_case(store, destinations=("hook", "email"))
    assert first.case_id == again.case_id == "HD-1001"
    assert sorted(d.destination for d in await store.outbox.deliveries([1])) == ["email", "hook"]


async def test_deliveries_for_destinations_this_process_lacks_are_left_for_another(store: Store) -> None:
    await open_case(store, destinations=("slack",))
    assert await case_outbox(store, [Recorder("hook")], QUICK).run_once() == []
    (row,) = await store.outbox.deliveries([1])
    assert row.state == "pending" and row.attempts == 0


async def test_the_cli_lists_failed_deliveries_with_their_error(tmp_path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    store = await Store.open(settings.resolved_database_url)
    await open_case(store)
    await case_outbox(store, [Recorder(failures=5)], OutboxPolicy(max_attempts=1)).run_once()
    await store.close()
    out = io.StringIO()
    assert await show_handoffs(settings, failed=True, out=out) == 0
    text = out.getvalue()
    assert "HD-1001" in text and "failed" in text
    assert "hook (1 attempts): ConnectionError: helpdesk endpoint unreachable" in text


async def test_every_attempts_outcome_reaches_the_metrics(database: Database) -> None:
    store = await database.open()
    await open_case(store)
    metrics = Metrics()

    def count(result: DeliveryResult) -> None:
        metrics.observe_delivery(result.destination, result.status)

    await case_outbox(store, [Recorder(failures=1)], QUICK, on_result=count).run_once()
    await case_outbox(store, [Recorder()], QUICK, clock=later(120), on_result=count).run_once()
    text = metrics.render().decode()
    assert 'policypal_handoff_deliveries_total{destination="hook",outcome="retrying"} 1.0' in text
    assert 'policypal_handoff_deliveries_total{destination="hook",outcome="delivered"} 1.0' in text


async def test_a_delivery_whose_case_is_gone_fails_at_once_naming_the_case(store: Store) -> None:
    await open_case(store)
    (row,) = await store.outbox.deliveries([1])
    sender = CaseDeliveries(store, [Recorder()])
    assert sender.label(row) == "HD-1001"
    async with store.transaction() as tx:  # the case was removed by hand (a restore, an operator)
        await tx.execute(delete(Handoff))
    (result,) = await Outbox(store, [sender], QUICK).run_once()
    assert (result.label, result.status) == ("HD-1001", "failed") and "case not found" in result.detail


def test_replies_are_counted_apart_from_handoff_deliveries() -> None:
    # the one outbox sends Slack/Teams replies and helpdesk cases: a reply failing during a Slack
    # incident must not read as a failed handoff on the operator's dashboard
    metrics = Metrics()
    count = delivery_counter(metrics, ["hook"])

    count(DeliveryResult("HD-1001", "hook", "delivered"))
    count(DeliveryResult("post 7", "slack:chat", "failed"))

    text = metrics.render().decode()
    assert 'policypal_handoff_deliveries_total{destination="hook",outcome="delivered"} 1.0' in text
    assert 'policypal_reply_deliveries_total{destination="slack:chat",outcome="failed"} 1.0' in text
    assert 'policypal_handoff_deliveries_total{destination="slack:chat"' not in text
