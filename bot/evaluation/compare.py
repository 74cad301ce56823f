"""An eval report against an earlier one: which tasks got better or worse, and how the numbers moved.

When the task files differ, the overall success rates are over different tasks, so the rate over the
tasks in both is given beside them: a dropped hard task must not read as an improvement.
"""

from __future__ import annotations

from typing import Any

from bot.evaluation.report import METRICS, STATS


def compare(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """What changed from ``old`` to ``new`` (both ``build_report`` dicts), JSON-ready."""
    was = {t["id"]: bool(t.get("passed")) for t in old.get("tasks", []) if isinstance(t, dict) and "id" in t}
    now = {t["id"]: bool(t.get("passed")) for t in new.get("tasks", [])}
    both = [task for task in now if task in was]
    return {
        "against": {key: old.get(key) for key in ("tasks_file", "model", "finished_at")},
        "pass_to_fail": [task for task, passed in now.items() if was.get(task) is True and not passed],
        "fail_to_pass": [task for task, passed in now.items() if was.get(task) is False and passed],
        "new_tasks": [task for task in now if task not in was],
        "missing_tasks": [task for task in was if task not in now],
        "success_rate": _delta(_rate(old), _rate(new)),
        "shared": {"tasks": len(both), "success_rate": _delta(_passed_share(was, both), _passed_share(now, both))},
        "metrics": {scope: _metric_deltas(old, new, scope) for scope in ("all", "successful")},
        "reasons": _reason_deltas(old.get("reasons") or {}, new.get("reasons") or {}),
    }


def _rate(report: dict[str, Any]) -> float | None:
    value = (report.get("summary") or {}).get("success_rate")
    return float(value) if isinstance(value, int | float) else None


def _passed_share(passed: dict[str, bool], tasks: list[str]) -> float | None:
    """The share of ``tasks`` that passed, rounded as a report's success rate is; None for no task."""
    return round(sum(passed[task] for task in tasks) / len(tasks), 4) if tasks else None


def _metric_deltas(old: dict[str, Any], new: dict[str, Any], scope: str) -> dict[str, dict[str, Any]]:
    deltas: dict[str, dict[str, Any]] = {}
    for metric in METRICS:
        before = ((old.get("metrics") or {}).get(scope) or {}).get(metric) or {}
        after = ((new.get("metrics") or {}).get(scope) or {}).get(metric) or {}
        deltas[metric] = {stat: _delta(before.get(stat), after.get(stat)) for stat in STATS}
    return deltas


def _reason_deltas(old: dict[str, int], new: dict[str, int]) -> dict[str, dict[str, Any]]:
    reasons = dict.fromkeys([*new, *old])
    return {reason: _delta(old.get(reason, 0), new.get(reason, 0)) for reason in reasons}


def _delta(before: Any, after: Any) -> dict[str, Any]:
    numbers = isinstance(before, int | float) and isinstance(after, int | float)
    return {"old": before, "new": after, "delta": round(after - before, 6) if numbers else None}
