"""The report's numbers: distributions over runs, budgets suggested from passing runs, comparisons."""

from __future__ import annotations

import json
import math
import re
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


def corrupted(report: dict[str, object], where: str, value: object) -> dict[str, object]:
    """``report`` (a copy) with the value at the dotted path ``where`` replaced."""
    copy = json.loads(json.dumps(report))
    *parents, key = where.split(".")
    node = copy
    for name in parents:
        node = node[int(name)] if isinstance(node, list) else node[name]
    node[int(key) if isinstance(node, list) else key] = value
    return copy  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("where", "value", "named"),
    [
        ("summary", 5, "summary"),
        ("summary.success_rate", "high", "summary.success_rate"),
        ("tasks.0", 5, "tasks[0]"),
        ("tasks.0.id", ["a"], "tasks[0].id"),
        ("tasks.0.passed", "yes", "tasks[0].passed"),
        ("metrics", [], "metrics"),
        ("metrics.all", [1], "metrics.all"),
        ("metrics.all.steps", [2], "metrics.all.steps"),
        ("metrics.successful.tokens.p95", "2", "metrics.successful.tokens.p95"),
        ("reasons", {"answered": "many"}, "reasons"),
    ],
)
def test_an_earlier_report_that_compare_could_not_read_is_refused_before_anything_runs(
    tmp_path: Path, where: str, value: object, named: str
):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(corrupted(build_report(eval_run(result("a", True))), where, value)))
    expected = re.escape(f"{path}: not a `policypal eval --json` report: {named}: ")
    with pytest.raises(ReportFileError, match=expected) as raised:
        load_report(path)
    assert "\n" not in str(raised.value)


def test_a_report_from_a_run_where_nothing_ran_or_passed_is_still_a_report_to_compare_with(tmp_path: Path):
    path = tmp_path / "old.json"
    errored = TaskResult(Task("x", ("q",)), (), error="RuntimeError: boom")
    write_report(build_report(eval_run(errored)), path)
    changes = compare(build_report(eval_run(result("x", True))), load_report(path))
    assert changes["fail_to_pass"] == ["x"] and changes["metrics"]["all"]["steps"]["p95"]["old"] is None


def test_the_json_report_is_strict_json_even_with_a_budget_set_to_infinity(tmp_path: Path):
    unbounded = Budgets(max_steps=6, max_tokens=20_000, deadline_s=math.inf, max_cost_usd=None)
    path = tmp_path / "report.json"
    write_report(build_report(EvalRun((result("a", True),), "m", unbounded, 1.0)), path)

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    data = json.loads(path.read_text(), parse_constant=refuse)
    assert data["budgets"]["deadline_s"]["configured"] is None


def test_the_json_report_is_written_into_a_folder_that_does_not_exist_yet(tmp_path: Path):
    path = tmp_path / "reports" / "nightly" / "eval.json"
    write_report(build_report(eval_run(result("a", True))), path)
    assert load_report(path)["summary"]["passed"] == 1


def test_compare_across_different_task_files_gives_the_success_rate_over_the_tasks_in_both():
    old = build_report(eval_run(result("a", True), result("b", False), *(result(f"gone{n}", False) for n in range(8))))
    new = build_report(eval_run(result("a", True), result("b", True), result("fresh", True)))

    changes = compare(new, old)

    assert changes["success_rate"] == {"old": 0.1, "new": 1.0, "delta": 0.9}  # mostly different tasks
    assert changes["shared"] == {"tasks": 2, "success_rate": {"old": 0.5, "new": 1.0, "delta": 0.5}}
    text = render_comparison(changes)
    assert ("  the task sets differ: over the 2 tasks in both, success rate 50.0% -> 100.0% (+50.0 points); "
            "the rate above and the figures below cover different tasks\n") in text


def test_compare_of_the_same_tasks_says_nothing_of_task_sets():
    old = build_report(eval_run(result("a", True), result("b", False)))
    changes = compare(build_report(eval_run(result("a", True), result("b", True))), old)
    assert changes["shared"] == {"tasks": 2, "success_rate": changes["success_rate"]}
    assert "task sets differ" not in render_comparison(changes)
