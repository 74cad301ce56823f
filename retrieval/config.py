"""Retrieval settings as one small value, built by bot.config and passed in (retrieval reads no env)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BUNDLED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MAX_K = 50  # passages one search may return


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
    snippet_chars: int = 700
    top_k: int = 5
    embed_batch_size: int = 16
