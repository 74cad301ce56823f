"""Slack's limits, held by every message PolicyPal sends and enforced by the fake Web API.

The fake checks each payload with slack_sdk's Block Kit models and the documented limits they leave
out (tests/fakes/conformance.py), refuses what Slack would refuse and fails the test that sent it.
Here: that it does, for each limit; and that what is too long for one message (a card, a decided
card, a give-up, a handoff, a notice) is split like an answer instead, with nothing lost.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import SlackSender
from adapters.slack.blocks import (
    CONFIRM,
    MESSAGE_CHARS,
    SlackMessage,
    button,
    card_messages,
    card_view_message,
    context,
    give_up_messages,
    handoff_messages,
    notice_messages,
    section,
)
from adapters.slack.inbound import BotIdentity
from adapters.slack.post import SlackWriter, web_client
from bot.cards import ERROR_CHARS, CardView
from bot.store import Place
from bot.types import GaveUp, PendingAction, TerminationReason
from tests.bot.helpers import OnePassage, service
from tests.fakes import conformance
from tests.fakes.slack_api import FakeSlackAPI

NOW = datetime(2026, 3, 4, 10, 30, tzinfo=UTC)
TICKET = {"category": "network_vpn", "summary": "VPN fails every time", "urgency": "high"}
LONG = "\n\n".join(f"Paragraph {n}: " + "the policy says this and that " * 40 for n in range(30))  # ~36,000
JIRA_ERROR = json.dumps({"errorMessages": [], "errors": {f"customfield_{n}": "x" * 90 for n in range(30)}})


def words(text: str) -> list[str]:
    return re.sub(r"```|[*_`]", " ", text).split()


def shown(messages: list[SlackMessage]) -> str:
    return " ".join(b.get("text", {}).get("text", "") for m in messages for b in m.blocks if b["type"] == "section")


def acceptable(messages: list[SlackMessage]) -> bool:
    return all(conformance.slack_refusal("chat.postMessage", m.payload()) is None for m in messages)


def action(text: str = "I can raise this ticket for you.", **arguments: Any) -> PendingAction:
    return PendingAction("p1", "create_it_ticket", {**TICKET, **arguments}, "h1", "U_ALICE", text, NOW)


def view(state: str, text: str = "Shall I?", **fields: Any) -> CardView:
    return CardView("p1", "h1", "create_it_ticket", text, TICKET, "U_ALICE", state, NOW + timedelta(hours=1),
                    decider="U_ALICE", decided_at=NOW, **fields)  # fmt: skip


# --- the fake refuses what Slack refuses ------------------------------------------------------------


@pytest_asyncio.fixture
async def slack() -> AsyncIterator[tuple[FakeSlackAPI, AsyncWebClient]]:
    async with FakeSlackAPI() as fake, aiohttp.ClientSession() as session:
        yield fake, AsyncWebClient(token=fake.token, base_url=fake.base_url, session=session)


def actions(*elements: dict[str, Any]) -> dict[str, Any]:
    return {"type": "actions", "elements": list(elements)}


REFUSED = {
    "section text over 3,000": ([section("x" * 3_001)], "invalid_blocks"),
    "context text over 3,000 (slack_sdk passes it)": ([context("x" * 3_463)], "invalid_blocks"),
    "section field over 2,000": ([{"type": "section", "fields": [{"type": "plain_text", "text": "x" * 2_001}]}],
                                 "invalid_blocks"),
    "eleven section fields": ([{"type": "section", "fields": [{"type": "plain_text", "text": "x"}] * 11}],
                              "invalid_blocks"),
    "button text over 75": ([actions(button("x" * 76, CONFIRM, "v"))], "invalid_blocks"),
    "action_id over 255": ([actions(button("Go", "a" * 256, "v"))], "invalid_blocks"),
    "button value over 2,000": ([actions(button("Go", CONFIRM, "v" * 2_001))], "invalid_blocks"),
    "51 blocks": ([section("x")] * 51, "invalid_blocks"),
    "an unknown block": ([{"type": "sparkle", "text": "x"}], "invalid_blocks"),
    "an unknown element": ([actions({"type": "slider", "action_id": "a"})], "invalid_blocks"),
    "markdown blocks over 12,000 in all": ([{"type": "markdown", "text": "x" * 6_001}] * 2, "invalid_blocks"),
    "blocks over 13,000 characters": ([section("x" * 2_900)] * 5, "msg_blocks_too_long"),
}  # fmt: skip


@pytest.mark.asyncio
@pytest.mark.parametrize("case", list(REFUSED))
async def test_the_fake_refuses_blocks_slack_refuses_and_records_the_violation(slack, case):
    fake, client = slack
    blocks, error = REFUSED[case]
    with pytest.raises(SlackApiError) as refused:
        await client.chat_postMessage(channel="C1", text="hi", blocks=blocks)
    assert refused.value.response["error"] == error
    assert fake.violations and conformance.take()  # taken: this test sent them on purpose
    assert fake.delivered() == []


@pytest.mark.asyncio
async def test_the_fake_refuses_message_text_over_40000_characters_in_updates_too(slack):
    fake, client = slack
    with pytest.raises(SlackApiError) as refused:
        await client.chat_update(channel="C1", ts="1.2", text="x" * 40_001)
    assert refused.value.response["error"] == "msg_too_long"
    assert conformance.take() == [f"Slack chat.update: {v}" for v in fake.violations] != []


@pytest.mark.asyncio
async def test_the_fake_refuses_a_stream_call_over_12000_characters(slack):
    _, client = slack
    with pytest.raises(SlackApiError) as refused:
        await client.chat_appendStream(channel="D1", ts="1.2", markdown_text="x" * 12_001)
    assert refused.value.response["error"] == "msg_too_long" and conformance.take()


@pytest.mark.asyncio
async def test_blocks_within_every_limit_are_taken(slack):
    fake, client = slack
    fields = [{"type": "plain_text", "text": "x" * 2_000}] * 2
    blocks = [section("x" * 3_000), context("y" * 3_000), {"type": "section", "fields": fields},
              actions(button("x" * 75, "a" * 255, "v" * 2_000))]  # fmt: skip
    await client.chat_postMessage(channel="C1", text="x" * 40_000, blocks=blocks)
    assert fake.violations == [] and len(fake.delivered()) == 1


# --- what is too long for one message is split like an answer ----------------------------------------


def test_a_card_with_a_long_proposal_is_split_and_its_last_part_holds_the_buttons():
    parts = card_messages(action(LONG))
    assert len(parts) > 1 and acceptable(parts)
    assert all(len(p.blocks) <= 50 and len(json.dumps(p.blocks)) <= MESSAGE_CHARS for p in parts)
    *body, last = parts
    assert [e["action_id"] for b in last.blocks if b["type"] == "actions" for e in b["elements"]] == [
        "pp_confirm", "pp_cancel",
    ]  # fmt: skip
    assert words(LONG) == words(shown(body))[: len(words(LONG))]  # every word, in order
    assert "VPN fails every time" in json.dumps([p.blocks for p in body])  # the frozen fields too


def test_a_short_card_stays_one_message():
    (card,) = card_messages(action())
    assert card.blocks[-2]["block_id"] == "pp_card_actions" and acceptable([card])


@pytest.mark.parametrize("state", ["open", "working", "done", "failed", "cancelled", "expired"])
def test_a_long_cards_update_replaces_only_its_last_part(state):
    """The buttons' message is the one a click or an update names: it becomes the state, the body stays."""
    shown_now = card_view_message(view(state, LONG, result={"error": "boom"} if state == "failed" else None))
    assert acceptable([shown_now])
    assert LONG[:40] not in json.dumps(shown_now.blocks)
    assert len(shown_now.blocks) <= 2


