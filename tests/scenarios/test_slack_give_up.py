"""Slack end to end: a run that exhausts its step budget answers honestly with the case id in the user's
thread, and the server's outbox posts the case with its transcript to the helpdesk channel."""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from adapters.destinations import destinations
from adapters.server import build_app
from adapters.slack import EVENTS_PATH
from bot.wiring import open_service
from tests.bot.helpers import OnePassage, settings_for, two_searches, wait_delivered
from tests.fakes.slack_api import FakeSlackAPI, event_envelope, mention_event, signed_headers

pytestmark = pytest.mark.asyncio

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
HELPDESK = "C0HELPDESK"


async def test_a_step_budget_give_up_in_slack_names_the_case_and_the_helpdesk_channel_gets_the_transcript(
    tmp_path, fake_openai
):
    fake_openai.script(*two_searches())
    async with FakeSlackAPI() as slack:
        slack.add_user("U_ALICE", "alice", "alice@example.com")
        settings = settings_for(
            tmp_path,
            fake_openai,
            max_steps=2,
            slack_bot_token=slack.token,
            slack_signing_secret=SECRET,
            slack_api_url=slack.base_url,
            helpdesk_slack_channel=HELPDESK,
        )
        service = await open_service(settings, searcher=OnePassage(), destinations=destinations(settings))
        server = TestServer(build_app(settings, service), host="127.0.0.1")
        await server.start_server()
        try:
            event = mention_event("U_ALICE", "<@UBOT> do I need receipts for taxis?", channel="C0GENERAL")
            body = json.dumps(event_envelope(event))
            async with aiohttp.ClientSession() as session:
                url = str(server.make_url(EVENTS_PATH))
                async with session.post(url, data=body.encode(), headers=signed_headers(SECRET, body)) as response:
                    assert response.status == 200
            (reply,) = await slack.wait_for("chat.postMessage", where=lambda c: c.get("channel") == "C0GENERAL")
            await slack.wait_for("chat.postMessage", 2, where=lambda c: c.get("channel") == HELPDESK)
            await wait_delivered(service.store)
            (record,) = await service.store.outbox.deliveries([1])
        finally:
            await server.close()
            await service.close()

    assert reply["thread_ts"] == event["ts"]
    shown = reply.block_text
    assert "I couldn't finish this reliably" in shown and "HD-1001" in shown
    assert "reply in this thread" in shown

    assert (record.destination, record.state) == ("slack", "delivered")
    summary, *thread = slack.calls_to("chat.postMessage", lambda c: c.get("channel") == HELPDESK)
    assert summary["text"].startswith("HD-1001 · alice (U_ALICE, alice@example.com) · ran out of steps")
    assert "do I need receipts for taxis?" in summary.block_text
    assert "https://acme.slack.com/archives/C0GENERAL/p" in summary.block_text  # the link back to the thread
    assert "thread_ts" not in summary.params
    assert all(call["thread_ts"] == record.external_ref.split("/")[1] for call in thread)
    transcript = "".join(call["text"] for call in thread).replace("&quot;", '"')
    assert "# HD-1001: ran out of steps" in transcript
    assert '"query": "expense receipts"' in transcript and '"query": "taxi expenses"' in transcript
