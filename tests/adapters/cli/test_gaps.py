"""`policypal gaps`: the questions the policies did not cover, grouped by their text, with counts."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.cli import main
from adapters.cli.gaps import show_gaps
from bot.store import Store
from tests.bot.helpers import ALICE, BOB, OnePassage, ask, service, settings_for
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

GYM = "does the company pay for my gym?"
PARKING = "where do I park my bike?"
NOT_IN_POLICY = "That is not in the policy documents."
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class FindsNothing:
    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Any]:
        return []


def _run(run_id: str, question: str, reason: str, minutes: int, user: str = "U1") -> dict[str, object]:
    return {
        "id": run_id, "conversation_key": f"slack:T1:C1:{run_id}", "platform": "slack", "user_id": user,
        "question": question, "reason": reason, "started_at": START + timedelta(minutes=minutes), "steps": 2,
        "input_tokens": 100, "output_tokens": 20, "cost_usd": 0.0, "latency_ms": 10.0, "model": "m", "trace": [],
        "owner": "",
    }  # fmt: skip


async def test_gaps_group_identical_questions_newest_first_and_skip_answered_runs(store: Store) -> None:
    for row in (
        _run("r1", GYM, "not_covered", 0, "U1"),
        _run("r2", PARKING, "not_covered", 5, "U1"),
        _run("r3", GYM, "not_covered", 10, "U2"),
        _run("r4", GYM, "not_covered", 11, "U2"),
        _run("r5", "how long must my password be?", "answered", 20),
    ):
        assert await store.runs.record(row)

    gaps = await store.runs.knowledge_gaps()

    assert [(g.question, g.count, g.askers) for g in gaps] == [(GYM, 3, 2), (PARKING, 1, 1)]
    assert gaps[0].first_asked == START and gaps[0].last_asked == START + timedelta(minutes=11)
    assert [g.question for g in await store.runs.knowledge_gaps(limit=1)] == [GYM]


async def _two_gaps_and_an_answer(tmp_path: Path, fake: FakeOpenAI) -> None:
    searched, said = tool_calls(("search_policies", {"query": "gym membership"})), text(NOT_IN_POLICY)
    fake.script(searched, said, searched, said)
    async with service(tmp_path, fake, FindsNothing()) as svc:
        await ask(svc, GYM, ALICE, thread="t1")
        await ask(svc, GYM, BOB, thread="t2")
    fake.script(tool_calls(("search_policies", {"query": "receipts"})), text("Keep receipts."))
    async with service(tmp_path, fake, OnePassage()) as svc:
        await ask(svc, "do I keep receipts?", ALICE, thread="t3")


async def test_policypal_gaps_lists_each_uncovered_question_once_with_its_count(tmp_path, fake_openai):
    await _two_gaps_and_an_answer(tmp_path, fake_openai)
    out = io.StringIO()

    assert await show_gaps(settings_for(tmp_path, fake_openai), out=out) == 0

    header, *rows = out.getvalue().splitlines()
    assert header.split()[:2] == ["asked", "people"]
    assert len(rows) == 1 and rows[0].split()[:2] == ["2", "2"] and rows[0].endswith(GYM)
    fake_openai.assert_script_consumed()


def test_policypal_gaps_json_for_scripts_and_a_friendly_line_when_there_are_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(["gaps"]) == 0
    assert capsys.readouterr().out.startswith("No uncovered questions")

    import asyncio

    async def record() -> None:
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'policypal.db'}")
        await store.runs.record(_run("r1", GYM, "not_covered", 0))
        await store.close()

    asyncio.run(record())
    assert main(["gaps", "-n", "5", "--json"]) == 0
    (gap,) = json.loads(capsys.readouterr().out)
    assert (gap["question"], gap["count"], gap["askers"]) == (GYM, 1, 1)
    assert gap["last_asked"].startswith("2026-03-02T09:00")


def test_policypal_gaps_counts_one_question_asked_in_other_case_and_spacing_once_with_its_people(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)

    async def record() -> None:
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'policypal.db'}")
        for row in (
            _run("r1", "Is there wedding leave?", "not_covered", 0, "U1"),
            _run("r2", "is there  wedding leave", "not_covered", 5, "U1"),
            _run("r3", "Is there wedding leave?", "not_covered", 7, "U2"),
            _run("r4", PARKING, "not_covered", 9, "U1"),
        ):
            await store.runs.record(row)
        await store.close()

    import asyncio

    asyncio.run(record())
    assert main(["gaps", "--json"]) == 0
    gaps = json.loads(capsys.readouterr().out)
    assert [(g["question"], g["count"], g["askers"]) for g in gaps] == [
        (PARKING, 1, 1),
        ("Is there wedding leave?", 3, 2),
    ]
    assert gaps[1]["first_asked"].startswith("2026-03-02T09:00") and gaps[1]["last_asked"].startswith(
        "2026-03-02T09:07"
    )
    assert main(["gaps", "-n", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:2] == ["1", "1"]