def test_a_ticket_systems_long_json_error_is_capped_on_the_card():
    failed = card_view_message(view("failed", result={"error": f"The ticket was not created: {JIRA_ERROR}"}))
    line = failed.blocks[-1]["elements"][0]["text"]
    assert len(JIRA_ERROR) > 3_000 and acceptable([failed])
    assert len(line) < ERROR_CHARS + 200 and line.count("…") == 1  # cut, and visibly so
    assert "The ticket was not created:" in line


def test_a_long_give_up_is_split_with_its_reference_and_buttons_at_the_end():
    gave_up = GaveUp(TerminationReason.DEADLINE, LONG)
    parts = give_up_messages(gave_up, "run_x")
    assert len(parts) > 1 and acceptable(parts)
    assert words(LONG) == words(shown(parts))
    assert "run_x" in json.dumps(parts[-1].blocks) and parts[-1].blocks[-1]["type"] == "actions"


def test_a_long_handoff_and_a_long_notice_are_split_too():
    for parts in (handoff_messages(LONG, "HD-1001"), notice_messages(LONG)):
        assert len(parts) > 1 and acceptable(parts)
        assert words(LONG) == words(shown(parts))
    assert "HD-1001" in json.dumps(handoff_messages(LONG, "HD-1001")[-1].blocks)


def test_a_short_notice_notifies_with_its_whole_text():
    (notice,) = notice_messages("Ask me about a *policy*.")
    assert notice.text == "Ask me about a policy."


# --- through the outbox and the fake Web API -------------------------------------------------------------

KEY = "slack:T0TEAM:C1:1700.1"


@pytest.mark.asyncio
async def test_a_long_give_up_reaches_slack_in_parts_all_accepted(tmp_path, fake_openai):
    async with FakeSlackAPI() as fake, aiohttp.ClientSession() as session:
        writer = SlackWriter(web_client(fake.token, session, fake.base_url), BotIdentity("UBOT", "BBOT", "T0TEAM"))
        async with service(tmp_path, fake_openai, OnePassage()) as svc:
            svc.outbox.register(SlackSender(writer, svc))
            await svc.store.threads.remember_place(Place(KEY, "slack", "T0TEAM", "C1", "1700.1", None))
            assert await svc.tell(KEY, LONG, run_id="run_1", case_id="HD-1001")
            await svc.outbox.drain(5)
            (row,) = await svc.store.outbox.of_conversation(KEY)
    posts = fake.delivered()
    assert len(posts) > 1 and fake.violations == [] and row.state == "delivered"
    assert all(p["thread_ts"] == "1700.1" for p in posts)
    assert "HD-1001" in posts[-1].block_text


@pytest.mark.asyncio
async def test_a_card_update_with_a_long_error_is_accepted(tmp_path):
    async with FakeSlackAPI() as fake, aiohttp.ClientSession() as session:
        writer = SlackWriter(web_client(fake.token, session, fake.base_url), BotIdentity("UBOT", "BBOT", "T0TEAM"))
        failed = view("failed", result={"error": f"The ticket was not created: {JIRA_ERROR}"}, case_id="HD-1002")
        await writer.update("C1", "1700.2", card_view_message(failed))
    (update,) = fake.delivered("chat.update")
    assert fake.violations == [] and "HD-1002" in update.block_text
