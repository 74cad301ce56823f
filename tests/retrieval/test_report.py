"""The index report as a person reads it: counts first, every list of names bounded the same way."""

from __future__ import annotations

from pathlib import Path

from retrieval import IndexReport, LoadFailure, format_report


def names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{number:03}.md" for number in range(count)]


def test_every_list_of_names_is_cut_after_ten_with_the_count_of_the_rest() -> None:
    """The 18F handbook's first index printed `added (237): ` and all 237 names on one line."""
    report = IndexReport(
        added=names("a", 237),
        replaced=names("r", 11),
        removed=names("x", 10),
        unchanged=names("u", 30),
        duplicates=[(Path(f"copy{number}.md"), f"a{number:03}.md") for number in range(12)],
        notes=[(Path(f"n{number}.md"), "decoded as cp1252") for number in range(13)],
    )

    lines = format_report(report, "/data/qdrant").splitlines()[1:]

    assert lines[0] == f"  added (237): {', '.join(names('a', 10))}, … and 227 more"
    assert lines[1] == f"  replaced (11): {', '.join(names('r', 10))}, … and 1 more"
    assert lines[2] == f"  removed (10): {', '.join(names('x', 10))}"  # ten fit: nothing summarised
    assert lines[3].endswith("u009.md, … and 20 more")
    assert lines[4].endswith("copy9.md (same as a009.md), … and 2 more")
    assert lines[5].endswith("n9.md: decoded as cp1252, … and 3 more")
    assert len(lines) == 6


def test_failures_are_counted_in_the_report_and_never_summarised_away() -> None:
    failures = [LoadFailure(Path(f"bad{number}.pdf"), "encrypted") for number in range(40)]

    text = format_report(IndexReport(added=["a.md"], failures=failures), "/data/qdrant")

    assert "  failed (40): skipped, each listed with its reason\n" in text  # the CLI prints each, with why
    assert "more" not in text
