"""Fixtures for the server process tests: one small index per session, fresh fakes per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.server.harness import build_index
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlackAPI


@pytest.fixture(scope="session")
def built_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once and closed; each server copies it (the embedded index is one process per path)."""
    return build_index(tmp_path_factory.mktemp("server-index"))


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI.start_in_thread()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def slack() -> Iterator[FakeSlackAPI]:
    fake = FakeSlackAPI.start_in_thread()
    fake.add_user("U_ALICE", "alice", "alice@example.com")
    fake.add_user("U_BOB", "bob", "bob@example.com")
    try:
        yield fake
    finally:
        fake.stop()
