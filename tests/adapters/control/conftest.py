"""A server holding an embedded index in this process (a real service, app and control socket), and the CLI.

The CLI runs as `policypal` would (argument parsing and dispatch included) in a worker thread, while
the server answers on this test's event loop.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

from adapters.cli.index import run_index
from adapters.cli.main import _parser, _run
from adapters.server import build_app
from bot.config import Settings
from bot.service import PolicyPal
from bot.wiring import open_service
from retrieval import RetrievalConfig
from tests.bot.helpers import settings_for
from tests.fakes.openai_server import FakeOpenAI

LEAVE = "# Leave\n\n## Carrying over\n\nYou may carry over up to five unused days into the next year.\n"
BIKES = "# Cycle to work\n\n## The scheme\n\nThe cycle-to-work scheme lends you up to 1,500 EUR for a bicycle.\n"


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder


@dataclass
class Served:
    """The server under test: its settings, service and app; ``stop`` is what SIGTERM does, once."""

    settings: Settings
    service: PolicyPal
    runner: web.AppRunner
    stopped: bool = False

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await self.runner.cleanup()
            await self.service.close()


@pytest_asyncio.fixture
async def server(tmp_path: Path, fake_openai: FakeOpenAI) -> AsyncIterator[Served]:
    """`policypal serve` on loopback, holding an embedded index of one policy from ``tmp_path/policies``."""
    settings = settings_for(tmp_path, fake_openai)
    assert run_index(settings.retrieval(), [write(tmp_path / "policies", "leave.md", LEAVE)]) == 0
    async for served in _serving(settings):
        yield served


@pytest.fixture(scope="session")
def leave_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The leave policy indexed once and closed; each test copies it (the embedded index is one process per path)."""
    root = tmp_path_factory.mktemp("leave-index")
    cfg = RetrievalConfig(qdrant_path=root / "qdrant", model_cache_dir=root / "models")
    assert run_index(cfg, [write(root / "policies", "leave.md", LEAVE)]) == 0
    return cfg.qdrant_path


@pytest_asyncio.fixture
async def copied_server(tmp_path: Path, fake_openai: FakeOpenAI, leave_index: Path) -> AsyncIterator[Served]:
    """As ``server``, on a copy of the leave index: for tests that only search and ask, not index."""
    settings = settings_for(tmp_path, fake_openai)
    shutil.copytree(leave_index, settings.retrieval().qdrant_path)
    async for served in _serving(settings):
        yield served


async def _serving(settings: Settings) -> AsyncIterator[Served]:
    service = await open_service(settings)
    runner = web.AppRunner(build_app(settings, service))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    served = Served(settings, service, runner)
    try:
        yield served
    finally:
        await served.stop()


async def cli(settings: Settings, *argv: str) -> int:
    """`policypal ARGV...` with these settings, in a worker thread (it runs its own event loop)."""
    return await asyncio.to_thread(_run, _parser().parse_args(argv), settings)
