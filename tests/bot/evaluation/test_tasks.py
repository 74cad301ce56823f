"""Task files are checked before anything runs: every problem at once, each naming its line and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.evaluation import Expect, TaskFileError, TicketExpectation, load_tasks, parse_tasks
from tests.bot.evaluation.scripted import TASKS


def line(**task: object) -> str:
    return json.dumps(task)


def test_a_task_gets_the_default_user_and_place_and_its_expectations():
    (task,), problems = parse_tasks([line(id="pw", ask="password length?", expect={"facts": ["14"]})])
    assert problems == []
    assert task.turns == ("password length?",) and task.place == "dm" and task.line == 1
    assert (task.user.id, task.user.groups) == ("eval-user", ("all",))
    assert task.expect == Expect(facts=("14",))


def test_a_conversation_a_user_a_thread_and_every_check_are_read():
    expect = {"facts": ["a"], "no_facts": ["b"], "cites": ["c.md"], "tools": ["search_policies"],
              "no_tools": ["create_it_ticket"], "ticket": {"category": "network_vpn"}, "not_covered": False,
              "max_steps": 4, "max_tokens": 11000}
    raw = line(id="t", conversation=["q1", "q2"], user={"id": "U1", "groups": ["managers"]}, place="thread",
               expect=expect)
    (task,), problems = parse_tasks(["", raw])
    assert problems == [] and task.line == 2
    assert task.turns == ("q1", "q2") and task.place == "thread"
    assert task.user.id == "U1" and task.user.groups == ("all", "managers")
    assert task.expect.ticket == TicketExpectation("network_vpn", None)
    assert (task.expect.not_covered, task.expect.max_steps, task.expect.max_tokens) == (False, 4, 11000)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("{not json", "line 1: not valid JSON"),
        ("[1, 2]", "line 1: must be a JSON object"),
        (line(ask="q", expect={"facts": ["x"]}), "line 1: id: required"),
        (line(id="t", expect={"facts": ["x"]}), "line 1: ask: give exactly one of ask"),
        (line(id="t", ask="q", conversation=["q"], expect={"facts": ["x"]}), "line 1: ask: give exactly one"),
        (line(id="t", conversation=[], expect={"facts": ["x"]}), "line 1: conversation: must be a non-empty list"),
        (line(id="t", ask="q"), "line 1: expect: required"),
        (line(id="t", ask="q", expect={"fact": ["x"]}), "line 1: expect.fact: unknown key"),
        (line(id="t", ask="q", expect={"facts": ["(unclosed"]}), "line 1: expect.facts[0]: not a valid regex"),
        (line(id="t", ask="q", expect={"facts": "14"}), "line 1: expect.facts: must be a list"),
        (line(id="t", ask="q", expect={"max_steps": 0}), "line 1: expect.max_steps: must be a whole number"),
        (line(id="t", ask="q", expect={"no_ticket": "yes"}), "line 1: expect.no_ticket: must be true or false"),
        (line(id="t", ask="q", expect={"ticket": {"category": "vpn"}}), "line 1: expect.ticket.category: must be"),
        (line(id="t", ask="q", expect={"ticket": {"category": "other"}, "no_ticket": True}),
         "line 1: expect.no_ticket: contradicts expect.ticket"),
        (line(id="t", ask="q", place="channel", expect={"facts": ["x"]}), "line 1: place: must be one of dm, thread"),
        (line(id="t", ask="q", user={"groups": "hr"}, expect={"facts": ["x"]}), "line 1: user.groups: must be"),
        (line(id="t", ask="q", extra=1, expect={"facts": ["x"]}), "line 1: extra: unknown key"),
    ],
)
def test_a_bad_line_is_named_with_its_key(raw: str, problem: str):
    _, problems = parse_tasks([raw], "tasks.jsonl")
    assert any(p.startswith(f"tasks.jsonl {problem}") for p in problems), problems


def test_every_problem_in_the_file_is_reported_at_once(tmp_path: Path):
    path = tmp_path / "tasks.jsonl"
    good = line(id="a", ask="q", expect={"facts": ["x"]})
    path.write_text("\n".join([good, "{oops", good, line(id="b", ask="q", expect={"cites": [1]})]) + "\n")
    with pytest.raises(TaskFileError) as raised:
        load_tasks(path)
    assert [p.split(": ")[0] for p in raised.value.problems] == [
        f"{path} line 2", f"{path} line 3", f"{path} line 4",
    ]
    assert "id: 'a' is already the id of line 1" in raised.value.problems[1]


def test_a_missing_or_empty_file_is_a_task_file_error(tmp_path: Path):
    with pytest.raises(TaskFileError, match="cannot read the task file"):
        load_tasks(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(TaskFileError, match="no tasks"):
        load_tasks(tmp_path / "empty.jsonl")


def test_the_example_task_file_of_the_tests_is_valid():
    assert len(load_tasks(TASKS)) == 8


@pytest.mark.parametrize(
    "expect",
    [{"facts": []}, {"no_ticket": False}, {"not_covered": None}, {"ticket": None, "cites": []}],
)
def test_an_expect_that_sets_no_check_is_refused_for_it_could_never_fail(expect: dict[str, object]):
    _, problems = parse_tasks([line(id="t", ask="q", expect=expect)], "tasks.jsonl")
    assert [p for p in problems if "sets no check" in p] == [
        "tasks.jsonl line 1: expect: sets no check (each one given is empty, false or null), so the task "
        "could never fail"
    ]


def test_a_badly_written_check_is_named_once_not_also_as_no_check():
    _, problems = parse_tasks([line(id="t", ask="q", expect={"facts": "14"})], "tasks.jsonl")
    assert problems == ["tasks.jsonl line 1: expect.facts: must be a list of non-empty strings"]


def test_only_a_newline_ends_a_task_line_not_a_unicode_line_separator_inside_a_string(tmp_path: Path):
    path = tmp_path / "tasks.jsonl"
    asks = ["first line\u2028second line", "pasted\x85text"]  # valid raw inside JSON strings
    path.write_text("".join(json.dumps({"id": f"t{n}", "ask": a, "expect": {"facts": ["x"]}}, ensure_ascii=False)
                            + "\r\n" for n, a in enumerate(asks)), encoding="utf-8")
    tasks = load_tasks(path)
    assert [(t.turns, t.line) for t in tasks] == [((asks[0],), 1), ((asks[1],), 2)]


def test_a_task_file_saved_with_a_byte_order_mark_loads(tmp_path: Path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(line(id="t", ask="q", expect={"facts": ["x"]}) + "\n", encoding="utf-8-sig")
    assert [t.id for t in load_tasks(path)] == ["t"]
