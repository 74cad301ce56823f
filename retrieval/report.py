"""What one index run did, and that account as a person reads it (the CLI prints it, the server sends it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from retrieval.types import LoadFailure

# Each list of names is summarised past this many ("… and 227 more"): a handbook's 237 file names on
# one line hide the counts. Failures are not: each is printed in full with its reason, to be acted on.
NAMES_SHOWN = 10


@dataclass
class IndexReport:
    """What one index run did, by document id; failures and duplicates by file."""

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    duplicates: list[tuple[Path, str]] = field(default_factory=list)
    failures: list[LoadFailure] = field(default_factory=list)
    notes: list[tuple[Path, str]] = field(default_factory=list)
    chunks_embedded: int = 0
    embed_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def documents(self) -> int:
        return len(self.added) + len(self.replaced) + len(self.unchanged)

    def merge(self, other: IndexReport) -> None:
        for name in ("added", "replaced", "removed", "unchanged", "duplicates", "failures", "notes"):
            getattr(self, name).extend(getattr(other, name))
        self.chunks_embedded += other.chunks_embedded
        self.embed_seconds += other.embed_seconds


def format_report(report: IndexReport, location: str) -> str:
    """The index run as a person reads it: counts, then names per outcome."""
    lines = [
        f"Indexed into {location} in {report.seconds:.1f} s "
        f"({report.chunks_embedded} chunks embedded in {report.embed_seconds:.1f} s).",
        _names("added", report.added),
        _names("replaced", report.replaced),
        _names("removed", report.removed),
        _names("unchanged (skipped)", report.unchanged),
        _names("duplicates (skipped)", [f"{path} (same as {other})" for path, other in report.duplicates]),
        f"  failed ({len(report.failures)}): skipped, each listed with its reason" if report.failures else "",
        _names("notes", [f"{path}: {note}" for path, note in report.notes]),
    ]
    return "\n".join(line for line in lines if line) + "\n"


def _names(label: str, names: Sequence[str]) -> str:
    if not names:
        return ""
    shown = list(names[:NAMES_SHOWN])
    more = f", … and {len(names) - len(shown)} more" if len(shown) < len(names) else ""
    return f"  {label} ({len(names)}): {', '.join(shown)}{more}"
