"""How ranking methods and relevance floors do on corpora they were not fitted on.

    python benchmarks/ranking.py --corpora DIR --data-dir DIR [--json FILE]

Each labelled corpus (the sample policies with examples/questions.jsonl, and the 18F and Sourcegraph
handbooks under --corpora with benchmarks/labels/*.jsonl) is indexed into --data-dir/<corpus> the
way `policypal index` indexes it (kept between runs: an unchanged corpus is not embedded again).
Every labelled question is asked once; its dense and BM25 candidate rankings (100 each) are what
every method below fuses, so methods differ only in how they combine the same two lists.

Methods: "plain RRF" is the untuned baseline (reciprocal rank fusion, k 60, both retrievers weighted
1: Qdrant's prefetch + RRF defaults); "rrf" fits k and the dense weight; "score sum" fits the BM25
weight of the min-max normalised score sum (retrieval/fusion.py). A fitted method is fitted on one
corpus's train split (doc-level MRR, ties to the fewer-knob setting) and measured on every corpus's
test split; the table has a row per (fitted on, measured on). Metrics are at document level (a hit
from a labelled document) and section level (its heading too): recall@5 and MRR (first relevant rank,
0 past 10). Each test row's MRR difference from plain RRF comes with its 95% interval (paired
bootstrap over the split's questions): on about 30 questions, one that spans 0 is no evidence either way.

Floors: the product's relevance floor (retrieval/search.py RelevanceFloor) and the answerable
questions it leaves with no passage (train and test), with the unanswerable ones it refuses.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.retrieval import REAL, SAMPLE, _first_rank, _ranking, config  # noqa: E402
from retrieval import PolicyIndex, RelevanceFloor, Retrieval, fuse  # noqa: E402
from retrieval.backends import Hit  # noqa: E402

Fusion = Callable[[Sequence[Hit], Sequence[Hit]], list[Hit]]


@dataclass
class Asked:
    """One labelled question with what the index returned for it, before any fusion."""

    question: dict[str, Any]
    retrieval: Retrieval

    @property
    def split(self) -> str:
        return str(self.question.get("split", "train"))


def rrf(k: float, dense_weight: float = 1.0) -> Fusion:
    """Reciprocal rank fusion: a hit at 1-based rank r in a list scores weight / (k + r)."""

    def fused(dense: Sequence[Hit], sparse: Sequence[Hit]) -> list[Hit]:
        scores: dict[str, float] = {}
        first: dict[str, Hit] = {}
        for weight, ranking in ((dense_weight, dense), (1.0, sparse)):
            for rank, hit in enumerate(ranking, start=1):
                scores[hit.id] = scores.get(hit.id, 0.0) + weight / (k + rank)
                first.setdefault(hit.id, hit)
        return [Hit(i, scores[i], first[i].payload) for i in sorted(first, key=lambda i: -scores[i])][:10]

    return fused


def score_sum(sparse_weight: float) -> Fusion:
    def fused(dense: Sequence[Hit], sparse: Sequence[Hit]) -> list[Hit]:
        return fuse(dense, sparse, limit=10, sparse_weight=sparse_weight)

    return fused


def z_sum(sparse_weight: float) -> Fusion:
    """Each list's scores as z-scores over its own candidates (shifted so its last counts 0), summed."""

    def fused(dense: Sequence[Hit], sparse: Sequence[Hit]) -> list[Hit]:
        scores: dict[str, float] = {}
        first: dict[str, Hit] = {}
        for weight, ranking in ((1.0 - sparse_weight, dense), (sparse_weight, sparse)):
            values = [hit.score for hit in ranking]
            if len(values) < 2:
                continue
            spread = statistics.pstdev(values) or 1.0
            for hit in ranking:
                scores[hit.id] = scores.get(hit.id, 0.0) + weight * (hit.score - values[-1]) / spread
                first.setdefault(hit.id, hit)
        return [Hit(i, scores[i], first[i].payload) for i in sorted(first, key=lambda i: -scores[i])][:10]

    return fused


FAMILIES: dict[str, list[tuple[str, Fusion]]] = {  # settings in order of preference: fewer knobs moved first
    "rrf": [(f"k {k:g}, dense x{w:g}", rrf(k, w)) for w in (1.0, 1.5, 2.0) for k in (60, 30, 10, 5, 2)],
    "score sum": [(f"BM25 {w:g}", score_sum(w)) for w in (0.3, 0.2, 0.4, 0.1, 0.5)],
    "z-score sum": [(f"BM25 {w:g}", z_sum(w)) for w in (0.5, 0.4, 0.3, 0.2, 0.1)],
}
PLAIN_RRF = rrf(60)


def measure(asked: Sequence[Asked], fusion: Fusion) -> dict[str, float]:
    """Doc- and section-level recall@5 and MRR of one fusion over the answerable questions."""
    out: dict[str, float] = {"n": 0}
    ranks: dict[str, list[float | None]] = {"doc": [], "section": []}
    for item in asked:
        if not item.question["answerable"]:
            continue
        hits = fusion(item.retrieval.dense, item.retrieval.sparse)
        for level in ranks:
            ranks[level].append(_first_rank(hits, item.question["answers"], level))
    for level, values in ranks.items():
        metrics = _ranking(values)
        out[f"{level} R@5"], out[f"{level} MRR"] = metrics["recall@5"], metrics["mrr"]
    out["n"] = len(ranks["doc"])
    return out


def reciprocal_ranks(asked: Sequence[Asked], fusion: Fusion) -> list[float]:
    """1/rank of the first hit from a labelled document (0 past 10), per answerable question."""
    ranks = []
    for item in asked:
        if item.question["answerable"]:
            rank = _first_rank(fusion(item.retrieval.dense, item.retrieval.sparse), item.question["answers"], "doc")
            ranks.append(1 / rank if rank else 0.0)
    return ranks


