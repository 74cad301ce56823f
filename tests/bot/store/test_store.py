from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.store import Store
from bot.types import TerminationReason
from tests.databases import Database

TRACE = [
    {"kind": "model", "input_tokens": 900, "output_tokens": 120, "latency_ms": 812.5},
    {"kind": "tool", "name": "search_policies", "arguments": {"query": "VPN"}, "latency_ms": 31.0},
]


async def _start(store: Store, run_id: str, owner: str = "host-1:100") -> None:
    await store.runs.start(run_id, "slack:T1:C1:1.0", "slack", "U1", "How do I get VPN?", "gpt-4o-mini", owner)


async def test_claim_event_is_true_once_then_false_for_retries(store: Store) -> None:
    assert await store.threads.claim_event("Ev1") is True
    assert await store.threads.claim_event("Ev1") is False
    assert await store.threads.claim_event("Ev2") is True


async def test_concurrent_claims_from_two_processes_have_one_winner(store: Store, second_store: Store) -> None:
    claims = [(store if i % 2 else second_store).threads.claim_event("Ev-retry") for i in range(8)]
    results = await asyncio.gather(*claims)
    assert results.count(True) == 1


async def test_prune_events_forgets_old_ids(store: Store) -> None:
    await store.threads.claim_event("Ev-old")
    assert await store.threads.prune_events(datetime.now(UTC) + timedelta(seconds=1)) == 1
    assert await store.threads.claim_event("Ev-old") is True


async def test_history_appends_in_order_per_thread(store: Store) -> None:
    assert await store.threads.load_history("slack:T1:C1:1.0") == []
    first = [
        {"role": "user", "content": "Où est la politique VPN ?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search_policies", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "[]"},
    ]
    await store.threads.append_history("slack:T1:C1:1.0", first)
    assert await store.threads.load_history("slack:T1:C1:1.0") == first
    await store.threads.append_history("slack:T1:C1:1.0", [{"role": "assistant", "content": "Voici."}])
    assert await store.threads.load_history("slack:T1:C1:1.0") == [*first, {"role": "assistant", "content": "Voici."}]
    assert await store.threads.load_history("slack:T1:C1:2.0") == []


async def test_run_is_running_until_finished_with_totals_and_trace(store: Store) -> None:
    await _start(store, "r1")
    running = await store.runs.get("r1")
    assert running is not None
    assert (running.status, running.reason, running.finished_at, running.trace) == ("running", None, None, [])

    await store.runs.finish(
        "r1",
        reason=TerminationReason.ANSWERED,
        steps=2,
        input_tokens=1800,
        output_tokens=240,
        cost_usd=0.0004,
        latency_ms=1650.0,
        trace=TRACE,
    )
    run = await store.runs.get("r1")
    assert run is not None
    assert run.status == "finished"
    assert run.reason == "answered"
    assert (run.steps, run.input_tokens, run.output_tokens) == (2, 1800, 240)
    assert run.cost_usd == pytest.approx(0.0004)
    assert run.latency_ms == pytest.approx(1650.0)
    assert run.trace == TRACE
    assert run.finished_at is not None and run.finished_at >= run.started_at


async def test_timestamps_come_back_timezone_aware_utc(store: Store) -> None:
    before = datetime.now(UTC)
    await _start(store, "r1")
    run = await store.runs.get("r1")
    assert run is not None
    assert run.started_at.tzinfo is not None and run.started_at.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= run.started_at <= datetime.now(UTC) + timedelta(seconds=1)


async def test_list_runs_is_newest_first_and_limited(store: Store) -> None:
    for run_id in ("r1", "r2", "r3"):
        await _start(store, run_id)
    assert [run.id for run in await store.runs.recent()] == ["r3", "r2", "r1"]
    assert [run.id for run in await store.runs.recent(limit=2)] == ["r3", "r2"]


async def test_get_run_of_unknown_id_is_none(store: Store) -> None:
    assert await store.runs.get("nope") is None


async def test_feedback_is_attached_to_an_existing_run_only(store: Store) -> None:
    await _start(store, "r1")
    assert await store.runs.set_feedback("r1", "down", "U1") is True
    run = await store.runs.get("r1")
    assert run is not None
    assert (run.feedback, run.feedback_by) == ("down", "U1")
    assert await store.runs.set_feedback("nope", "up", "U1") is False


async def test_running_runs_lists_unfinished_runs_by_owner(store: Store) -> None:
    await _start(store, "r1", owner="host-1:100")
    await _start(store, "r2", owner="host-2:200")
    await _start(store, "r3", owner="host-1:100")
    await store.runs.finish(
        "r3", reason="answered", steps=1, input_tokens=1, output_tokens=1, cost_usd=0, latency_ms=1, trace=[]
    )
    assert sorted(run.id for run in await store.runs.unfinished()) == ["r1", "r2"]
    assert [run.id for run in await store.runs.unfinished(owner="host-1:100")] == ["r1"]


async def test_data_survives_reopening_the_database(store: Store, database: Database) -> None:
    await store.threads.append_history("k", [{"role": "user", "content": "hi"}])
    await store.close()
    reopened = await database.open()
    assert await reopened.threads.load_history("k") == [{"role": "user", "content": "hi"}]


async def test_open_rejects_an_unsupported_database() -> None:
    with pytest.raises(ValueError, match="unsupported database"):
        await Store.open("mysql+aiomysql://u@localhost/db")


async def test_open_creates_the_sqlite_directory_and_enables_wal(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "policypal.db"
    store = await Store.open(f"sqlite+aiosqlite:///{path}")
    try:
        assert await store.threads.claim_event("Ev1") is True
        assert path.exists()
        assert path.with_name("policypal.db-wal").exists()
    finally:
        await store.close()
