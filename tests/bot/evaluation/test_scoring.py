"""The scoring proved on real runs: the real service and loop, a scripted model on loopback, the sample index.

Each task in tasks.jsonl is built to fail one check, or none; the eval must fail exactly that one.
"""

from __future__ import annotations

from pathlib import Path

from bot.evaluation import EvalRun, build_report, load_tasks, run_tasks
from tests.bot.evaluation.scripted import TASKS, SampleOrNothing, script
from tests.bot.helpers import settings_for
from tests.fakes.openai_server import FakeOpenAI

FAILS = {  # task -> the checks it must fail (the others must pass)
    "pw-right": set(),
    "pw-wrong-doc": {"cites"},
    "phishing-ticket": {"no_ticket"},
    "gym-answered": {"not_covered"},
    "wedding-honest": set(),
    "receipts-guarded": set(),
    "vpn-ticket": set(),
    "leave-follow-up": set(),
}


async def evaluate(tmp_path: Path, fake: FakeOpenAI, index: object, concurrency: int = 4) -> EvalRun:
    script(fake)
    tasks = load_tasks(TASKS)
    run = await run_tasks(settings_for(tmp_path, fake), tasks, concurrency=concurrency,
                          searcher=SampleOrNothing(index))  # type: ignore[arg-type]
    fake.assert_script_consumed()
    return run


async def test_each_task_fails_exactly_the_check_it_was_built_to_fail(tmp_path, fake_openai, sample_index):
    run = await evaluate(tmp_path, fake_openai, sample_index)

    failed = {r.task.id: {c.name for c in r.checks if not c.passed} for r in run.results}
    assert failed == FAILS
    assert [r.task.id for r in run.results] == list(FAILS)  # in the file's order, though run concurrently
    assert all(r.error is None and r.checks for r in run.results)


async def test_failed_checks_say_why(tmp_path, fake_openai, sample_index):
    run = await evaluate(tmp_path, fake_openai, sample_index)
    details = {r.task.id: {c.name: c.detail for c in r.checks if not c.passed} for r in run.results}

    assert details["pw-wrong-doc"]["cites"].startswith('no citation contains "passwords-mfa.md" (cited: ')
    assert "expenses.md" in details["pw-wrong-doc"]["cites"]
    assert details["phishing-ticket"]["no_ticket"].startswith("a ticket was proposed: category='security_incident'")
    assert details["gym-answered"]["not_covered"].startswith('ended answered, expected not_covered: "Yes, claim')


async def test_what_each_run_did_is_read_from_its_reply_and_trace(tmp_path, fake_openai, sample_index):
    run = await evaluate(tmp_path, fake_openai, sample_index)
    by_id = {r.task.id: r for r in run.results}

    honest = by_id["wedding-honest"].last
    assert honest is not None and honest.reason == "not_covered" and honest.citations == ()
    guarded = by_id["receipts-guarded"].last
    assert guarded is not None and guarded.guards == ("repeat", "unknown_tool")
    assert guarded.tools == ("search_policies", "lookup_user") and guarded.steps == 2
    ticket = by_id["vpn-ticket"].last
    assert ticket is not None and ticket.reason == "pending_confirmation"  # proposed, left pending
    assert ticket.ticket == {"category": "network_vpn", "summary": "VPN keeps dropping", "urgency": "high"}
    follow_up = by_id["leave-follow-up"]
    assert len(follow_up.runs) == 2 and "27 days" in follow_up.runs[1].text  # the checks judged the last reply
    assert all(o.tokens > 0 and o.cost_usd > 0 and o.latency_ms > 0 for r in run.results for o in r.runs)


async def test_the_report_aggregates_the_runs(tmp_path, fake_openai, sample_index):
    report = build_report(await evaluate(tmp_path, fake_openai, sample_index), tasks_file="tasks.jsonl")

    assert report["summary"] == {"tasks": 8, "passed": 5, "success_rate": 0.625, "runs": 9}
    assert report["reasons"] == {"answered": 6, "pending_confirmation": 2, "not_covered": 1}
    assert report["guards"]["repeat"] == 1 and report["guards"]["unknown_tool"] == 1
    assert sum(report["guards"].values()) == 2
    assert report["metrics"]["all"]["steps"] == {"median": 2, "p95": 2}
    assert report["metrics"]["successful"]["steps"] == {"median": 2, "p95": 2}
    assert report["budgets"]["max_steps"] == {"configured": 6, "p95": 2, "suggested": 3}


async def test_an_eval_never_writes_to_the_configured_database(tmp_path, fake_openai, sample_index):
    await evaluate(tmp_path, fake_openai, sample_index, concurrency=1)
    assert not (tmp_path / "policypal.db").exists()
