"""Where the index lives: the IndexBackend protocol, the values that cross it, and its two engines.

EdgeBackend runs Qdrant's engine in-process on local disk (the default); QdrantBackend talks to a
Qdrant server that many replicas share. open_backend picks one from a RetrievalConfig. The two engine
classes are imported on first use, not with this package: everything in retrieval imports the values
here, and only a process that opens an engine should pay for its client library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from retrieval.backends.base import (
    SCROLL_PAGE,
    Hit,
    IndexBackend,
    IndexMeta,
    IndexPoint,
    Rankings,
    StoredDoc,
    point_id,
    visible_to,
)
from retrieval.backends.opener import open_backend

if TYPE_CHECKING:
    from retrieval.backends.edge import EdgeBackend
    from retrieval.backends.qdrant import QdrantBackend

__all__ = [
    "SCROLL_PAGE",
    "EdgeBackend",
    "Hit",
    "IndexBackend",
    "IndexMeta",
    "IndexPoint",
    "QdrantBackend",
    "Rankings",
    "StoredDoc",
    "open_backend",
    "point_id",
    "visible_to",
]

_ENGINES = {"EdgeBackend": "retrieval.backends.edge", "QdrantBackend": "retrieval.backends.qdrant"}


def __getattr__(name: str) -> Any:
    """EdgeBackend and QdrantBackend, imported when first asked for (PEP 562)."""
    if name in _ENGINES:
        import importlib

        return getattr(importlib.import_module(_ENGINES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
