"""`policypal eval TASKS.jsonl`: score real runs of a task file, print the report, exit for CI.

Exit 0, or 1 when ``--min-success`` is not met, when every run ended in a model error (the model
could not be reached, or refused the key: nothing was measured) or the index cannot be opened; 2 for
a task file, an earlier report or a ``--json`` path that cannot be used, before anything runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from bot.config import Settings
from bot.evaluation import (
    DEFAULT_CONCURRENCY,
    ReportFileError,
    TaskFileError,
    TaskResult,
    build_report,
    compare,
    load_report,
    load_tasks,
    render_comparison,
    render_report,
    run_tasks,
    write_report,
)
from bot.policy_tools import Searcher
from retrieval import PolicyIndexError


@dataclass(frozen=True)
class EvalOptions:
    tasks: Path
    json_out: Path | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    min_success: float | None = None
    compare: Path | None = None


async def run_eval(
    settings: Settings,
    options: EvalOptions,
    *,
    searcher: Searcher | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Load and check everything first, run the tasks, report; ``searcher`` replaces the index (tests)."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        tasks = load_tasks(options.tasks)
        earlier = load_report(options.compare) if options.compare else None
    except TaskFileError as exc:
        count = len(exc.problems)
        err.write(f"policypal eval: the task file cannot be used ({count} problem{'' if count == 1 else 's'}):\n  ")
        err.write("\n  ".join(exc.problems) + "\n")
        return 2
    except ReportFileError as exc:
        err.write(f"policypal eval: --compare: {exc}\n")
        return 2
    unwritable = _unwritable(options.json_out, options.tasks) if options.json_out is not None else ""
    if unwritable:
        err.write(f"policypal eval: --json {options.json_out}: {unwritable}\n")
        return 2
    if searcher is None:
        from adapters.cli.console import ensure_sample_index
        from adapters.cli.data_home import make_data_home

        make_data_home(settings, err)  # only now that the task file passed: a bad one leaves nothing behind
        ensure_sample_index(settings)
    try:
        with progress(len(tasks), err) as tick:
            run = await run_tasks(settings, tasks, concurrency=options.concurrency, searcher=searcher, on_result=tick)
    except PolicyIndexError as exc:  # e.g. `policypal serve` holds the embedded index
        err.write(f"policypal eval: {exc}\n")
        return 1
    report = build_report(run, tasks_file=str(options.tasks))
    if earlier is not None:
        report["comparison"] = compare(report, earlier)
    out.write(render_report(report))
    if earlier is not None:
        out.write("\n" + render_comparison(report["comparison"]))
    if options.json_out is not None:
        write_report(report, options.json_out)
        err.write(f"(report written to {options.json_out})\n")
    return _exit_code(report, options.min_success, err)


def _unwritable(path: Path, tasks: Path) -> str:
    """Why the report could not be written to ``path`` (checked first: a whole eval's report is not lost
    to a typo at its end, nor the task file to a report written over it), or "". A missing folder is
    fine: writing the report makes it."""
    if path.is_dir():
        return "is a folder; name a file"
    if path.exists() and path.samefile(tasks):
        return "is the task file itself; name another file for the report"
    folder = next((parent for parent in path.absolute().parents if parent.exists()), None)
    if folder is None or not folder.is_dir():
        return f"{folder} is not a folder"
    if path.exists() and not os.access(path, os.W_OK):
        return "cannot be written (permission denied)"
    if not path.exists() and not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot be written in {folder} (permission denied)"
    return ""


def _exit_code(report: dict[str, Any], minimum: float | None, err: TextIO) -> int:
    runs, reasons = report["summary"]["runs"], report["reasons"]
    if runs and reasons.get("model_error", 0) == runs:
        err.write(
            f"policypal eval: every run ({runs}) ended in a model error: the model could not be reached or "
            "refused the request, so nothing was measured (see the reasons above)\n"
        )
        return 1
    rate = report["summary"]["success_rate"]
    if minimum is not None and rate < minimum:
        err.write(f"policypal eval: success rate {rate:.1%} is below --min-success {minimum:.1%}\n")
        return 1
    return 0


@contextmanager
def progress(total: int, stream: TextIO) -> Iterator[_Tick]:
    """A progress bar on a terminal; nothing in a pipe or a CI log (the report says it all)."""
    if not stream.isatty():
        yield _Tick(None)
        return
    with tqdm(total=total, file=stream, unit="task", desc="eval", leave=False, mininterval=0, miniters=1) as bar:
        yield _Tick(bar)


class _Tick:
    """Advances the bar as each task ends, showing how many failed so far."""

    def __init__(self, bar: tqdm[Any] | None) -> None:
        self._bar = bar
        self._failed = 0

    def __call__(self, result: TaskResult) -> None:
        if self._bar is None:
            return
        self._failed += 0 if result.passed else 1
        self._bar.set_postfix(failed=self._failed, refresh=False)
        self._bar.update(1)
