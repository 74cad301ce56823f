"""The report's numbers: distributions over runs, budgets suggested from passing runs, comparisons."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.agent import Budgets
from bot.evaluation import (
    CheckResult,
    EvalRun,
    Observed,
    ReportFileError,
    Task,
    TaskResult,
    ToolUse,
    build_report,
    compare,
    load_report,
    render_comparison,
    render_report,
    write_report,
)

BUDGETS = Budgets(max_steps=6, max_tokens=20_000, deadline_s=20.0, max_cost_usd=0.05)


def result(task_id: str, passed: bool, *, steps: int = 2, tokens: int = 2_000, cost: float = 0.001,
           ms: float = 900.0, reason: str = "answered", guards: tuple[str, ...] = ()) -> TaskResult:
    calls = (ToolUse("search_policies"), *(ToolUse("search_policies", guard=g) for g in guards))
    run = Observed(f"run_{task_id}", reason, "text", calls=calls, steps=steps, tokens=tokens, cost_usd=cost,
                   latency_ms=ms)
    check = CheckResult("facts", passed, "" if passed else 'no match for /14/ in "text"')
    return TaskResult(Task(task_id, ("q",)), (run,), (check,))


def eval_run(*results: TaskResult) -> EvalRun:
    return EvalRun(tuple(results), "policypal-offline", BUDGETS, 3.0)


def test_p95_is_the_nearest_rank_and_budgets_are_suggested_from_passing_runs_with_a_margin():
    passing = [result(f"t{n}", True, steps=1 + n % 3, tokens=1_000 * (n + 1), cost=0.0004, ms=100.0 * (n + 1))
               for n in range(20)]  # steps 1,2,3 repeating; tokens 1,000..20,000; seconds 0.1..2.0
    failing = result("slow", False, steps=6, tokens=19_500, ms=19_000.0)
    report = build_report(eval_run(*passing, failing))

    assert report["metrics"]["successful"]["tokens"] == {"median": 10_500, "p95": 19_000}
    assert report["metrics"]["all"]["steps"]["p95"] == 3 and report["metrics"]["all"]["steps"]["median"] == 2
    budgets = report["budgets"]
    assert budgets["max_steps"] == {"configured": 6, "p95": 3, "suggested": 4}  # 3 x 1.25 = 3.75, up
    assert budgets["max_tokens"] == {"configured": 20_000, "p95": 19_000, "suggested": 24_000}  # 23,750 up
    assert budgets["deadline_s"]["suggested"] == 3  # 1.9 s x 1.25 = 2.375, up
    assert budgets["max_cost_usd"]["suggested"] == 0.001  # $0.0005, up to a tenth of a cent


def test_nothing_passing_suggests_nothing_and_a_free_model_no_cost_cap():
    report = build_report(eval_run(result("a", False), result("b", False)))
    assert report["summary"]["success_rate"] == 0.0
    assert report["metrics"]["successful"]["steps"] is None
    assert {row["suggested"] for row in report["budgets"].values()} == {None}
    free = build_report(eval_run(result("c", True, cost=0.0)))
    assert free["budgets"]["max_cost_usd"]["suggested"] is None and free["budgets"]["max_steps"]["suggested"] == 3


def test_reasons_and_guards_are_counted_over_every_run():
    report = build_report(eval_run(
        result("a", True, guards=("repeat",)), result("b", True, reason="not_covered"),
        result("c", False, guards=("repeat", "search_cap")),
    ))
    assert report["reasons"] == {"answered": 2, "not_covered": 1}
    assert report["guards"]["repeat"] == 2 and report["guards"]["search_cap"] == 1
    assert report["guards"]["unknown_tool"] == 0  # every guard is listed, fired or not


def test_the_text_report_shows_each_failed_check_with_its_reason():
    text = render_report(build_report(eval_run(result("good", True), result("bad", False)), tasks_file="t.jsonl"))
    assert "  PASS good " in text and "  FAIL bad " in text
    assert '       facts: no match for /14/ in "text"' in text
    assert "Success: 1/2 tasks passed (50.0%)" in text
    assert "Guard firings: none; tool errors: 0" in text


def test_compare_names_what_got_worse_and_better_and_how_the_numbers_moved(tmp_path: Path):
    old = build_report(eval_run(result("a", True), result("b", False), result("gone", True), result("c", True)))
    new = build_report(eval_run(result("a", False, steps=4), result("b", True), result("c", True),
                                result("fresh", True)))
    path = tmp_path / "old.json"
    write_report(old, path)

    changes = compare(new, load_report(path))

    assert changes["pass_to_fail"] == ["a"] and changes["fail_to_pass"] == ["b"]
    assert changes["new_tasks"] == ["fresh"] and changes["missing_tasks"] == ["gone"]
    assert changes["success_rate"] == {"old": 0.75, "new": 0.75, "delta": 0.0}
    assert changes["metrics"]["all"]["steps"]["p95"] == {"old": 2, "new": 4, "delta": 2}
    text = render_comparison(changes)
    assert "  pass -> fail: a\n" in text and "  fail -> pass: b\n" in text


def test_an_earlier_report_that_is_not_one_is_refused(tmp_path: Path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"results": []}))
    for name in ("bad.json", "other.json", "missing.json"):
        with pytest.raises(ReportFileError):
            load_report(tmp_path / name)
