"""A run task cancelled outright (a shutdown's drain past its grace) takes its tool calls and its model
call down with it, instead of leaving them running with nobody waiting for them."""

from __future__ import annotations

import asyncio

import pytest

from bot.types import Inbound
from tests.bot.helpers import ALICE, eventually, service
from tests.fakes.openai_server import FakeOpenAI, delay, text, tool_calls

pytestmark = pytest.mark.asyncio


class HungSearch:
    """A search that never finishes by itself; its start and its cancellation go on the fake's timeline."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.started = asyncio.Event()

    async def asearch(self, query, k=5, filter=None):
        self.fake.mark("search started")
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.fake.mark("search cancelled")
            raise
        return []


async def test_a_run_task_cancelled_while_its_tools_run_cancels_them(tmp_path, fake_openai):
    searcher = HungSearch(fake_openai)
    fake_openai.script(tool_calls(("search_policies", {"query": "leave"})))
    async with service(tmp_path, fake_openai, searcher, deadline_s=30) as svc:
        inbound = Inbound("console", "terminal", "t1", ALICE, "leave?", event_id="hard-cancel-tools")
        task = asyncio.create_task(svc.handle_message(inbound, asyncio.Event()))
        await asyncio.wait_for(searcher.started.wait(), 30)
        task.cancel()  # what BackgroundTasks.drain does to a run still going at shutdown
        with pytest.raises(asyncio.CancelledError):
            await task
        fake_openai.mark("run ended")
        await eventually(lambda: "search cancelled" in fake_openai.events, timeout_s=10)
    assert "search cancelled" in fake_openai.events_until("run ended")  # stopped with the run, not left behind


async def test_a_run_task_cancelled_while_the_model_answers_hangs_up_on_the_model(tmp_path, fake_openai):
    fake_openai.script(delay(30, text("never read")))
    async with service(tmp_path, fake_openai, HungSearch(fake_openai), deadline_s=30) as svc:
        inbound = Inbound("console", "terminal", "t1", ALICE, "leave?", event_id="hard-cancel-model")
        task = asyncio.create_task(svc.handle_message(inbound, asyncio.Event()))
        await eventually(lambda: "request 1" in fake_openai.events, timeout_s=30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await eventually(lambda: "abandoned 1" in fake_openai.events, timeout_s=10)  # the client hung up
    assert "reply 1" not in fake_openai.events
