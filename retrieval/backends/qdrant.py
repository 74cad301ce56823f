"""A Qdrant server (POLICYPAL_QDRANT_URL) through qdrant-client: the backend many replicas share.

The model and dimension live in the collection's metadata; a collection without it (another tool's,
on a shared server) is used only when empty and shaped as PolicyPal makes it, never stamped and mixed.
Tests drive this same class with qdrant-client's local mode (``QdrantClient(location=":memory:")``),
which speaks the server's API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qdrant_client import QdrantClient, models

from retrieval.backends.base import (
    DENSE,
    KEYWORD_FIELDS,
    RANKING_FIELDS,
    SCROLL_PAGE,
    SPARSE,
    STORED_DOC_FIELDS,
    Hit,
    IndexMeta,
    IndexPoint,
    Rankings,
    StoredDoc,
    audience_values,
    collect_stored_docs,
)
from retrieval.embedding import Vectors
from retrieval.errors import IndexMismatchError, IndexMissingError, PolicyIndexError
from retrieval.types import SearchFilter

META_KEY = "policypal"


class QdrantBackend:
    """IndexBackend on one collection of a Qdrant server (or qdrant-client local mode in tests)."""

    def __init__(self, client: QdrantClient, collection: str, *, location: str = "qdrant") -> None:
        self.location = location
        self._client = client
        self._collection = collection

    @classmethod
    def connect(cls, url: str, api_key: str | None, collection: str, *, create: bool) -> QdrantBackend:
        """Connect to a server; without create, a missing collection is an IndexMissingError."""
        # The version probe would only add a warning before our own error when the server is down.
        client = QdrantClient(url=url, api_key=api_key, check_compatibility=False)
        backend = cls(client, collection, location=f"{url} (collection {collection!r})")
        try:
            exists = client.collection_exists(collection)
        except Exception as exc:  # connection refused, DNS, TLS, auth: all mean the same to the user
            raise PolicyIndexError(f"Cannot reach the Qdrant server at {url}: {exc}") from exc
        if not create and not exists:
            raise IndexMissingError(
                f"No collection {collection!r} on {url} yet: run `policypal index PATH...` first."
            )
        return backend

    def read_meta(self) -> IndexMeta | None:
        if not self._client.collection_exists(self._collection):
            return None
        config = self._client.get_collection(self._collection).config
        metadata = config.metadata or {}
        if META_KEY in metadata:
            return IndexMeta.from_dict(metadata[META_KEY])
        if self._dense_size(config) is None or self.count():
            raise self._foreign()
        return None

    def create(self, meta: IndexMeta) -> None:
        if not self._client.collection_exists(self._collection):
            self._client.create_collection(
                self._collection,
                vectors_config={DENSE: models.VectorParams(size=meta.dimension, distance=models.Distance.COSINE)},
                sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
                metadata={META_KEY: meta.as_dict()},
            )
            self._create_payload_indexes()
        else:  # empty and shaped as ours (read_meta checked): adopted if its dimension fits
            if self._dense_size(self._client.get_collection(self._collection).config) != meta.dimension:
                raise self._foreign()
            self._client.update_collection(self._collection, metadata={META_KEY: meta.as_dict()})

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        self._client.upsert(self._collection, points=[_point(p) for p in points], wait=True)

    def delete_chunks(self, doc_id: str, from_position: int = 0) -> None:
        conditions: list[models.Condition] = [
            models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id))
        ]
        if from_position > 0:
            conditions.append(models.FieldCondition(key="position", range=models.Range(gte=from_position)))
        selector = models.FilterSelector(filter=models.Filter(must=conditions))
        self._client.delete(self._collection, points_selector=selector, wait=True)

    def stored_docs(self) -> dict[str, StoredDoc]:
        docs: dict[str, StoredDoc] = {}
        offset: Any = None
        while True:
            records, offset = self._client.scroll(
                self._collection, limit=SCROLL_PAGE, offset=offset, with_payload=STORED_DOC_FIELDS
            )
            collect_stored_docs([r.payload or {} for r in records], docs)
            if offset is None:
                return docs

    def count(self) -> int:
        return self._client.count(self._collection, exact=True).count

    def rankings(self, query: Vectors, *, candidates: int, search_filter: SearchFilter | None) -> Rankings:
        flt = _filter(search_filter)
        sparse = models.SparseVector(indices=query.sparse_indices, values=query.sparse_values)
        requests = [
            models.QueryRequest(query=q, using=name, filter=flt, limit=candidates, with_payload=RANKING_FIELDS)
            for q, name in ((query.dense, DENSE), (sparse, SPARSE))
        ]
        dense_hits, sparse_hits = self._client.query_batch_points(self._collection, requests=requests)
        return Rankings([_hit(p) for p in dense_hits.points], [_hit(p) for p in sparse_hits.points])

    def payloads(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        records = self._client.retrieve(self._collection, ids=list(ids), with_payload=True, with_vectors=False)
        return {str(record.id): dict(record.payload or {}) for record in records}

    def close(self) -> None:
        self._client.close()

    @staticmethod
    def _dense_size(config: models.CollectionConfig) -> int | None:
        """The size of our dense vector when the collection has PolicyPal's two vectors, else None."""
        vectors, sparse = config.params.vectors, config.params.sparse_vectors or {}
        dense = vectors.get(DENSE) if isinstance(vectors, dict) else None
        if dense is None or dense.distance != models.Distance.COSINE or SPARSE not in sparse:
            return None
        return dense.size

    def _foreign(self) -> IndexMismatchError:
        return IndexMismatchError(
            f"The collection {self._collection!r} at {self.location} was not made by `policypal index` (it has no "
            "PolicyPal metadata, and points or vectors of another shape): set POLICYPAL_COLLECTION to another name."
        )

    def _create_payload_indexes(self) -> None:
        for name in KEYWORD_FIELDS:
            self._client.create_payload_index(self._collection, name, models.PayloadSchemaType.KEYWORD)
        self._client.create_payload_index(self._collection, "position", models.PayloadSchemaType.INTEGER)


def _point(point: IndexPoint) -> models.PointStruct:
    sparse = models.SparseVector(indices=point.vectors.sparse_indices, values=point.vectors.sparse_values)
    return models.PointStruct(id=point.id, vector={DENSE: point.vectors.dense, SPARSE: sparse},
                              payload=point.payload)


def _filter(search_filter: SearchFilter | None) -> models.Filter | None:
    if search_filter is None:
        return None
    must: list[models.Condition] = []
    if search_filter.section:
        must.append(models.FieldCondition(key="section", match=models.MatchValue(value=search_filter.section)))
    if search_filter.groups is not None:
        visible = models.FieldCondition(
            key="audience", match=models.MatchAny(any=audience_values(search_filter.groups))
        )
        empty = models.IsEmptyCondition(is_empty=models.PayloadField(key="audience"))
        must.append(models.Filter(should=[visible, empty]))
    return models.Filter(must=must) if must else None


def _hit(point: models.ScoredPoint) -> Hit:
    return Hit(id=str(point.id), score=float(point.score), payload=dict(point.payload or {}))
