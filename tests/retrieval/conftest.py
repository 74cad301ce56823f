"""Retrieval fixtures: one embedding model per session, small corpora, both index backends.

Loading the model costs about a second and embedding is the slow part of indexing, so every test
shares one loaded Embedder and indexes only a handful of short documents.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from retrieval import Document, Embedder, PolicyIndex, RetrievalConfig, Vectors
from retrieval.backends import IndexBackend

REPO = Path(__file__).resolve().parents[2]
SAMPLE_POLICIES = REPO / "bot" / "sample_policies"
CORPORA_VAR = "POLICYPAL_TEST_CORPORA"
# Read at import: clean_env drops every POLICYPAL_ variable before each test runs.
TEST_CORPORA = os.environ.get(CORPORA_VAR, "")
HANDBOOKS = ("18f-handbook/docs", "sourcegraph-handbook/docs")

OpenIndex = Callable[..., PolicyIndex]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No developer setting (env or a .env in the working directory) may change a result."""
    for name in list(os.environ):
        if name.upper().startswith("POLICYPAL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)


class MemoEmbedder(Embedder):
    """The real bundled model, remembering vectors: tests index the same few texts many times."""

    def __init__(self, model_name: str, cache_dir: Path) -> None:
        super().__init__(model_name, cache_dir, batch_size=16)
        self._passages: dict[str, Vectors] = {}
        self._queries: dict[str, Vectors] = {}

    def embed_documents(self, texts: Sequence[str]) -> list[Vectors]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._passages]
        if missing:
            self._passages.update(zip(missing, super().embed_documents(missing), strict=True))
        return [self._passages[t] for t in texts]

    def embed_query(self, text: str) -> Vectors:
        if text not in self._queries:
            self._queries[text] = super().embed_query(text)
        return self._queries[text]


@pytest.fixture
def handbooks() -> list[Path]:
    """The real 18F and Sourcegraph handbooks under $POLICYPAL_TEST_CORPORA; skipped when it is unset.

    They are large and not part of the repository, so CI runs without them; a developer points the
    variable at a folder holding both to run the tests that read them.
    """
    if not TEST_CORPORA:
        pytest.skip(f"{CORPORA_VAR} is not set: the real handbooks stay out of CI (set it to a folder with "
                    f"{' and '.join(HANDBOOKS)} to run this)")
    roots = [Path(TEST_CORPORA) / handbook for handbook in HANDBOOKS]
    missing = [str(root) for root in roots if not root.is_dir()]
    if missing:
        pytest.fail(f"{CORPORA_VAR}={TEST_CORPORA} lacks {', '.join(missing)}")
    return roots


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    """The bundled model, loaded once for the whole session."""
    cache = tmp_path_factory.mktemp("models")
    return MemoEmbedder(RetrievalConfig().embedding_model, cache).load()


@pytest.fixture
def cfg(tmp_path: Path) -> RetrievalConfig:
    return RetrievalConfig(qdrant_path=tmp_path / "qdrant", model_cache_dir=tmp_path / "models")


@pytest.fixture(params=["edge", "qdrant-client"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    """Every backend-facing test runs on the embedded engine and on qdrant-client (local mode)."""
    return str(request.param)


def pytest_configure(config: pytest.Config) -> None:
    # qdrant-client's local mode warns that payload indexes are a server feature; expected here.
    config.addinivalue_line("filterwarnings", "ignore:Payload indexes have no effect:UserWarning")


class KeepOpen:
    """An in-memory qdrant-client backend that survives PolicyIndex.close(), as a server would."""

    def __init__(self, backend: IndexBackend) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> object:
        return getattr(self._backend, name)

    def close(self) -> None:
        pass


@pytest.fixture
def open_index(cfg: RetrievalConfig, embedder: Embedder, backend_kind: str) -> Iterator[OpenIndex]:
    """Open (creating) a PolicyIndex on the chosen backend, as often as a test likes; all closed at teardown."""
    from qdrant_client import QdrantClient

    from retrieval.backends import QdrantBackend

    opened: list[PolicyIndex] = []
    server = QdrantBackend(QdrantClient(location=":memory:"), cfg.collection, location=":memory:")

    def _open(**overrides: object) -> PolicyIndex:
        for index in opened:
            index.close()  # one process holds the embedded index at a time
        index = PolicyIndex.open(
            replace(cfg, **overrides),  # type: ignore[arg-type]
            create=True,
            embedder=embedder,
            backend=KeepOpen(server) if backend_kind == "qdrant-client" else None,  # type: ignore[arg-type]
        )
        opened.append(index)
        return index

    yield _open
    for index in opened:
        index.close()
    server.close()


def make_doc(
    doc_id: str,
    text: str,
    *,
    title: str | None = None,
    section: str | None = None,
    audience: tuple[str, ...] = (),
) -> Document:
    """A Document as the loader would produce it (hash over text and metadata)."""
    title = title or doc_id.removesuffix(".md").replace("-", " ").title()
    digest = hashlib.sha256(f"{title}\0{section}\0{audience}\0{text}".encode()).hexdigest()
    return Document(doc_id, title, f"/policies/{doc_id}", text, digest, section=section, audience=audience)


VPN_DOC = """# VPN access

## Connecting

Use the GlobalProtect client to connect to the company VPN from outside the office.
Sign in with your company account and approve the MFA prompt on your phone.

## Troubleshooting

Error KX-7731 means your device certificate has expired. Reinstall the certificate from the
self-service portal, then restart GlobalProtect. If the error persists, open an IT ticket.
"""

LEAVE_DOC = """# Annual leave

## Allowance

Full-time employees get 25 days of paid annual leave per calendar year, plus public holidays.
Part-time employees get a pro-rata allowance.

## Carry-over

You may carry over up to 5 unused days into the next year; they expire on 31 March.
"""

TRAVEL_DOC = """# Business travel

## Flights

Book all flights through the travel portal. Economy class is the standard for flights under six
hours; premium economy is allowed for longer flights. Business class needs CFO approval.

## Hotels

Hotel stays are reimbursed up to the city rate listed in the travel portal.
"""

SALARY_DOC = """# Salary bands

## Engineering bands

Salary bands for engineering levels E1 to E6 are reviewed every April by the People team.
Managers see the bands for their reports in the compensation tool.
"""


@pytest.fixture
def corpus() -> list[Document]:
    """Four short policies with sections and audiences: enough to exercise ranking and filters."""
    return sample_corpus()


def sample_corpus() -> list[Document]:
    return [
        make_doc("vpn.md", VPN_DOC, section="IT"),
        make_doc("leave.md", LEAVE_DOC, section="People", audience=("all",)),
        make_doc("travel.md", TRAVEL_DOC, section="Finance"),
        make_doc("salary-bands.md", SALARY_DOC, section="People", audience=("managers", "hr")),
    ]


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: Embedder) -> Path:
    """POLICYPAL_DATA_DIR for the CLI, with the session's loaded model standing in for a fresh load."""
    data = tmp_path / "data"
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(data))
    monkeypatch.setattr(Embedder, "from_config", lambda cfg: embedder)
    return data


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`policypal ARGV...` in this process: exit code, stdout, stderr."""
    from adapters.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
