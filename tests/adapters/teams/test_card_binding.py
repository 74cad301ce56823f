"""A ticket card's buttons work on that card only: data carried to another card's message is refused."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from adapters.teams.cards import CARD_CONTENT_TYPE, MESSAGE_CONTENT_TYPE
from bot.cards import card_id
from bot.store import PendingRecord
from tests.adapters.teams.test_app import TICKET, Teams
from tests.fakes.bot_connector import Recorded
from tests.fakes.openai_server import text, tool_calls

pytestmark = pytest.mark.asyncio



async def two_cards(teams: Teams) -> tuple[Recorded, Recorded]:
    """Alice asks twice, in two channel threads, for the same ticket: two cards with the same call and hash."""
    proposal = tool_calls(("create_it_ticket", TICKET), content="I can raise a ticket for this. Please confirm.")
    teams.model.script(proposal, proposal, text("Done."))  # the last one for after a click
    posted = []
    for count in (1, 2):
        await teams.post(teams.channel.channel_message("my VPN says NG-809, please open a ticket"))
        posted.append(await teams.reply(count=count))
    await stored(teams, 2)
    return posted[0], posted[1]


async def stored(teams: Teams, count: int) -> list[PendingRecord]:
    for _ in range(200):
        pending = await teams.service.store.pending.find("open")
        if len(pending) == count and all(p.platform_message for p in pending):
            return pending
        await asyncio.sleep(0.02)
    raise AssertionError("the cards' messages were never stored")


def confirm_data(posted: Recorded) -> dict[str, Any]:
    (card,) = posted.cards
    return dict(next(a["data"] for a in card["actions"] if a["verb"] == "confirm"))


async def test_a_button_from_one_card_clicked_on_another_is_refused_and_changes_nothing(
    teams: Teams, caplog: pytest.LogCaptureFixture
):
    card_a, card_b = await two_cards(teams)
    assert confirm_data(card_a)["args_hash"] == confirm_data(card_b)["args_hash"]  # the same call
    caplog.set_level(logging.WARNING, logger="bot.pending")

    # Card A's Confirm data, sent as a click on card B's message.
    status, body = await teams.post(teams.channel.card_action("confirm", confirm_data(card_a), on=card_b))
    await teams.settle()

    assert status == 200, body
    assert body == {"statusCode": 200, "type": MESSAGE_CONTENT_TYPE, "value": "This button belongs to another card."}
    assert teams.channel.updates == []  # card B (and card A) stay as they are
    assert await teams.service.store.tickets.count() == 0
    assert [p.state for p in await teams.service.store.pending.find("open")] == ["open", "open"]
    assert len(teams.channel.messages()) == 2  # the two cards, nothing else
    assert any("not from its own card" in r.getMessage() for r in caplog.records)


async def test_a_button_from_an_earlier_release_is_refused_on_another_card(teams: Teams):
    card_a, card_b = await two_cards(teams)
    old = {k: v for k, v in confirm_data(card_a).items() if k != "card_id"}  # pending id and hash only

    status, body = await teams.post(teams.channel.card_action("confirm", old, on=card_b))

    assert status == 200 and body["value"] == "This button belongs to another card."
    assert await teams.service.store.tickets.count() == 0


async def test_a_cards_own_button_names_its_card_and_still_confirms_it(teams: Teams):
    _, card_b = await two_cards(teams)
    data = confirm_data(card_b)
    assert data["card_id"] == card_id(data["pending_id"])

    status, body = await teams.post(teams.channel.card_action("confirm", data, on=card_b))

    assert status == 200 and body["type"] == CARD_CONTENT_TYPE
    assert await teams.service.store.tickets.count() == 1
    update = await teams.channel.wait_for(lambda r: r.kind == "update" and "IT-1001" in str(r.cards))
    assert update.activity_id == card_b.id
