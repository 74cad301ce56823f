from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text, update
from sqlalchemy.exc import DBAPIError

from bot.store import Rating, Store
from bot.store.tables import PlaceJoin, StopRequest
from bot.types import TerminationReason
from tests.databases import Database

TRACE = [
    {"kind": "model", "input_tokens": 900, "output_tokens": 120, "latency_ms": 812.5},
    {"kind": "tool", "name": "search_policies", "arguments": {"query": "VPN"}, "latency_ms": 31.0},
]


async def _start(store: Store, run_id: str, owner: str = "host-1:100") -> None:
    await store.runs.start(run_id, "slack:T1:C1:1.0", "slack", "U1", "How do I get VPN?", "gpt-4o-mini", owner)


async def test_an_event_is_accepted_once_then_found_for_its_retries(store: Store) -> None:
    assert await store.inbox.accept("slack:Ev1", "slack", "slack.request", {"body": {"n": 1}}, "host:1:2:a") is True
    assert await store.inbox.accept("slack:Ev1", "slack", "slack.request", {"body": {"n": 2}}, "host:1:3:b") is False
    assert await store.inbox.accept("slack:Ev2", "slack", "slack.request", {}, "host:1:2:a") is True
    item = await store.inbox.get("slack:Ev1")
    assert item is not None  # the first delivery's, leased to its writer
    assert (item.payload, item.state, item.owner, item.epoch, item.attempts) == (
        {"body": {"n": 1}}, "leased", "host:1:2:a", 1, 1,
    )  # fmt: skip
    assert await store.inbox.get("slack:Ev3") is None


async def test_concurrent_accepts_from_two_processes_have_one_winner(store: Store, second_store: Store) -> None:
    accepts = [
        (store if i % 2 else second_store).inbox.accept("slack:Ev-retry", "slack", "k", {}, f"p{i}") for i in range(8)
    ]
    results = await asyncio.gather(*accepts)
    assert results.count(True) == 1
    item = await store.inbox.get("slack:Ev-retry")
    assert item is not None and item.owner == f"p{results.index(True)}"


async def test_an_id_remembered_without_work_is_seen_by_every_later_delivery(store: Store, second_store: Store) -> None:
    assert await store.inbox.remember("slack:Ev-old") is True
    assert await second_store.inbox.remember("slack:Ev-old") is False
    assert await second_store.inbox.accept("slack:Ev-old", "slack", "k", {}, "p1") is False
    item = await store.inbox.get("slack:Ev-old")
    assert item is not None and (item.state, item.kind) == ("done", "legacy")
    assert await store.inbox.unanswered(datetime.now(UTC) - timedelta(days=1)) == []  # nothing to work on


async def test_prune_forgets_old_items_and_keeps_recent_ones(store: Store) -> None:
    await store.inbox.accept("slack:Ev-old", "slack", "k", {}, "p1")
    assert await store.inbox.prune(datetime.now(UTC) - timedelta(minutes=5)) == 0
    assert await store.inbox.prune(datetime.now(UTC) + timedelta(seconds=1)) == 1
    assert await store.inbox.get("slack:Ev-old") is None
    assert await store.inbox.accept("slack:Ev-old", "slack", "k", {}, "p1") is True  # a day on: new again


async def test_an_item_is_unanswered_until_a_run_names_it_or_it_is_finished(store: Store) -> None:
    since = datetime.now(UTC) - timedelta(minutes=1)
    for n in range(3):
        await store.inbox.accept(f"slack:Ev{n}", "slack", "k", {}, "p1")
    assert [i.id for i in await store.inbox.unanswered(since)] == ["slack:Ev0", "slack:Ev1", "slack:Ev2"]
    assert await store.runs.record(_run_row("r0"), fence=("slack:Ev0", 1))
    assert await store.inbox.finish("slack:Ev1", 1)
    assert await store.inbox.finish("slack:Ev1", 1) is False  # once
    assert [i.id for i in await store.inbox.unanswered(since)] == ["slack:Ev2"]
    assert await store.inbox.finish("slack:Ev2", 1, error="ValueError: boom")
    failed = await store.inbox.get("slack:Ev2")
    assert failed is not None and (failed.state, failed.last_error) == ("failed", "ValueError: boom")
    assert await store.inbox.unanswered(since) == []


