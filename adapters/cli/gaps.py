"""`policypal gaps`: questions the policies did not answer (runs that ended ``not_covered``), grouped.

One line per distinct question with how often it was asked, so a policy owner sees what the
documents are missing; no helpdesk case is opened for any of them.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from bot.config import Settings
from bot.store import KnowledgeGap, Store
from bot.unicode_text import terminal_safe

QUESTION_CHARS = 80


async def show_gaps(
    settings: Settings, *, limit: int = 20, as_json: bool = False, out: TextIO | None = None
) -> int:
    """Print the most recently asked uncovered questions (``limit`` distinct ones)."""
    store = await Store.open(settings.resolved_database_url)
    try:
        gaps = await store.runs.knowledge_gaps(limit)
    finally:
        await store.close()
    (out or sys.stdout).write(_json(gaps) if as_json else terminal_safe(_table(gaps)))
    return 0


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
