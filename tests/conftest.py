"""Fixtures shared by every test package: a clean environment, the fake OpenAI server, the sample index."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from retrieval import Embedder, PolicyIndex, RetrievalConfig
from tests.fakes import conformance
from tests.fakes.openai_server import FakeOpenAI, fake_openai_server

pytest_plugins = ["tests.databases"]  # the store fixtures (SQLite and PostgreSQL), for every package

REPO = Path(__file__).resolve().parent.parent
SAMPLE_POLICIES = REPO / "bot" / "sample_policies"
PLATFORM_VARS = ("OPENAI_", "SLACK_", "MICROSOFTAPP", "POLICYPAL_")
TEST_VARS = ("POLICYPAL_TEST_",)  # set by CI for the tests themselves (the PostgreSQL URL): kept


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's shell or .env must never change a result; models never come from a hub."""
    for name in list(os.environ):
        if name.upper().startswith(PLATFORM_VARS) and not name.upper().startswith(TEST_VARS):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def isolated_data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default data home (platformdirs honours XDG_DATA_HOME) under this test's tmp, never the real
    user's home: a test that sets no POLICYPAL_DATA_DIR, and every process it starts, keeps state here."""
    home = tmp_path / "xdg-data-home"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    return home / "policypal"


@pytest.fixture(autouse=True)
def vendor_conformance() -> Iterator[None]:
    """Every payload a fake Slack or Teams received is one the vendor accepts (tests/fakes/conformance.py):
    a test that sent anything else fails here, even when it never looked at that payload."""
    conformance.take()
    yield
    found = conformance.take()
    assert not found, "payloads Slack or Teams would refuse:\n" + "\n".join(found[:20])


@pytest_asyncio.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    async for fake in fake_openai_server():
        yield fake


def built_index(root: Path, *folders: Path) -> PolicyIndex:
    """``folders`` indexed under ``root`` with the bundled model (embedded engine); the caller closes it."""
    cfg = RetrievalConfig(qdrant_path=root / "qdrant", model_cache_dir=root / "models")
    embedder = Embedder(cfg.embedding_model, cfg.model_cache_dir, batch_size=16).load()
    index = PolicyIndex.open(cfg, create=True, embedder=embedder)
    report = index.index_paths(list(folders))
    assert report.ok and index.count() > 0, report
    return index


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyIndex]:
    """The sample policies indexed once per session."""
    index = built_index(tmp_path_factory.mktemp("sample-index"), SAMPLE_POLICIES)
    yield index
    index.close()
