"""PolicyIndex: incremental indexing and hybrid (dense + BM25) search over one Qdrant collection.

Incremental means: each point carries its document's content hash, the chunking settings, the
chunk count and the root it was indexed from, so one scroll of those payload fields tells which
documents are unchanged (nothing to chunk or embed), changed (replaced in place, surplus chunks
deleted), new, or gone. "Gone" is scoped to the roots of the current run: ``index a/`` and then
``index b/`` keeps a's documents. A document id already owned by another root that still exists
is reported as a failure rather than silently moved.

Search asks the engine for the dense and the BM25 rankings in one call, fuses them by normalised
score (retrieval.fusion; Passage.score is that fused score, 0-1) and fetches the winners' payloads.
Fused scores are relative to the query's own candidates, so the relevance floor reads raw signals
instead: the best dense cosine against the query's background similarity to the corpus, and the
BM25 term strength.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from tqdm import tqdm

from retrieval.backends.base import (
    Hit,
    IndexBackend,
    IndexMeta,
    IndexMismatchError,
    IndexMissingError,
    IndexPoint,
    StoredDoc,
    UnknownSectionError,
    open_backend,
    point_id,
)
from retrieval.chunking import CHUNKER_VERSION, chunk_document
from retrieval.config import MAX_K, RetrievalConfig
from retrieval.embedding import SPARSE_MODEL, Embedder
from retrieval.fusion import CANDIDATES, fuse
from retrieval.paths import real_path
from retrieval.types import Chunk, Document, LoadFailure, LoadReport, Passage, SearchFilter

PROGRESS_DELAY_S = 1.0  # the bar appears only on runs long enough to need one
BACKGROUND_FROM = 10  # dense ranks past this one are the query's background similarity
BACKGROUND_TO = 50  # ... up to this one
CORPUS_SIZE_TTL_S = 60.0


@dataclass(frozen=True)
class Retrieval:
    """One hybrid search before the relevance floor: the fused passages and what the floor reads."""

    fused: list[Hit]  # the top k, best first, with whole payloads
    dense: list[Hit]  # the dense retriever's own top CANDIDATES (payload: doc_id and heading)
    sparse: list[Hit]  # the BM25 retriever's own top CANDIDATES
    query_terms: int  # distinct BM25 terms in the query (stopwords dropped)
    corpus_size: int  # indexed chunks, which bounds any term's IDF

    @property
    def best_dense(self) -> float:
        return self.dense[0].score if self.dense else 0.0

    @property
    def dense_contrast(self) -> float:
        """How far the best passage stands above the query's background similarity to the corpus.

        The background is the mean cosine of dense ranks 11-50: big handbooks resemble any HR-ish
        question at 0.4-0.5, so the absolute cosine alone cannot tell "answered" from "on topic".
        """
        scores = [hit.score for hit in self.dense]
        background = scores[BACKGROUND_FROM:BACKGROUND_TO] or scores[1:]
        return self.best_dense - sum(background) / len(background) if background else 0.0

    @property
    def term_strength(self) -> float:
        """Best BM25 score over the most a passage could score if every query term were unique to it.

        Near 1 when rare query terms (a policy number, an error code) all occur in one passage.
        """
        if not self.sparse or not self.query_terms or self.corpus_size < 2:
            return 0.0
        rarest_idf = math.log(1 + (self.corpus_size - 0.5) / 1.5)  # Qdrant's IDF of a term in one point
        return self.sparse[0].score / (self.query_terms * rarest_idf)


@dataclass(frozen=True)
class RelevanceFloor:
    """Below it a search returns nothing, so the agent can say the policy does not cover the question.

    Fused scores are relative to the query's own candidates, so the floor reads raw signals. A
    passage is relevant enough when its dense cosine is at least ``min_dense`` and, with
    ``contrast_weight`` times its contrast to the corpus background added, reaches
    ``min_relevance``; or when the BM25 term strength reaches ``min_terms`` (exact identifiers the
    dense model misses). Tuned with benchmarks/retrieval.py on examples/questions.jsonl and the 18F
    and Sourcegraph handbook labels: unanswerable questions refused 67% / 83% / 75%, answerable
    ones kept 97% / 98% / 92%.
    """

    min_dense: float = 0.36
    contrast_weight: float = 5.0
    min_relevance: float = 1.17
    min_terms: float = 0.65

    def relevance(self, retrieval: Retrieval) -> float:
        return retrieval.best_dense + self.contrast_weight * retrieval.dense_contrast

    def admits(self, retrieval: Retrieval) -> bool:
        if len(retrieval.dense) < 2:  # one passage indexed (or allowed by the filter): no background to read
            return retrieval.best_dense >= self.min_dense or retrieval.term_strength >= self.min_terms
        dense = retrieval.best_dense >= self.min_dense and self.relevance(retrieval) >= self.min_relevance
        return dense or retrieval.term_strength >= self.min_terms


@dataclass
class IndexReport:
    """What one index run did, by document id; failures and duplicates by file."""

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    duplicates: list[tuple[Path, str]] = field(default_factory=list)
    failures: list[LoadFailure] = field(default_factory=list)
    notes: list[tuple[Path, str]] = field(default_factory=list)
    chunks_embedded: int = 0
    embed_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def documents(self) -> int:
        return len(self.added) + len(self.replaced) + len(self.unchanged)

    def merge(self, other: IndexReport) -> None:
        for name in ("added", "replaced", "removed", "unchanged", "duplicates", "failures", "notes"):
            getattr(self, name).extend(getattr(other, name))
        self.chunks_embedded += other.chunks_embedded
        self.embed_seconds += other.embed_seconds


@dataclass(frozen=True)
class RootLoad:
    """The documents loaded from one path given to `policypal index`, which scopes removals."""

    root: str
    report: LoadReport
    protected: frozenset[str] = frozenset()  # ids of files that failed to load: not "gone"
    protected_files: frozenset[str] = frozenset()  # their real paths (a front matter id is unknown)

    @property
    def removes(self) -> bool:
        """Whether what is gone from this root may be removed: not when nothing at all loaded from it.

        A root that is missing (unmounted, mistyped) or whose every file failed says nothing about
        what it holds; `policypal index --remove ROOT` removes its documents on purpose.
        """
        return bool(self.report.documents or self.report.duplicates)


@dataclass
class _Pending:
    """A document to chunk and embed in this run."""

    doc: Document
    replacing: bool
    chunks: list[Chunk] = field(default_factory=list)


def load_roots(paths: Sequence[Path]) -> list[RootLoad]:
    """Load each path separately, so every document knows the root that scopes its removal.

    A path given twice, or inside a directory given in the same run, is loaded once, from the outer
    directory: otherwise one file would be indexed twice, or conflict with itself.
    """
    from retrieval.ingest.loaders import load_documents  # PDF/DOCX/HTML parsers: only `index` pays their import

    keys = [_root_key(path) for path in paths]
    directories = [key for key in dict.fromkeys(keys) if os.path.isdir(key)]
    loads, seen = [], set()
    for path, key in zip(paths, keys, strict=True):
        if key in seen:
            continue
        seen.add(key)
        outer = next((d for d in directories if d != key and Path(key).is_relative_to(d)), None)
        if outer is not None:
            note = f"inside {outer}, which this run indexes too: indexed from there"
            loads.append(RootLoad(key, LoadReport(notes=[(path, note)])))
        elif not os.path.lexists(path):
            loads.append(RootLoad(key, LoadReport(failures=[LoadFailure(path, "no such file or directory")])))
        else:
            report = load_documents([path])
            failed = frozenset(real_path(failure.path) for failure in report.failures)
            loads.append(RootLoad(key, report, _failed_ids(path, report.failures), failed))
    return loads


def _root_key(path: Path) -> str:
    return real_path(path)  # never raises, even for a symlink loop


def _failed_ids(root: Path, failures: Sequence[LoadFailure]) -> frozenset[str]:
    """Default doc ids (paths relative to the root) of files that failed: their old chunks stay indexed."""
    if not root.is_dir():
        return frozenset()
    ids = set()
    for failure in failures:
        try:
            ids.add(failure.path.relative_to(root).as_posix())  # walked paths are root / relative, as given
        except ValueError:
            continue
    return frozenset(ids)


class IndexingStopped(Exception):
    """``stop_writes`` was called while indexing (the server holding the index is shutting down)."""


class PolicyIndex:
    """The policy index: open once, index incrementally, search from any thread or the event loop."""

    def __init__(
        self,
        backend: IndexBackend,
        embedder: Embedder,
        cfg: RetrievalConfig,
        *,
        floor: RelevanceFloor | None = None,
    ) -> None:
        self.cfg = cfg
        self.floor = floor or RelevanceFloor()
        self.embedder = embedder
        self._backend = backend
        self._lock = threading.Lock()  # neither engine promises thread safety: one call at a time
        self._size_cache: tuple[float, int] | None = None
        self._sections_cache: tuple[float, list[str]] | None = None
        self._stop_writes = threading.Event()

    @classmethod
    def open(
        cls,
        cfg: RetrievalConfig,
        *,
        create: bool = False,
        embedder: Embedder | None = None,
        backend: IndexBackend | None = None,
        floor: RelevanceFloor | None = None,
    ) -> PolicyIndex:
        """Open the configured index; create=True makes it if missing (indexing), else it must exist."""
        embedder = embedder or Embedder.from_config(cfg)
        backend = backend or open_backend(cfg, create=create)
        try:
            _check_meta(backend, _expected_meta(embedder), create=create)
        except BaseException:
            backend.close()
            raise
        return cls(backend, embedder, cfg, floor=floor)

    def __enter__(self) -> PolicyIndex:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Flush and release the index (and, for the embedded index, its process lock)."""
        with self._lock:
            self._backend.close()

    @property
    def location(self) -> str:
        return self._backend.location

    def count(self) -> int:
        """Number of indexed chunks."""
        with self._lock:
            return self._backend.count()

    # -- indexing -------------------------------------------------------------------------------

    def stop_writes(self) -> None:
        """Make indexing in another thread stop before its next batch: a server shutting down cannot
        wait minutes for a folder to embed. Chunks already written stay; the next run completes them."""
        self._stop_writes.set()

    def index_paths(self, paths: Sequence[Path], *, progress: bool = False) -> IndexReport:
        """Load and index files and directories (each path is a root that scopes removals)."""
        return self.index_loads(load_roots(paths), progress=progress)

    def index_loads(self, loads: Sequence[RootLoad], *, progress: bool = False) -> IndexReport:
        """Index what load_roots returned; one scroll of stored hashes serves every root."""
        started = time.perf_counter()
        stored = self._stored_docs()
        report = IndexReport()
        for load in loads:
            report.failures.extend(load.report.failures)
            report.duplicates.extend(load.report.duplicates)
            report.notes.extend(load.report.notes)
            if not load.removes and any(old.root == load.root for old in stored.values()):
                note = "nothing loaded from it, so what was indexed from it is kept (`policypal index --remove`)"
                report.notes.append((Path(load.root), note))
            root_report = self.index_documents(
                load.report.documents, root=load.root, protected=load.protected, progress=progress, stored=stored,
                protected_files=load.protected_files, removes=load.removes,
            )
            report.merge(root_report)
        report.seconds = time.perf_counter() - started
        return report

    def remove_roots(self, paths: Sequence[Path]) -> IndexReport:
        """Remove every document indexed from these paths (or from inside them), even if they are gone."""
        started = time.perf_counter()
        stored = self._stored_docs()
        report = IndexReport()
        for path in paths:
            key = Path(_root_key(path))
            gone = sorted(
                doc_id for doc_id, old in stored.items()
                if Path(old.root).is_relative_to(key) or (old.file and Path(old.file).is_relative_to(key))
            )
            if not gone:
                report.failures.append(LoadFailure(path, "nothing is indexed from here"))
            self._delete_docs(gone, stored, report)
        self._size_cache = self._sections_cache = None
        report.seconds = time.perf_counter() - started
        return report

    def index_documents(
        self,
        documents: Sequence[Document],
        *,
        root: str,
        protected: frozenset[str] = frozenset(),
        progress: bool = False,
        stored: dict[str, StoredDoc] | None = None,
        protected_files: frozenset[str] = frozenset(),
        removes: bool = True,
    ) -> IndexReport:
        """Bring the index in line with these documents from one root: add, replace, remove, skip."""
        started = time.perf_counter()
        stored = self._stored_docs() if stored is None else stored
        report = IndexReport()
        pending = self._plan(documents, root, stored, report)
        self._write(pending, root, report, progress)
        for item in pending:
            count = len(item.chunks)
            stored[item.doc.doc_id] = StoredDoc(root, item.doc.content_hash, self._chunking, count, count,
                                                item.doc.file)
        if removes:
            present = {d.doc_id for d in documents} | protected
            self._remove_missing(root, present, protected_files, stored, report)
        self._size_cache = self._sections_cache = None
        report.seconds = time.perf_counter() - started
        return report

    @property
    def _chunking(self) -> str:
        """The chunking settings and chunker version, stored per point: changing either re-chunks every document."""
        return f"{self.cfg.chunk_max_tokens}/{self.cfg.chunk_overlap_tokens}/v{CHUNKER_VERSION}"

    @property
    def _max_tokens(self) -> int:
        return min(self.cfg.chunk_max_tokens, self.embedder.max_input_tokens)

    def _stored_docs(self) -> dict[str, StoredDoc]:
        with self._lock:
            return self._backend.stored_docs()

    def _plan(
        self, documents: Sequence[Document], root: str, stored: dict[str, StoredDoc], report: IndexReport
    ) -> list[_Pending]:
        pending = []
        for doc in documents:
            old = stored.get(doc.doc_id)
            if old is not None and old.root != root and not _moved_here(old, doc):
                report.failures.append(LoadFailure(Path(doc.file or doc.source), _conflict(doc.doc_id, old.root)))
            elif old is not None and self._is_current(old, doc, root):
                report.unchanged.append(doc.doc_id)
            else:
                pending.append(_Pending(doc, replacing=old is not None))
        return pending

    def _is_current(self, old: StoredDoc, doc: Document, root: str) -> bool:
        """Stored from this root, same content, same chunking, and no chunk missing."""
        same = old.root == root and old.content_hash == doc.content_hash and old.chunking == self._chunking
        return same and old.complete

    def _write(self, pending: list[_Pending], root: str, report: IndexReport, progress: bool) -> None:
        if not pending:
            return
        self._chunk(pending, report)
        points = [(item, chunk) for item in pending for chunk in item.chunks]
        # Similar lengths per batch: less padding, so faster embedding and a smaller ONNX peak.
        points.sort(key=lambda pair: len(pair[1].text))
        with tqdm(total=len(points), desc="embedding", unit="chunk", file=sys.stderr,
                  disable=not progress, delay=PROGRESS_DELAY_S) as bar:
            for batch in _batches(points, self.embedder.batch_size):
                if self._stop_writes.is_set():  # chunks_embedded: a bar disabled (no progress) counts nothing
                    raise IndexingStopped(
                        f"indexing stopped after {report.chunks_embedded} of {len(points)} passages: the server is "
                        "shutting down. What was written is kept; run `policypal index` again to finish."
                    )
                self._embed_and_upsert(batch, root, report)
                bar.update(len(batch))
        with self._lock:
            for item in pending:
                if item.replacing:
                    self._backend.delete_chunks(item.doc.doc_id, from_position=len(item.chunks))
        for item in pending:
            (report.replaced if item.replacing else report.added).append(item.doc.doc_id)

    def _chunk(self, pending: list[_Pending], report: IndexReport) -> None:
        for item in list(pending):
            item.chunks = chunk_document(
                item.doc,
                max_tokens=self._max_tokens,
                overlap_tokens=self.cfg.chunk_overlap_tokens,
                count_tokens=self.embedder.count_tokens,
            )
            if not item.chunks:
                report.failures.append(LoadFailure(Path(item.doc.source), "no text to index"))
                pending.remove(item)

    def _embed_and_upsert(self, batch: Sequence[tuple[_Pending, Chunk]], root: str, report: IndexReport) -> None:
        started = time.perf_counter()
        vectors = self.embedder.embed_documents([chunk.text for _item, chunk in batch])
        report.embed_seconds += time.perf_counter() - started
        report.chunks_embedded += len(batch)
        points = [
            IndexPoint(point_id(item.doc.doc_id, chunk.position), vec, self._payload(item, chunk, root))
            for (item, chunk), vec in zip(batch, vectors, strict=True)
        ]
        with self._lock:
            self._backend.upsert(points)

    def _payload(self, item: _Pending, chunk: Chunk, root: str) -> dict[str, Any]:
        doc = item.doc
        return {
            "doc_id": doc.doc_id,
            "title": doc.title,
            "heading": chunk.heading,
            "heading_path": list(chunk.heading_path),
            "source": doc.source,
            "text": chunk.text,
            "position": chunk.position,
            "chunk_count": len(item.chunks),
            "content_hash": doc.content_hash,
            "chunking": self._chunking,
            "section": doc.section,
            "audience": list(doc.audience),
            "root": root,
            "file": doc.file,
        }

    def _remove_missing(
        self,
        root: str,
        present: set[str] | frozenset[str],
        failed_files: frozenset[str],
        stored: dict[str, StoredDoc],
        report: IndexReport,
    ) -> None:
        gone = sorted(
            doc_id for doc_id, old in stored.items()
            if old.root == root and doc_id not in present and old.file not in failed_files
        )
        self._delete_docs(gone, stored, report)

    def _delete_docs(self, doc_ids: list[str], stored: dict[str, StoredDoc], report: IndexReport) -> None:
        with self._lock:
            for doc_id in doc_ids:
                self._backend.delete_chunks(doc_id)
        for doc_id in doc_ids:
            del stored[doc_id]
        report.removed.extend(doc_ids)

    # -- search ---------------------------------------------------------------------------------

    def search(self, query: str, k: int | None = None, filter: SearchFilter | None = None) -> list[Passage]:
        """Top passages for a question, or [] when nothing clears the relevance floor."""
        k = self.cfg.top_k if k is None else k
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k must be between 1 and {MAX_K}, not {k}")
        if not query.strip():
            return []
        filter = self._known_section(filter)
        retrieval = self.retrieve(query, k=k, filter=filter)
        if not self.floor.admits(retrieval):
            return []
        return [self._passage(hit.score, hit.payload) for hit in retrieval.fused]

    async def asearch(
        self, query: str, k: int | None = None, filter: SearchFilter | None = None
    ) -> list[Passage]:
        """search() in a worker thread, so embedding and the engine never block the event loop."""
        return await asyncio.to_thread(self.search, query, k, filter)

    def retrieve(self, query: str, *, k: int, filter: SearchFilter | None = None) -> Retrieval:
        """The fused top k and the floor's signals, before the floor (search() applies it)."""
        vectors = self.embedder.embed_query(query)
        with self._lock:
            rankings = self._backend.rankings(vectors, candidates=max(k, CANDIDATES), search_filter=filter)
            top = fuse(rankings.dense, rankings.sparse, limit=k)
            payloads = self._backend.payloads([hit.id for hit in top])
        return Retrieval(
            fused=[Hit(hit.id, hit.score, payloads[hit.id]) for hit in top if hit.id in payloads],
            dense=rankings.dense,
            sparse=rankings.sparse,
            query_terms=len(vectors.sparse_indices),
            corpus_size=self._corpus_size(),
        )

    def sections(self) -> list[str]:
        """The sections documents declare, sorted; refreshed now and then (another process may index)."""
        now = time.monotonic()
        if self._sections_cache is None or now - self._sections_cache[0] > CORPUS_SIZE_TTL_S:
            found = sorted({doc.section for doc in self._stored_docs().values() if doc.section})
            self._sections_cache = (now, found)
        return self._sections_cache[1]

    def _known_section(self, filter: SearchFilter | None) -> SearchFilter | None:
        """The filter with its section spelled as the index spells it ("it" finds "IT"), or an error."""
        if filter is None or not filter.section:
            return filter
        known = self.sections()
        if filter.section in known:
            return filter
        same = [section for section in known if section.casefold() == filter.section.casefold()]
        if not same:
            raise UnknownSectionError(filter.section, known)
        return replace(filter, section=same[0])

    def _corpus_size(self) -> int:
        """Chunk count for the floor's IDF bound, refreshed now and then (another process may index)."""
        now = time.monotonic()
        if self._size_cache is None or now - self._size_cache[0] > CORPUS_SIZE_TTL_S:
            with self._lock:
                self._size_cache = (now, self._backend.count())
        return self._size_cache[1]

    def _passage(self, score: float, payload: dict[str, Any]) -> Passage:
        return Passage(
            score=score,
            doc_id=str(payload.get("doc_id", "")),
            title=str(payload.get("title", "")),
            heading=str(payload.get("heading", "")),
            source=str(payload.get("source", "")),
            text=snippet(_body(payload), self.cfg.snippet_chars),
            section=payload.get("section"),
        )


