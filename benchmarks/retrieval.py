"""Retrieval quality, indexing cost, query latency and memory, against the targets in the issue.

    python benchmarks/retrieval.py [--quick] [--corpora DIR] [--dump-signals FILE]

--corpora DIR (default: $POLICYPAL_CORPORA) is the folder holding the real handbooks, 18f-handbook/ and
sourcegraph-handbook/; a full run needs it, --quick does not.

--dump-signals writes a line per labelled question (floor signals, the first relevant rank at section
and doc level, the top three hits): the place to start reading misses.

Quality: each labelled question (examples/questions.jsonl, and benchmarks/labels/*.jsonl for the real
corpora under --corpora) is answered with k=10. A hit is relevant when its
document is a labelled one and the label's heading is contained in the hit's heading path (section
level), or when only the document matches (doc level); recall@k counts questions with any relevant
hit in the top k, MRR uses the first relevant rank (0 past 10). "Dense" ranks by the dense vector
alone, "hybrid" is what search returns (score fusion of dense and BM25, retrieval/fusion.py), and
"rrf" is Qdrant's weighted reciprocal rank fusion (k 5, dense 1.5, BM25 1: the fusion search used
before) of the same two rankings, for comparison. The floor rows say how many unanswerable
questions get no passage at all, and how many answerable ones still get passages.

Cost: every phase runs in its own process, so peak RSS (ru_maxrss) is that phase's alone. Indexing
splits time into the embedding model's (including its load) and everything else (reading and
parsing files, chunking, BM25, storing). Re-index is a fresh `policypal index DIR` process on an
unchanged corpus, start-up included.

Latency: ~1,000 and ~10,000-chunk indexes are synthesised from the real corpora's stored points
(dense and sparse vectors and payloads): real points first, then copies whose dense vectors get
Gaussian noise (sigma 0.02 per dimension, renormalised) under new ids, until the size is reached.
The labelled questions are the queries: end-to-end is PolicyIndex.search (embedding included),
engine is the two rankings, their fusion and the payload fetch on precomputed vectors. --quick uses
the sample corpus only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from retrieval import (  # noqa: E402
    CANDIDATES,
    SPARSE_MODEL,
    Embedder,
    PolicyIndex,
    Retrieval,
    RetrievalConfig,
    Vectors,
    fuse,
)
from retrieval.backends import SCROLL_PAGE, EdgeBackend, Hit, IndexMeta, IndexPoint, point_id  # noqa: E402

CORPORA_VAR = "POLICYPAL_CORPORA"
SAMPLE = ("sample", REPO / "bot" / "sample_policies", REPO / "examples" / "questions.jsonl")
REAL = (  # (name, docs folder under --corpora, labels)
    ("18f", Path("18f-handbook") / "docs", REPO / "benchmarks" / "labels" / "18f.jsonl"),
    ("sourcegraph", Path("sourcegraph-handbook") / "docs", REPO / "benchmarks" / "labels" / "sourcegraph.jsonl"),
)
SIZES = (1_000, 10_000)
NOISE = 0.02
RELEVANCE_TARGETS = {"recall@5": 0.97, "mrr": 0.94}  # hybrid, on every labelled corpus
TARGETS = {
    "hybrid recall@5 (every corpus)": ">= 0.97",
    "hybrid MRR (every corpus)": ">= 0.94",
    "embedding share of indexing": ">= 90%",
    "unchanged re-index of 18F": "< 3 s",
    "peak RSS while indexing": "< 1.5 GB",
    "query p50 at 10,000 chunks": "< 20 ms",
}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def config(data_dir: Path) -> RetrievalConfig:
    """The layout `policypal` uses for POLICYPAL_DATA_DIR=data_dir, so the CLI can re-index it."""
    return RetrievalConfig(qdrant_path=data_dir / "qdrant", model_cache_dir=data_dir / "models")


# -- phases (each runs in its own process) ---------------------------------------------------------


def phase_index(data_dir: Path, corpus: Path) -> dict[str, Any]:
    """Index a corpus from scratch: time split and peak memory."""
    cfg = config(data_dir)
    started = time.perf_counter()
    embedder = Embedder.from_config(cfg).load()
    load_seconds = time.perf_counter() - started
    with PolicyIndex.open(cfg, create=True, embedder=embedder) as index:
        report = index.index_paths([corpus])
        chunks = index.count()
    total = time.perf_counter() - started
    embedding = report.embed_seconds + load_seconds
    return {
        "documents": report.documents, "failures": len(report.failures), "chunks": chunks,
        "seconds": total, "embed_seconds": embedding, "model_load_seconds": load_seconds,
        "embed_share": embedding / total, "peak_rss_mb": peak_rss_mb(),
    }


def phase_evaluate(data_dir: Path, labels: Path, dump: Path | None) -> dict[str, Any]:
    """Answer every labelled question: ranking metrics for dense and hybrid, and the floor."""
    questions = [json.loads(line) for line in labels.read_text().splitlines() if line.strip()]
    signals = []
    scores: dict[str, list[float | None]] = {}
    with PolicyIndex.open(config(data_dir)) as index:
        for question in questions:
            retrieval = index.retrieve(question["question"], k=10)
            passes = index.floor.admits(retrieval)
            signals.append(_signals(question, retrieval, passes))
            if question["answerable"]:
                rankings = (("dense", retrieval.dense[:10]), ("hybrid", retrieval.fused),
                            ("rrf", _rrf(retrieval.dense, retrieval.sparse)[:10]))
                for mode, hits in rankings:
                    for level in ("section", "doc"):
                        scores.setdefault(f"{mode}/{level}", []).append(_first_rank(hits, question["answers"], level))
                scores.setdefault("kept", []).append(float(passes))
            else:
                scores.setdefault("refused", []).append(float(not passes))
    if dump:
        with dump.open("a") as out:
            out.writelines(json.dumps(row) + "\n" for row in signals)
    metrics = {name: _ranking(ranks) for name, ranks in scores.items() if "/" in name}
    return {
        "questions": len(questions), "metrics": metrics,
        "unanswerable_refused": _mean(scores.get("refused", [])),
        "answerable_kept": _mean(scores.get("kept", [])),
        "peak_rss_mb": peak_rss_mb(),
    }


def phase_synthesise(sources: list[Path], out_dir: Path, size: int) -> dict[str, Any]:
    """An index of `size` points: real stored points first, then noisy copies of them."""
    import numpy as np

    real = [point for source in sources for point in _stored_points(source)]
    rng = np.random.default_rng(7)
    cfg = config(out_dir)
    backend = EdgeBackend.open(cfg.qdrant_path, cfg.collection, create=True)
    dimension = len(real[0].vectors.dense)
    backend.create(IndexMeta(cfg.embedding_model, dimension, SPARSE_MODEL))
    batch: list[IndexPoint] = []
    for n in range(size):
        batch.append(real[n] if n < len(real) else _noisy_copy(real[n % len(real)], n, rng))
        if len(batch) == 500:
            backend.upsert(batch)
            batch = []
    if batch:
        backend.upsert(batch)
    count = backend.count()
    backend.close()
    return {"points": count, "real_points": min(len(real), size)}


def phase_serve(data_dir: Path, labels: list[Path], rounds: int) -> dict[str, Any]:
    """Query latency (end-to-end and engine only) and the serving process's peak memory."""
    questions = [json.loads(line)["question"] for path in labels for line in path.read_text().splitlines() if line]
    with PolicyIndex.open(config(data_dir)) as index:
        index.search("warm-up question about leave")
        vectors = [index.embedder.embed_query(q) for q in questions]
        end_to_end = _timed(lambda q: index.search(q, k=5), questions * rounds)
        backend = index._context.backend
        engine = _timed(lambda v: _engine_search(backend, v), vectors * rounds)
        chunks = index.count()
    return {"chunks": chunks, "queries": len(end_to_end), "end_to_end_ms": _percentiles(end_to_end),
            "engine_ms": _percentiles(engine), "peak_rss_mb": peak_rss_mb()}


