"""Incremental indexing: only what changed is chunked, embedded and written; what is gone is removed.

Each point carries its document's content hash, the chunking settings, the chunk count and the root
it was indexed from, so one scroll of those payload fields tells which documents are unchanged
(nothing to chunk or embed), changed (replaced in place, surplus chunks deleted), new, or gone.
A document a stopped or interrupted run left short embeds only the chunks it lacks.
"Gone" is scoped to the roots of the current run: ``index a/`` and then ``index b/`` keeps a's
documents. A document id already owned by another root that still exists is reported as a failure
rather than silently moved. One file is one document: indexed under another id from another root
before (the file alone, then its folder), that other id is removed once this root's copy is written.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrieval.backends import IndexPoint, StoredDoc, point_id
from retrieval.chunking import CHUNKER_VERSION, chunk_document
from retrieval.context import IndexContext
from retrieval.errors import IndexingStopped
from retrieval.paths import real_path
from retrieval.report import IndexReport
from retrieval.roots import RootLoad, load_roots
from retrieval.types import Chunk, Document, LoadFailure

PROGRESS_DELAY_S = 1.0  # the bar appears only on runs long enough to need one


@dataclass
class _Pending:
    """A document to chunk and embed in this run."""

    doc: Document
    replacing: bool
    chunks: list[Chunk] = field(default_factory=list)
    written: frozenset[int] = frozenset()  # positions an interrupted run already stored for this very version
    expected: int = -1  # how many chunks that run stored it as (a different count: nothing is reused)


class Indexer:
    """The writing side of a PolicyIndex: brings the stored points in line with the documents given.

    ``changed`` is called after every run that wrote or removed, so the reading side drops what it
    cached about the corpus.
    """

    def __init__(self, context: IndexContext, *, changed: Callable[[], None]) -> None:
        self._context = context
        self._changed = changed
        self._stop_writes = threading.Event()

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
        stored = self._context.stored_docs()
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
        stored = self._context.stored_docs()
        report = IndexReport()
        for path in paths:
            key = Path(real_path(path))
            gone = sorted(
                doc_id for doc_id, old in stored.items()
                if Path(old.root).is_relative_to(key) or (old.file and Path(old.file).is_relative_to(key))
            )
            if not gone:
                report.failures.append(LoadFailure(path, "nothing is indexed from here"))
            self._delete_docs(gone, stored, report)
        self._changed()
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
        stored = self._context.stored_docs() if stored is None else stored
        report = IndexReport()
        taken = _taken_over(documents, root, stored)
        pending = self._plan(documents, root, stored, report, taken)
        self._write(pending, root, report, progress)
        for item in pending:
            count = len(item.chunks)
            stored[item.doc.doc_id] = StoredDoc(root, item.doc.content_hash, self._chunking, count, count,
                                                item.doc.file)
        self._delete_docs(sorted(taken - {item.doc.doc_id for item in pending}), stored, report)
        if removes:
            present = {d.doc_id for d in documents} | protected
            self._remove_missing(root, present, protected_files, stored, report)
        self._changed()
        report.seconds = time.perf_counter() - started
        return report

    @property
    def _chunking(self) -> str:
        """The chunking settings and chunker version, stored per point: changing either re-chunks every document."""
        cfg = self._context.cfg
        return f"{cfg.chunk_max_tokens}/{cfg.chunk_overlap_tokens}/v{CHUNKER_VERSION}"

    @property
    def _max_tokens(self) -> int:
        return min(self._context.cfg.chunk_max_tokens, self._context.embedder.max_input_tokens)

    def _plan(
        self,
        documents: Sequence[Document],
        root: str,
        stored: dict[str, StoredDoc],
        report: IndexReport,
        taken: set[str],
    ) -> list[_Pending]:
        pending = []
        for doc in documents:
            old = stored.get(doc.doc_id)
            if old is not None and old.root != root and doc.doc_id not in taken and not _moved_here(old, doc):
                report.failures.append(LoadFailure(Path(doc.file or doc.source), _conflict(doc.doc_id, old.root)))
            elif old is not None and self._is_current(old, doc, root):
                report.unchanged.append(doc.doc_id)
            elif old is not None and self._is_cut_short(old, doc, root):
                pending.append(_Pending(doc, True, written=frozenset(old.positions), expected=old.chunk_count))
            else:
                pending.append(_Pending(doc, replacing=old is not None))
        return pending

    def _is_current(self, old: StoredDoc, doc: Document, root: str) -> bool:
        """Stored from this root, same content, same chunking, and no chunk missing."""
        same = old.root == root and old.content_hash == doc.content_hash and old.chunking == self._chunking
        return same and old.complete

    def _is_cut_short(self, old: StoredDoc, doc: Document, root: str) -> bool:
        """This very version, partly stored by a run that stopped: its stored chunks can stay."""
        same = old.root == root and old.content_hash == doc.content_hash and old.chunking == self._chunking
        return same and old.file == doc.file and not old.mixed and old.points < old.chunk_count

    def _write(self, pending: list[_Pending], root: str, report: IndexReport, progress: bool) -> None:
        if not pending:
            return
        from tqdm import tqdm  # only a run that embeds pays its import

        self._chunk(pending, report)
        points = [(item, chunk) for item in pending for chunk in item.chunks if not _stored(item, chunk)]
        # Similar lengths per batch: less padding, so faster embedding and a smaller ONNX peak.
        points.sort(key=lambda pair: len(pair[1].text))
        embedder = self._context.embedder
        with tqdm(total=len(points), desc="embedding", unit="chunk", file=sys.stderr,
                  disable=not progress, delay=PROGRESS_DELAY_S) as bar:
            for batch in _batches(points, embedder.batch_size):
                if self._stop_writes.is_set():  # chunks_embedded: a bar disabled (no progress) counts nothing
                    raise IndexingStopped(
                        f"indexing stopped after {report.chunks_embedded} of {len(points)} passages: the server is "
                        "shutting down. What was written is kept; run `policypal index` again to finish."
                    )
                self._embed_and_upsert(batch, root, report)
                bar.update(len(batch))
        with self._context.lock:
            for item in pending:
                if item.replacing:
                    self._context.backend.delete_chunks(item.doc.doc_id, from_position=len(item.chunks))
        for item in pending:
            (report.replaced if item.replacing else report.added).append(item.doc.doc_id)

    def _chunk(self, pending: list[_Pending], report: IndexReport) -> None:
        for item in list(pending):
            item.chunks = chunk_document(
                item.doc,
                max_tokens=self._max_tokens,
                overlap_tokens=self._context.cfg.chunk_overlap_tokens,
                count_tokens=self._context.embedder.count_tokens,
            )
            if not item.chunks:
                report.failures.append(LoadFailure(Path(item.doc.source), "no text to index"))
                pending.remove(item)

    def _embed_and_upsert(self, batch: Sequence[tuple[_Pending, Chunk]], root: str, report: IndexReport) -> None:
        started = time.perf_counter()
        vectors = self._context.embedder.embed_documents([chunk.text for _item, chunk in batch])
        report.embed_seconds += time.perf_counter() - started
        report.chunks_embedded += len(batch)
        points = [
            IndexPoint(point_id(item.doc.doc_id, chunk.position), vec, self._payload(item, chunk, root))
            for (item, chunk), vec in zip(batch, vectors, strict=True)
        ]
        with self._context.lock:
            self._context.backend.upsert(points)

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
            "classification": doc.classification,
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
        with self._context.lock:
            for doc_id in doc_ids:
                self._context.backend.delete_chunks(doc_id)
        for doc_id in doc_ids:
            del stored[doc_id]
        report.removed.extend(doc_ids)


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), max(1, size)):
        yield items[start : start + size]


def _stored(item: _Pending, chunk: Chunk) -> bool:
    """Whether a run that stopped already stored this chunk (same version, chunked the same way)."""
    return len(item.chunks) == item.expected and chunk.position in item.written


def _taken_over(documents: Sequence[Document], root: str, stored: dict[str, StoredDoc]) -> set[str]:
    """Ids stored from another root for a file that this root now indexes under another id.

    `index docs/sub/a.md` (id "a.md") then `index docs` (id "sub/a.md"): without this the file stays
    indexed twice, "a.md" outlives the file, and docs/a.md conflicts with an id its own folder holds.
    Not taken when the new id is itself owned elsewhere: that document fails as a conflict instead.
    """
    by_file = {doc.file: doc for doc in documents if doc.file}
    taken = set()
    for doc_id, old in stored.items():
        doc = by_file.get(old.file) if old.file and old.root != root else None
        if doc is None or doc.doc_id == doc_id:
            continue
        holder = stored.get(doc.doc_id)
        if holder is None or holder.root == root or _moved_here(holder, doc):
            taken.add(doc_id)
    return taken


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
