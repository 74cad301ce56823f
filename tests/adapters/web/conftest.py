"""The console on a real server app over loopback HTTP, with a service whose runs come from the fake model."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from adapters.destinations import destinations
from adapters.server.app import build_app
from bot.service import PolicyPal
from bot.store import Store
from bot.wiring import open_service
from tests.bot.helpers import settings_for
from tests.databases import POSTGRES_SKIP_REASON, POSTGRES_URL_ENV
from tests.fakes.openai_server import FakeOpenAI

SECRET = "console-secret-for-tests-0123"


@dataclass
class Console:
    url: str
    service: PolicyPal
    http: aiohttp.ClientSession  # signed in with the secret as a bearer token

    async def get(self, path: str, **kwargs: Any) -> tuple[int, str]:
        async with self.http.get(self.url + path, **kwargs) as response:
            return response.status, await response.text()


ConsoleFactory = Callable[..., Any]


@pytest_asyncio.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The console's database: a SQLite file, or a fresh PostgreSQL database migrated to head."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'policypal.db'}"
        return
    admin = os.environ.get(POSTGRES_URL_ENV)
    if not admin:
        pytest.skip(POSTGRES_SKIP_REASON)
    name = f"pp_console_{uuid.uuid4().hex[:12]}"
    await _autocommit(admin, f'CREATE DATABASE "{name}"')
    url = make_url(admin).set(database=name).render_as_string(hide_password=False)
    store = await Store.open(url, schema="upgrade")  # as an operator's `policypal db upgrade` would
    await store.close()
    try:
        yield url
    finally:
        await _autocommit(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest_asyncio.fixture
async def start_console(tmp_path: Path, fake_openai: FakeOpenAI, database_url: str) -> AsyncIterator[ConsoleFactory]:
    """Start the server app with the console; ``searcher`` and settings overrides per test."""
    started: list[tuple[web.AppRunner, PolicyPal, aiohttp.ClientSession]] = []

    async def start(searcher: Any = None, *, helpdesk: bool = False, **overrides: Any) -> Console:
        """``helpdesk``: cases go to the destinations the settings configure, as in production."""
        values = {"console_secret": SECRET, "database_url": database_url, **overrides}
        settings = settings_for(tmp_path, fake_openai, **values)
        sends_to = destinations(settings) if helpdesk else None
        service = await open_service(settings, searcher=searcher or _Finds(), destinations=sends_to)
        runner = web.AppRunner(build_app(settings, service))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {SECRET}"} if values["console_secret"] else {})
        started.append((runner, service, http))
        return Console(f"http://127.0.0.1:{port}", service, http)

    yield start
    for runner, service, http in started:
        await http.close()
        await runner.cleanup()
        await service.close()


async def _autocommit(url: str, statement: str) -> None:
    """CREATE/DROP DATABASE, which PostgreSQL runs outside a transaction only."""
    engine = create_async_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


class _Finds:
    """Finds nothing: runs that search end not covered unless a test gives its own searcher."""

    async def asearch(self, query: str, k: int = 5, filter: object = None) -> list[object]:
        return []
