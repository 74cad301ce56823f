"""Teams tests stream without Teams' pace of one update a second (adapters/teams/streaming.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_stream_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("adapters.teams.streaming.PACE_S", 0.0)
