"""The eval report: per-task verdicts, the run distributions, and budgets suggested from measurement.

A report is a plain JSON-ready dict (``--json`` writes it, ``--compare`` reads an earlier one back).
Distributions are over runs (every turn of every task is one run, as budgets are per run): median
and p95 (nearest rank) of steps, tokens, cost and seconds, for all runs and for the runs of tasks
that passed. Suggested budgets are the passing runs' p95 plus a margin, rounded up.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.agent import GUARDS
from bot.evaluation.checks import Observed
from bot.evaluation.runner import EvalRun, TaskResult

REPORT_VERSION = 1
MARGIN = 0.25  # suggested budget = p95 of passing runs x (1 + MARGIN), rounded up
METRICS = ("steps", "tokens", "cost_usd", "seconds")
STATS = ("median", "p95")  # of each metric
TOKEN_STEP = 1_000  # suggested token budgets round up to this
COST_STEP = 0.001


def build_report(run: EvalRun, *, tasks_file: str = "") -> dict[str, Any]:
    """The whole report of ``run`` as JSON-ready data."""
    results = run.results
    passed = [r for r in results if r.passed]
    every_run = [o for r in results for o in r.runs]
    passing_runs = [o for r in passed for o in r.runs]
    return {
        "version": REPORT_VERSION,
        "tasks_file": tasks_file,
        "model": run.model,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(run.seconds, 2),
        "summary": {
            "tasks": len(results),
            "passed": len(passed),
            "success_rate": round(len(passed) / len(results), 4) if results else 0.0,
            "runs": len(every_run),
        },
        "metrics": {"all": distribution(every_run), "successful": distribution(passing_runs)},
        "reasons": dict(Counter(o.reason for o in every_run).most_common()),
        "guards": {guard: sum(o.guards.count(guard) for o in every_run) for guard in _guard_names(every_run)},
        "tool_errors": sum(o.tool_errors for o in every_run),
        "budgets": suggested_budgets(run, passing_runs),
        "tasks": [_task_json(r) for r in results],
    }


def distribution(runs: Sequence[Observed]) -> dict[str, dict[str, float] | None]:
    """Median and p95 of each metric over ``runs`` (None for a metric when there are no runs)."""
    values = {
        "steps": [float(o.steps) for o in runs],
        "tokens": [float(o.tokens) for o in runs],
        "cost_usd": [o.cost_usd for o in runs],
        "seconds": [o.latency_ms / 1000 for o in runs],
    }
    return {name: _summary(values[name]) for name in METRICS}


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest rank: the smallest value at least ``share`` of the values are at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def suggested_budgets(run: EvalRun, passing: Sequence[Observed]) -> dict[str, dict[str, float | None]]:
    """Each configured budget beside the passing runs' p95 and the budget that p95 suggests."""
    budgets = run.budgets
    configured = {
        "max_steps": float(budgets.max_steps),
        "max_tokens": float(budgets.max_tokens),
        "deadline_s": budgets.deadline_s,
        "max_cost_usd": budgets.max_cost_usd,
    }
    measured = distribution(passing)
    sources = {"max_steps": "steps", "max_tokens": "tokens", "deadline_s": "seconds", "max_cost_usd": "cost_usd"}
    table: dict[str, dict[str, float | None]] = {}
    for budget, metric in sources.items():
        summary = measured[metric]
        p95 = summary["p95"] if summary else None
        table[budget] = {"configured": configured[budget], "p95": p95, "suggested": _suggest(budget, p95)}
    return table


def _suggest(budget: str, p95: float | None) -> float | None:
    """p95 plus the margin, rounded up to a budget one would write down; None when nothing was measured."""
    if p95 is None or p95 <= 0:
        return None
    wanted = p95 * (1 + MARGIN)
    if budget == "max_tokens":
        return float(math.ceil(wanted / TOKEN_STEP) * TOKEN_STEP)
    if budget == "max_cost_usd":
        return round(math.ceil(wanted / COST_STEP) * COST_STEP, 6)
    return float(math.ceil(wanted - 1e-9))  # steps and seconds: whole numbers


def _summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": round(statistics.median(values), 6), "p95": round(percentile(values, 0.95), 6)}


def _guard_names(runs: Sequence[Observed]) -> list[str]:
    """The loop's guards in their order, then any other a trace names (a newer release's)."""
    fired = {guard for o in runs for guard in o.guards}
    return [*GUARDS, *sorted(fired - set(GUARDS))]


def _task_json(result: TaskResult) -> dict[str, Any]:
    last = result.last
    data: dict[str, Any] = {
        "id": result.task.id,
        "line": result.task.line,
        "passed": result.passed,
        "reason": last.reason if last else None,
        "steps": last.steps if last else 0,
        "tokens": last.tokens if last else 0,
        "cost_usd": round(last.cost_usd, 6) if last else 0.0,
        "seconds": round(last.latency_ms / 1000, 3) if last else 0.0,
        "answer": last.text if last else None,
        "citations": [c.label() for c in last.citations] if last else [],
        "ticket": last.ticket if last else None,
        "tools": list(last.tools) if last else [],
        "guards": list(last.guards) if last else [],
        "run_ids": [o.run_id for o in result.runs],
        "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in result.checks],
    }
    if result.error is not None:
        data["error"] = result.error
    return data


def write_report(report: dict[str, Any], path: Path) -> None:
    """``report`` as strict JSON (an infinite budget is null: ``Infinity`` breaks other parsers) at ``path``.

    Missing folders are made, as ``--json reports/nightly.json`` would otherwise fail after the whole run.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_finite(report), indent=2, ensure_ascii=False, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float (a budget set to ``inf``) made None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
