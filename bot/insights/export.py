"""Knowledge gaps as CSV for policy owners, who open it in a spreadsheet: no cell may run as a formula."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from bot.insights.gaps import GapGroup, GapQuestion, reason_counts

CSV_COLUMNS = ("group", "question", "count", "askers", "last_asked", "reasons", "example_runs")
# A spreadsheet reads a cell starting with one of these as a formula (OWASP's CSV injection list).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def gaps_csv(groups: Iterable[GapGroup]) -> str:
    """One row per question under its group's label (repeated); reasons read "not_covered: 2; not_helpful: 1"."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for group in groups:
        writer.writerows(_row(group.label, question) for question in group.questions)
    return out.getvalue()


def _row(label: str, question: GapQuestion) -> list[str | int]:
    reasons = "; ".join(f"{reason}: {n}" for reason, n in reason_counts(question.reasons))
    return [
        _cell(label),
        _cell(question.text),
        question.count,
        question.askers,
        question.last_asked.isoformat(timespec="seconds"),
        _cell(reasons),
        _cell(" ".join(question.run_ids)),
    ]


def _cell(text: str) -> str:
    """Text a spreadsheet shows as text: a leading apostrophe before anything that would start a formula."""
    return "'" + text if text.startswith(_FORMULA_STARTS) else text
