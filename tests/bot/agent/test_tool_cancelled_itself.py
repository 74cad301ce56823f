"""A tool whose own await was cancelled by someone else is a failed call, not the end of the run.

A tool may wait on work it shares (a load in flight that another caller started): when that work
is cancelled, the tool's await raises ``CancelledError`` although nobody stopped this run. That is
an observation like any other failure; the run goes on, with its trace and its termination reason.
"""

from __future__ import annotations

import asyncio

import pytest

from bot.types import TerminationReason
from tests.bot.helpers import ask, last_tool_results, service
from tests.fakes.openai_server import text, tool_calls

pytestmark = pytest.mark.asyncio


class SharedLoadCancelled:
    """A searcher waiting on a load another caller started, which that caller then cancelled."""

    async def asearch(self, query, k=5, filter=None):
        shared: asyncio.Future[list] = asyncio.get_running_loop().create_future()
        shared.cancel()  # the caller that started the load was stopped
        return await shared


async def test_a_tool_cancelled_from_inside_becomes_an_observation_and_the_run_answers(tmp_path, fake_openai):
    fake_openai.script(tool_calls(("search_policies", {"query": "leave"})), text("The search failed."))
    async with service(tmp_path, fake_openai, SharedLoadCancelled()) as svc:
        reply = await asyncio.wait_for(ask(svc, "how much leave?"), 60)  # only stops a hung test
        row = await svc.store.runs.get(reply.run_id)
    assert reply.reason == TerminationReason.ANSWERED
    (observation,) = last_tool_results(fake_openai.requests[1])
    assert observation["error"] == "search_policies failed: CancelledError"
    assert row is not None and row.reason == "answered"
    assert [step.get("error") for step in row.trace if step["kind"] == "tool"] == ["CancelledError"]
