"""Alembic's environment: PolicyPal's models, on the async engine, or on a connection handed in.

``bot.store.migrate`` passes an open connection in ``config.attributes["connection"]`` (so a test's
search_path and the caller's advisory lock apply); run any other way, the URL comes from
``sqlalchemy.url`` in the Alembic config.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from sqlalchemy.sql.type_api import TypeEngine

from bot.store.columns import UtcDateTime
from bot.store.tables import Base

config = context.config
target_metadata = Base.metadata


def _render_item(kind: str, item: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    """Autogenerate writes ``UtcDateTime()`` with its import, not a module path it would not import."""
    if kind == "type" and isinstance(item, UtcDateTime):
        autogen_context.imports.add("from bot.store.columns import UtcDateTime")
        return "UtcDateTime()"
    if kind == "type" and isinstance(item, TypeEngine) and type(item).__name__ == "JSON":
        return "sa.JSON()"  # none_as_null is Python-side only
    return False


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        compare_type=True,
        render_item=_render_item,
        **kwargs,  # type: ignore[arg-type]
    )


def run_migrations_offline() -> None:
    """Emit SQL instead of running it (``alembic upgrade --sql``), for a DBA to review."""
    url = config.get_main_option("sqlalchemy.url")
    _configure(url=url, literal_binds=True, render_as_batch=bool(url and url.startswith("sqlite")))
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    # SQLite cannot ALTER most things in place: batch mode copies the table instead.
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(_run_on)
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database: set sqlalchemy.url or pass a connection")
    asyncio.run(_run_async(url))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
