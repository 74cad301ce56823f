"""Slack end to end: a reply whose post may have gone through on a failed attempt is never posted twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from adapters.slack.app import SLACK
from bot.delivery import OutboxPolicy
from tests.adapters.slack.test_app import ALICE, SlackRig, answer, running_slack
from tests.fakes.openai_server import FakeOpenAI, tool_calls
from tests.fakes.slack_api import dm_event, event_envelope

pytestmark = pytest.mark.asyncio

RETRY_AT_ONCE = OutboxPolicy(max_attempts=4, backoff_s=0.05, max_backoff_s=0.05, stale_after_s=60.0)
TICKET = {"category": "hardware", "summary": "Laptop screen broken", "urgency": "normal"}


@pytest_asyncio.fixture
async def slack(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SlackRig]:
    async for rig in running_slack(tmp_path, fake_openai, monkeypatch):
        rig.service.outbox.post_policy = RETRY_AT_ONCE
        yield rig


async def settled(rig: SlackRig, thread_ts: str) -> list[str]:
    """The states of the thread's outbox rows, once none is waiting for another attempt."""
    key = f"slack:T0TEAM:D0ALICE:{thread_ts}"
    async with asyncio.timeout(5):
        while True:
            rows = await rig.service.store.outbox.of_conversation(key)
            if rows and all(row.state in ("delivered", "failed") for row in rows):
                return [row.state for row in rows]
            await asyncio.sleep(0.02)


async def test_an_answer_slack_took_whose_response_was_lost_is_not_posted_again(
    slack: SlackRig, monkeypatch: pytest.MonkeyPatch
):
    client = slack.app[SLACK].bridge.writer.client
    real_post, taken = client.chat_postMessage, []

    async def response_lost_once(**kwargs: Any) -> Any:
        response = await real_post(**kwargs)  # Slack posted it...
        if not taken:
            taken.append(response["ts"])
            raise TimeoutError  # ...but its answer never arrived
        return response

    monkeypatch.setattr(client, "chat_postMessage", response_lost_once)
    slack.model.script(answer())
    event = dm_event(ALICE, "Can I work from abroad?")
    await slack.send(event_envelope(event))
    assert await settled(slack, event["ts"]) == ["delivered"]
    assert len(slack.slack.threads[("D0ALICE", event["ts"])]) == 1  # the answer once, not twice
    assert slack.slack.calls_to("conversations.replies")  # the retry looked before posting


async def test_a_card_whose_place_was_not_recorded_is_not_posted_again(
    slack: SlackRig, monkeypatch: pytest.MonkeyPatch
):
    real_card_posted, failed = slack.service.card_posted, []

    async def fails_once(*args: Any, **kwargs: Any) -> Any:
        if not failed:
            failed.append(args)
            raise ConnectionError("database went away")  # after chat.postMessage took the card
        return await real_card_posted(*args, **kwargs)

    monkeypatch.setattr(slack.service, "card_posted", fails_once)
    slack.model.script(tool_calls(("create_it_ticket", TICKET)))
    event = dm_event(ALICE, "My laptop screen is broken, please open a ticket")
    await slack.send(event_envelope(event))
    assert await settled(slack, event["ts"]) == ["delivered"]
    cards = [m for m in slack.slack.threads[("D0ALICE", event["ts"])] if m["text"].startswith("Please confirm")]
    assert len(cards) == 1  # one card with Confirm and Cancel, not two

