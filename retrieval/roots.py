"""Roots: each path given to `policypal index`, loaded on its own because it scopes what a run may remove.

A document indexed from a root is removed when a later run of that root no longer finds it; other
roots keep theirs. So the loader runs once per root, remembers which files failed (their chunks stay),
and a root from which nothing loaded at all (unmounted, mistyped) removes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from retrieval.paths import real_path
from retrieval.types import LoadFailure, LoadReport

SUPPORTED = ".md .txt .html .pdf .docx"  # named when there is nothing to index


@dataclass(frozen=True)
class RootLoad:
    """The documents loaded from one path given to `policypal index`, which scopes removals."""

    root: str
    report: LoadReport
    protected: frozenset[str] = frozenset()  # ids of files that failed to load: not "gone"
    protected_files: frozenset[str] = frozenset()  # their real paths (a front matter id is unknown)

    @property
    def removes(self) -> bool:
        """Whether what is gone from this root may be removed: not when nothing at all loaded from it.

        A root that is missing (unmounted, mistyped) or whose every file failed says nothing about
        what it holds; `policypal index --remove ROOT` removes its documents on purpose.
        """
        return bool(self.report.documents or self.report.duplicates)


def load_roots(paths: Sequence[Path], *, known_groups: Collection[str] | None = None) -> list[RootLoad]:
    """Load each path separately, so every document knows the root that scopes its removal.

    A path given twice, or inside a directory given in the same run, is loaded once, from the outer
    directory: otherwise one file would be indexed twice, or conflict with itself. ``known_groups``:
    the configured group names a front matter audience may use (``load_documents``); None: any.
    """
    from retrieval.ingest import load_documents  # PDF/DOCX/HTML parsers: only `index` pays their import

    keys = [real_path(path) for path in paths]  # never raises, even for a symlink loop
    directories = [key for key in dict.fromkeys(keys) if os.path.isdir(key)]
    loads, seen = [], set()
    for path, key in zip(paths, keys, strict=True):
        if key in seen:
            continue
        seen.add(key)
        outer = next((d for d in directories if d != key and Path(key).is_relative_to(d)), None)
        if outer is not None:
            note = f"inside {outer}, which this run indexes too: indexed from there"
            loads.append(RootLoad(key, LoadReport(notes=[(path, note)])))
        elif not os.path.lexists(path):
            loads.append(RootLoad(key, LoadReport(failures=[LoadFailure(path, "no such file or directory")])))
        else:
            report = load_documents([path], known_groups=known_groups)
            failed = frozenset(real_path(failure.path) for failure in report.failures)
            loads.append(RootLoad(key, report, _failed_ids(path, report.failures), failed))
    return loads


def load_for_index(
    paths: Sequence[str | Path], *, known_groups: Collection[str] | None = None
) -> tuple[list[RootLoad], str | None]:
    """The documents under paths, or why there is nothing to index: then the index must not be touched,
    since indexing a root with no documents would remove everything indexed from it before."""
    loads = load_roots([Path(p) for p in paths], known_groups=known_groups)
    if any(load.report.documents for load in loads):
        return loads, None
    return loads, f"No documents to index in {', '.join(map(str, paths))} (supported: {SUPPORTED})."


def _failed_ids(root: Path, failures: Sequence[LoadFailure]) -> frozenset[str]:
    """Default doc ids (paths relative to the root) of files that failed: their old chunks stay indexed."""
    if not root.is_dir():
        return frozenset()
    ids = set()
    for failure in failures:
        try:
            ids.add(failure.path.relative_to(root).as_posix())  # walked paths are root / relative, as given
        except ValueError:
            continue
    return frozenset(ids)