def phase_serve_qdrant_client(data_dir: Path, labels: list[Path]) -> dict[str, Any]:
    """The same engine work on qdrant-client's local mode (pure Python), for comparison."""
    from qdrant_client import QdrantClient

    from retrieval.backends import QdrantBackend

    cfg = config(data_dir)
    points = _stored_points(data_dir)
    backend = QdrantBackend(QdrantClient(path=str(data_dir / "qdrant-client")), cfg.collection)
    backend.create(IndexMeta(cfg.embedding_model, len(points[0].vectors.dense), SPARSE_MODEL))
    for start in range(0, len(points), 500):
        backend.upsert(points[start : start + 500])
    embedder = Embedder.from_config(cfg)
    questions = [json.loads(line)["question"] for path in labels for line in path.read_text().splitlines() if line]
    vectors = [embedder.embed_query(q) for q in questions]
    engine = _timed(lambda v: _engine_search(backend, v), vectors)
    backend.close()
    return {"chunks": len(points), "engine_ms": _percentiles(engine)}


# -- helpers -------------------------------------------------------------------------------------


def _engine_search(backend: Any, vectors: Vectors) -> list[Hit]:
    """What PolicyIndex.retrieve asks of the engine for k=5, without the query embedding."""
    rankings = backend.rankings(vectors, candidates=CANDIDATES, search_filter=None)
    top = fuse(rankings.dense, rankings.sparse, limit=5)
    payloads = backend.payloads([hit.id for hit in top])
    return [Hit(hit.id, hit.score, payloads[hit.id]) for hit in top]