def _body(payload: dict[str, Any]) -> str:
    """Chunk text without its leading heading-path line (the passage carries the heading itself)."""
    text = str(payload.get("text", ""))
    head, _blank, body = text.partition("\n\n")
    path = [str(part) for part in payload.get("heading_path") or []]
    is_heading = bool(path) and (head == " > ".join(path) or path[-1].startswith(head))
    return body.strip() if body and is_heading else text.strip()


def snippet(text: str, limit: int) -> str:
    """Text cut to at most limit characters, at a word boundary where one is near."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.6:
        cut = cut[:space]
    return cut.rstrip() + "…"


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), max(1, size)):
        yield items[start : start + size]


def _moved_here(old: StoredDoc, doc: Document) -> bool:
    """The same file reached from another root now, or its old file or root is gone: not a conflict."""
    if old.file and (old.file == doc.file or not os.path.lexists(old.file)):
        return True
    return not Path(old.root).exists()


def _conflict(doc_id: str, other_root: str) -> str:
    return (
        f"document id {doc_id!r} is already indexed from {other_root}; give one of the two files "
        "a front matter `id`, or index them from one root"
    )


def _expected_meta(embedder: Embedder) -> IndexMeta:
    return IndexMeta(model=embedder.model_name, dimension=embedder.dimension, sparse_model=SPARSE_MODEL)


def _check_meta(backend: IndexBackend, expected: IndexMeta, *, create: bool) -> None:
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
