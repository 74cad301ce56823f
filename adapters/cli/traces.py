"""`policypal traces`: recent runs as a table, or one run's every step."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any, TextIO

from bot.config import Settings
from bot.store import Rating, Ratings, RunRow, Store
from bot.unicode_text import terminal_safe


async def show_traces(
    settings: Settings, run_id: str | None, *, limit: int = 20, as_json: bool = False, out: TextIO = sys.stdout
) -> int:
    store = await Store.open(settings.resolved_database_url)
    try:
        if run_id is None:
            runs = await store.runs.recent(limit)
            out.write(_json([_summary(r) for r in runs]) if as_json else terminal_safe(_table(runs)))
            return 0
        run = await store.runs.get(run_id)
        if run is None:  # with --json, stdout holds JSON or nothing: a script's parser must not read this
            (sys.stderr if as_json else out).write(f"No run {run_id}.\n")
            return 1
        ratings = await store.runs.ratings(run_id)
        if as_json:
            out.write(_json({**_summary(run), "ratings": [_summary(r) for r in ratings], "steps": run.trace}))
        else:
            out.write(terminal_safe(_detail(run, Ratings.of(ratings, run.user_id))))
        return 0
    finally:
        await store.close()


def _summary(row: RunRow | Rating) -> dict[str, Any]:
    data = asdict(row)
    data.pop("trace", None)
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in data.items()}


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _table(runs: list[RunRow]) -> str:
    header = (
        f"{'run':<22} {'when (UTC)':<16} {'reason':<21} {'steps':>5} {'tokens':>7} {'cost $':>8} {'secs':>7}  question"
    )
    lines = [header]
    for r in runs:
        tokens = r.input_tokens + r.output_tokens
        lines.append(
            f"{r.id:<22} {r.started_at:%Y-%m-%d %H:%M} {r.reason or r.status:<21} {r.steps:>5} {tokens:>7} "
            f"{r.cost_usd:>8.4f} {r.latency_ms / 1000:>7.2f}  {r.question[:60]}"
        )
    return "\n".join(lines) + "\n"


def _detail(run: RunRow, ratings: Ratings) -> str:
    lines = [
        f"run {run.id}  {run.platform}  user {run.user_id}  model {run.model}",
        f"question: {run.question}",
        f"reason: {run.reason}  steps {run.steps}  tokens {run.input_tokens}+{run.output_tokens}  "
        f"cost ${run.cost_usd:.5f}  {run.latency_ms:.0f} ms",
        f"built for readers in: {', '.join(run.audience) if run.audience is not None else 'not recorded'}",
        f"feedback: {str(ratings) or 'none'}",
        "",
    ]
    for n, step in enumerate(run.trace, 1):
        lines.append(_step_line(n, step))
    return "\n".join(lines) + "\n"


def _step_line(n: int, step: dict[str, Any]) -> str:
    kind = step["kind"]
    head = f"{n:>2}. {kind:<10} {step['name']:<20} {step.get('latency_ms', 0):>8.1f} ms"
    if kind in ("model", "compaction"):
        head += f"  tokens {step.get('input_tokens', 0)}+{step.get('output_tokens', 0)}  ${step.get('cost_usd', 0):.5f}"
        head += f"  stop={step.get('stop_reason', '-')}"
    elif kind == "answer":
        head += f"  written from the result, no model call left ({step.get('stop_reason', '-')})"
    else:
        if kind == "decision":
            head += f"  {step.get('decision', '?')} by {step.get('decider', '?')}"
        head += f"  args={step.get('arguments', '')}"
        if "result_chars" in step:
            head += f"  result={step['result_chars']} chars"
        elif step.get("text"):  # a proposed write: no result yet
            head += f"  {step['text']}"
    if step.get("guard"):
        head += f"  refused by the {step['guard']} guard"
    if step.get("error"):
        head += f"  ERROR: {step['error']}"
    return head