async def test_only_one_process_takes_over_an_item_and_each_takeover_raises_the_epoch(
    store: Store, second_store: Store
) -> None:
    await store.inbox.accept("slack:Ev1", "slack", "k", {}, "dead")
    won = await asyncio.gather(store.inbox.relet("slack:Ev1", 1, "a"), second_store.inbox.relet("slack:Ev1", 1, "b"))
    assert sorted(won, key=str) == [2, None]
    assert await store.inbox.holds("slack:Ev1", 2) and not await store.inbox.holds("slack:Ev1", 1)
    assert await store.inbox.relet("slack:Ev1", 2, "c") == 3
    item = await store.inbox.get("slack:Ev1")
    assert item is not None and (item.owner, item.epoch, item.attempts) == ("c", 3, 3)


async def test_an_attempt_given_back_is_not_counted_and_only_its_own_epoch_may_give_it_back(store: Store) -> None:
    await store.inbox.accept("slack:Ev1", "slack", "k", {}, "p1")
    assert await store.inbox.give_back("slack:Ev1", 1)  # p1 stopped before it began the work
    assert await store.inbox.relet("slack:Ev1", 1, "p2") == 2
    assert not await store.inbox.give_back("slack:Ev1", 1)  # p1's epoch no longer holds it
    item = await store.inbox.get("slack:Ev1")
    assert item is not None and (item.owner, item.epoch, item.attempts) == ("p2", 2, 1)


async def test_a_postgresql_statement_waiting_on_a_lock_another_replica_holds_fails_rather_than_waits(
    database: Database,
) -> None:
    if database.url.startswith("sqlite"):
        pytest.skip("SQLite bounds lock waits with its busy timeout (PRAGMA busy_timeout), not lock_timeout")
    store = await database.open()
    async with store.transaction() as conn:  # every session gets the bounds, the acks' engine's too
        assert (await conn.execute(text("SHOW lock_timeout"))).scalar() == "5s"
        assert (await conn.execute(text("SHOW idle_in_transaction_session_timeout"))).scalar() == "1min"
    settings = {**database.connect_args["server_settings"], "lock_timeout": "100ms"}  # a short wait, for the test
    quick = Database(database.url, {"server_settings": settings})
    impatient = await quick.open()
    try:
        await store.inbox.accept("slack:Ev1", "slack", "k", {}, "p1")
        async with store.transaction() as holder:  # another replica, mid-transaction on the item
            await holder.execute(text("SELECT id FROM inbox WHERE id = 'slack:Ev1' FOR UPDATE"))
            with pytest.raises(DBAPIError, match="lock timeout"):
                await impatient.inbox.finish("slack:Ev1", 1)
        assert await impatient.inbox.finish("slack:Ev1", 1)  # the lock released: the same write goes through
    finally:
        await quick.close_all()


def _run_row(run_id: str, **fields: object) -> dict[str, object]:
    return {
        "id": run_id, "conversation_key": "slack:T1:C1:1.0", "platform": "slack", "user_id": "U1",
        "question": "How do I get VPN?", "reason": "answered", "started_at": datetime.now(UTC), "steps": 2,
        "input_tokens": 1800, "output_tokens": 240, "cost_usd": 0.0004, "latency_ms": 1650.0, "model": "gpt-4o-mini",
        "trace": TRACE, "owner": "host-1:100", **fields,
    }  # fmt: skip


async def test_a_finished_run_is_stored_once_in_one_insert_with_its_totals(store: Store) -> None:
    assert await store.runs.record(_run_row("r1")) is True
    run = await store.runs.get("r1")
    assert run is not None
    assert (run.status, run.reason, run.inbox_id, run.owner) == ("finished", "answered", None, "host-1:100")
    assert (run.steps, run.input_tokens, run.output_tokens, run.trace) == (2, 1800, 240, TRACE)
    assert run.finished_at is not None and run.finished_at >= run.started_at
    assert await store.runs.unfinished() == []


async def test_a_run_fenced_by_its_inbox_item_is_stored_only_while_its_epoch_holds_the_item(store: Store) -> None:
    await store.inbox.accept("slack:Ev1", "slack", "k", {}, "p1")
    assert await store.inbox.relet("slack:Ev1", 1, "p2") == 2  # p1 stalled; p2 took the item over
    assert await store.runs.record(_run_row("r_stale"), fence=("slack:Ev1", 1)) is False
    assert await store.runs.get("r_stale") is None  # written nothing
    assert await store.runs.record(_run_row("r_new"), fence=("slack:Ev1", 2)) is True
    run = await store.runs.get("r_new")
    assert run is not None and (run.inbox_id, run.status) == ("slack:Ev1", "finished")
    assert await store.runs.record(_run_row("r_none"), fence=("slack:Ev-unknown", 1)) is False


