"""A cancelled run (a platform's Stop, a shutdown's drain) ends at once, wherever it is waiting.

The model call already stopped on the cancel; these are the other waits of a run: a turn of tools,
and the summary call of a compaction.
"""

from __future__ import annotations

import asyncio

import pytest

from bot.types import GaveUp, Inbound, TerminationReason
from tests.bot.helpers import ALICE, eventually, service
from tests.fakes.openai_server import FakeOpenAI, delay, text, tool_calls

pytestmark = pytest.mark.asyncio

SEARCH = "search_policies"


def search(query: str) -> tuple[str, dict[str, str]]:
    return (SEARCH, {"query": query})


class SlowSearch:
    """A search that takes seconds, putting its start and end on the fake's timeline."""

    def __init__(self, fake: FakeOpenAI, seconds: float) -> None:
        self.fake, self.seconds = fake, seconds
        self.started = asyncio.Event()

    async def asearch(self, query, k=5, filter=None):
        self.fake.mark("search started")
        self.started.set()
        await asyncio.sleep(self.seconds)
        self.fake.mark("search finished")
        return []


async def test_a_run_cancelled_while_its_tools_run_ends_without_waiting_for_them(tmp_path, fake_openai):
    searcher = SlowSearch(fake_openai, seconds=4)  # well inside the deadline: only the cancel can end it sooner
    fake_openai.script(tool_calls(search("leave"), search("travel")), text("never asked for"))
    cancel = asyncio.Event()
    async with service(tmp_path, fake_openai, searcher, deadline_s=30) as svc:
        inbound = Inbound("console", "terminal", "t1", ALICE, "leave and travel?", event_id="stop-tools")
        task = asyncio.create_task(svc.handle_message(inbound, cancel))
        await asyncio.wait_for(searcher.started.wait(), 30)
        cancel.set()  # the person pressed Stop while the searches were running
        reply = await asyncio.wait_for(task, 60)  # only stops a hung test
        fake_openai.mark("run ended")
        row = await svc.store.runs.get(reply.run_id)
    assert reply is not None and reply.reason == TerminationReason.CANCELLED
    assert isinstance(reply.outcome, GaveUp)
    assert "search finished" not in fake_openai.events_until("run ended")  # not waited for
    assert len(fake_openai.requests) == 1  # and no model call after the cancel
    assert [step.get("error") for step in row.trace if step["kind"] == "tool"] == ["cancelled", "cancelled"]


async def test_a_run_cancelled_during_a_compaction_summary_ends_without_waiting_for_it(
    tmp_path, fake_openai, sample_index
):
    queries = ["annual leave", "sick leave", "travel class", "expenses receipts"]
    fake_openai.script(
        *[tool_calls(search(q)) for q in queries],
        delay(4, text("- searched leave and travel")),  # the summary call: slow, well inside the deadline
        text("never asked for"),
    )
    cancel = asyncio.Event()
    async with service(
        tmp_path, fake_openai, sample_index, compact_at_tokens=1_500, max_searches=10, max_steps=8,
        max_tokens=60_000, deadline_s=30,
    ) as svc:
        inbound = Inbound("console", "terminal", "t2", ALICE, "leave and travel?", event_id="stop-summary")
        task = asyncio.create_task(svc.handle_message(inbound, cancel))
        await eventually(lambda: any(not r.tools for r in fake_openai.requests), timeout_s=30)  # summarising
        cancel.set()
        reply = await asyncio.wait_for(task, 60)  # only stops a hung test
        fake_openai.mark("run ended")
    assert reply is not None and reply.reason == TerminationReason.CANCELLED
    summary = next(n for n, r in enumerate(fake_openai.requests, 1) if not r.tools)
    assert f"reply {summary}" not in fake_openai.events_until("run ended")  # the summary was not waited for
    assert len(fake_openai.requests) == summary  # and no model call after the cancel
