"""`policypal gaps`: questions the policies did not answer (runs that ended ``not_covered``), grouped.

One line per distinct question with how often it was asked, so a policy owner sees what the
documents are missing; no helpdesk case is opened for any of them. Questions that differ only in
case, spacing or trailing punctuation are one question (``bot.insights.wording_key``), asked by the
distinct people who asked it in any of those spellings.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TextIO

from bot.config import Settings
from bot.insights import wording_key
from bot.store import GapRun, KnowledgeGap, Store
from bot.types import TerminationReason
from bot.unicode_text import terminal_safe

QUESTION_CHARS = 80
EVER = datetime(1970, 1, 1, tzinfo=UTC)


async def show_gaps(
    settings: Settings, *, limit: int = 20, as_json: bool = False, out: TextIO | None = None
) -> int:
    """Print the most recently asked uncovered questions (``limit`` distinct ones)."""
    store = await Store.open(settings.resolved_database_url)
    try:
        runs = await store.reports.gap_runs(EVER)  # the newest gap runs, one row each: who asked, and how
    finally:
        await store.close()
    gaps = uncovered(runs)[:limit]
    (out or sys.stdout).write(_json(gaps) if as_json else terminal_safe(_table(gaps)))
    return 0


def uncovered(runs: Sequence[GapRun]) -> list[KnowledgeGap]:
    """The ``not_covered`` runs as one gap per wording, most recently asked first (ties: by text).

    Grouping the stored text in SQL made "Wedding leave?" and "wedding leave" two gaps, and summing
    their askers counted one person twice; here each gap counts the distinct user ids behind it.
    """
    by_key: dict[str, list[GapRun]] = {}
    for run in runs:
        if run.reason == TerminationReason.NOT_COVERED.value:
            by_key.setdefault(wording_key(run.question), []).append(run)
    gaps = sorted((_gap(asked) for asked in by_key.values()), key=lambda gap: gap.question)
    return sorted(gaps, key=lambda gap: gap.last_asked, reverse=True)


def _gap(asked: Sequence[GapRun]) -> KnowledgeGap:
    """One wording's runs; its label is the spelling asked most (ties: the most recently asked)."""
    newest_first = sorted(asked, key=lambda run: run.started_at, reverse=True)
    ((label, _),) = Counter(run.question for run in newest_first).most_common(1)
    return KnowledgeGap(
        question=label,
        count=len(asked),
        askers=len({run.user_id for run in asked}),
        first_asked=min(run.started_at for run in asked),
        last_asked=newest_first[0].started_at,
    )


def _json(gaps: list[KnowledgeGap]) -> str:
    rows = [
        {
            "question": gap.question,
            "count": gap.count,
            "askers": gap.askers,
            "first_asked": gap.first_asked.isoformat(),
            "last_asked": gap.last_asked.isoformat(),
        }
        for gap in gaps
    ]
    return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"


def _table(gaps: list[KnowledgeGap]) -> str:
    if not gaps:
        return "No uncovered questions: no run has ended not_covered.\n"
    lines = [f"{'asked':>5} {'people':>6}  {'last asked (UTC)':<16}  question"]
    for gap in gaps:
        question = " ".join(gap.question.split())
        if len(question) > QUESTION_CHARS:
            question = question[: QUESTION_CHARS - 1] + "…"
        lines.append(f"{gap.count:>5} {gap.askers:>6}  {gap.last_asked:%Y-%m-%d %H:%M}  {question}")
    return "\n".join(lines) + "\n"
