"""Store fixtures for every test package: each store test runs on SQLite and, when configured, on PostgreSQL.

Each PostgreSQL test gets its own schema (unique name, dropped afterwards), so parallel CI jobs and
leftovers from an interrupted run never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bot.store import Store

POSTGRES_URL_ENV = "POLICYPAL_TEST_POSTGRES_URL"
POSTGRES_SKIP_REASON = f"{POSTGRES_URL_ENV} not set; PostgreSQL store tests skipped"


@dataclass
class Database:
    """One test database; ``open()`` gives another Store on it, as a second process would have."""

    url: str
    connect_args: dict[str, Any] = field(default_factory=dict)
    _opened: list[Store] = field(default_factory=list)

    async def open(self) -> Store:
        store = await Store.open(self.url, connect_args=self.connect_args, schema="upgrade")
        self._opened.append(store)
        return store

    async def close_all(self) -> None:
        for store in self._opened:
            await store.close()


async def _run_admin(url: str, statement: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A fresh, empty database: a SQLite file, or a private schema in PostgreSQL."""
    if request.param == "sqlite":
        db = Database(f"sqlite+aiosqlite:///{tmp_path / 'policypal.db'}")
        try:
            yield db
        finally:
            await db.close_all()
        return
    url = os.environ.get(POSTGRES_URL_ENV)
    if not url:
        pytest.skip(POSTGRES_SKIP_REASON)
    schema = f"pp_test_{uuid.uuid4().hex[:16]}"
    await _run_admin(url, f'CREATE SCHEMA "{schema}"')
    db = Database(url, {"server_settings": {"search_path": schema}})
    try:
        yield db
    finally:
        await db.close_all()
        await _run_admin(url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
async def store(database: Database) -> Store:
    """The Store most tests need; closed with the database fixture."""
    return await database.open()


@pytest.fixture
async def second_store(database: Database) -> Store:
    """Another Store on the same database, as a second process or replica would hold."""
    return await database.open()
