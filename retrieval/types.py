"""Values that flow through retrieval: documents in, chunks indexed, passages out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Document:
    """A loaded policy document, its body normalised to Markdown (``#`` headings, pipe tables)."""

    doc_id: str  # stable across runs: the path relative to the indexed root, or front matter `id`
    title: str
    source: str  # a URL from front matter, else the file path
    text: str
    content_hash: str  # sha256 of text and metadata: an unchanged hash means nothing to embed
    section: str | None = None
    audience: tuple[str, ...] = ()  # empty: everyone may see it
    file: str = ""  # the real path of the file it was loaded from ("" when not loaded from a file)
    classification: str | None = None  # front matter `classification` ("confidential"), for citations


@dataclass(frozen=True)
class Chunk:
    """One indexed passage of a document, with the heading path that locates it."""

    doc_id: str
    position: int  # 0-based order within the document; with doc_id it makes the point id
    heading_path: tuple[str, ...]
    text: str

    @property
    def heading(self) -> str:
        return " > ".join(self.heading_path)


@dataclass(frozen=True)
class LoadFailure:
    """A file that could not be read, reported by name instead of stopping the run."""

    path: Path
    reason: str


@dataclass
class LoadReport:
    """What a load produced: documents to index, files that failed, and what was skipped or noted."""

    documents: list[Document] = field(default_factory=list)
    failures: list[LoadFailure] = field(default_factory=list)
    duplicates: list[tuple[Path, str]] = field(default_factory=list)  # (skipped path, doc_id of the original)
    notes: list[tuple[Path, str]] = field(default_factory=list)  # loaded, but worth telling (e.g. cp1252 text)


@dataclass(frozen=True)
class Passage:
    """A search hit as the agent and the CLI see it; ``text`` is bounded in length."""

    score: float
    doc_id: str
    title: str
    heading: str
    source: str  # for readers: the document's URL, or its path inside the indexed folder (retrieval.sources)
    text: str
    section: str | None = None
    audience: tuple[str, ...] = ()  # the document's; empty: everyone may read it
    classification: str | None = None  # the document's sensitivity label, where its front matter gives one

    def as_dict(self) -> dict[str, object]:
        return {
            "score": round(self.score, 4),
            "title": self.title,
            "heading": self.heading,
            "source": self.source,
            "text": self.text,
            "doc_id": self.doc_id,
            "section": self.section,
        }


@dataclass(frozen=True)
class SearchFilter:
    """Optional narrowing of a search: one section, and the caller's audience groups."""

    section: str | None = None
    groups: tuple[str, ...] | None = None  # None: no audience filtering (admin / CLI)
