"""What a run tells the person's status line while it works, and that a broken status line costs the run nothing."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from bot.agent import WORKING, ToolRegistry
from bot.agent.progress import READING, activity, tell
from bot.policy_tools import preparing_ticket, searching
from bot.types import Answer, Inbound, TerminationReason, ToolCall
from tests.bot.helpers import ALICE, OnePassage, service
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

pytestmark = pytest.mark.asyncio

_events = itertools.count(1)


async def ask_with(svc, question: str, progress) -> object:
    inbound = Inbound("console", "terminal", "t1", ALICE, question, event_id=f"progress-{next(_events)}")
    return await svc.handle_message(inbound, progress=progress)


async def test_each_turn_of_tools_is_told_in_plain_words_before_it_runs_then_the_reading(tmp_path, fake_openai):
    fake_openai.script(
        tool_calls(("search_policies", {"query": "work abroad"}), ("search_policies", {"query": "travel insurance"})),
        text("Yes."),
    )
    told: list[str] = []

    async def progress(line: str) -> None:
        told.append(line)

    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        reply = await ask_with(svc, "Can I work abroad, and am I insured?", progress)
    assert reply.reason == TerminationReason.ANSWERED
    assert told == [
        "Searching the policies for “work abroad”, searching the policies for “travel insurance”…",
        READING,
    ]


async def test_a_status_line_that_fails_or_hangs_never_fails_or_holds_the_run(
    tmp_path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("bot.agent.progress.PROGRESS_TIMEOUT_S", 0.05)
    fake_openai.script(tool_calls(("search_policies", {"query": "leave"})), text("You get 25 days."))
    calls: list[str] = []

    async def broken(line: str) -> None:
        calls.append(line)
        if len(calls) == 1:
            raise RuntimeError("the platform refused the status")
        await asyncio.Event().wait()  # never returns

    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        reply = await ask_with(svc, "How much leave?", broken)
    assert isinstance(reply.outcome, Answer) and reply.outcome.text == "You get 25 days."
    assert calls == ["Searching the policies for “leave”…", READING]


async def test_a_hanging_status_line_never_holds_a_run_past_its_deadline(
    tmp_path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("bot.agent.progress.PROGRESS_TIMEOUT_S", 3600.0)  # only the deadline can end the wait
    fake_openai.script(tool_calls(("search_policies", {"query": "leave"})), text("You get 25 days."))
    calls: list[str] = []

    async def hanging(line: str) -> None:
        calls.append(line)
        await asyncio.Event().wait()  # never returns

    async with service(tmp_path, fake_openai, OnePassage(), deadline_s=3.0) as svc:
        reply = await asyncio.wait_for(ask_with(svc, "How much leave?", hanging), 120)  # a hang guard, not a timing
    assert reply.reason == TerminationReason.DEADLINE
    assert calls == ["Searching the policies for “leave”…"]  # no time left to tell the reading


async def test_the_tools_say_what_they_do_and_a_call_that_cannot_be_read_says_nothing():
    assert searching({"query": "expenses", "section": "Finance"}) == "Searching the Finance policies…"
    assert searching({"query": "x" * 100}).endswith("…”…") and len(searching({"query": "x" * 100})) < 100
    assert preparing_ticket({}) == "Preparing a ticket for you to confirm…"
    registry = ToolRegistry()
    assert activity([ToolCall("c1", "unknown", "{}")], registry) == WORKING
    await tell(None, "nothing to tell")  # no hook: nothing happens
