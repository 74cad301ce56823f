"""What an operator scrapes and probes, when things go wrong: bounded metric labels, metrics without a database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from adapters.server import build_app
from bot.service import PolicyPal
from bot.wiring import open_service
from tests.adapters.server.harness import metric, running, server_env, wait_calls
from tests.bot.helpers import settings_for
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import FakeSlackAPI, dm_event, event_envelope

INVENTED_TOOL = "made_up_tool_7f3a"


def test_a_tool_name_the_model_invents_is_not_a_metric_label(
    tmp_path: Path, built_index: Path, model: FakeOpenAI, slack: FakeSlackAPI
):
    # The model chooses the names of the tools it calls (and a question can steer it): each invented
    # name must not become a time series of its own.
    model.script(tool_calls((INVENTED_TOOL, {"q": "x"})), text("Done."))
    with running(server_env(tmp_path, built_index, model, slack), tmp_path) as server:
        server.send_event(event_envelope(dm_event("U_ALICE", "call your secret tool")))
        wait_calls(slack, "chat.postMessage")
        _, metrics = server.get("/metrics")
    assert INVENTED_TOOL not in metrics
    assert metric(metrics, "policypal_tool_latency_seconds_count", tool="unknown") == 1.0


@pytest_asyncio.fixture
async def served(tmp_path: Path, fake_openai: FakeOpenAI) -> AsyncIterator[tuple[str, PolicyPal]]:
    """The server's app on loopback with a service of its own (and a stub index: nothing to search)."""
    settings = settings_for(tmp_path, fake_openai)
    service = await open_service(settings, searcher=_NoIndex())
    runner = web.AppRunner(build_app(settings, service))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", service
    finally:
        await runner.cleanup()
        await service.close()


class _NoIndex:
    async def asearch(self, query: str, k: int = 5, filter: object = None) -> list[object]:
        return []


async def _refused() -> dict[str, int]:
    raise ConnectionRefusedError(111, "Connect call failed ('10.0.0.5', 5432)")


async def _hung() -> dict[str, int]:
    await asyncio.sleep(3600)
    return {}


@pytest.mark.asyncio
@pytest.mark.parametrize("outage", [_refused, _hung], ids=["refused", "hung"])
async def test_metrics_are_served_without_the_pending_gauge_while_the_database_is_down(served, outage, monkeypatch):
    url, service = served
    service.metrics.runs.labels(reason="answered", platform="slack").inc()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        async with http.get(f"{url}/metrics") as before:
            assert 'policypal_pending_actions{state="open"} 0.0' in await before.text()
        monkeypatch.setattr(service.store.pending, "counts", outage)
        async with http.get(f"{url}/metrics") as during:
            status, body = during.status, await during.text()
    assert status == 200, body
    assert metric(body, "policypal_runs_total", reason="answered", platform="slack") == 1.0
    assert "policypal_pending_actions{" not in body  # gone rather than a stale count