def _rrf(
    dense: Sequence[Hit], sparse: Sequence[Hit], k: int = 5, weights: tuple[float, float] = (1.5, 1.0)
) -> list[Hit]:
    """Qdrant's weighted RRF (a point at 0-based position p scores 1 / ((p + 1) / weight + k - 1))."""
    scores: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for weight, ranking in zip(weights, (dense[:50], sparse[:50]), strict=True):
        for position, hit in enumerate(ranking):
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / ((position + 1) / weight + k - 1)
            first.setdefault(hit.id, hit)
    return [Hit(i, scores[i], first[i].payload) for i in sorted(first, key=lambda i: -scores[i])]


def _signals(question: dict[str, Any], retrieval: Retrieval, passes: bool) -> dict[str, Any]:
    return {
        "id": question["id"], "answerable": question["answerable"], "passes": passes,
        "best_dense": round(retrieval.best_dense, 4),
        "term_strength": round(retrieval.term_strength, 4),
        "section_rank": _first_rank(retrieval.fused, question["answers"], "section"),
        "doc_rank": _first_rank(retrieval.fused, question["answers"], "doc"),
        "top3": [f"{hit.payload.get('doc_id')} | {hit.payload.get('heading')}" for hit in retrieval.fused[:3]],
    }


def _first_rank(hits: Sequence[Any], answers: list[dict[str, str]], level: str) -> int | None:
    for rank, hit in enumerate(hits, start=1):
        if any(_relevant(hit.payload, answer, level) for answer in answers):
            return rank
    return None


def _relevant(payload: dict[str, Any], answer: dict[str, str], level: str) -> bool:
    if payload.get("doc_id") != answer["doc"]:
        return False
    heading = answer.get("heading")  # a label without one is satisfied by the document
    return level == "doc" or not heading or _heading_key(heading) in _heading_key(str(payload.get("heading", "")))


