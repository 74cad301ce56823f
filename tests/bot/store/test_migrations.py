"""Alembic migrations: an empty database upgraded to head has exactly the models' schema, on both engines."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import JSON, Float, Integer, String, column, select, table, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bot.helpdesk import Helpdesk, case_number
from bot.store import Store, UtcDateTime, migrate, utcnow
from bot.store.engine import SCHEMA_HEAD
from bot.store.tables import Base
from bot.types import UserRef
from tests.databases import Database


def _engine(database: Database) -> AsyncEngine:
    return create_async_engine(database.url, connect_args=database.connect_args)


def _differences(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


async def _run(engine: AsyncEngine, work: Any) -> Any:
    async with engine.begin() as conn:
        return await conn.run_sync(work)


def _to(revision: str) -> Any:
    def move(connection: Connection) -> None:
        config = migrate.alembic_config()
        config.attributes["connection"] = connection
        if revision == "base":
            command.downgrade(config, "base")
        else:
            command.upgrade(config, revision)

    return move


async def test_an_empty_database_upgraded_to_head_matches_the_models(database: Database):
    engine = _engine(database)
    try:
        before = await migrate.upgrade(engine)
        after = await migrate.schema_state(engine)
        differences = await _run(engine, _differences)
    finally:
        await engine.dispose()
    assert before.empty and before.current is None
    assert after.at_head and after.current == migrate.head_revision()
    assert differences == []


async def test_every_migration_goes_down_to_nothing_and_back_up(database: Database):
    engine = _engine(database)
    try:
        await migrate.upgrade(engine)
        await _run(engine, _to("base"))
        emptied = await migrate.schema_state(engine)
        await _run(engine, _to("head"))
        differences = await _run(engine, _differences)
    finally:
        await engine.dispose()
    assert emptied.empty and emptied.current is None
    assert differences == []


async def test_a_database_made_before_migrations_is_adopted_and_upgraded(database: Database):
    engine = _engine(database)
    try:
        await _run(engine, _to(migrate.BASELINE))
        async with engine.begin() as conn:  # what create_all left: the tables, no version table
            await conn.execute(text("DROP TABLE alembic_version"))
        assert (await migrate.schema_state(engine)).unversioned
        store = await Store.open(database.url, connect_args=database.connect_args, schema="upgrade")
        await store.close()
        differences = await _run(engine, _differences)
        after = await migrate.schema_state(engine)
    finally:
        await engine.dispose()
    assert after.at_head and differences == []


@pytest.mark.postgres
async def test_postgres_is_not_upgraded_behind_the_operators_back(database: Database):
    if database.url.startswith("sqlite"):
        pytest.skip("the embedded SQLite default upgrades itself")
    with pytest.raises(migrate.DatabaseNotReady, match="run `policypal db upgrade` once"):
        await Store.open(database.url, connect_args=database.connect_args)
    engine = _engine(database)
    try:
        await _run(engine, _to(migrate.BASELINE))
        with pytest.raises(migrate.DatabaseNotReady, match=f"at revision {migrate.BASELINE}; this release needs"):
            await Store.open(database.url, connect_args=database.connect_args)
        await migrate.upgrade(engine)
    finally:
        await engine.dispose()
    store = await Store.open(database.url, connect_args=database.connect_args)
    await store.close()


async def test_the_embedded_default_upgrades_itself_when_opened(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path / 'policypal.db'}"
    store = await Store.open(url)
    await store.close()
    engine = create_async_engine(url)
    try:
        assert (await migrate.schema_state(engine)).at_head
    finally:
        await engine.dispose()


def test_the_head_written_for_a_fast_open_is_the_newest_migration():
    """Opening a database at SCHEMA_HEAD skips Alembic: a new migration must move SCHEMA_HEAD with it."""
    assert migrate.head_revision() == SCHEMA_HEAD


async def test_a_database_one_migration_behind_is_still_upgraded_when_opened(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path / 'behind.db'}"
    engine = create_async_engine(url)
    await _run(engine, _to("0007_feedback_comment"))
    await engine.dispose()
    store = await Store.open(url)
    try:
        assert (await migrate.schema_state(store._engine)).current == SCHEMA_HEAD
    finally:
        await store.close()


def test_a_revision_this_release_does_not_know_is_refused_with_advice():
    state = migrate.SchemaState("9999_future", migrate.head_revision(), frozenset({"0001_baseline"}), frozenset())
    message = migrate.problem(state, "postgresql+asyncpg://bot:s3cret@db/policypal")
    assert message is not None and "does not know" in message and "s3cret" not in message


async def test_a_partial_schema_from_a_pre_release_build_is_refused_with_advice_not_a_traceback(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path / 'policypal.db'}"
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(lambda sync: Base.metadata.tables["thread_places"].create(sync))
    finally:
        await engine.dispose()
    with pytest.raises(migrate.DatabaseNotReady, match=r"no migration history .*Move it aside"):
        await Store.open(url)


def _down_to(revision: str) -> Any:
    def move(connection: Connection) -> None:
        config = migrate.alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, revision)

    return move


_CONVERSATIONS = table(
    "conversations", column("key", String), column("messages", JSON), column("updated_at", UtcDateTime)
)


async def test_thread_history_moves_to_appended_entries_and_back(database: Database):
    key = "slack:T1:C1:1.0"
    before = [{"role": "user", "content": "Où est la politique VPN ?"}, {"role": "assistant", "content": "Ici."}]
    later = [{"role": "user", "content": "Merci"}, {"role": "assistant", "content": "De rien."}]
    engine = _engine(database)
    try:
        await _run(engine, _to("0002_serve"))
        async with engine.begin() as conn:
            await conn.execute(_CONVERSATIONS.insert().values(key=key, messages=before, updated_at=utcnow()))
        store = await database.open()  # upgrades to head
        upgraded = await store.threads.load_history(key)
        await store.threads.append_history(key, later)
        await _run(engine, _down_to("0002_serve"))
        async with engine.connect() as conn:
            folded = (await conn.execute(select(_CONVERSATIONS.c.messages))).scalars().all()
    finally:
        await engine.dispose()
    assert upgraded == before
    assert folded == [before + later]


_DELIVERIES = table(
    "handoff_deliveries",
    column("case_number", Integer),
    column("destination", String),
    column("state", String),
    column("attempts", Integer),
    column("next_attempt_at", UtcDateTime),
    column("created_at", UtcDateTime),
)


async def test_outbox_rows_written_before_delivery_keys_each_get_their_own(database: Database):
    now = utcnow()
    rows = [
        {"case_number": 1, "destination": name, "state": "pending", "attempts": 0, "next_attempt_at": now,
         "created_at": now}
        for name in ("webhook", "email")
    ]  # fmt: skip
    engine = _engine(database)
    try:
        await _run(engine, _to("0003_history_entries"))
        async with engine.begin() as conn:
            await conn.execute(_DELIVERIES.insert(), rows)
        store = await database.open()  # upgrades to head
        keys = [row.idempotency_key for row in await store.outbox.deliveries([1])]
        await _run(engine, _down_to("0003_history_entries"))
        async with engine.connect() as conn:
            left = (await conn.execute(select(_DELIVERIES.c.destination))).scalars().all()
    finally:
        await engine.dispose()
    assert len(set(keys)) == 2 and all(uuid.UUID(key) for key in keys)
    assert sorted(left) == ["email", "webhook"]


async def test_an_upgrade_that_fails_half_way_leaves_nothing_behind_and_can_be_run_again(
    database: Database, monkeypatch: pytest.MonkeyPatch
):
    now = utcnow()
    row = {"case_number": 1, "destination": "email", "state": "pending", "attempts": 0, "next_attempt_at": now,
           "created_at": now}  # fmt: skip
    engine = _engine(database)
    try:
        await _run(engine, _to("0003_history_entries"))
        async with engine.begin() as conn:
            await conn.execute(_DELIVERIES.insert(), [row])

        def crash() -> uuid.UUID:  # 0004 fails after adding its column, before moving the version
            raise RuntimeError("killed mid-upgrade")

        with monkeypatch.context() as patch:
            patch.setattr(uuid, "uuid4", crash)
            with pytest.raises(RuntimeError, match="killed mid-upgrade"):
                await migrate.upgrade(engine)
        assert (await migrate.schema_state(engine)).current == "0003_history_entries"
        await migrate.upgrade(engine)  # was: "duplicate column name: idempotency_key", for good
        assert (await migrate.schema_state(engine)).at_head
    finally:
        await engine.dispose()


_EVENTS = table("processed_events", column("event_id", String), column("received_at", UtcDateTime))
_KEYED_DELIVERIES = table(
    "handoff_deliveries",
    column("id", Integer),
    column("case_number", Integer),
    column("destination", String),
    column("state", String),
    column("attempts", Integer),
    column("next_attempt_at", UtcDateTime),
    column("created_at", UtcDateTime),
    column("external_ref", String),
    column("idempotency_key", String),
)


async def test_events_and_deliveries_of_an_earlier_release_move_to_the_inbox_and_outbox_and_back(
    database: Database,
):
    now = utcnow()
    deliveries = [
        {"id": n, "case_number": 6 + n, "destination": "webhook", "state": state, "attempts": 1, "next_attempt_at": now,
         "created_at": now, "external_ref": ref, "idempotency_key": f"key-{n}"}
        for n, state, ref in ((1, "delivered", "WH-1"), (2, "failed", None))
    ]  # fmt: skip
    engine = _engine(database)
    try:
        await _run(engine, _to("0004_delivery_keys"))
        async with engine.begin() as conn:
            await conn.execute(_EVENTS.insert(), [{"event_id": "slack:Ev1", "received_at": now}])
            await conn.execute(_KEYED_DELIVERIES.insert(), deliveries)
        store = await database.open()  # upgrades to head
        redelivered = await store.inbox.accept("slack:Ev1", "slack", "slack.request", {}, "host:1:2:a")
        item = await store.inbox.get("slack:Ev1")
        moved = await store.outbox.deliveries([7, 8])
        case = await Helpdesk(store, ["webhook"]).open_case(  # a new row after the copied ids, not on them
            origin="run:r1", reason="step_budget", user=UserRef("U1"), conversation_key="slack:T:C:1", question="q"
        )
        (new_row,) = await store.outbox.deliveries([case_number(case.case_id)])
        await store.close()
        await _run(engine, _down_to("0004_delivery_keys"))
        async with engine.connect() as conn:
            events = (await conn.execute(select(_EVENTS.c.event_id))).scalars().all()
            back = (await conn.execute(select(_KEYED_DELIVERIES.c.id, _KEYED_DELIVERIES.c.state))).all()
    finally:
        await engine.dispose()
    assert redelivered is False  # an event the earlier release handled is still not run again
    assert item is not None and (item.state, item.kind) == ("done", "legacy")
    assert [(r.id, r.kind, r.state, r.external_ref, r.idempotency_key) for r in moved] == [
        (1, "case", "delivered", "WH-1", "key-1"), (2, "case", "failed", None, "key-2"),
    ]  # fmt: skip
    assert new_row.id not in (1, 2) and new_row.kind == "case"
    assert events == ["slack:Ev1"]
    assert sorted(back) == [(1, "delivered"), (2, "failed"), (new_row.id, "pending")]


_RUNS = table(
    "runs",
    *(column(name, String) for name in ("id", "conversation_key", "platform", "user_id", "question", "status",
                                        "model", "owner", "feedback", "feedback_by", "feedback_comment")),
    *(column(name, Integer) for name in ("steps", "input_tokens", "output_tokens")),
    *(column(name, Float) for name in ("cost_usd", "latency_ms")),
    column("trace", JSON),
    column("started_at", UtcDateTime),
)  # fmt: skip


def _rated_run(run_id: str, rating: str, by: str, comment: str | None = None) -> dict[str, Any]:
    return {"id": run_id, "conversation_key": "slack:T1:C1:1.0", "platform": "slack", "user_id": "U_ASKER",
            "question": "q", "status": "finished", "model": "m", "owner": "", "feedback": rating, "feedback_by": by,
            "feedback_comment": comment, "steps": 1, "input_tokens": 1, "output_tokens": 1, "cost_usd": 0,
            "latency_ms": 1, "trace": [], "started_at": utcnow()}  # fmt: skip


async def test_each_runs_rating_becomes_its_raters_and_the_run_keeps_only_the_askers_and_back(database: Database):
    engine = _engine(database)
    try:
        await _run(engine, _to("0008_console"))
        async with engine.begin() as conn:
            await conn.execute(
                _RUNS.insert(),
                [_rated_run("r1", "helpful", "U_ASKER", "clear"), _rated_run("r2", "not_helpful", "U_BYSTANDER")],
            )
        store = await database.open()  # upgrades to head
        kept = [[(r.user_id, r.rating, r.comment) for r in await store.runs.ratings(n)] for n in ("r1", "r2")]
        runs = [await store.runs.get(n) for n in ("r1", "r2")]
        await store.runs.set_feedback("r1", "not_helpful", "U_BYSTANDER")
        await store.runs.set_feedback("r2", "helpful", "U_OTHER")  # the newest rating of r2
        await _run(engine, _down_to("0008_console"))
        async with engine.connect() as conn:
            columns = (_RUNS.c.id, _RUNS.c.feedback, _RUNS.c.feedback_by, _RUNS.c.feedback_comment)
            back = (await conn.execute(select(*columns).order_by(_RUNS.c.id))).all()
    finally:
        await engine.dispose()
    assert kept == [[("U_ASKER", "helpful", "clear")], [("U_BYSTANDER", "not_helpful", None)]]
    assert [(r.feedback, r.feedback_by, r.feedback_comment) for r in runs if r] == [
        ("helpful", "U_ASKER", "clear"), (None, None, None),  # a bystander's rating is not the run's own
    ]  # fmt: skip
    assert back == [("r1", "helpful", "U_ASKER", "clear"), ("r2", "helpful", "U_OTHER", None)]
