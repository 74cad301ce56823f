"""Helpdesk cases in the console: deliveries as they stand, a retry that really resends, restricted transcripts."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from bot.helpdesk import case_number
from tests.adapters.web import scenario
from tests.adapters.web.scenario import ALICE, Finds
from tests.adapters.web.test_pages import cells

pytestmark = pytest.mark.asyncio
POLL_S = 0.05
WAIT_S = 30.0  # generous: only a bound on a hang, never a measured duration


class Helpdesk:
    """A helpdesk webhook on loopback that fails until told to accept."""

    def __init__(self) -> None:
        self.accepting = False
        self.received: list[dict] = []

    async def hook(self, request: web.Request) -> web.Response:
        if not self.accepting:
            return web.Response(status=500, text="helpdesk down")
        self.received.append(await request.json())
        return web.json_response({"id": f"EXT-{len(self.received)}"})


@pytest_asyncio.fixture
async def helpdesk() -> AsyncIterator[tuple[Helpdesk, str]]:
    desk = Helpdesk()
    app = web.Application()
    app.router.add_post("/hook", desk.hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield desk, f"http://127.0.0.1:{port}/hook"
    await runner.cleanup()


async def until(console, path: str, pattern: str) -> str:
    """The page once it matches ``pattern`` (the server's outbox worker runs on its own schedule)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            _, page = await console.get(path)
            if re.search(pattern, page):
                return page
            await asyncio.sleep(POLL_S)


async def test_a_failed_delivery_shows_failed_and_retry_sends_it_again(start_console, fake_openai, helpdesk):
    desk, url = helpdesk
    console = await start_console(
        Finds(),
        helpdesk=True,
        helpdesk_webhook_url=url,
        helpdesk_webhook_secret="whsec-console-test-1234",
        helpdesk_max_attempts=1,
    )
    reply = await scenario.not_covered(console.service, fake_openai)
    case = await console.service.request_handoff(reply.conversation_key, ALICE, question="I want a human")
    number = case_number(case.case_id)
    page = await until(console, f"/console/cases/{number}", r'id="case-status">failed<')
    assert cells(page, "deliveries")[0][:2] == ["webhook", "failed"] and "500" in page
    _, listing = await console.get("/console/cases", params={"failed": "1"})
    assert [r[0] for r in cells(listing, "cases")] == [case.case_id]
    token = re.search(r'name="form_token" value="([0-9a-f]+)"', page).group(1)
    desk.accepting = True
    async with console.http.post(
        f"{console.url}/console/cases/{number}/retry", data={"form_token": token}, allow_redirects=False
    ) as retried:
        assert retried.status == 303 and retried.headers["Location"].endswith("retried=1")
    page = await until(console, f"/console/cases/{number}", r'id="case-status">delivered<')
    assert (
        cells(page, "deliveries")[0][:3] == ["webhook", "delivered", "1"] and "EXT-1" in page
    )  # a retry starts its count again
    assert len(desk.received) == 1
    assert "does the company pay for my gym?" in page  # the transcript: the run before the request


async def test_a_case_from_a_restricted_conversation_hides_its_transcript(start_console, fake_openai):
    console = await start_console(Finds())
    reply = await scenario.restricted(console.service, fake_openai)
    case = await console.service.request_handoff(reply.conversation_key, scenario.DANA)
    _, page = await console.get(f"/console/cases/{case_number(case.case_id)}")
    assert "only operators named in POLICYPAL_CONSOLE_RESTRICTED_OPERATORS" in page
    assert "Finance and facilities" not in page and 'id="transcript"' not in page
