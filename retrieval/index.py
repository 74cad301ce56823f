"""PolicyIndex: the one object callers hold, for incremental indexing and hybrid search over one collection.

It opens the backend, refuses an index built with another embedding model, and hands the work to
retrieval.indexing (writes) and retrieval.search (reads), which share the backend behind one lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from retrieval.backends import IndexBackend, IndexMeta, open_backend
from retrieval.config import RetrievalConfig
from retrieval.context import IndexContext
from retrieval.embedding import SPARSE_MODEL, Embedder
from retrieval.errors import IndexMismatchError, IndexMissingError
from retrieval.indexing import Indexer
from retrieval.report import IndexReport
from retrieval.rerank import Reranker
from retrieval.roots import RootLoad
from retrieval.search import RelevanceFloor, Retrieval, Searcher
from retrieval.types import Document, Passage, SearchFilter


class PolicyIndex:
    """The policy index: open once, index incrementally, search from any thread or the event loop."""

    def __init__(
        self,
        backend: IndexBackend,
        embedder: Embedder,
        cfg: RetrievalConfig,
        *,
        floor: RelevanceFloor | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self._context = IndexContext(backend, embedder, cfg)
        self._searcher = Searcher(self._context, floor or RelevanceFloor(), reranker or Reranker.from_config(cfg))
        self._indexer = Indexer(self._context, changed=self._searcher.forget)

    @classmethod
    def open(
        cls,
        cfg: RetrievalConfig,
        *,
        create: bool = False,
        embedder: Embedder | None = None,
        backend: IndexBackend | None = None,
        floor: RelevanceFloor | None = None,
        reranker: Reranker | None = None,
    ) -> PolicyIndex:
        """Open the configured index; create=True makes it if missing (indexing), else it must exist."""
        embedder = embedder or Embedder.from_config(cfg)
        backend = backend or open_backend(cfg, create=create)
        try:
            _check_meta(backend, _expected_meta(embedder), create=create)
        except BaseException:
            backend.close()
            raise
        return cls(backend, embedder, cfg, floor=floor, reranker=reranker)

    def __enter__(self) -> PolicyIndex:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Flush and release the index (and, for the embedded index, its process lock)."""
        with self._context.lock:
            self._context.backend.close()

    @property
    def cfg(self) -> RetrievalConfig:
        return self._context.cfg

    @property
    def embedder(self) -> Embedder:
        return self._context.embedder

    @embedder.setter
    def embedder(self, embedder: Embedder) -> None:
        self._context.embedder = embedder

    @property
    def floor(self) -> RelevanceFloor:
        return self._searcher.floor

    @floor.setter
    def floor(self, floor: RelevanceFloor) -> None:
        self._searcher.floor = floor

    @property
    def location(self) -> str:
        return self._context.backend.location

    def count(self) -> int:
        """Number of indexed chunks."""
        with self._context.lock:
            return self._context.backend.count()

    # -- indexing (retrieval.indexing) ----------------------------------------------------------

    def stop_writes(self) -> None:
        """Make indexing in another thread stop before its next batch (IndexingStopped); see Indexer."""
        self._indexer.stop_writes()

    def index_paths(self, paths: Sequence[Path], *, progress: bool = False) -> IndexReport:
        """Load and index files and directories (each path is a root that scopes removals)."""
        return self._indexer.index_paths(paths, progress=progress)

    def index_loads(self, loads: Sequence[RootLoad], *, progress: bool = False) -> IndexReport:
        """Index what load_roots returned; one scroll of stored hashes serves every root."""
        return self._indexer.index_loads(loads, progress=progress)

    def remove_roots(self, paths: Sequence[Path]) -> IndexReport:
        """Remove every document indexed from these paths (or from inside them), even if they are gone."""
        return self._indexer.remove_roots(paths)

    def index_documents(
        self, documents: Sequence[Document], *, root: str, protected: frozenset[str] = frozenset()
    ) -> IndexReport:
        """Bring the index in line with these documents from one root: add, replace, remove, skip.

        ``protected``: document ids to keep although absent (their files failed to load this time).
        """
        return self._indexer.index_documents(documents, root=root, protected=protected)

    # -- search (retrieval.search) --------------------------------------------------------------

    def search(self, query: str, k: int | None = None, filter: SearchFilter | None = None) -> list[Passage]:
        """Top passages for a question, or [] when nothing clears the relevance floor."""
        return self._searcher.search(query, k, filter)

    async def asearch(
        self, query: str, k: int | None = None, filter: SearchFilter | None = None
    ) -> list[Passage]:
        """search() in a worker thread, so embedding and the engine never block the event loop."""
        return await asyncio.to_thread(self.search, query, k, filter)

    def retrieve(self, query: str, *, k: int, filter: SearchFilter | None = None) -> Retrieval:
        """The fused top k and the floor's signals, before the floor (search() applies it)."""
        return self._searcher.retrieve(query, k=k, filter=filter)

    def sections(self, groups: Sequence[str] | None = None) -> list[str]:
        """The sections of documents readers with ``groups`` may read (None: all), sorted."""
        return self._searcher.sections(groups)


def _expected_meta(embedder: Embedder) -> IndexMeta:
    return IndexMeta(model=embedder.model_name, dimension=embedder.dimension, sparse_model=SPARSE_MODEL)


def _check_meta(backend: IndexBackend, expected: IndexMeta, *, create: bool) -> None:
    """Create the collection's metadata on first use, else refuse an index built with another model."""
    meta = backend.read_meta()
    if meta is None:
        if not create:
            raise IndexMissingError(f"No policy index at {backend.location} yet: run `policypal index PATH...`.")
        backend.create(expected)
        return
    same_model = meta.model.lower() == expected.model.lower() and meta.dimension == expected.dimension
    if not same_model or meta.sparse_model != expected.sparse_model:
        raise IndexMismatchError(
            f"The index at {backend.location} was built with the embedding model {meta.model} "
            f"({meta.dimension} dimensions), but POLICYPAL_EMBEDDING_MODEL selects {expected.model} "
            f"({expected.dimension} dimensions). Re-index: delete {backend.location} (or use another "
            "POLICYPAL_COLLECTION) and run `policypal index PATH...`, or set the model back."
        )