def _heading_key(heading: str) -> str:
    """Labels quote headings as the source writes them ("**Restricted**", "[Phishing](url)"); the index
    keeps their text only."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return " ".join(re.sub(r"[*_]", "", text).split()).casefold()


def _ranking(ranks: list[float | None]) -> dict[str, float]:
    return {
        "recall@1": _mean([r is not None and r <= 1 for r in ranks]),
        "recall@5": _mean([r is not None and r <= 5 for r in ranks]),
        "mrr": _mean([1 / r if r else 0.0 for r in ranks]),
    }


def _mean(values: Sequence[float | bool]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _timed(call: Any, inputs: Sequence[Any]) -> list[float]:
    times = []
    for item in inputs:
        started = time.perf_counter()
        call(item)
        times.append((time.perf_counter() - started) * 1000)
    return times


def _percentiles(times_ms: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(times_ms, n=20)
    return {"p50": statistics.median(times_ms), "p95": cuts[18]}


def _stored_points(data_dir: Path) -> list[IndexPoint]:
    """Every point of an index, vectors and payload included."""
    import qdrant_edge as qe

    cfg = config(data_dir)
    backend = EdgeBackend.open(cfg.qdrant_path, cfg.collection, create=False)
    shard = backend._shard
    assert shard is not None
    points, offset = [], None
    while True:
        records, offset = shard.scroll(qe.ScrollRequest(offset=offset, limit=SCROLL_PAGE, with_payload=True,
                                                        with_vector=True))
        points += [_point(record) for record in records]
        if offset is None:
            break
    backend.close()
    return points


def _point(record: Any) -> IndexPoint:
    vectors = record.vector
    sparse = vectors["bm25"]
    return IndexPoint(str(record.id), Vectors(list(vectors["dense"]), list(sparse.indices), list(sparse.values)),
                      dict(record.payload or {}))


def _noisy_copy(point: IndexPoint, n: int, rng: Any) -> IndexPoint:
    import numpy as np

    dense = np.asarray(point.vectors.dense) + rng.normal(0, NOISE, len(point.vectors.dense))
    dense /= np.linalg.norm(dense)
    doc_id = f"{point.payload.get('doc_id')}#copy{n}"
    payload = {**point.payload, "doc_id": doc_id}
    vectors = Vectors(dense.tolist(), point.vectors.sparse_indices, point.vectors.sparse_values)
    return IndexPoint(point_id(doc_id, int(point.payload.get("position", 0))), vectors, payload)


# -- orchestration -------------------------------------------------------------------------------


@dataclass
class Corpus:
    name: str
    docs: Path
    labels: Path
    data_dir: Path


def run_phase(*args: str) -> dict[str, Any]:
    """Run one phase in a fresh process and return its JSON result."""
    result = subprocess.run([sys.executable, __file__, "--phase", *args], capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if result.returncode != 0:
        raise SystemExit(f"phase {args[0]} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def reindex_seconds(corpus: Corpus) -> float:
    """Wall time of `policypal index DIR` in a fresh process on an unchanged corpus."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLICYPAL_")}
    env.update(POLICYPAL_DATA_DIR=str(corpus.data_dir), HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "adapters.cli", "index", str(corpus.docs)], cwd=corpus.data_dir,
                            env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if "unchanged" not in result.stdout or "embedded" not in result.stdout:
        raise SystemExit(f"re-index did not report unchanged documents:\n{result.stdout}\n{result.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="sample corpus only")
    parser.add_argument("--corpora", type=Path, metavar="DIR", default=os.environ.get(CORPORA_VAR) or None,
                        help=f"folder with 18f-handbook/ and sourcegraph-handbook/ (default: ${CORPORA_VAR})")
    parser.add_argument("--dump-signals", type=Path,
                        help="append per question: floor signals, first relevant ranks, top 3 hits (JSON lines)")
    parser.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(dispatch(args.phase)))
        return
    available = [SAMPLE] if args.quick else [SAMPLE, *real_corpora(parser, args.corpora)]
    work = Path(tempfile.mkdtemp(prefix="policypal-bench-"))
    try:
        report(work, available, args.quick, args.dump_signals)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def real_corpora(parser: argparse.ArgumentParser, corpora: Path | None) -> list[tuple[str, Path, Path]]:
    """The labelled handbooks under --corpora; a full run without them would report on the sample alone."""
    if corpora is None:
        parser.error(f"a full run needs the real handbooks: pass --corpora DIR or set {CORPORA_VAR} (or use --quick)")
    found = [(name, corpora / docs, labels) for name, docs, labels in REAL]
    missing = [str(docs) for _name, docs, _labels in found if not docs.is_dir()]
    if missing:
        parser.error(f"--corpora {corpora}: no {', '.join(missing)}")
    return found


def dispatch(phase: list[str]) -> dict[str, Any]:
    name, *rest = phase
    if name == "index":
        return phase_index(Path(rest[0]), Path(rest[1]))
    if name == "evaluate":
        return phase_evaluate(Path(rest[0]), Path(rest[1]), Path(rest[2]) if len(rest) > 2 else None)
    if name == "synthesise":
        return phase_synthesise([Path(p) for p in rest[2:]], Path(rest[0]), int(rest[1]))
    if name == "serve":
        return phase_serve(Path(rest[0]), [Path(p) for p in rest[2:]], int(rest[1]))
    if name == "serve-qdrant-client":
        return phase_serve_qdrant_client(Path(rest[0]), [Path(p) for p in rest[1:]])
    raise SystemExit(f"unknown phase {name}")


def report(work: Path, available: Sequence[tuple[str, Path, Path]], quick: bool, dump: Path | None) -> None:
    corpora = [Corpus(name, docs, labels, work / name) for name, docs, labels in available]
    print(f"# Retrieval benchmark ({'quick: ' if quick else ''}{', '.join(c.name for c in corpora)})\n")
    indexing = {c.name: run_phase("index", str(c.data_dir), str(c.docs)) for c in corpora}
    print_indexing(corpora, indexing)
    print_quality(corpora, dump)
    print_latency(work, corpora, quick)


