"""`policypal handoffs --retry --json`: what a script reads is one JSON object, as with every other --json."""

from __future__ import annotations

import io
import json

from adapters.cli.console import ask
from adapters.cli.handoffs import show_handoffs
from adapters.destinations import destinations
from bot.wiring import open_service
from tests.bot.helpers import ALICE, settings_for
from tests.fakes.helpdesk_servers import FakeWebhook, status
from tests.fakes.openai_server import tool_calls


async def test_retry_with_json_prints_one_object_of_what_was_put_back_and_attempted(
    tmp_path, fake_openai, sample_index
):
    """`handoffs --retry --json` ignored --json and printed "1 failed deliveries put back ..." as text."""
    searches = [tool_calls(("search_policies", {"query": q})) for q in ("expenses", "travel booking")]
    fake_openai.script(*searches)  # two searches on a two-step budget: the run gives up, opening HD-1001
    async with FakeWebhook() as hook:
        settings = settings_for(
            tmp_path, fake_openai, max_steps=2, helpdesk_max_attempts=1,
            helpdesk_webhook_url=f"{hook.url}/handoffs", helpdesk_webhook_secret=hook.secret,
        )  # fmt: skip
        hook.script(status(503, "maintenance"))  # the first delivery fails for good (one attempt)
        service = await open_service(settings, searcher=sample_index, destinations=destinations(settings))
        try:
            await ask(service, "tell me about expenses", ALICE, out=io.StringIO())
        finally:
            await service.close()
        retried = io.StringIO()
        code = await show_handoffs(settings, retry=True, as_json=True, destinations=destinations, out=retried)

    assert code == 0
    assert json.loads(retried.getvalue()) == {
        "put_back": 1,
        "attempted": [{"case_id": "HD-1001", "destination": "webhook", "status": "delivered", "detail": "WH-1"}],
    }
    assert len(hook.accepted) == 1
