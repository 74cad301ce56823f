"""The embedded default: qdrant-edge, Qdrant's own engine in-process (Rust), on local disk.

Layout under cfg.qdrant_path: ``<collection>/`` (the shard), ``<collection>.meta.json`` (model and
dimension) and ``.<collection>.lock``. The lock is an OS file lock held for as long as the index is
open, so a second process gets a clear IndexInUseError instead of a half-written index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import qdrant_edge as qe

from retrieval.backends.base import (
    DENSE,
    KEYWORD_FIELDS,
    RANKING_FIELDS,
    SCROLL_PAGE,
    SPARSE,
    STORED_DOC_FIELDS,
    Hit,
    IndexMeta,
    IndexPoint,
    Rankings,
    StoredDoc,
    audience_values,
    collect_stored_docs,
)
from retrieval.embedding import Vectors
from retrieval.errors import IndexInUseError, IndexMissingError
from retrieval.types import SearchFilter

try:
    import fcntl
except ImportError:  # Windows: qdrant-edge's own WAL lock still refuses a second process
    fcntl = None  # type: ignore[assignment]


def in_use_message(path: Path) -> str:
    return (
        f"The index at {path} is in use by another process (e.g. `policypal serve`); stop it, or set "
        "POLICYPAL_QDRANT_URL to a Qdrant server, which many processes can share."
    )


def _take_lock(lock_path: Path, index_path: Path) -> IO[str]:
    handle = lock_path.open("a")
    if fcntl is None:
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise IndexInUseError(in_use_message(index_path)) from None
    return handle


def _load_shard(shard_dir: Path, index_path: Path) -> qe.EdgeShard:
    try:
        return qe.EdgeShard.load(str(shard_dir))
    except Exception as exc:
        if "WouldBlock" in str(exc):  # the engine's WAL lock, where no OS file lock was possible
            raise IndexInUseError(in_use_message(index_path)) from exc
        raise


class EdgeBackend:
    """IndexBackend on a qdrant-edge shard, guarded by an OS file lock."""

    def __init__(self, path: Path, collection: str, lock: IO[str]) -> None:
        self.location = str(path)
        self._path = path
        self._shard_dir = path / collection
        self._meta_path = path / f"{collection}.meta.json"
        self._lock = lock
        self._shard: qe.EdgeShard | None = None
        if (self._shard_dir / "edge_config.json").exists():
            self._shard = _load_shard(self._shard_dir, path)

    @classmethod
    def open(cls, path: Path, collection: str, *, create: bool) -> EdgeBackend:
        """Open (and with create=True, make room for) the index; raises if missing or in use."""
        if not create and not (path / collection).is_dir():
            raise IndexMissingError(f"No policy index at {path} yet: run `policypal index PATH...` first.")
        path.mkdir(parents=True, exist_ok=True)
        lock = _take_lock(path / f".{collection}.lock", path)
        try:
            return cls(path, collection, lock)
        except BaseException:
            lock.close()
            raise

    def read_meta(self) -> IndexMeta | None:
        if self._shard is None or not self._meta_path.is_file():
            return None
        return IndexMeta.from_dict(json.loads(self._meta_path.read_text(encoding="utf-8")))

    def create(self, meta: IndexMeta) -> None:
        partial = self._meta_path.with_name(self._meta_path.name + ".partial")
        partial.write_text(json.dumps(meta.as_dict()), encoding="utf-8")
        partial.replace(self._meta_path)
        if self._shard is None:
            self._shard = qe.EdgeShard.create(str(self._shard_dir), _edge_config(meta.dimension))
            for name in KEYWORD_FIELDS:
                self._update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
            self._update(qe.UpdateOperation.create_field_index("position", qe.PayloadSchemaType.Integer))

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        self._update(qe.UpdateOperation.upsert_points([_edge_point(p) for p in points]))

    def delete_chunks(self, doc_id: str, from_position: int = 0) -> None:
        conditions: list[Any] = [qe.FieldCondition(key="doc_id", match=qe.MatchValue(doc_id))]
        if from_position > 0:
            conditions.append(qe.FieldCondition(key="position", range=qe.RangeFloat(gte=from_position)))
        self._update(qe.UpdateOperation.delete_points_by_filter(qe.Filter(must=conditions)))

    def stored_docs(self) -> dict[str, StoredDoc]:
        docs: dict[str, StoredDoc] = {}
        offset: Any = None
        while self._shard is not None:
            request = qe.ScrollRequest(offset=offset, limit=SCROLL_PAGE, with_payload=STORED_DOC_FIELDS)
            records, offset = self._shard.scroll(request)
            collect_stored_docs([r.payload or {} for r in records], docs)
            if offset is None:
                break
        return docs

    def count(self) -> int:
        return 0 if self._shard is None else self._shard.count(qe.CountRequest(exact=True))

    def rankings(self, query: Vectors, *, candidates: int, search_filter: SearchFilter | None) -> Rankings:
        if self._shard is None:
            return Rankings()
        flt = _edge_filter(search_filter)
        dense = qe.Query.Nearest(query.dense, using=DENSE)
        sparse = qe.Query.Nearest(qe.SparseVector(query.sparse_indices, query.sparse_values), using=SPARSE)
        requests = [
            qe.QueryRequest(limit=candidates, query=q, filter=flt, with_payload=RANKING_FIELDS)
            for q in (dense, sparse)
        ]
        dense_hits, sparse_hits = self._shard.query_batch(qe.QueryBatchRequest(requests))
        return Rankings([_hit(p) for p in dense_hits], [_hit(p) for p in sparse_hits])

    def payloads(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if self._shard is None or not ids:
            return {}
        records = self._shard.retrieve(list(ids), True, False)
        return {str(record.id): dict(record.payload or {}) for record in records}

    def close(self) -> None:
        if self._shard is not None:
            self._shard.flush()
            self._shard.close()
            self._shard = None
        self._lock.close()  # closing the file releases the flock

    def _update(self, operation: qe.UpdateOperation) -> None:
        if self._shard is None:
            raise IndexMissingError(f"No policy index at {self._path} yet: run `policypal index PATH...` first.")
        self._shard.update(operation)


def _edge_config(dimension: int) -> qe.EdgeConfig:
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
    )


def _edge_point(point: IndexPoint) -> qe.Point:
    sparse = qe.SparseVector(point.vectors.sparse_indices, point.vectors.sparse_values)
    return qe.Point(point.id, {DENSE: point.vectors.dense, SPARSE: sparse}, point.payload)


def _edge_filter(search_filter: SearchFilter | None) -> qe.Filter | None:
    if search_filter is None:
        return None
    must: list[Any] = []
    if search_filter.section:
        must.append(qe.FieldCondition(key="section", match=qe.MatchValue(search_filter.section)))
    if search_filter.groups is not None:
        visible = qe.FieldCondition(key="audience", match=qe.MatchAny(audience_values(search_filter.groups)))
        must.append(qe.Filter(should=[visible, qe.IsEmptyCondition(key="audience")]))
    return qe.Filter(must=must) if must else None


def _hit(point: qe.ScoredPoint) -> Hit:
    return Hit(id=str(point.id), score=float(point.score), payload=dict(point.payload or {}))