def print_indexing(corpora: list[Corpus], indexing: dict[str, dict[str, Any]]) -> None:
    print("## Indexing (fresh index; embedding includes the model load)\n")
    print("| corpus | docs | chunks | total s | embedding s | other s | embedding share | chunks/s embedding | "
          "chunks/s total | peak RSS MB | unchanged re-index s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for corpus in corpora:
        row = indexing[corpus.name]
        again = reindex_seconds(corpus)
        print(f"| {corpus.name} | {row['documents']} | {row['chunks']} | {row['seconds']:.1f} | "
              f"{row['embed_seconds']:.1f} | {row['seconds'] - row['embed_seconds']:.1f} | "
              f"{row['embed_share']:.0%} | {row['chunks'] / row['embed_seconds']:.1f} | "
              f"{row['chunks'] / row['seconds']:.1f} | {row['peak_rss_mb']:.0f} | {again:.2f} |")
    print()


def print_quality(corpora: list[Corpus], dump: Path | None) -> None:
    print("## Quality (section level = doc and heading label; doc level = doc only)\n")
    print("| corpus | questions | mode | level | recall@1 | recall@5 | MRR | target (hybrid) |")
    print("|---|---|---|---|---|---|---|---|")
    floors = []
    for corpus in corpora:
        if not corpus.labels.is_file():
            continue
        extra = [str(dump)] if dump else []
        result = run_phase("evaluate", str(corpus.data_dir), str(corpus.labels), *extra)
        for name, m in result["metrics"].items():
            mode, level = name.split("/")
            print(f"| {corpus.name} | {result['questions']} | {mode} | {level} | {m['recall@1']:.3f} | "
                  f"{m['recall@5']:.3f} | {m['mrr']:.3f} | {_verdict(mode, m)} |")
        floors.append((corpus.name, result))
    print("\n| corpus | unanswerable refused (no passage) | answerable kept | peak RSS MB |")
    print("|---|---|---|---|")
    for name, result in floors:
        print(f"| {name} | {result['unanswerable_refused']:.0%} | {result['answerable_kept']:.0%} | "
              f"{result['peak_rss_mb']:.0f} |")
    print()


def _verdict(mode: str, metrics: dict[str, float]) -> str:
    if mode != "hybrid":
        return ""
    missed = [name for name, floor in RELEVANCE_TARGETS.items() if metrics[name] < floor]
    return "met" if not missed else "missed: " + ", ".join(missed)


def print_latency(work: Path, corpora: list[Corpus], quick: bool) -> None:
    labels = [str(c.labels) for c in corpora if c.labels.is_file()]
    sources = [str(c.data_dir) for c in corpora if c.name != "sample"] or [str(corpora[0].data_dir)]
    print(f"## Query latency (synthesised indexes from {', '.join(Path(s).name for s in sources)}; "
          f"queries: {len(labels)} label files)\n")
    print("| chunks | real points | queries | end-to-end p50 ms | p95 ms | engine p50 ms | p95 ms | "
          "serving peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for size in SIZES:
        out = work / f"synth-{size}"
        built = run_phase("synthesise", str(out), str(size), *sources)
        shutil.copytree(corpora[0].data_dir / "models", out / "models")
        served = run_phase("serve", str(out), "1" if quick else "3", *labels)
        e2e, engine = served["end_to_end_ms"], served["engine_ms"]
        print(f"| {served['chunks']} | {built['real_points']} | {served['queries']} | {e2e['p50']:.1f} | "
              f"{e2e['p95']:.1f} | {engine['p50']:.2f} | {engine['p95']:.2f} | {served['peak_rss_mb']:.0f} |")
        if size == SIZES[-1] and not quick:
            local = run_phase("serve-qdrant-client", str(out), *labels)
            print(f"| {local['chunks']} (qdrant-client local mode, for comparison) | | | | | "
                  f"{local['engine_ms']['p50']:.1f} | {local['engine_ms']['p95']:.1f} | |")
    print("\nTargets: " + "; ".join(f"{k} {v}" for k, v in TARGETS.items()))


if __name__ == "__main__":
    main()
