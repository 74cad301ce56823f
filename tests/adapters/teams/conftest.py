"""Teams tests stream without Teams' pace of one update a second (adapters/teams/streaming.py), and
share one running app on the fake connector (``teams``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.adapters.teams.test_app import Teams, running_teams
from tests.fakes.openai_server import FakeOpenAI


@pytest.fixture(autouse=True)
def no_stream_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("adapters.teams.streaming.PACE_S", 0.0)


@pytest_asyncio.fixture
async def teams(
    tmp_path: Path, fake_openai: FakeOpenAI, sample_index: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Teams]:
    """The Teams app on the fake connector, with the scripted model and the sample index."""
    async for harness in running_teams(tmp_path, fake_openai, sample_index, monkeypatch):
        yield harness
