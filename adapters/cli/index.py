"""`policypal index` and `policypal search`: printing and exit codes only; the work is in retrieval."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TextIO

from retrieval import (
    EmbeddingError,
    IndexInUseError,
    IndexMissingError,
    LoadFailure,
    Passage,
    PolicyIndex,
    PolicyIndexError,
    RetrievalConfig,
    SearchFilter,
    format_report,
    load_for_index,
)
from retrieval.backends import open_backend


def run_index(
    cfg: RetrievalConfig,
    paths: Sequence[str | Path],
    *,
    out: TextIO | None = None,
    known_groups: Collection[str] | None = None,
) -> int:
    """Index files and directories; 1 when any file failed or there was nothing to index.

    ``known_groups``: the configured groups, so a file whose audience names another fails (None: any).
    """
    out = out or sys.stdout
    started = time.perf_counter()
    loads, nothing = load_for_index(paths, known_groups=known_groups)
    if nothing:
        _print_failures([f for load in loads for f in load.report.failures])
        _print_notes([note for load in loads for note in load.report.notes])
        print(nothing, file=sys.stderr)
        return 1
    try:
        with PolicyIndex.open(cfg, create=True) as index:
            report = index.index_loads(loads, progress=sys.stderr.isatty())  # a bar in a log is noise
            location = index.location
    except (PolicyIndexError, EmbeddingError) as exc:
        print(exc, file=sys.stderr)
        return 1
    report.seconds = time.perf_counter() - started  # reading and parsing the files included
    out.write(format_report(report, location))
    _print_failures(report.failures)
    return 0 if report.ok else 1


def run_remove(cfg: RetrievalConfig, paths: Sequence[str | Path], *, out: TextIO | None = None) -> int:
    """Remove what was indexed from these paths (which may be gone); 1 when a path had nothing indexed."""
    out = out or sys.stdout
    try:
        with PolicyIndex.open(cfg) as index:
            report = index.remove_roots([Path(p) for p in paths])
            location = index.location
    except PolicyIndexError as exc:
        print(exc, file=sys.stderr)
        return 1
    out.write(format_report(report, location))
    _print_failures(report.failures)
    return 0 if report.ok else 1


def run_search(
    cfg: RetrievalConfig,
    query: str,
    *,
    k: int | None = None,
    section: str | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
) -> int:
    """Search and print passages (or one JSON array); 1 when there is no index to search."""
    out = out or sys.stdout
    search_filter = SearchFilter(section=section) if section else None
    try:
        with PolicyIndex.open(cfg) as index:
            passages = index.search(query, k=k, filter=search_filter)
    except (PolicyIndexError, EmbeddingError) as exc:
        print(exc, file=sys.stderr)
        return 1
    print_passages(passages, as_json=as_json, out=out)
    return 0


def print_passages(passages: Sequence[Passage], *, as_json: bool = False, out: TextIO | None = None) -> None:
    """What `policypal search` prints, whether it searched here or the running server searched for it."""
    out = out or sys.stdout
    if as_json:
        out.write(json.dumps([p.as_dict() for p in passages], ensure_ascii=False, indent=2) + "\n")
    else:
        out.write(format_passages(passages))


def index_if_missing(cfg: RetrievalConfig, paths: Path | Sequence[Path]) -> bool:
    """Index paths when nothing is indexed yet (first run of the terminal chat); True if it indexed."""
    roots = [paths] if isinstance(paths, Path) else list(paths)
    try:
        open_backend(cfg, create=False).close()
        return False
    except IndexInUseError:
        return False  # another process holds it, so it exists
    except IndexMissingError:
        pass
    print(f"Indexing {', '.join(map(str, roots))} (first run)...", file=sys.stderr)
    return run_index(cfg, roots, out=sys.stderr) == 0


def format_passages(passages: Sequence[Passage]) -> str:
    """Passages for a terminal: rank, title and heading, source, then the snippet."""
    if not passages:
        return "No passage in the policy index answers this closely enough.\n"
    blocks = []
    for rank, passage in enumerate(passages, start=1):
        blocks.append(
            f"{rank}. {_label(passage)}  (score {passage.score:.3f})\n"
            f"   {passage.source}\n\n{_indent(passage.text)}\n"
        )
    return "\n".join(blocks)


def _label(passage: Passage) -> str:
    """The heading path, which normally starts with the title; the title first when it does not."""
    if passage.heading.startswith(passage.title):
        return passage.heading
    return " > ".join(part for part in (passage.title, passage.heading) if part)


def _print_failures(failures: Sequence[LoadFailure]) -> None:
    for failure in failures:
        print(f"failed: {failure.path}: {failure.reason}", file=sys.stderr)


def _print_notes(notes: Sequence[tuple[Path, str]]) -> None:
    for path, note in notes:
        print(f"note: {path}: {note}", file=sys.stderr)


def _indent(text: str) -> str:
    return "\n".join(f"   {line}" if line else "" for line in text.splitlines())