def paired_interval(ours: Sequence[float], base: Sequence[float], *, draws: int = 2000) -> tuple[float, float]:
    """95% interval of mean(ours - base) over the same questions, by paired bootstrap.

    A test split of 30 questions moves MRR by 0.02-0.03 when one answer moves from rank 1 to 3, so a
    difference is read with its interval: one that spans 0 is not evidence either way. Seeded, so a
    rerun prints the same interval.
    """
    differences = [a - b for a, b in zip(ours, base, strict=True)]
    if not differences:
        return (0.0, 0.0)
    pick = random.Random(0)
    means = sorted(statistics.fmean(pick.choices(differences, k=len(differences))) for _ in range(draws))
    return (means[int(0.025 * draws)], means[int(0.975 * draws) - 1])


def fit(train: Sequence[Asked], family: str) -> tuple[str, Fusion]:
    """The family's setting with the best doc-level MRR on train; earlier (simpler) settings win ties."""
    best = max(FAMILIES[family], key=lambda option: round(measure(train, option[1])["doc MRR"], 4))
    return best


def ask_all(name: str, docs: Path, labels: Path, data_dir: Path) -> list[Asked]:
    target = data_dir / name
    cfg = config(target)
    with PolicyIndex.open(cfg, create=True) as index:
        report = index.index_paths([docs])
        print(f"{name}: {report.documents} documents, {index.count()} chunks", file=sys.stderr)
        questions = [json.loads(line) for line in labels.read_text().splitlines() if line.strip()]
        return [Asked(q, index.retrieve(q["question"], k=10)) for q in questions]


def floor_row(asked: Sequence[Asked], floor: RelevanceFloor) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for split in ("train", "test"):
        part = [a for a in asked if a.split == split]
        answerable = [a for a in part if a.question["answerable"]]
        dropped = [a.question["id"] for a in answerable if not floor.admits(a.retrieval)]
        unanswerable = [a for a in part if not a.question["answerable"]]
        row[split] = {
            "answerable": len(answerable), "dropped": len(dropped), "dropped_ids": dropped,
            "unanswerable": len(unanswerable),
            "refused": sum(not floor.admits(a.retrieval) for a in unanswerable),
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", type=Path, required=True,
                        help="folder with 18f-handbook/ and sourcegraph-handbook/")
    parser.add_argument("--data-dir", type=Path, required=True, help="indexes are kept in DIR/<corpus>")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    corpora = [SAMPLE, *((name, args.corpora / docs, labels) for name, docs, labels in REAL)]
    asked = {name: ask_all(name, docs, labels, args.data_dir) for name, docs, labels in corpora}
    result: dict[str, Any] = {"methods": [], "floor": {}}

    print("## Ranking on held-out questions (test splits; doc level, then section level)\n")
    print("| method | fitted on | setting | measured on | n | doc R@5 | doc MRR | section R@5 | section MRR |"
          " MRR vs plain RRF | 95% interval |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for measured_on, items in asked.items():
        test = [a for a in items if a.split == "test"]
        base = measure(test, PLAIN_RRF)
        base_ranks = reciprocal_ranks(test, PLAIN_RRF)
        rows = [("plain RRF", "-", "k 60, weights 1", PLAIN_RRF)]
        rows.append(("product", "-", "retrieval.fusion.fuse", score_sum(0.3)))
        for family in FAMILIES:
            for fitted_on, fit_items in asked.items():
                setting, fusion = fit([a for a in fit_items if a.split == "train"], family)
                rows.append((family, fitted_on, setting, fusion))
        for method, fitted_on, setting, fusion in rows:
            m = measure(test, fusion)
            delta = m["doc MRR"] - base["doc MRR"]
            low, high = paired_interval(reciprocal_ranks(test, fusion), base_ranks)
            print(f"| {method} | {fitted_on} | {setting} | {measured_on} | {m['n']:.0f} | {m['doc R@5']:.3f} | "
                  f"{m['doc MRR']:.3f} | {m['section R@5']:.3f} | {m['section MRR']:.3f} | {delta:+.3f} | "
                  f"{low:+.3f} to {high:+.3f} |")
            result["methods"].append({"method": method, "fitted_on": fitted_on, "setting": setting,
                                      "measured_on": measured_on, **m, "mrr_delta_interval": [low, high]})
    print("\n## Train splits (for comparison: what fitting saw)\n")
    print("| method | corpus | n | doc R@5 | doc MRR | section MRR |")
    print("|---|---|---|---|---|---|")
    for name, items in asked.items():
        train = [a for a in items if a.split == "train"]
        for method, fusion in (("plain RRF", PLAIN_RRF), ("product", score_sum(0.3))):
            m = measure(train, fusion)
            print(f"| {method} | {name} | {m['n']:.0f} | {m['doc R@5']:.3f} | {m['doc MRR']:.3f} | "
                  f"{m['section MRR']:.3f} |")

    print("\n## Relevance floor (answerable questions given no passage; unanswerable ones refused)\n")
    print("| corpus | split | answerable dropped | unanswerable refused | dropped |")
    print("|---|---|---|---|---|")
    floor = RelevanceFloor()
    for name, items in asked.items():
        row = floor_row(items, floor)
        result["floor"][name] = row
        for split, f in row.items():
            share = f["dropped"] / f["answerable"] if f["answerable"] else 0.0
            print(f"| {name} | {split} | {f['dropped']}/{f['answerable']} ({share:.1%}) | "
                  f"{f['refused']}/{f['unanswerable']} | {', '.join(f['dropped_ids'])} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
