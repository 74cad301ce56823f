"""Trajectory-aware evaluation (`policypal eval`): run task files through the real service and score
what each run answered and did on the way; the report suggests budgets from what was measured.
"""

from bot.evaluation.checks import CheckResult, Observed, ToolUse, score
from bot.evaluation.compare import compare
from bot.evaluation.earlier import ReportFileError, load_report
from bot.evaluation.report import build_report, write_report
from bot.evaluation.runner import DEFAULT_CONCURRENCY, EvalRun, TaskResult, run_tasks
from bot.evaluation.tasks import Expect, Task, TaskFileError, TicketExpectation, load_tasks, parse_tasks
from bot.evaluation.text import render_comparison, render_report

__all__ = [
    "DEFAULT_CONCURRENCY",
    "CheckResult",
    "EvalRun",
    "Expect",
    "Observed",
    "ReportFileError",
    "Task",
    "TaskFileError",
    "TaskResult",
    "TicketExpectation",
    "ToolUse",
    "build_report",
    "compare",
    "load_report",
    "load_tasks",
    "parse_tasks",
    "render_comparison",
    "render_report",
    "run_tasks",
    "score",
    "write_report",
]
