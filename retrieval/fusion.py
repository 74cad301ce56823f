"""Score fusion of the dense and BM25 rankings into one.

Each retriever's candidates are min-max normalised over its own list (best 1, last 0; a passage the
list did not return counts 0 there), then summed with BM25 weighted ``sparse_weight`` and dense the
rest. Rank fusion (RRF) keeps only positions, so a passage far ahead on cosine or on rare terms
counts no more than one barely ahead; keeping the gaps lifted MRR on all three labelled corpora
(benchmarks/retrieval.py, the weight chosen on two corpora and checked on the third).
"""

from __future__ import annotations

from collections.abc import Sequence

from retrieval.backends import Hit

SPARSE_WEIGHT = 0.3
CANDIDATES = 100  # hits each retriever hands to the fusion


def fuse(dense: Sequence[Hit], sparse: Sequence[Hit], *, limit: int, sparse_weight: float = SPARSE_WEIGHT) -> list[Hit]:
    """The top `limit` of both rankings by weighted normalised score; ties keep dense order first."""
    scores: dict[str, float] = {}
    first_seen: dict[str, Hit] = {}
    for weight, ranking in ((1.0 - sparse_weight, dense), (sparse_weight, sparse)):
        for hit, normalised in zip(ranking, _normalised(ranking), strict=True):
            scores[hit.id] = scores.get(hit.id, 0.0) + weight * normalised
            first_seen.setdefault(hit.id, hit)
    order = sorted(first_seen, key=lambda point: -scores[point])  # stable: dense order breaks ties
    return [Hit(point, scores[point], first_seen[point].payload) for point in order[:limit]]


def _normalised(ranking: Sequence[Hit]) -> list[float]:
    if not ranking:
        return []
    best, last = ranking[0].score, ranking[-1].score
    if best <= last:  # one hit, or all tied: each is as good as the best
        return [1.0] * len(ranking)
    return [(hit.score - last) / (best - last) for hit in ranking]
