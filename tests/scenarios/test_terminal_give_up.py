"""End to end in the terminal: a run that gives up tells the user the case id, and the helpdesk gets it."""

from __future__ import annotations

import io
import json

import pytest

from adapters.cli.console import ask
from adapters.cli.handoffs import show_handoffs
from adapters.destinations import destinations
from bot.errors import ConfigError
from bot.wiring import open_service
from tests.bot.helpers import ALICE, settings_for
from tests.fakes.helpdesk_servers import FakeWebhook, status
from tests.fakes.openai_server import tool_calls
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.asyncio


def search(query: str):
    return ("search_policies", {"query": query})


def helpdesk_settings(tmp_path, fake_openai, slack: FakeSlackAPI, hook: FakeWebhook):
    return settings_for(
        tmp_path,
        fake_openai,
        max_steps=2,
        slack_bot_token=slack.token,
        slack_api_url=slack.base_url,
        helpdesk_slack_channel="C0HELPDESK",
        helpdesk_webhook_url=f"{hook.url}/handoffs",
        helpdesk_webhook_secret=hook.secret,
    )


async def test_a_step_budget_give_up_tells_the_case_id_and_the_helpdesk_channel_gets_the_transcript(
    tmp_path, fake_openai, sample_index
):
    fake_openai.script(tool_calls(search("expenses")), tool_calls(search("travel booking")))
    async with FakeSlackAPI() as slack, FakeWebhook() as hook:
        settings = helpdesk_settings(tmp_path, fake_openai, slack, hook)
        svc = await open_service(settings, searcher=sample_index, destinations=destinations(settings))
        out = io.StringIO()
        code = await ask(svc, "tell me about expenses", ALICE, out=out)
        await svc.close()
    printed = out.getvalue()
    assert code == 3
    assert "I couldn't finish this reliably. I've passed this to the helpdesk as case HD-1001;" in printed
    assert "(HD-1001 sent to the helpdesk via slack)" in printed
    assert "(HD-1001 sent to the helpdesk via webhook)" in printed
    summary, *thread = slack.calls_to("chat.postMessage")
    assert summary["channel"] == "C0HELPDESK" and summary["text"].startswith("HD-1001 · Alice")
    assert "ran out of steps" in summary.block_text and "tell me about expenses" in summary.block_text
    transcript = "".join(call["text"] for call in thread)
    assert '"query": "expenses"' in transcript.replace("&quot;", '"') and "travel booking" in transcript
    (case_json,) = [r.json for r in hook.requests]
    assert case_json["case"]["case_id"] == "HD-1001"
    assert [s["kind"] for s in case_json["case"]["transcript"]["runs"][0]["trace"]] == ["model", "tool"] * 2


async def test_a_destination_that_is_down_leaves_the_case_queued_until_a_retry(tmp_path, fake_openai, sample_index):
    fake_openai.script(tool_calls(search("expenses")), tool_calls(search("travel booking")))
    async with FakeSlackAPI() as slack, FakeWebhook() as hook:
        settings = helpdesk_settings(tmp_path, fake_openai, slack, hook)
        settings = settings.model_copy(update={"helpdesk_max_attempts": 1})
        hook.script(status(503, "maintenance"))
        svc = await open_service(settings, searcher=sample_index, destinations=destinations(settings))
        out = io.StringIO()
        await ask(svc, "tell me about expenses", ALICE, out=out)
        await svc.close()
        assert "(HD-1001 could not be sent via webhook: the helpdesk webhook had a server error (503)" in out.getvalue()

        failed, retried = io.StringIO(), io.StringIO()
        assert await show_handoffs(settings, failed=True, out=failed) == 0
        assert await show_handoffs(settings, retry=True, destinations=destinations, out=retried) == 0
    assert "✗ webhook (1 attempts): the helpdesk webhook had a server error (503): maintenance" in failed.getvalue()
    assert "1 failed deliveries put back" in retried.getvalue()
    assert "HD-1001 → webhook: delivered" in retried.getvalue()
    assert len(slack.calls_to("chat.postMessage", lambda c: "thread_ts" not in c.params)) == 1  # not re-sent
    assert len(hook.accepted) == 1


async def test_a_half_configured_destination_is_refused_at_start(tmp_path, fake_openai):
    settings = settings_for(tmp_path, fake_openai, helpdesk_webhook_url="https://helpdesk.example/hook")
    with pytest.raises(ConfigError, match="POLICYPAL_HELPDESK_WEBHOOK_SECRET"):
        destinations(settings)
    settings = settings_for(tmp_path, fake_openai, helpdesk_slack_channel="C0HELPDESK")
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN"):
        destinations(settings)
    settings = settings_for(tmp_path, fake_openai, helpdesk_smtp_host="smtp.example")
    with pytest.raises(ConfigError, match="POLICYPAL_HELPDESK_EMAIL_FROM"):
        destinations(settings)
    assert json.dumps([d.name for d in destinations(settings_for(tmp_path, fake_openai))]) == "[]"
