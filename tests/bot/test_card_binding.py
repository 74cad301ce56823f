"""A click is bound to its card: the card id its button carries and the message it was clicked in."""

from __future__ import annotations

from typing import Any

import pytest

from bot.cards import ClickedCard, card_id
from bot.pending import WRONG_CARD, PendingActions
from bot.store import Store
from tests.bot.test_pending import TTL, Clock, _propose


def located(posted: dict[str, Any]) -> tuple[str, str] | None:
    return (posted["channel"], posted["ts"]) if "channel" in posted and "ts" in posted else None


def clicked(card: str | None, message: tuple[str, str] | None = ("C1", "1.1")) -> ClickedCard:
    return ClickedCard(card, message, located)


AT = {"channel": "C1", "ts": "1.1"}


def test_a_click_belongs_to_its_card_only_where_the_card_was_posted() -> None:
    assert clicked(card_id("p1")).belongs_to("p1", AT)
    assert not clicked(card_id("p1"), ("C1", "2.2")).belongs_to("p1", AT)  # carried to another message
    assert not clicked(card_id("p1"), ("C2", "1.1")).belongs_to("p1", AT)  # the same ts in another channel
    assert not clicked(card_id("p1"), None).belongs_to("p1", AT)  # a click that names no message
    assert not clicked(card_id("p2")).belongs_to("p1", AT)  # a button naming another card


def test_an_earlier_releases_button_is_held_to_the_cards_message() -> None:
    assert clicked(None).belongs_to("p1", AT)
    assert not clicked(None, ("C1", "2.2")).belongs_to("p1", AT)


@pytest.mark.parametrize("posted", [None, {}, {"platform": "slack"}])
def test_where_the_cards_message_is_unknown_the_click_is_taken(posted: dict[str, Any] | None) -> None:
    assert clicked(card_id("p1"), ("C9", "9.9")).belongs_to("p1", posted)
    assert clicked(None, ("C9", "9.9")).belongs_to("p1", posted)


def test_card_ids_differ_between_actions_and_hold_for_one() -> None:
    assert card_id("p1") == card_id("p1") != card_id("p2")


async def test_a_click_from_another_card_is_refused_and_decides_nothing(store: Store) -> None:
    pending = PendingActions(store, ttl=TTL, clock=Clock())
    action = await _propose(pending, requester="U1")
    await pending.set_platform_message(action.id, AT)

    verdict = await pending.decide(action.id, "U1", "confirm", action.args_hash,
                                   card=clicked(card_id(action.id), ("C1", "2.2")))  # fmt: skip

    assert (verdict.status, verdict.message) == ("wrong_card", WRONG_CARD)
    record = await pending.get(action.id)
    assert record is not None and (record.state, record.decider) == ("open", None)
    won = await pending.decide(action.id, "U1", "confirm", action.args_hash, card=clicked(card_id(action.id)))
    assert won.status == "confirmed"


def test_a_ticket_systems_error_on_a_card_is_one_line_shown_through_the_surfaces_text_function() -> None:
    from datetime import UTC, datetime

    from bot.cards import CardView

    error = "rejected (422): summary <!channel> see <https://evil.test|here>\nline two &amp; more"
    view = CardView("p1", "h" * 32, "create_it_ticket", "", {}, "U1", "failed", datetime(2026, 3, 2, tzinfo=UTC),
                    decider="U1", decided_at=datetime(2026, 3, 2, tzinfo=UTC), result={"error": error})
    said = view.status(lambda user: f"<@{user}>", text=lambda t: f"[{t}]").split("but it failed:", 1)[1]
    assert said == " [rejected (422): summary <!channel> see <https://evil.test|here> line two &amp; more]."
