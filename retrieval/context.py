"""What indexing and search share once an index is open: its backend behind one lock, the model, the settings."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from retrieval.backends import IndexBackend, StoredDoc
from retrieval.config import RetrievalConfig
from retrieval.embedding import Embedder


@dataclass
class IndexContext:
    """One open index as its writer and its reader see it.

    Neither engine promises thread safety, so every backend call holds ``lock``. The embedder is
    read from here at each use, so one swapped on the PolicyIndex serves both sides.
    """

    backend: IndexBackend
    embedder: Embedder
    cfg: RetrievalConfig
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stored_docs(self) -> dict[str, StoredDoc]:
        """What the index holds per document (one scroll of payload fields, no vectors)."""
        with self.lock:
            return self.backend.stored_docs()
