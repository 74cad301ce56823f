"""A throwaway PostgreSQL database for a benchmark: created beside the one named, upgraded, dropped after."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from sqlalchemy import text as sql
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bot.store import Store


@contextlib.asynccontextmanager
async def scratch_database(url: str) -> AsyncIterator[str]:
    """A new, empty PostgreSQL database beside the one named (dropped afterwards), upgraded to head."""
    name = f"pp_bench_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    async with admin.connect() as conn:
        await conn.execute(sql(f'CREATE DATABASE "{name}"'))
    scratch = make_url(url).set(database=name).render_as_string(hide_password=False)
    try:
        await (await Store.open(scratch, schema="upgrade")).close()
        yield scratch
    finally:
        async with admin.connect() as conn:
            await conn.execute(sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


async def count_runs(url: str) -> int:
    """How many runs a database holds (what the benchmark checks every event became)."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(sql("select count(*) from runs"))).scalar_one())
    finally:
        await engine.dispose()
