"""Retrieval settings as one small value, built by bot.config and passed in (retrieval reads no env)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BUNDLED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MAX_K = 50  # passages one search may return
# Most characters of one passage's text a search returns. Chunks are at most 256 tokens (about 1,150
# characters on the sample policies), so the default gives nearly every passage whole; a longer one
# is cut after its last whole table row, list item or sentence (retrieval.search.snippet).
PASSAGE_CHARS = 1_200


@dataclass(frozen=True)
class RetrievalConfig:
    qdrant_path: Path = Path("data/qdrant")
    qdrant_url: str | None = None  # set: a Qdrant server through qdrant-client
    qdrant_api_key: str | None = None
    collection: str = "policies"
    embedding_model: str = BUNDLED_MODEL
    model_cache_dir: Path = Path("data/models")
    chunk_max_tokens: int = 256
    chunk_overlap_tokens: int = 32
    snippet_chars: int = PASSAGE_CHARS
    top_k: int = 5
    embed_batch_size: int = 4  # fastest measured (benchmarks/embedding_speed.py); bigger batches pad more
    # Optional cross-encoder reranking (retrieval.rerank), off while rerank_model is None. It names a fastembed
    # cross-encoder (fastembed.rerank.cross_encoder.TextCrossEncoder.list_supported_models()), downloaded
    # into model_cache_dir on first use unless rerank_model_dir holds its files (then no network is needed).
    # rerank_candidates: how many of the fused passages the reranker re-scores, best first.
    rerank_model: str | None = None
    rerank_model_dir: Path | None = None
    rerank_candidates: int = 20
    # Where the indexed folder is published (a wiki, a Git host): a file's citation links to this URL plus
    # its path inside the folder; None: the path alone. Never the server's own path (retrieval.sources).
    source_base_url: str | None = None
