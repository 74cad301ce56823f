"""Score fusion: normalised per list, weighted, and a passage one list did not return counts zero there."""

from __future__ import annotations

import pytest

from retrieval import fuse
from retrieval.backends import Hit
from retrieval.fusion import SPARSE_WEIGHT


def hits(*scored: tuple[str, float]) -> list[Hit]:
    return [Hit(point, score, {"doc_id": point}) for point, score in scored]


def test_a_wide_lead_counts_more_than_a_narrow_one() -> None:
    # Dense barely prefers a over b; BM25 prefers b by a mile. Rank fusion would tie them.
    dense = hits(("a", 0.70), ("b", 0.69), ("c", 0.40))
    sparse = hits(("b", 30.0), ("a", 5.0), ("c", 4.0))
    fused = fuse(dense, sparse, limit=3)
    assert [hit.id for hit in fused] == ["b", "a", "c"]


def test_scores_are_the_weighted_sum_of_min_max_normalised_scores() -> None:
    dense = hits(("a", 0.9), ("b", 0.5), ("c", 0.4))
    sparse = hits(("c", 12.0), ("b", 2.0))
    by_id = {hit.id: hit.score for hit in fuse(dense, sparse, limit=3)}
    dense_weight = 1 - SPARSE_WEIGHT
    assert by_id["a"] == pytest.approx(dense_weight * 1.0)  # best dense, absent from BM25
    assert by_id["b"] == pytest.approx(dense_weight * 0.2 + SPARSE_WEIGHT * 0.0)
    assert by_id["c"] == pytest.approx(dense_weight * 0.0 + SPARSE_WEIGHT * 1.0)


def test_a_passage_only_bm25_found_still_makes_the_top() -> None:
    # An error code the dense model misses: BM25 alone finds it, ahead of dense's also-rans.
    dense = hits(("a", 0.31), ("b", 0.30), ("c", 0.30))
    sparse = hits(("code", 25.0), ("b", 1.0))
    assert [hit.id for hit in fuse(dense, sparse, limit=2)] == ["a", "code"]
    assert fuse(dense, sparse, limit=1, sparse_weight=0.6)[0].id == "code"


def test_a_single_or_all_tied_list_counts_as_best() -> None:
    fused = fuse(hits(("a", 0.5), ("b", 0.5)), hits(("b", 3.0)), limit=2)
    assert [hit.id for hit in fused] == ["b", "a"]
    assert fused[0].score == pytest.approx(1.0)


def test_ties_keep_dense_order_and_limit_cuts() -> None:
    dense = hits(("a", 0.8), ("b", 0.8), ("c", 0.8), ("d", 0.8))
    assert [hit.id for hit in fuse(dense, [], limit=2)] == ["a", "b"]


def test_nothing_in_nothing_out() -> None:
    assert fuse([], [], limit=5) == []
