"""Schema migrations: where the database stands against this release, and bringing it to head.

The tables are defined once, in ``bot.store.tables`` on one ``Base``; Alembic revisions under
``bot/migrations/versions`` (shipped as package data) move a database from any earlier release to
this one. Policy (see docs/deploy.md):

* the embedded default (SQLite) upgrades itself whenever it is opened: one process, one file;
* PostgreSQL is shared by replicas, so a server refuses to start unless the database is exactly at
  head, and an operator runs ``policypal db upgrade`` once (after a backup). Concurrent upgrades
  are serialised by an advisory lock, so two replicas running it at once are still safe.

A database made by ``create_all`` before migrations existed (no ``alembic_version`` table, every
baseline table present) is stamped at the baseline revision and upgraded from there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.errors import DatabaseNotReady

log = logging.getLogger(__name__)

SCRIPT_LOCATION = "bot.store:migrations"
BASELINE = "0001_baseline"
BASELINE_TABLES = frozenset(
    {"processed_events", "conversations", "runs", "tickets", "pending_actions", "thread_places", "handoffs",
     "handoff_deliveries"}
)  # fmt: skip
UPGRADE_LOCK = 7_140_925_301  # pg_advisory_xact_lock key: one upgrade at a time per database
VERSION_TABLE = "alembic_version"


@dataclass(frozen=True)
class SchemaState:
    """Where a database stands: its revision (None: never migrated), this release's head, its tables."""

    current: str | None
    head: str
    known: frozenset[str]
    tables: frozenset[str]

    @property
    def at_head(self) -> bool:
        return self.current == self.head

    @property
    def empty(self) -> bool:
        return self.current is None and not (self.tables & BASELINE_TABLES)

    @property
    def partial(self) -> bool:
        """Some PolicyPal tables, no migration history, not the baseline set: nothing safe to adopt."""
        return self.current is None and bool(self.tables & BASELINE_TABLES) and not self.tables >= BASELINE_TABLES

    @property
    def unversioned(self) -> bool:
        """Tables made by create_all before migrations existed: adopt them at the baseline."""
        return self.current is None and self.tables >= BASELINE_TABLES


def alembic_config(url: str | None = None) -> Config:
    """Alembic's configuration, built in code: the scripts ship inside the package."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.set_main_option("path_separator", "os")
    config.set_main_option("file_template", "%%(rev)s")  # revision ids read like 0002_serve
    if url:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migrations shipped"
    return head


async def schema_state(engine: AsyncEngine) -> SchemaState:
    """Read the database's revision and tables (no change made)."""
    async with engine.connect() as conn:
        return await conn.run_sync(_state)


async def upgrade(engine: AsyncEngine) -> SchemaState:
    """Bring the database to head in one transaction; returns the state it was in before."""
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(_upgrade)
    except OperationalError:
        # Two processes creating the same SQLite file at once: the loser finds it done.
        state = await schema_state(engine)
        if not state.at_head:
            raise
        return state


def problem(state: SchemaState, url: str) -> str | None:
    """What is wrong with the schema for this release, in words an operator can act on; None if at head."""
    where = make_url(url).render_as_string(hide_password=True)
    if state.at_head:
        return None
    if state.partial:
        missing = ", ".join(sorted(BASELINE_TABLES - state.tables))
        return (
            f"The database {where} has some PolicyPal tables but no migration history (missing: {missing}); "
            "it was made by a pre-release build. Move it aside (keep it as a backup) and start again."
        )
    if state.empty or state.unversioned:
        what = "has no PolicyPal tables yet" if state.empty else "predates migrations"
        return f"The database {where} {what}: run `policypal db upgrade` once (from any one replica)."
    if state.current not in state.known:
        return (
            f"The database {where} is at revision {state.current}, which this release does not know (was it "
            f"upgraded by a newer PolicyPal?). Run that release, or restore a backup taken before the upgrade."
        )
    return (
        f"The database {where} is at revision {state.current}; this release needs {state.head}. "
        "Back it up, then run `policypal db upgrade` (once, from any one replica)."
    )


def require_head(state: SchemaState, url: str) -> None:
    """Raise DatabaseNotReady unless the schema is exactly this release's."""
    if (message := problem(state, url)) is not None:
        raise DatabaseNotReady(message)


def _state(connection: Connection) -> SchemaState:
    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    assert head is not None
    current = MigrationContext.configure(connection).get_current_revision()
    tables = frozenset(inspect(connection).get_table_names()) - {VERSION_TABLE}
    known = frozenset(rev.revision for rev in script.walk_revisions())
    return SchemaState(current, head, known, tables)


def _begin_sqlite(connection: Connection) -> None:
    """Open the upgrade's transaction now, holding the write lock (one upgrade at a time per file).

    The sqlite3 driver begins a transaction only before INSERT/UPDATE/DELETE, so without this every
    CREATE and ALTER commits on its own: an upgrade that fails half way leaves a revision half applied
    (a column added, the version not moved) and every later upgrade stops at "duplicate column".
    """
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _upgrade(connection: Connection) -> SchemaState:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": UPGRADE_LOCK})
    elif connection.dialect.name == "sqlite":
        _begin_sqlite(connection)
    before = _state(connection)
    if before.at_head:
        return before
    if before.partial:
        raise DatabaseNotReady(problem(before, connection.engine.url.render_as_string()) or "")
    config = alembic_config()
    config.attributes["connection"] = connection
    if before.unversioned:
        log.warning("adopting a database made before migrations: stamping it at %s", BASELINE)
        command.stamp(config, BASELINE)
    command.upgrade(config, "head")
    log.info("database upgraded from %s to %s", before.current or "nothing", before.head)
    return before
