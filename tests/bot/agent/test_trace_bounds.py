"""Stored traces are bounded: one tool call with megabytes of arguments cannot grow the database by megabytes."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from bot.redaction import TRACE_VALUE_CHARS
from bot.types import TerminationReason
from tests.bot.helpers import OnePassage, ask, service
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

pytestmark = pytest.mark.asyncio

HUGE = 2_000_000
ROOMY = {"max_tokens": 10_000_000, "compact_at_tokens": 10_000_000, "max_cost_usd": 10.0}  # a second model call


class RoomyOpenAI(FakeOpenAI):
    """The fake OpenAI server taking request bodies beyond aiohttp's 1 MB default, as real endpoints do."""

    async def start(self) -> RoomyOpenAI:
        app = web.Application(client_max_size=16 * 2**20)
        app.router.add_post("/v1/chat/completions", self._handle)
        self._closing = asyncio.Event()
        return await self._listen(app, handler_cancellation=True)


@pytest_asyncio.fixture
async def roomy_openai() -> AsyncIterator[FakeOpenAI]:
    async with RoomyOpenAI() as fake:
        yield fake
        fake.assert_no_problems()


async def test_a_tool_call_of_two_megabytes_stores_a_bounded_trace_but_the_loop_sees_it_whole(
    tmp_path, roomy_openai: FakeOpenAI
):
    # The arguments were stored whole, and the schema error quoting them again: about 4 MB per call.
    query = "password: hunter2-x. " + "x" * HUGE
    roomy_openai.script(tool_calls(("search_policies", {"query": query}), usage=(100, 10)), text("Done."))
    async with service(tmp_path, roomy_openai, OnePassage(), **ROOMY) as svc:
        reply = await ask(svc, "find it")
        row = await svc.store.runs.get(reply.run_id)

    assert reply.reason == TerminationReason.ANSWERED
    stored = json.dumps(row.trace, ensure_ascii=False)
    assert len(stored) < 50_000
    (step,) = [step for step in row.trace if step["kind"] == "tool"]
    assert len(step["arguments"]) <= TRACE_VALUE_CHARS and len(step["error"]) <= TRACE_VALUE_CHARS
    assert re.search(r"…\[cut: 2,000,0\d\d characters, 1,99\d,\d{3} not stored\]\Z", step["arguments"])
    assert step["arguments"].startswith('{"query": "password: [redacted] xxx')  # redacted before it was cut
    assert re.search(r"…\[cut: 2,\d{3},\d{3} characters, 1,99\d,\d{3} not stored\]\Z", step["error"])
    assert "hunter2" not in stored
    sent = roomy_openai.requests[1].messages
    (call,) = next(m for m in reversed(sent) if m["role"] == "assistant")["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"query": query}  # the model's history is whole


async def test_a_give_up_after_a_call_with_a_two_megabyte_tool_name_opens_a_bounded_case(
    tmp_path, roomy_openai: FakeOpenAI
):
    # The helpdesk bounded a step's arguments, text and error, but copied every other field whole.
    name = "search_" + "x" * HUGE
    roomy_openai.script(tool_calls((name, {"query": "leave"}), usage=(100, 10)))
    async with service(tmp_path, roomy_openai, OnePassage(), max_steps=1, **ROOMY) as svc:
        reply = await ask(svc, "find it")
        row = await svc.store.runs.get(reply.run_id)
        (case,) = await svc.store.cases.recent()

    assert reply.reason == TerminationReason.STEP_BUDGET
    assert len(json.dumps(row.trace)) < 50_000
    assert len(json.dumps(case.transcript)) < 50_000
    (step,) = [step for run in case.transcript["runs"] for step in run["trace"] if step["kind"] == "tool"]
    assert step["name"].startswith("search_xxx") and step["name"].endswith(" not stored]")
