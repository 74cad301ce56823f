"""An earlier ``--json`` report read back for ``--compare``, checked for everything ``compare`` reads.

The check runs before any task does: a hand-edited or foreign file is refused at once, naming the
field, rather than failing after the whole eval ran (and taking the new report down with it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bot.evaluation.report import METRICS, STATS


class ReportFileError(ValueError):
    """An earlier report that cannot be compared with (missing, not JSON, not an eval report)."""


def load_report(path: Path) -> dict[str, Any]:
    """An earlier ``--json`` report, checked for what ``compare`` reads."""
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportFileError(f"{path}: cannot read the report: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list) or "summary" not in data:
        raise ReportFileError(f"{path}: not a `policypal eval --json` report (no summary and tasks)")
    problem = shape_problem(data)
    if problem:
        raise ReportFileError(f"{path}: not a `policypal eval --json` report: {problem}")
    return data


def shape_problem(report: dict[str, Any]) -> str:
    """The first field ``compare`` could not read in ``report``, as ``field: what is wrong``; "" if none."""
    summary = report.get("summary")
    if not isinstance(summary, dict):
        return "summary: not an object"
    if not _number_or_none(summary.get("success_rate")):
        return "summary.success_rate: not a number"
    for n, task in enumerate(report["tasks"]):
        if not isinstance(task, dict):
            return f"tasks[{n}]: not an object"
        if not isinstance(task.get("id"), str):
            return f"tasks[{n}].id: not a string"
        if not isinstance(task.get("passed"), bool):
            return f"tasks[{n}].passed: not true or false"
    reasons = report.get("reasons") or {}
    if not isinstance(reasons, dict) or not all(_count(v) for v in reasons.values()):
        return "reasons: not an object of counts"
    return _metrics_problem(report.get("metrics"))


def _metrics_problem(metrics: Any) -> str:
    if metrics is None:
        return ""
    if not isinstance(metrics, dict):
        return "metrics: not an object"
    for scope, by_metric in metrics.items():
        if by_metric is None:
            continue
        if not isinstance(by_metric, dict):
            return f"metrics.{scope}: not an object"
        for metric in METRICS:
            stats = by_metric.get(metric)
            if stats is None:
                continue
            if not isinstance(stats, dict):
                return f"metrics.{scope}.{metric}: not an object or null"
            for stat in STATS:
                if not _number_or_none(stats.get(stat)):
                    return f"metrics.{scope}.{metric}.{stat}: not a number"
    return ""


def _number_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
