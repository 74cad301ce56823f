"""`policypal eval` as CI runs it: exit codes for a bad task file, --min-success and --compare; the report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from adapters.cli import main
from adapters.cli.eval import EvalOptions, run_eval
from bot.evaluation import load_tasks
from tests.bot.evaluation.scripted import TASKS, SampleOrNothing, script
from tests.bot.helpers import settings_for
from tests.fakes.openai_server import FakeOpenAI, error

PASSING = 5 / 8  # of tests/bot/evaluation/tasks.jsonl with its scripted model


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def evaluate(tmp_path: Path, fake: FakeOpenAI, index: object, **options: object) -> tuple[int, str, str]:
    script(fake)
    out, err = io.StringIO(), options.pop("err", io.StringIO())
    assert isinstance(err, io.StringIO)
    code = await run_eval(settings_for(tmp_path, fake), EvalOptions(TASKS, **options),  # type: ignore[arg-type]
                          searcher=SampleOrNothing(index), out=out, err=err)  # type: ignore[arg-type]
    fake.assert_script_consumed()
    return code, out.getvalue(), err.getvalue()


def test_a_bad_task_file_exits_2_naming_each_line_and_key_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(tmp_path / "data"))
    tasks = tmp_path / "tasks.jsonl"
    good = json.dumps({"id": "a", "ask": "q", "expect": {"facts": ["x"]}})
    typo = json.dumps({"id": "c", "ask": "q", "expect": {"site": []}})
    tasks.write_text(f'{good}\n{{"id": "b", "ask": "q"}}\n\n{typo}\n')

    assert main(["eval", str(tasks)]) == 2

    err = capsys.readouterr().err
    assert "the task file cannot be used (2 problems)" in err
    assert f"{tasks} line 2: expect: required" in err and f"{tasks} line 4: expect.site: unknown key" in err
    assert not (tmp_path / "data").exists()  # nothing ran: no index built, no database opened

    tasks.write_text("not json\n")
    assert main(["eval", str(tasks)]) == 2
    assert "the task file cannot be used (1 problem):" in capsys.readouterr().err


def test_an_unusable_compare_report_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.json").write_text("[]")
    assert main(["eval", str(TASKS), "--compare", str(tmp_path / "old.json")]) == 2
    assert "--compare: " in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--min-success", "1.5"], ["--min-success", "90"], ["--concurrency", "0"]])
def test_out_of_range_options_are_usage_errors(option: list[str], capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", str(TASKS), *option])
    assert exit_info.value.code == 2


async def test_min_success_sets_the_exit_code(tmp_path, fake_openai, sample_index):
    met, report, _ = await evaluate(tmp_path, fake_openai, sample_index, min_success=PASSING)
    missed, _, err = await evaluate(tmp_path, fake_openai, sample_index, min_success=0.7)

    assert met == 0 and missed == 1
    assert "success rate 62.5% is below --min-success 70.0%" in err
    assert "Success: 5/8 tasks passed (62.5%)" in report
    assert "       cites: no citation contains \"passwords-mfa.md\"" in report


async def test_json_then_compare_shows_what_got_worse_and_better(tmp_path, fake_openai, sample_index):
    first = tmp_path / "first.json"
    code, _, err = await evaluate(tmp_path, fake_openai, sample_index, json_out=first)
    assert code == 0 and f"(report written to {first})" in err
    earlier = json.loads(first.read_text())
    assert earlier["summary"]["success_rate"] == PASSING and len(earlier["tasks"]) == 8
    for task in earlier["tasks"]:  # pretend the earlier release passed the wrong-document task only
        task["passed"] = {"pw-wrong-doc": True, "wedding-honest": False}.get(task["id"], task["passed"])
    first.write_text(json.dumps(earlier))

    second = tmp_path / "second.json"
    code, report, _ = await evaluate(tmp_path, fake_openai, sample_index, compare=first, json_out=second)

    assert code == 0  # a comparison reports; only --min-success fails a build
    assert "  pass -> fail: pw-wrong-doc\n" in report and "  fail -> pass: wedding-honest\n" in report
    comparison = json.loads(second.read_text())["comparison"]
    assert comparison["pass_to_fail"] == ["pw-wrong-doc"] and comparison["fail_to_pass"] == ["wedding-honest"]


async def test_a_progress_bar_only_on_a_terminal(tmp_path, fake_openai, sample_index):
    _, _, piped = await evaluate(tmp_path, fake_openai, sample_index)
    terminal = Terminal()
    await evaluate(tmp_path, fake_openai, sample_index, err=terminal)
    assert piped == ""
    assert "8/8" in terminal.getvalue() and "failed=3" in terminal.getvalue()


@pytest.mark.parametrize("target", ["folder", "under a file"])
async def test_a_json_path_that_cannot_be_written_exits_2_before_anything_runs(
    tmp_path: Path, fake_openai: FakeOpenAI, sample_index: object, target: str
):
    # checked first: a whole eval's report is not lost to a typo in --json at its end
    (tmp_path / "reports").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    json_out = tmp_path / "reports" if target == "folder" else tmp_path / "notes.txt" / "report.json"
    err = io.StringIO()

    code = await run_eval(settings_for(tmp_path, fake_openai), EvalOptions(TASKS, json_out=json_out),
                          searcher=SampleOrNothing(sample_index), out=io.StringIO(), err=err)  # type: ignore[arg-type]

    assert code == 2 and f"--json {json_out}: " in err.getvalue()
    assert fake_openai.events == []  # no task ran


async def test_an_eval_whose_every_run_is_a_model_error_fails_even_without_min_success(
    tmp_path: Path, fake_openai: FakeOpenAI, sample_index: object
):
    # the model refused the key on every request: nothing was measured, so CI must not read it as green
    runs = sum(len(task.turns) for task in load_tasks(TASKS))  # a conversation's every message is a run
    fake_openai.script(*(error(401, "Incorrect API key provided") for _ in range(runs)))
    out, err = io.StringIO(), io.StringIO()

    code = await run_eval(settings_for(tmp_path, fake_openai), EvalOptions(TASKS),
                          searcher=SampleOrNothing(sample_index), out=out, err=err)  # type: ignore[arg-type]

    fake_openai.assert_script_consumed()
    assert code == 1 and f"every run ({runs}) ended in a model error" in err.getvalue()
    assert f"model_error {runs}" in out.getvalue()


async def test_a_json_path_naming_the_task_file_exits_2_and_leaves_the_tasks_as_they_were(
    tmp_path: Path, fake_openai: FakeOpenAI, sample_index: object
):
    """`policypal eval tasks.jsonl --json tasks.jsonl` (a completion slip) wrote the report over the tasks."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(TASKS.read_bytes())
    err = io.StringIO()

    code = await run_eval(settings_for(tmp_path, fake_openai), EvalOptions(tasks, json_out=tmp_path / "tasks.jsonl"),
                          searcher=SampleOrNothing(sample_index), out=io.StringIO(), err=err)  # type: ignore[arg-type]

    assert code == 2 and "is the task file itself" in err.getvalue()
    assert tasks.read_bytes() == TASKS.read_bytes()
    assert fake_openai.events == []  # no task ran
