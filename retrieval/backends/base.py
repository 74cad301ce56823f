"""The storage seam: one small protocol, the values that cross it, and the helpers both engines share.

Both backends (qdrant-edge in-process, retrieval.backends.edge; a Qdrant server, retrieval.backends.qdrant)
store the same points (a named dense vector, a BM25 sparse vector with IDF, and a payload) and answer
with the same two rankings (dense and BM25), so everything above this module is backend-neutral.
This module imports neither engine: retrieval.backends.opener chooses one.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from retrieval.embedding import Vectors
from retrieval.types import SearchFilter

DENSE = "dense"
SPARSE = "bm25"
SCHEMA_VERSION = 1
SCROLL_PAGE = 2_000
# uuid5 namespace for point ids: the same document chunk always gets the same id.
POINT_NAMESPACE = uuid.UUID("5b2f3c1e-8d0a-4f61-9a57-0c6a1f3e2b84")
KEYWORD_FIELDS = ("doc_id", "root", "section", "audience")
STORED_DOC_FIELDS = [
    "doc_id", "root", "content_hash", "chunking", "chunk_count", "file", "section", "audience", "position",
]
RANKING_FIELDS = ["doc_id", "heading"]  # what a ranking carries; the passages shown are fetched whole


@dataclass(frozen=True)
class IndexMeta:
    """What the collection was built with; a different model must not write to or read from it."""

    model: str
    dimension: int
    sparse_model: str
    schema: int = SCHEMA_VERSION

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "dimension": self.dimension, "sparse_model": self.sparse_model,
                "schema": self.schema}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexMeta:
        return cls(str(data["model"]), int(data["dimension"]), str(data.get("sparse_model", "")),
                   int(data.get("schema", SCHEMA_VERSION)))


@dataclass(frozen=True)
class IndexPoint:
    """One chunk ready to store: its deterministic id, vectors and payload."""

    id: str
    vectors: Vectors
    payload: dict[str, Any]


@dataclass
class StoredDoc:
    """What the index holds for one document: enough to decide, without embedding, if it changed."""

    root: str
    content_hash: str
    chunking: str
    chunk_count: int
    points: int = 0
    file: str = ""  # the real path it was loaded from ("" in indexes written before it was stored)
    section: str | None = None
    mixed: bool = False  # its points come from more than one version of it
    audience: tuple[str, ...] = ()  # empty: everyone may read it
    positions: set[int] = field(default_factory=set)  # chunk positions stored: a run cut short resumes from them

    @property
    def complete(self) -> bool:
        """False after an interrupted run left some of its chunks missing or extra, or from two versions."""
        return self.points == self.chunk_count and not self.mixed


@dataclass(frozen=True)
class Hit:
    """One scored point with its payload, as any backend returns it."""

    id: str
    score: float
    payload: dict[str, Any]


@dataclass
class Rankings:
    """Each retriever's own top candidates, best first (payload: RANKING_FIELDS only).

    Their raw scores are what retrieval.fusion fuses and what the relevance floor reads.
    """

    dense: list[Hit] = field(default_factory=list)
    sparse: list[Hit] = field(default_factory=list)


class IndexBackend(Protocol):
    """The few operations PolicyIndex needs from Qdrant, whichever engine runs it."""

    location: str

    def read_meta(self) -> IndexMeta | None: ...

    def create(self, meta: IndexMeta) -> None: ...

    def upsert(self, points: Sequence[IndexPoint]) -> None: ...

    def delete_chunks(self, doc_id: str, from_position: int = 0) -> None: ...

    def stored_docs(self) -> dict[str, StoredDoc]: ...

    def count(self) -> int: ...

    def rankings(self, query: Vectors, *, candidates: int, search_filter: SearchFilter | None) -> Rankings:
        """The dense and the BM25 top `candidates` in one engine call."""
        ...

    def payloads(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Whole payloads of these points (the passages a search returns), by id."""
        ...

    def close(self) -> None: ...


def point_id(doc_id: str, position: int) -> str:
    """Deterministic point id: re-indexing a document overwrites its chunks in place."""
    return str(uuid.uuid5(POINT_NAMESPACE, f"{doc_id}\x00{position}"))


def collect_stored_docs(payloads: Sequence[dict[str, Any]], into: dict[str, StoredDoc]) -> None:
    """Fold scrolled payloads into one StoredDoc per document (shared by both backends)."""
    for payload in payloads:
        doc_id = str(payload.get("doc_id"))
        stored = into.get(doc_id)
        if stored is None:
            stored = into[doc_id] = StoredDoc(
                root=str(payload.get("root", "")),
                content_hash=str(payload.get("content_hash", "")),
                chunking=str(payload.get("chunking", "")),
                chunk_count=int(payload.get("chunk_count", -1)),
                file=str(payload.get("file", "")),
                section=payload.get("section") or None,
                audience=tuple(str(group) for group in payload.get("audience") or ()),
            )
        elif _version(payload) != (stored.content_hash, stored.chunking, stored.chunk_count):
            stored.mixed = True  # a replacement cut short: as many points as before, some still old
        stored.points += 1
        stored.positions.add(int(payload.get("position", -1)))


def _version(payload: dict[str, Any]) -> tuple[str, str, int]:
    return str(payload.get("content_hash", "")), str(payload.get("chunking", "")), int(payload.get("chunk_count", -1))


def visible_to(audience: Sequence[str], groups: Sequence[str] | None) -> bool:
    """Whether readers with these groups may read a document with this audience (None: no filter)."""
    return groups is None or not audience or bool(set(audience) & set(audience_values(groups)))


def audience_values(groups: Sequence[str]) -> list[str]:
    """The audience tags a user with these groups may see: theirs and the public "all"."""
    return sorted({*groups, "all"})
