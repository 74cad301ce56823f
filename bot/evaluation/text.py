"""The eval report and its comparison as text for a terminal: verdicts first, then the numbers."""

from __future__ import annotations

from typing import Any

from bot.evaluation.report import MARGIN

METRIC_LABELS = {"steps": "steps", "tokens": "tokens", "cost_usd": "cost $", "seconds": "seconds"}
BUDGETS = {  # budget: (label, the metric it bounds)
    "max_steps": ("steps", "steps"),
    "max_tokens": ("tokens", "tokens"),
    "deadline_s": ("deadline s", "seconds"),
    "max_cost_usd": ("cost $", "cost_usd"),
}


def render_report(report: dict[str, Any]) -> str:
    """Every task's verdict (failed checks with their reasons), success, distributions, reasons, guards, budgets."""
    summary = report["summary"]
    lines = [
        f"policypal eval {report.get('tasks_file', '')}: {summary['tasks']} tasks, {summary['runs']} runs, "
        f"model {report['model']}, {report['seconds']:.1f} s",
        "",
        *(_task_lines(task) for task in report["tasks"]),
        "",
        f"Success: {summary['passed']}/{summary['tasks']} tasks passed ({summary['success_rate']:.1%})",
        "",
        *_metric_lines(report["metrics"]),
        "",
        "Termination reasons: " + (_counts(report["reasons"]) or "none"),
        "Guard firings: " + (_counts(report["guards"]) or "none") + f"; tool errors: {report['tool_errors']}",
        "",
        *_budget_lines(report["budgets"]),
    ]
    return "\n".join(lines) + "\n"


def _task_lines(task: dict[str, Any]) -> str:
    verdict = "PASS" if task["passed"] else "FAIL"
    head = (
        f"  {verdict} {task['id']:<28} {task['reason'] or '-':<21} {task['steps']:>2} steps "
        f"{task['tokens']:>7,} tokens  ${task['cost_usd']:.4f}  {task['seconds']:>5.2f} s"
    )
    failed = [f"       {c['name']}: {c['detail']}" for c in task["checks"] if not c["passed"]]
    if task.get("error"):
        failed.insert(0, f"       error: {task['error']}")
    return "\n".join([head, *failed])


def _metric_lines(metrics: dict[str, Any]) -> list[str]:
    lines = [f"  {'per run':<10} {'median':>10} {'p95':>10}   {'passing: median':>15} {'p95':>10}"]
    for metric, label in METRIC_LABELS.items():
        every, passing = metrics["all"][metric], metrics["successful"][metric]
        lines.append(
            f"  {label:<10} {_stat(every, 'median', metric):>10} {_stat(every, 'p95', metric):>10}   "
            f"{_stat(passing, 'median', metric):>15} {_stat(passing, 'p95', metric):>10}"
        )
    return lines


def _budget_lines(budgets: dict[str, Any]) -> list[str]:
    margin = f"+{MARGIN:.0%}"
    lines = [f"  {'budget':<12} {'configured':>12} {'p95 passing':>12} {'suggested (' + margin + ')':>18}"]
    for budget, (label, metric) in BUDGETS.items():
        row = budgets[budget]
        lines.append(
            f"  {label:<12} {_number(row['configured'], metric):>12} {_number(row['p95'], metric):>12} "
            f"{_number(row['suggested'], metric):>18}"
        )
    return lines


def render_comparison(comparison: dict[str, Any]) -> str:
    """Tasks that changed verdict, then the success rate, medians and p95s that moved."""
    against = comparison["against"]
    rate = comparison["success_rate"]
    lines = [
        f"Compared with {against.get('tasks_file') or 'the earlier report'} "
        f"(model {against.get('model')}, {against.get('finished_at')}):",
        "  pass -> fail: " + (", ".join(comparison["pass_to_fail"]) or "none"),
        "  fail -> pass: " + (", ".join(comparison["fail_to_pass"]) or "none"),
    ]
    if comparison["new_tasks"] or comparison["missing_tasks"]:
        lines.append(f"  new tasks: {', '.join(comparison['new_tasks']) or 'none'}; "
                     f"no longer in the file: {', '.join(comparison['missing_tasks']) or 'none'}")
    lines.append(f"  success rate: {_rate(rate['old'])} -> {_rate(rate['new'])}{_points(rate['delta'])}")
    if comparison["new_tasks"] or comparison["missing_tasks"]:
        lines.append(_shared_line(comparison["shared"]))
    for scope, label in (("all", "all runs"), ("successful", "passing runs")):
        for metric, name in METRIC_LABELS.items():
            moved = comparison["metrics"][scope][metric]
            lines.append(f"  {label:<12} {name:<8} " + "   ".join(
                f"{stat} {_number(d['old'], metric)} -> {_number(d['new'], metric)}{_signed(d['delta'], metric)}"
                for stat, d in moved.items()
            ))
    changed = {reason: d for reason, d in comparison["reasons"].items() if d["delta"]}
    lines.append("  reasons: " + (", ".join(
        f"{reason} {d['old']} -> {d['new']}" for reason, d in changed.items()) or "unchanged"))
    return "\n".join(lines) + "\n"


def _shared_line(shared: dict[str, Any]) -> str:
    """The success rate over the tasks both reports ran: the overall rates above compare different tasks."""
    rate = shared["success_rate"]
    over = (f"over the {shared['tasks']} tasks in both, success rate {_rate(rate['old'])} -> {_rate(rate['new'])}"
            f"{_points(rate['delta'])}" if shared["tasks"] else "no task is in both")
    return f"  the task sets differ: {over}; the rate above and the figures below cover different tasks"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.items() if count)


def _stat(summary: dict[str, float] | None, stat: str, metric: str) -> str:
    return _number(summary[stat] if summary else None, metric)


def _number(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    if metric == "cost_usd":
        return f"{value:.4f}"
    if metric == "seconds":
        return f"{value:.2f}"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _signed(delta: float | None, metric: str) -> str:
    if not delta:
        return ""
    return f" ({'+' if delta > 0 else '-'}{_number(abs(delta), metric)})"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _points(delta: float | None) -> str:
    return "" if not delta else f" ({delta * 100:+.1f} points)"
