"""The ticket card in Slack: posted in the thread, decided only by its requester, exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from adapters.slack.blocks import CANCEL, CONFIRM
from bot.cards import card_id
from bot.store import utcnow
from tests.adapters.slack.test_app import ALICE, BOB, SlackRig, running_slack
from tests.bot.helpers import eventually
from tests.fakes.openai_server import FakeOpenAI, held, text, tool_calls
from tests.fakes.slack_api import SlackCall, dm_event, event_envelope, mention_event

pytestmark = pytest.mark.asyncio

TICKET = {"category": "network_vpn", "summary": "NorthGate VPN fails with NG-809", "urgency": "high"}
OTHER_TICKET = {"category": "hardware", "summary": "Replace my laptop", "urgency": "critical"}


@pytest_asyncio.fixture
async def slack(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SlackRig]:
    async for rig in running_slack(tmp_path, fake_openai, monkeypatch):
        yield rig


def propose(arguments: dict[str, Any] = TICKET) -> Any:
    return tool_calls(("create_it_ticket", arguments), content="I can raise a ticket for this. Please confirm.")


async def post_card(rig: SlackRig, *turns: Any) -> tuple[SlackCall, dict[str, Any]]:
    """Ask in a channel thread; the card message and the event that started the thread."""
    rig.model.script(propose(), *turns)
    event = mention_event(ALICE, "<@UBOT> my VPN says NG-809, please open a ticket")
    await rig.send(event_envelope(event))
    (card,) = await rig.replies()
    await stored_where_posted(rig)  # stored just after chat.postMessage returns; no one clicks faster
    return card, event


async def stored_where_posted(rig: SlackRig) -> None:
    for _ in range(100):
        pending = await rig.service.store.pending.find("open")
        if pending and pending[0].platform_message:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the card's message was never stored with its pending action")


def button(card: SlackCall, action_id: str) -> str:
    return next(
        e["value"] for b in card.blocks if b["type"] == "actions" for e in b["elements"] if e["action_id"] == action_id
    )


def context_text(call: SlackCall) -> str:
    return " ".join(e["text"] for b in call.blocks if b["type"] == "context" for e in b["elements"])


async def click(rig: SlackRig, user: str, action_id: str, card: SlackCall, event: dict[str, Any]) -> None:
    status, _, _ = await rig.click(user, action_id, button(card, action_id), message_ts="1700000001.000100",
                                   thread_ts=event["ts"])  # fmt: skip
    rig.model.mark("click acked")
    assert status == 200


async def final_update(rig: SlackRig, count: int = 1) -> SlackCall:
    """The last chat.update once ``count`` card updates showing a decision (no buttons) have arrived."""
    updates = await rig.slack.wait_for("chat.update", count, where=lambda c: "clicked" not in context_text(c))
    return updates[-1]


async def test_a_proposed_ticket_is_a_card_in_the_thread_with_the_exact_fields(slack: SlackRig):
    card, event = await post_card(slack)
    assert (card["channel"], card["thread_ts"]) == ("C0GENERAL", event["ts"])
    fields = next(b for b in card.blocks if "fields" in b)["fields"]
    assert [f["text"] for f in fields] == [
        "Category: network_vpn",
        "Summary: NorthGate VPN fails with NG-809",
        "Urgency: high",
    ]
    (record,) = await slack.service.store.pending.find("open")
    assert button(card, CONFIRM) == button(card, CANCEL) == f"{record.id}:{record.args_hash}:{card_id(record.id)}"
    assert record.platform_message == {"platform": "slack", "channel": "C0GENERAL", "ts": "1700000001.000100",
                                       "thread_ts": event["ts"]}  # fmt: skip
    assert "Only <@U_ALICE> can confirm this" in context_text(card)


async def test_confirm_by_the_requester_creates_the_frozen_ticket_updates_the_card_and_replies(slack: SlackRig):
    # After the click the model would ask for another ticket: only the frozen arguments may be used.
    card, event = await post_card(slack, text("Done: ticket IT-1001 is open."))
    await click(slack, ALICE, CONFIRM, card, event)
    update = await final_update(slack)
    replies = await slack.replies(2)
    ticket = await slack.service.store.tickets.get(1)
    assert {k: ticket[k] for k in TICKET} == TICKET
    assert ticket["requester_name"] == "alice"  # from users.info
    assert update["channel"] == "C0GENERAL" and update["ts"] == "1700000001.000100"
    assert all(b["type"] != "actions" for b in update.blocks)  # the buttons are gone
    line = context_text(update)
    assert "Confirmed by <@U_ALICE> at" in line and "*IT-1001*" in line
    assert replies[1]["thread_ts"] == event["ts"] and "Done: ticket IT-1001 is open." in replies[1].block_text
    slack.model.assert_script_consumed()


async def test_the_card_shows_the_ticket_id_while_a_slow_model_is_still_writing(slack: SlackRig):
    model_may_finish = asyncio.Event()
    card, event = await post_card(slack, held(model_may_finish, text("Done: ticket IT-1001 is open.")))
    await click(slack, ALICE, CONFIRM, card, event)
    update = await final_update(slack)
    slack.model.mark("card updated")
    assert "*IT-1001*" in context_text(update)
    assert len(slack.slack.calls_to("chat.postMessage")) == 1  # only the card: the reply is still coming
    model_may_finish.set()  # a click or a card update that waited for the model would come 10 s later, after it
    # The ack and the updated card both came before the model's reply: neither waited for the slow model.
    assert "reply 2" not in slack.model.events_until("click acked")
    assert "reply 2" not in slack.model.events_until("card updated")
    replies = await slack.replies(2)
    assert "Done: ticket IT-1001 is open." in replies[1].block_text


async def test_the_card_loses_its_buttons_at_once_while_the_decision_runs(slack: SlackRig):
    card, event = await post_card(slack, text("Done."))
    await click(slack, ALICE, CONFIRM, card, event)
    first, *_ = await slack.slack.wait_for("chat.update")
    assert "<@U_ALICE> clicked Confirm" in context_text(first)
    assert all(b["type"] != "actions" for b in first.blocks)
    await final_update(slack)


async def test_a_click_by_another_user_is_refused_privately_and_changes_nothing(slack: SlackRig):
    card, event = await post_card(slack)
    await click(slack, BOB, CONFIRM, card, event)
    (note,) = await slack.slack.wait_for("chat.postEphemeral")
    assert (note["user"], note["text"]) == (BOB, "Only <@U_ALICE> can confirm this.")
    assert note["thread_ts"] == event["ts"]
    (record,) = await slack.service.store.pending.find("open")
    assert record.decider is None
    assert await slack.service.store.tickets.count() == 0
    assert slack.slack.calls_to("chat.update") == []


async def test_cancel_updates_the_card_and_creates_nothing(slack: SlackRig):
    card, event = await post_card(slack, text("OK, no ticket."))
    await click(slack, ALICE, CANCEL, card, event)
    update = await final_update(slack)
    await slack.replies(2)
    assert "Cancelled by <@U_ALICE>" in context_text(update)
    assert await slack.service.store.tickets.count() == 0


async def test_a_double_click_creates_one_ticket(slack: SlackRig):
    card, event = await post_card(slack, text("Ticket raised."))
    await asyncio.gather(click(slack, ALICE, CONFIRM, card, event), click(slack, ALICE, CONFIRM, card, event))
    await slack.replies(2)
    (note,) = await slack.slack.wait_for("chat.postEphemeral")
    assert note["text"].startswith("Already confirmed by <@U_ALICE>")
    assert "*IT-1001*" in context_text(await final_update(slack))
    assert await slack.service.store.tickets.count() == 1
    await asyncio.sleep(0.2)
    assert len(slack.slack.calls_to("chat.postMessage")) == 2  # the card and one final reply
    slack.model.assert_script_consumed()


async def test_a_click_after_the_decision_says_so_and_shows_the_decided_card(slack: SlackRig):
    card, event = await post_card(slack, text("Ticket raised."))
    await click(slack, ALICE, CONFIRM, card, event)
    await slack.replies(2)
    await click(slack, ALICE, CANCEL, card, event)
    (note,) = await slack.slack.wait_for("chat.postEphemeral")
    assert note["text"].startswith("Already confirmed by <@U_ALICE> at ")
    update = await final_update(slack, 2)
    assert "*IT-1001*" in context_text(update)
    assert await slack.service.store.tickets.count() == 1


async def test_an_expired_card_says_so_and_is_updated(slack: SlackRig):
    card, event = await post_card(slack)
    (record,) = await slack.service.store.pending.find("open")
    await slack.service.store.pending.update(record.id, expires_at=utcnow() - timedelta(minutes=1))
    await click(slack, ALICE, CONFIRM, card, event)
    (note,) = await slack.slack.wait_for("chat.postEphemeral")
    assert note["text"].startswith("This request expired at")
    update = await final_update(slack)
    assert "This request expired at" in context_text(update) and all(b["type"] != "actions" for b in update.blocks)
    assert await slack.service.store.tickets.count() == 0


async def test_a_button_whose_hash_does_not_match_the_frozen_call_does_nothing(slack: SlackRig):
    card, event = await post_card(slack)
    pending_id = button(card, CONFIRM).split(":")[0]
    await slack.click(ALICE, CONFIRM, f"{pending_id}:{'0' * 32}", thread_ts=event["ts"])
    (note,) = await slack.slack.wait_for("chat.postEphemeral")
    assert "does not match" in note["text"]
    (restored,) = await slack.slack.wait_for("chat.update")  # the decision is refused before buttons go
    assert button(restored, CONFIRM) == button(card, CONFIRM)  # the real buttons are there
    assert await slack.service.store.tickets.count() == 0


async def test_a_card_in_a_dm_thread_works_the_same(slack: SlackRig):
    slack.model.script(propose(), text("Done."))
    event = dm_event(ALICE, "please open a VPN ticket")
    await slack.send(event_envelope(event))
    (card,) = await slack.replies()
    status, _, _ = await slack.click(ALICE, CONFIRM, button(card, CONFIRM), channel="D0ALICE", thread_ts=event["ts"])
    assert status == 200
    assert (await slack.replies(2))[1]["channel"] == "D0ALICE"
    assert await slack.service.store.tickets.count() == 1


async def test_a_card_slack_refuses_is_withdrawn_and_handed_to_a_person(slack: SlackRig):
    slack.slack.fail("chat.postMessage", "invalid_blocks")  # the card is not posted: no one can confirm it
    slack.model.script(propose())
    event = mention_event(ALICE, "<@UBOT> my VPN says NG-809, please open a ticket")
    await slack.send(event_envelope(event))
    refused, notice = await slack.replies(2)  # the fake records the refused call too
    assert any(b["type"] == "actions" for b in refused.blocks)
    assert notice["thread_ts"] == event["ts"] and not any(b["type"] == "actions" for b in notice.blocks)
    assert "couldn't show you the confirmation" in notice["text"] and "HD-1001" in notice["text"]
    assert await slack.service.store.pending.find("open") == []
    (withdrawn,) = await slack.service.store.pending.find("expired")
    (case,) = await slack.service.store.cases.recent()
    assert (case.reason, case.origin) == ("card_not_shown", f"action:{withdrawn.id}")
    assert await slack.service.store.tickets.count() == 0


async def test_a_click_whose_work_keeps_failing_is_retried_then_says_so_and_the_card_keeps_its_buttons(
    slack: SlackRig, monkeypatch
):
    card, event = await post_card(slack)
    tries: list[str] = []

    async def broken(pending_id: str, *args: Any, **kwargs: Any) -> Any:
        tries.append(pending_id)
        raise RuntimeError("database down")

    monkeypatch.setattr(slack.service, "click", broken)
    await click(slack, ALICE, CONFIRM, card, event)
    for tried in (1, 2):  # each sweeper pass hands the unanswered click out again
        await eventually(lambda n=tried: len(tries) == n and len(slack.service.inbox) == 0)
        await slack.service.inbox.recover(set())
    _, note = await slack.replies(2)
    assert len(tries) == 3 and note["thread_ts"] == event["ts"] and "Something went wrong" in note["text"]
    assert slack.slack.calls_to("chat.update") == []  # nothing was decided: the buttons never went away
    assert len(await slack.service.store.pending.find("open")) == 1
