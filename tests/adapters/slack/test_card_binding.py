"""A ticket card's buttons work on that card only: a value carried to another card's message is refused."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from adapters.slack.blocks import CONFIRM
from bot.cards import card_id
from bot.store import PendingRecord
from tests.adapters.slack.test_app import ALICE, SlackRig, running_slack
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import SlackCall, event_envelope, mention_event

pytestmark = pytest.mark.asyncio

TICKET = {"category": "network_vpn", "summary": "NorthGate VPN fails with NG-809", "urgency": "high"}


@pytest_asyncio.fixture
async def slack(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SlackRig]:
    async for rig in running_slack(tmp_path, fake_openai, monkeypatch):
        yield rig


async def two_cards(rig: SlackRig) -> tuple[tuple[SlackCall, str], tuple[SlackCall, str]]:
    """Alice asks twice, in two threads, for the same ticket: two cards with the same call and hash."""
    proposal = tool_calls(("create_it_ticket", TICKET), content="Please confirm.")
    rig.model.script(proposal, proposal, text("Done."))  # the last one for after a click
    threads = []
    for count in (1, 2):
        event = mention_event(ALICE, "<@UBOT> my VPN says NG-809, please open a ticket")
        await rig.send(event_envelope(event))
        threads.append(((await rig.replies(count))[-1], event["ts"]))
    await posted(rig, 2)
    return threads[0], threads[1]


async def posted(rig: SlackRig, count: int) -> list[PendingRecord]:
    """The open actions once each has its card's message stored."""
    for _ in range(200):
        pending = await rig.service.store.pending.find("open")
        if len(pending) == count and all(p.platform_message for p in pending):
            return pending
        await asyncio.sleep(0.02)
    raise AssertionError("the cards' messages were never stored")


def confirm_value(card: SlackCall) -> str:
    return next(e["value"] for b in card.blocks if b["type"] == "actions" for e in b["elements"]
                if e["action_id"] == CONFIRM)  # fmt: skip


async def test_a_button_from_one_card_clicked_on_another_is_refused_and_changes_nothing(
    slack: SlackRig, caplog: pytest.LogCaptureFixture
):
    (card_a, _), (card_b, thread_b) = await two_cards(slack)
    assert confirm_value(card_a).split(":")[1] == confirm_value(card_b).split(":")[1]  # the same hash
    caplog.set_level(logging.WARNING, logger="bot.pending")

    # Card A's Confirm value, sent as a click on card B's message (same call, same hash).
    status, _, _ = await slack.click(ALICE, CONFIRM, confirm_value(card_a), message_ts=card_b.answer["ts"],
                                     thread_ts=thread_b)  # fmt: skip
    assert status == 200
    (note,) = await slack.slack.wait_for("chat.postEphemeral")
    await slack.service.inbox.drain(5.0)
    await slack.service.outbox.drain(5.0)

    assert (note["user"], note["text"]) == (ALICE, "This button belongs to another card.")
    assert note["thread_ts"] == thread_b
    assert await slack.service.store.tickets.count() == 0
    assert [p.state for p in await slack.service.store.pending.find("open")] == ["open", "open"]
    assert slack.slack.calls_to("chat.update") == []  # card B (and card A) unchanged
    assert any("not from its own card" in r.getMessage() for r in caplog.records)


async def test_a_cards_own_button_names_its_card_and_still_confirms_it(slack: SlackRig):
    _, (card_b, thread_b) = await two_cards(slack)
    pending_id, _, card = confirm_value(card_b).split(":")
    assert card == card_id(pending_id)
    status, _, _ = await slack.click(ALICE, CONFIRM, confirm_value(card_b), message_ts=card_b.answer["ts"],
                                     thread_ts=thread_b)  # fmt: skip
    assert status == 200
    updates = await slack.slack.wait_for("chat.update", 2)
    assert {u["ts"] for u in updates} == {card_b.answer["ts"]}
    assert await slack.service.store.tickets.count() == 1
    states = sorted(p.state for p in [*await slack.service.store.pending.find("open"),
                                      *await slack.service.store.pending.find("done")])  # fmt: skip
    assert states == ["done", "open"]


async def test_a_button_from_an_earlier_release_works_on_its_own_card_only(slack: SlackRig):
    (card_a, thread_a), (card_b, thread_b) = await two_cards(slack)
    old_value = ":".join(confirm_value(card_a).split(":")[:2])  # pending id and hash, no card id

    await slack.click(ALICE, CONFIRM, old_value, message_ts=card_b.answer["ts"], thread_ts=thread_b)
    (note,) = await slack.slack.wait_for("chat.postEphemeral")
    assert note["text"] == "This button belongs to another card."
    assert await slack.service.store.tickets.count() == 0

    await slack.click(ALICE, CONFIRM, old_value, message_ts=card_a.answer["ts"], thread_ts=thread_a)
    await slack.slack.wait_for("chat.update", 2)
    assert await slack.service.store.tickets.count() == 1

