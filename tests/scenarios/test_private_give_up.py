"""End to end in a private place: a give-up in a Slack DM or a Teams personal chat names the case and
promises what the helpdesk can do there (staff cannot post in that chat), not a reply in the thread."""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from adapters.server import build_app
from adapters.slack import EVENTS_PATH
from bot.wiring import open_service
from tests.bot.helpers import OnePassage, settings_for, two_searches
from tests.fakes.bot_connector import TENANT, FakeBotConnector
from tests.fakes.slack_api import FakeSlackAPI, dm_event, event_envelope, signed_headers

pytestmark = pytest.mark.asyncio

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


async def test_a_give_up_in_a_slack_dm_promises_an_email_not_a_reply_in_the_thread(tmp_path, fake_openai):
    fake_openai.script(*two_searches())
    async with FakeSlackAPI() as slack:
        slack.add_user("U_ALICE", "alice", "alice@example.com")
        settings = settings_for(tmp_path, fake_openai, max_steps=2, slack_bot_token=slack.token,
                                slack_signing_secret=SECRET, slack_api_url=slack.base_url)  # fmt: skip
        service = await open_service(settings, searcher=OnePassage())
        server = TestServer(build_app(settings, service), host="127.0.0.1")
        await server.start_server()
        try:
            event = dm_event("U_ALICE", "do I need receipts for taxis?", channel="D0ALICE")
            body = json.dumps(event_envelope(event))
            async with aiohttp.ClientSession() as session:
                url = str(server.make_url(EVENTS_PATH))
                async with session.post(url, data=body.encode(), headers=signed_headers(SECRET, body)) as response:
                    assert response.status == 200
            (reply,) = await slack.wait_for("chat.postMessage", where=lambda c: c.get("channel") == "D0ALICE")
        finally:
            await server.close()
            await service.close()
    shown = reply.block_text
    assert "I couldn't finish this reliably" in shown and "HD-1001" in shown
    assert "someone will reply by email to alice@example.com" in shown and "in this thread" not in shown


async def test_a_give_up_in_a_teams_personal_chat_promises_an_email_not_a_reply_in_the_thread(tmp_path, fake_openai):
    fake_openai.script(*two_searches())
    async with FakeBotConnector() as channel:
        settings = settings_for(tmp_path, fake_openai, max_steps=2, teams_allow_unauthenticated=True,
                                teams_allowed_tenants=TENANT)  # fmt: skip
        service = await open_service(settings, searcher=OnePassage())
        runner = web.AppRunner(build_app(settings, service), shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            activity = channel.personal_message("Do I need receipts for taxis?")
            status, _ = await channel.post(f"http://127.0.0.1:{runner.addresses[0][1]}/api/messages", activity)
            chat = activity["conversation"]["id"]
            reply = await channel.wait_for(lambda r: r.type == "message" and r.conversation_id == chat)
        finally:
            await runner.cleanup()
            await service.close()
    assert status in (200, 201)
    assert "I couldn't finish this reliably" in reply.text and "HD-1001" in reply.text
    assert "someone will reply by email to alice@contoso.example" in reply.text and "in this thread" not in reply.text
