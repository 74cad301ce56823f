"""Choosing the engine: a Qdrant server when a URL is configured, else the embedded qdrant-edge index.

Each engine's module is imported only when it is chosen: qdrant-client alone costs about a second and
130 MB to import, which a process on the embedded index (the default) never needs to pay.
"""

from __future__ import annotations

from retrieval.backends.base import IndexBackend
from retrieval.config import RetrievalConfig


def open_backend(cfg: RetrievalConfig, *, create: bool) -> IndexBackend:
    """A Qdrant server when cfg.qdrant_url is set, else the embedded on-disk index at cfg.qdrant_path."""
    if cfg.qdrant_url:
        from retrieval.backends.qdrant import QdrantBackend

        return QdrantBackend.connect(cfg.qdrant_url, cfg.qdrant_api_key, cfg.collection, create=create)
    from retrieval.backends.edge import EdgeBackend

    return EdgeBackend.open(cfg.qdrant_path, cfg.collection, create=create)
