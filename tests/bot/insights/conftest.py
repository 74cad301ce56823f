"""The bundled embedding model, loaded once per session, as the console's grouping calls it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bot.insights import Embed
from retrieval import Embedder, RetrievalConfig


@pytest.fixture(scope="session")
def embed(tmp_path_factory: pytest.TempPathFactory) -> Embed:
    """Texts to the bundled model's dense vectors (what bot/wiring.py gives the offline model)."""
    root = tmp_path_factory.mktemp("insights-model")
    cfg = RetrievalConfig(qdrant_path=root / "qdrant", model_cache_dir=root / "models")
    embedder = Embedder.from_config(cfg).load()

    def dense(texts: Sequence[str]) -> list[list[float]]:
        return [vectors.dense for vectors in embedder.embed_documents(texts)]

    return dense
