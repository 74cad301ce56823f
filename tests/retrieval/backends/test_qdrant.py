"""The Qdrant server backend (driven through qdrant-client's local mode, which speaks the server's API)."""

from __future__ import annotations

import pytest
from qdrant_client import QdrantClient, models

from retrieval import Embedder, IndexMismatchError, PolicyIndex, RetrievalConfig
from retrieval.backends import QdrantBackend
from tests.retrieval.conftest import KeepOpen


@pytest.mark.parametrize("create", [True, False])
def test_a_collection_policypal_did_not_make_is_refused_not_stamped_and_written_into(
    cfg: RetrievalConfig, embedder: Embedder, create: bool
) -> None:
    # A shared server's "policies" collection made by another tool: `policypal index` wrote its own
    # model into the collection's metadata, then failed on upsert (no "dense" vector) with a traceback.
    client = QdrantClient(location=":memory:")
    client.create_collection(cfg.collection, vectors_config=models.VectorParams(size=768, distance=models.Distance.DOT))
    client.upsert(cfg.collection, points=[models.PointStruct(id=1, vector=[0.1] * 768, payload={"x": 1})])
    backend = KeepOpen(QdrantBackend(client, cfg.collection, location="http://qdrant:6333"))

    with pytest.raises(IndexMismatchError, match=r"collection 'policies' at http://qdrant:6333 was not made by"):
        PolicyIndex.open(cfg, create=create, embedder=embedder, backend=backend)  # type: ignore[arg-type]

    assert not client.get_collection(cfg.collection).config.metadata  # left as it was
    client.close()


def test_an_empty_collection_shaped_as_policypal_makes_it_is_adopted(cfg: RetrievalConfig, embedder: Embedder) -> None:
    client = QdrantClient(location=":memory:")
    client.create_collection(
        cfg.collection,
        vectors_config={"dense": models.VectorParams(size=384, distance=models.Distance.COSINE)},
        sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)},
    )
    backend = QdrantBackend(client, cfg.collection)

    with PolicyIndex.open(cfg, create=True, embedder=embedder, backend=backend) as index:
        assert index.count() == 0
        assert client.get_collection(cfg.collection).config.metadata  # stamped with the model now
