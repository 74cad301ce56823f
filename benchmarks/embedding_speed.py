"""Embedding throughput and peak memory by batch size, ONNX memory arena, length sorting and threads.

    python benchmarks/embedding_speed.py [--corpus DIR] [--limit N] [--repeats N] [--batch-sizes 1,4,...]

The chunks are the real ones: the corpus (default: the sample policies) is loaded and chunked the
way `policypal index` does it (retrieval.roots + retrieval.chunking, exact model token counts);
--limit keeps the first N chunks in reading order. Each configuration embeds all of them, dense and
BM25, through Embedder.embed_documents, in a fresh process so that its peak RSS (ru_maxrss) is its
own. "sorted" orders the chunks by token length before cutting them into batches, so a batch pads
little; "unsorted" keeps reading order, so each batch pads to its longest chunk. Threads "default"
is onnxruntime's own choice (one per core).

The machine may be shared: every configuration runs --repeats times, the rounds interleaved so a
burst of load hits all configurations alike, and the table gives the min and median chunks/s and
the highest peak RSS; the load average is printed before and after each round.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from retrieval import Embedder, RetrievalConfig, load_roots  # noqa: E402
from retrieval.chunking import chunk_document  # noqa: E402

SAMPLE = REPO / "bot" / "sample_policies"
BATCH_SIZES = (1, 4, 8, 16, 32)


@dataclass(frozen=True)
class Setting:
    """One configuration to measure."""

    batch_size: int
    memory_arena: bool
    sort_by_length: bool
    threads: int | None

    @property
    def label(self) -> str:
        return (f"| {self.batch_size} | {'on' if self.memory_arena else 'off'} | "
                f"{'sorted' if self.sort_by_length else 'unsorted'} | {self.threads or 'default'} |")


def load_chunks(corpus: Path, embedder: Embedder, limit: int | None) -> list[str]:
    """The texts `policypal index` would embed for this corpus, in reading order."""
    cfg = RetrievalConfig()
    max_tokens = min(cfg.chunk_max_tokens, embedder.max_input_tokens)
    texts = [
        chunk.text
        for load in load_roots([corpus])
        for doc in load.report.documents
        for chunk in chunk_document(doc, max_tokens=max_tokens, overlap_tokens=cfg.chunk_overlap_tokens,
                                    count_tokens=embedder.count_tokens)
    ]
    return texts[:limit] if limit else texts


def measure(setting: Setting, corpus: Path, limit: int | None, cache_dir: Path) -> dict[str, Any]:
    """Run in a worker process: embed every chunk once with this setting."""
    embedder = Embedder(RetrievalConfig().embedding_model, cache_dir, batch_size=setting.batch_size,
                        memory_arena=setting.memory_arena, threads=setting.threads).load()
    texts = load_chunks(corpus, embedder, limit)
    if setting.sort_by_length:
        texts.sort(key=embedder.count_tokens)
    started = time.perf_counter()
    for start in range(0, len(texts), setting.batch_size):
        embedder.embed_documents(texts[start : start + setting.batch_size])
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"chunks": len(texts), "seconds": seconds, "chunks_per_s": len(texts) / seconds, "peak_rss_mb": peak_mb}


def run_worker(setting: Setting, corpus: Path, limit: int | None, cache_dir: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", json.dumps(asdict(setting)), "--corpus", str(corpus),
               "--cache-dir", str(cache_dir)]
    if limit:
        command += ["--limit", str(limit)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{setting} failed:\n{result.stderr}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def load_average() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


def settings(batch_sizes: list[int]) -> list[Setting]:
    """Every combination; at batch 1 sorting changes nothing (no padding), so only unsorted runs."""
    return [
        Setting(batch, arena, sort, threads)
        for batch, arena, sort, threads in itertools.product(batch_sizes, (False, True), (False, True), (None, 2))
        if batch > 1 or not sort
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=SAMPLE, help="a folder of policies (default: the samples)")
    parser.add_argument("--limit", type=int, help="only the first N chunks, in reading order")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-sizes", default=",".join(map(str, BATCH_SIZES)))
    parser.add_argument("--only", metavar="SETTINGS",
                        help="only these, batch:arena:order:threads (e.g. 16:off:sorted:default,4:on:unsorted:2)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        setting = Setting(**json.loads(args.worker))
        print(json.dumps(measure(setting, args.corpus, args.limit, args.cache_dir)))
        return
    chosen = parse_only(args.only) if args.only else settings([int(b) for b in args.batch_sizes.split(",")])
    with tempfile.TemporaryDirectory(prefix="embedding-speed-") as work:
        results = run_rounds(chosen, args.corpus, args.limit, Path(work), args.repeats)
    print_table(results, args)


def parse_only(spec: str) -> list[Setting]:
    chosen = []
    for item in spec.split(","):
        batch, arena, sort, threads = item.split(":")
        thread_count = None if threads == "default" else int(threads)
        chosen.append(Setting(int(batch), arena == "on", sort == "sorted", thread_count))
    return chosen


def run_rounds(
    chosen: list[Setting], corpus: Path, limit: int | None, cache_dir: Path, repeats: int
) -> dict[Setting, list[dict[str, Any]]]:
    results: dict[Setting, list[dict[str, Any]]] = {setting: [] for setting in chosen}
    for round_number in range(1, repeats + 1):
        print(f"round {round_number}/{repeats}: load average {load_average()} (1/5/15 min) at start",
              file=sys.stderr, flush=True)
        for setting in chosen:
            results[setting].append(run_worker(setting, corpus, limit, cache_dir))
        print(f"round {round_number}/{repeats}: load average {load_average()} at end", file=sys.stderr, flush=True)
    return results


def print_table(results: dict[Setting, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    chunks = next(iter(results.values()))[0]["chunks"]
    subset = "the first " if args.limit else ""
    print(f"## Embedding speed: {args.corpus} ({subset}{chunks} chunks), {args.repeats} runs each, "
          f"{os.cpu_count()} cores, load average {load_average()} at the end\n")
    print("| batch | arena | order | threads | chunks/s min | chunks/s median | peak RSS MB (max) |")
    print("|---|---|---|---|---|---|---|")
    ranked = sorted(results.items(), key=lambda item: -statistics.median(r["chunks_per_s"] for r in item[1]))
    for setting, runs in ranked:
        rates = [run["chunks_per_s"] for run in runs]
        peak = max(run["peak_rss_mb"] for run in runs)
        print(f"{setting.label} {min(rates):.1f} | {statistics.median(rates):.1f} | {peak:.0f} |")


if __name__ == "__main__":
    main()
