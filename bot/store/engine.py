"""Opening the database: one code path for SQLite (aiosqlite, the embedded default) and PostgreSQL
(asyncpg, shared by replicas), the schema checked or migrated, and the base every repository shares.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import event, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

SQLITE_BUSY_TIMEOUT_MS = 5_000
# PostgreSQL sessions, as SQLite's busy timeout bounds its lock waits: a statement waiting longer than
# lock_timeout for a row another replica holds fails (the work is retried, as for any database error)
# instead of queueing every replica behind it; a transaction left idle that long by a frozen process
# is ended by the server, releasing its locks. A deployment's own ``server_settings`` win.
POSTGRES_SESSION = {"lock_timeout": "5s", "idle_in_transaction_session_timeout": "60s"}
# This release's newest migration, written here too so that opening a database already at it needs no
# Alembic (about 0.3 s of a server's start-up); tests/bot/store/test_migrations.py keeps the two equal.
SCHEMA_HEAD = "0011_stop_requests"
SUPPORTED_DIALECTS = ("sqlite", "postgresql")

SchemaPolicy = Literal["auto", "upgrade", "require"]


class Repository:
    """One aggregate's statements on the shared engine; ``_insert`` is the dialect's INSERT with ON CONFLICT.

    A write method that takes ``conn`` runs inside the caller's transaction when given one (see
    ``Store.transaction``): what must commit together (a run, its history, its outbox rows) does.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._insert: Callable[..., Any] = sqlite_insert if engine.dialect.name == "sqlite" else pg_insert

    @contextlib.asynccontextmanager
    async def _begin(self, conn: AsyncConnection | None) -> AsyncIterator[AsyncConnection]:
        """The caller's transaction, or a new one committed at the end of the block."""
        if conn is not None:
            yield conn
            return
        async with self._engine.begin() as own:
            yield own


async def open_engine(url: str, connect_args: Mapping[str, Any] | None, schema: SchemaPolicy) -> AsyncEngine:
    """Connect and make sure the schema is this release's (see ``Store.open``)."""
    dialect = make_url(url).get_backend_name()
    if dialect not in SUPPORTED_DIALECTS:
        raise ValueError(f"unsupported database {dialect!r}; use sqlite+aiosqlite or postgresql+asyncpg")
    if dialect == "sqlite":
        prepare_sqlite_file(url)
    engine = create_async_engine(url, connect_args=_connect_args(dialect, connect_args), **_pool_options(dialect))
    if dialect == "sqlite":
        event.listen(engine.sync_engine, "connect", _tune_sqlite)
    try:
        await _ensure_schema(engine, url, schema)
    except BaseException:
        await engine.dispose()
        raise
    return engine


def open_ack_engine(engine: AsyncEngine, url: str, connect_args: Mapping[str, Any] | None) -> AsyncEngine:
    """A small engine of its own for the writes an ack waits for (the inbox), so a burst of acks never
    queues for a connection behind the runs' work. SQLite still has one writer at a time; its busy
    timeout turns the lock into a short wait, and every transaction here is a single INSERT."""
    dialect = engine.dialect.name
    # No pre-ping here: a checkout costs no extra round trip; a connection the server dropped is
    # recycled instead (and a failed accept answers 503, so the platform delivers the event again).
    options = (
        _pool_options(dialect) if dialect == "sqlite" else {"pool_size": 2, "max_overflow": 2, "pool_recycle": 300}
    )
    ack = create_async_engine(url, connect_args=_connect_args(dialect, connect_args), **options)
    if dialect == "sqlite":
        event.listen(ack.sync_engine, "connect", _tune_sqlite)
    return ack


def _connect_args(dialect: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The driver's arguments: PostgreSQL sessions get ``POSTGRES_SESSION`` under what the caller set."""
    args = dict(given or {})
    if dialect == "postgresql":
        args["server_settings"] = {**POSTGRES_SESSION, **(args.get("server_settings") or {})}
    return args


def _pool_options(dialect: str) -> dict[str, Any]:
    """SQLite takes one writer at a time: one connection per process queues writers in order, where a
    pool of them would race for the file lock and lose after the busy timeout in a burst of events."""
    if dialect == "sqlite":
        return {"pool_size": 1, "max_overflow": 0, "pool_timeout": 60}
    return {"pool_pre_ping": True}


def _tune_sqlite(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers and one writer work at once; the busy timeout makes a second process wait
    # for the write lock instead of failing with "database is locked". synchronous=NORMAL is safe
    # in WAL against process crashes and corruption; only an OS crash or power cut can lose the
    # last commits. It keeps finish_run near 1.7 ms median (FULL: 2.2-2.9 ms, p95 up to 5 ms).
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


async def _at_head(engine: AsyncEngine) -> bool:
    """Whether the database records ``SCHEMA_HEAD`` as its one revision (any error: let Alembic look)."""
    try:
        async with engine.connect() as conn:
            versions = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars().all()
    except Exception:  # no such table yet, or anything else: the full check says what is wrong
        return False
    return list(versions) == [SCHEMA_HEAD]


def prepare_sqlite_file(url: str) -> None:
    """Make the directory of a SQLite database file (SQLite makes the file, not its folders)."""
    database = make_url(url).database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)


async def _ensure_schema(engine: AsyncEngine, url: str, policy: SchemaPolicy) -> None:
    if await _at_head(engine):
        return
    from bot.store import migrate  # Alembic loads only for a database that is not at this release's head

    if policy == "auto":
        policy = "upgrade" if engine.dialect.name == "sqlite" else "require"
    if policy == "upgrade":
        await migrate.upgrade(engine)
    else:
        migrate.require_head(await migrate.schema_state(engine), url)
