"""Retrieval for PolicyPal: policy files loaded, chunked and embedded into a Qdrant index, and searched.

PolicyIndex is the one object to hold: it indexes roots incrementally (only what changed is embedded)
and answers a question with the passages that clear a relevance floor, or none. Settings come in as a
RetrievalConfig (retrieval reads no environment), and every error a user can act on is named in
retrieval.errors. The storage engines live in retrieval.backends and file loading in retrieval.ingest;
both are imported only when used, so importing this package loads neither fastembed, nor a Qdrant
client, nor a document parser. A Reranker can re-score the best passages with a cross-encoder; it is
off unless RetrievalConfig.rerank_model names one. Nothing here imports bot or adapters.
"""

from __future__ import annotations

from retrieval.config import BUNDLED_MODEL, MAX_K, PASSAGE_CHARS, RetrievalConfig
from retrieval.embedding import SPARSE_MODEL, Embedder, Vectors
from retrieval.errors import (
    EmbeddingError,
    ExtractError,
    IndexingStopped,
    IndexInUseError,
    IndexMismatchError,
    IndexMissingError,
    NoBodyText,
    PolicyIndexError,
    RerankError,
    UnknownSectionError,
)
from retrieval.fusion import CANDIDATES, fuse
from retrieval.index import PolicyIndex
from retrieval.paths import real_path
from retrieval.report import IndexReport, format_report
from retrieval.rerank import Reranker
from retrieval.roots import RootLoad, load_for_index, load_roots
from retrieval.search import RelevanceFloor, Retrieval
from retrieval.types import Chunk, Document, LoadFailure, LoadReport, Passage, SearchFilter

__all__ = [
    "BUNDLED_MODEL",
    "CANDIDATES",
    "MAX_K",
    "PASSAGE_CHARS",
    "SPARSE_MODEL",
    "Chunk",
    "Document",
    "Embedder",
    "EmbeddingError",
    "ExtractError",
    "IndexInUseError",
    "IndexMismatchError",
    "IndexMissingError",
    "IndexReport",
    "IndexingStopped",
    "LoadFailure",
    "LoadReport",
    "NoBodyText",
    "Passage",
    "PolicyIndex",
    "PolicyIndexError",
    "RelevanceFloor",
    "RerankError",
    "Reranker",
    "Retrieval",
    "RetrievalConfig",
    "RootLoad",
    "SearchFilter",
    "UnknownSectionError",
    "Vectors",
    "format_report",
    "fuse",
    "load_for_index",
    "load_roots",
    "real_path",
]
