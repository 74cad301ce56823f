"""Teams end to end: a run that exhausts its step budget answers honestly with the case id in the channel
thread, and the server's outbox posts the case card to the helpdesk channel."""

from __future__ import annotations

import pytest
from aiohttp import web

from adapters.destinations import destinations
from adapters.server import build_app
from bot.wiring import open_service
from tests.bot.helpers import OnePassage, settings_for, two_searches, wait_delivered
from tests.fakes.bot_connector import CHANNEL, TENANT, FakeBotConnector

pytestmark = pytest.mark.asyncio

HELPDESK = "19:helpdesk@thread.tacv2"


async def test_a_step_budget_give_up_in_teams_names_the_case_and_the_helpdesk_channel_gets_the_card(
    tmp_path, fake_openai
):
    fake_openai.script(*two_searches())
    async with FakeBotConnector() as channel:
        settings = settings_for(
            tmp_path,
            fake_openai,
            max_steps=2,
            teams_allow_unauthenticated=True,
            teams_allowed_tenants=TENANT,
            helpdesk_teams_service_url=channel.service_url,
            helpdesk_teams_conversation_id=HELPDESK,
        )
        service = await open_service(settings, searcher=OnePassage(), destinations=destinations(settings))
        runner = web.AppRunner(build_app(settings, service), shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            activity = channel.channel_message("Do I need receipts for taxis?")
            status, _ = await channel.post(f"http://127.0.0.1:{runner.addresses[0][1]}/api/messages", activity)
            thread = f"{CHANNEL};messageid={activity['id']}"
            reply = await channel.wait_for(lambda r: r.type == "message" and r.conversation_id == thread)
            card_post = await channel.wait_for(lambda r: r.type == "message" and r.conversation_id == HELPDESK)
            transcript = await channel.wait_for(
                lambda r: r.type == "message" and r.conversation_id == f"{HELPDESK};messageid={card_post.id}"
            )
            await wait_delivered(service.store)
            case = await service.store.cases.get(1)
        finally:
            await runner.cleanup()
            await service.close()

    assert status in (200, 201)
    shown = reply.text + str(reply.cards)
    assert "I couldn't finish this reliably" in shown and "HD-1001" in shown
    assert case.platform == "teams" and case.reason == "step_budget"
    assert case.transcript["runs"][0]["trace"][1]["arguments"] == '{"query": "expense receipts"}'
    (card,) = card_post.cards
    facts = {f["title"]: f["value"] for block in card["body"] if "facts" in block for f in block["facts"]}
    assert facts["Case"] == "HD-1001"
    assert "Do I need receipts for taxis?" in str(card["body"])
    assert "HD-1001" in transcript.text and "expense receipts" in transcript.text  # the whole transcript