async def test_a_second_run_for_one_inbox_item_writes_nothing(store: Store, second_store: Store) -> None:
    await store.inbox.accept("slack:Ev1", "slack", "k", {}, "p1")
    results = await asyncio.gather(
        store.runs.record(_run_row("r_a"), fence=("slack:Ev1", 1)),
        second_store.runs.record(_run_row("r_b"), fence=("slack:Ev1", 1)),
    )
    assert sorted(results) == [False, True]
    assert await store.runs.record(_run_row("r_c"), fence=("slack:Ev1", 1)) is False
    stored = [run.id for run in await store.runs.recent()]
    assert stored == [["r_a", "r_b"][results.index(True)]]


async def test_a_run_record_rolls_back_with_the_transaction_it_is_part_of(store: Store) -> None:
    with pytest.raises(RuntimeError, match="the reply's rows failed"):
        async with store.transaction() as tx:
            assert await store.runs.record(_run_row("r1"), conn=tx)
            await store.threads.append_history("slack:T1:C1:1.0", [{"role": "user", "content": "hi"}], conn=tx)
            raise RuntimeError("the reply's rows failed")
    assert await store.runs.get("r1") is None
    assert await store.threads.load_history("slack:T1:C1:1.0") == []


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


async def test_a_run_an_earlier_release_recorded_as_running_is_finished_with_totals_and_trace(store: Store) -> None:
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
    await store.runs.record(_run_row("r1", started_at=before))
    run = await store.runs.get("r1")
    assert run is not None and run.finished_at is not None
    for moment in (run.started_at, run.finished_at):
        assert moment.tzinfo is not None and moment.utcoffset() == timedelta(0)
    assert run.started_at == before
    assert before <= run.finished_at <= datetime.now(UTC) + timedelta(seconds=1)


async def test_list_runs_is_newest_first_and_limited(store: Store) -> None:
    start = datetime.now(UTC)
    for n, run_id in enumerate(("r1", "r2", "r3")):
        await store.runs.record(_run_row(run_id, started_at=start + timedelta(seconds=n)))
    assert [run.id for run in await store.runs.recent()] == ["r3", "r2", "r1"]
    assert [run.id for run in await store.runs.recent(limit=2)] == ["r3", "r2"]


async def test_get_run_of_unknown_id_is_none(store: Store) -> None:
    assert await store.runs.get("nope") is None


async def test_feedback_is_attached_to_an_existing_run_only(store: Store) -> None:
    await store.runs.record(_run_row("r1"))
    assert await store.runs.set_feedback("r1", "down", "U1") is True
    run = await store.runs.get("r1")
    assert run is not None
    assert (run.feedback, run.feedback_by) == ("down", "U1")
    assert await store.runs.set_feedback("nope", "up", "U1") is False


def _ratings(ratings: list[Rating]) -> list[tuple[str, str, str | None]]:
    return sorted((r.user_id, r.rating, r.comment) for r in ratings)


async def test_two_people_rating_the_same_answer_keep_a_rating_each(store: Store) -> None:
    await store.runs.record(_run_row("r1"))  # asked by U1
    assert await store.runs.set_feedback("r1", "helpful", "U1") is True
    assert await store.runs.set_feedback("r1", "not_helpful", "U2", "wrong office") is True
    assert _ratings(await store.runs.ratings("r1")) == [("U1", "helpful", None), ("U2", "not_helpful", "wrong office")]
    assert await store.runs.ratings("nope") == []


async def test_a_bystanders_rating_does_not_replace_the_askers(store: Store) -> None:
    await store.runs.record(_run_row("r1"))
    await store.runs.set_feedback("r1", "helpful", "U1", "spot on")
    await store.runs.set_feedback("r1", "not_helpful", "U2")
    run = await store.runs.get("r1")
    assert run is not None
    assert (run.feedback, run.feedback_by, run.feedback_comment) == ("helpful", "U1", "spot on")
    await store.runs.record(_run_row("r2"))
    await store.runs.set_feedback("r2", "not_helpful", "U2")  # only a bystander rated: the asker has no rating
    unrated = await store.runs.get("r2")
    assert unrated is not None and (unrated.feedback, unrated.feedback_by) == (None, None)


async def test_a_second_click_replaces_only_that_persons_own_rating(store: Store) -> None:
    await store.runs.record(_run_row("r1"))
    await store.runs.set_feedback("r1", "not_helpful", "U2", "wrong office")
    await store.runs.set_feedback("r1", "not_helpful", "U1", "too long")
    await store.runs.set_feedback("r1", "helpful", "U2")  # U2 changes their mind; their comment goes with it
    await store.runs.set_feedback("r1", "helpful", "U1", "read it again")
    assert _ratings(await store.runs.ratings("r1")) == [("U1", "helpful", "read it again"), ("U2", "helpful", None)]
    run = await store.runs.get("r1")
    assert run is not None and (run.feedback, run.feedback_comment) == ("helpful", "read it again")


async def test_running_runs_lists_unfinished_runs_by_owner(store: Store) -> None:
    await _start(store, "r1", owner="host-1:100")
    await _start(store, "r2", owner="host-2:200")
    await _start(store, "r3", owner="host-1:100")
    await store.runs.finish(
        "r3", reason="answered", steps=1, input_tokens=1, output_tokens=1, cost_usd=0, latency_ms=1, trace=[]
    )
    assert sorted(run.id for run in await store.runs.unfinished()) == ["r1", "r2"]
    assert [run.id for run in await store.runs.unfinished(owner="host-1:100")] == ["r1"]


async def test_joins_recorded_by_two_processes_at_once_are_each_counted_in_one_row_per_place(
    store: Store, second_store: Store
) -> None:
    long_name = "teams:t:19:" + "x" * 600  # longer than the column: kept as its digest
    places = ["slack:T1:C1"] * 6 + ["slack:T1:C2", long_name]
    await asyncio.gather(*((store if n % 2 else second_store).joins.record(p) for n, p in enumerate(places)))
    assert await store.joins.counts(["slack:T1:C1", "slack:T1:C2", "slack:T1:C3", long_name]) == {
        "slack:T1:C1": 6, "slack:T1:C2": 1, long_name: 1,
    }  # fmt: skip
    async with store.transaction() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM place_joins"))).scalar_one() == 3


async def test_joins_prune_forgets_only_places_nobody_joined_for_a_day(store: Store) -> None:
    await store.joins.record("teams:t:19:old")
    await store.joins.record("teams:t:19:new")
    two_days_ago = datetime.now(UTC) - timedelta(days=2)
    async with store.transaction() as conn:
        await conn.execute(update(PlaceJoin).where(PlaceJoin.place == "teams:t:19:old").values(joined_at=two_days_ago))
    assert await store.joins.prune() == 1
    assert await store.joins.counts(["teams:t:19:old", "teams:t:19:new"]) == {"teams:t:19:new": 1}


async def test_stops_pressed_through_two_processes_at_once_each_change_the_mark_every_process_reads(
    store: Store, second_store: Store
) -> None:
    key = "slack:T1:D1:1.0"
    assert await store.stops.mark(key) is None  # nobody stopped it: a run compares against nothing
    await second_store.stops.request(key)
    first = await store.stops.mark(key)
    await asyncio.gather(*((store if n % 2 else second_store).stops.request(key) for n in range(4)))
    later = await store.stops.mark(key)
    assert first is not None and later is not None and (first[0], later[0]) == (1, 5) and later != first
    assert await second_store.stops.mark("slack:T1:D1:2.0") is None  # another thread of the same channel


async def test_stops_prune_forgets_only_conversations_nobody_stopped_for_a_day(store: Store) -> None:
    await store.stops.request("slack:T1:D1:old")
    await store.stops.request("slack:T1:D1:new")
    two_days_ago = datetime.now(UTC) - timedelta(days=2)
    async with store.transaction() as conn:
        stmt = update(StopRequest).where(StopRequest.conversation_key == "slack:T1:D1:old")
        await conn.execute(stmt.values(stopped_at=two_days_ago))
    assert await store.stops.prune() == 1
    assert await store.stops.mark("slack:T1:D1:old") is None
    assert await store.stops.mark("slack:T1:D1:new") is not None


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
        assert await store.inbox.accept("slack:Ev1", "slack", "k", {}, "p1") is True
        assert path.exists()
        assert path.with_name("policypal.db-wal").exists()
    finally:
        await store.close()
