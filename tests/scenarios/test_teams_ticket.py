"""Teams card clicks end to end: the ticket card, Confirm / Cancel, and the feedback and helpdesk buttons."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest_asyncio
from aiohttp import web

from adapters.server import build_app
from adapters.teams import cards
from adapters.teams.cards import CARD_CONTENT_TYPE
from bot.store import PendingRecord, utcnow
from tests.adapters.teams.test_app import TICKET, Teams, running_teams
from tests.fakes.bot_connector import ALICE, BOB, CHANNEL, Recorded
from tests.fakes.helpdesk_servers import FakeWebhook, slow
from tests.fakes.openai_server import held, text, tool_calls


@pytest_asyncio.fixture
async def teams(tmp_path, fake_openai, sample_index, monkeypatch):
    async for harness in running_teams(tmp_path, fake_openai, sample_index, monkeypatch):
        yield harness


def propose(arguments: dict[str, Any] = TICKET) -> Any:
    return tool_calls(("create_it_ticket", arguments), content="I can raise a ticket for this. Please confirm.")


async def card_in_channel(teams: Teams) -> tuple[Recorded, dict[str, Any]]:
    """Alice asks in a channel; the bot posts the ticket card in her thread."""
    await teams.post(teams.channel.channel_message("my VPN says NG-809, please open a ticket"))
    posted = await teams.reply()
    (card,) = posted.cards
    await stored_where_posted(teams)  # a person cannot click within the milliseconds before that
    return posted, card


async def stored_where_posted(teams: Teams) -> PendingRecord:
    """The open pending action once the bot has stored where its card was posted."""
    for _ in range(100):
        pending = await teams.service.store.pending.find("open")
        if pending and pending[0].platform_message:
            return pending[0]
        await asyncio.sleep(0.02)
    raise AssertionError("the card's platform message was never stored")


async def click(teams: Teams, posted: Recorded, verb: str, card: dict[str, Any], sender=ALICE) -> dict[str, Any]:
    data = next(a["data"] for a in card["actions"] if a["verb"] == verb)
    status, body = await teams.post(teams.channel.card_action(verb, data, on=posted, sender=sender))
    assert status == 200, body
    assert body["statusCode"] == 200 and body["type"] == CARD_CONTENT_TYPE
    return body["value"]


def card_text(card: dict[str, Any]) -> str:
    """Every text on the card, TextBlocks and the TextRuns of RichTextBlocks alike."""
    runs = [[block.get("text", "")] + [run["text"] for run in block.get("inlines", [])] for block in card["body"]]
    return " ".join(text for texts in runs for text in texts if text)


def facts(card: dict[str, Any]) -> dict[str, str]:
    return cards.card_fields(card)


# --- the card -------------------------------------------------------------------------------------


async def test_the_ticket_card_shows_the_exact_call_and_its_buttons_carry_only_ids(teams):
    teams.model.script(propose())
    posted, card = await card_in_channel(teams)
    pending = await stored_where_posted(teams)

    assert card["type"] == "AdaptiveCard" and card["version"] == "1.5"
    assert "I can raise a ticket for this. Please confirm." in card_text(card)
    assert facts(card) == {"Category": "network_vpn", "Summary": TICKET["summary"], "Urgency": "high"}
    confirm, cancel = card["actions"]
    assert (confirm["type"], confirm["verb"], cancel["type"], cancel["verb"]) == (
        "Action.Execute",
        "confirm",
        "Action.Execute",
        "cancel",
    )
    assert confirm["data"] == cancel["data"] == {"pending_id": pending.id, "args_hash": pending.args_hash}
    assert pending.platform_message["activity_id"] == posted.id
    assert pending.platform_message["reference"]["conversation"]["id"] == posted.conversation_id


# --- deciding -------------------------------------------------------------------------------------


async def test_confirm_by_the_requester_answers_fast_replaces_the_card_and_replies_later_in_the_thread(
    tmp_path, fake_openai, sample_index, monkeypatch
):
    # The click may take as long as it likes (30 s), so only the order can tell whether it waited for the model.
    async for teams in running_teams(tmp_path, fake_openai, sample_index, monkeypatch, invoke_wait_s=30.0):
        model_may_finish = asyncio.Event()
        teams.model.script(propose(), held(model_may_finish, text("Done: ticket IT-1001 is open.")))
        posted, card = await card_in_channel(teams)

        decided = await click(teams, posted, "confirm", card)
        teams.model.mark("click answered")
        model_may_finish.set()  # a click that waits for the model gets its reply 10 s later, before the answer

        assert "reply 2" not in teams.model.events_until("click answered")  # before the slow model finished
        assert "Confirmed by Alice Example" in card_text(decided) and "IT-1001" in card_text(decided)
        assert "actions" not in decided and facts(decided) == facts(card)
        update = await teams.channel.wait_for(lambda r: r.kind == "update")
        assert update.activity_id == posted.id and update.conversation_id == posted.conversation_id
        assert update.cards == [decided]
        final = await teams.reply(count=2)
        assert final.text == "Done: ticket IT-1001 is open."
        assert final.conversation_id == posted.conversation_id
        assert posted.conversation_id.startswith(f"{CHANNEL};messageid=")
        ticket = await teams.service.store.tickets.get(1)
        assert {k: ticket[k] for k in TICKET} == TICKET and ticket["requester_id"] == ALICE["aadObjectId"]


async def test_a_slow_ticket_system_gets_creating_the_ticket_then_the_posted_card_shows_it(
    tmp_path, fake_openai, sample_index, monkeypatch
):
    async with FakeWebhook() as hook:
        hook.script(slow(1.5))  # creates the ticket, answers after the click's 0.3 s wait (and well within our timeout)
        harness = running_teams(tmp_path, fake_openai, sample_index, monkeypatch, invoke_wait_s=0.3,
                                tickets="webhook", tickets_webhook_url=hook.url, tickets_webhook_secret=hook.secret)
        teams = await anext(harness)
        try:
            teams.model.script(propose(), text("Done: your ticket is open."))
            posted, card = await card_in_channel(teams)
            seen = await click(teams, posted, "confirm", card)
            assert "Confirmed by Alice Example. Creating the ticket…" in card_text(seen) and "actions" not in seen
            update = await teams.channel.wait_for(lambda r: r.kind == "update")
            assert "WH-1" in card_text(update.cards[0]) and "actions" not in update.cards[0]
            assert (await teams.reply(count=2)).text == "Done: your ticket is open."
        finally:
            await harness.aclose()


async def test_another_user_is_told_only_the_requester_can_decide_and_nothing_runs(teams):
    teams.model.script(propose())
    posted, card = await card_in_channel(teams)

    seen_by_bob = await click(teams, posted, "confirm", card, sender=BOB)

    assert "Only Alice Example can confirm or cancel this request." in card_text(seen_by_bob)
    assert len(await teams.service.store.pending.find("open")) == 1
    assert await teams.service.store.tickets.count() == 0
    await asyncio.sleep(0.2)
    assert teams.channel.updates == [] and len(teams.model.requests) == 1


async def test_cancel_replaces_the_card_and_creates_no_ticket(teams):
    teams.model.script(propose(), text("OK, no ticket."))
    posted, card = await card_in_channel(teams)

    decided = await click(teams, posted, "cancel", card)

    assert "Cancelled by Alice Example" in card_text(decided)
    update = await teams.channel.wait_for(lambda r: r.kind == "update")
    assert "Cancelled by Alice Example" in card_text(update.cards[0])
    assert (await teams.reply(count=2)).text == "OK, no ticket."
    assert await teams.service.store.tickets.count() == 0


async def test_a_double_click_creates_one_ticket_and_both_clicks_see_it(teams):
    teams.model.script(propose(), text("Ticket raised."))
    posted, card = await card_in_channel(teams)

    first, second = await asyncio.gather(click(teams, posted, "confirm", card), click(teams, posted, "confirm", card))

    assert await teams.service.store.tickets.count() == 1
    for seen in (first, second):
        assert "IT-1001" in card_text(seen) and "actions" not in seen
    await teams.reply(count=2)
    await asyncio.sleep(0.2)
    assert len(teams.channel.messages()) == 2  # the card and one final reply
    teams.model.assert_script_consumed()


async def test_a_click_on_an_expired_card_says_so_and_runs_nothing(teams):
    teams.model.script(propose())
    posted, card = await card_in_channel(teams)
    (pending,) = await teams.service.store.pending.find("open")
    await teams.service.store.pending.update(pending.id, expires_at=utcnow() - timedelta(seconds=1))

    seen = await click(teams, posted, "confirm", card)

    assert "This request expired at" in card_text(seen) and "actions" not in seen
    update = await teams.channel.wait_for(lambda r: r.kind == "update")
    assert "expired" in card_text(update.cards[0])
    assert await teams.service.store.tickets.count() == 0


async def test_a_click_on_an_already_decided_card_shows_the_decision(teams):
    teams.model.script(propose(), text("Cancelled."))
    posted, card = await card_in_channel(teams)
    await click(teams, posted, "cancel", card)
    await teams.reply(count=2)

    later = await click(teams, posted, "confirm", card)

    assert "Cancelled by Alice Example" in card_text(later)
    assert await teams.service.store.tickets.count() == 0


async def test_a_tampered_hash_is_refused(teams):
    teams.model.script(propose())
    posted, card = await card_in_channel(teams)
    card["actions"][0]["data"]["args_hash"] = "0" * 32

    seen = await click(teams, posted, "confirm", card)

    assert "does not match the stored request" in card_text(seen)
    assert await teams.service.store.tickets.count() == 0


async def test_a_redelivered_confirm_invoke_runs_the_ticket_once(teams):
    teams.model.script(propose(), text("Ticket raised."))
    posted, card = await card_in_channel(teams)
    data = card["actions"][0]["data"]
    invoke = teams.channel.card_action("confirm", data, on=posted)

    await teams.post(invoke)
    _, again = await teams.post(invoke)

    assert "IT-1001" in card_text(again["value"])
    await teams.reply(count=2)
    assert await teams.service.store.tickets.count() == 1


async def test_after_a_restart_a_click_still_decides_and_replies_in_the_stored_thread(teams):
    teams.model.script(propose(), text("Ticket raised."))
    posted, card = await card_in_channel(teams)
    # Another process (or this one restarted) on the same database knows nothing but what is stored.
    runner = web.AppRunner(build_app(teams.settings, teams.service))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        invoke = teams.channel.card_action("confirm", card["actions"][0]["data"], on=posted)
        invoke["conversation"]["id"] = CHANNEL  # even without the thread marker on the click
        status, body = await teams.channel.post(f"http://127.0.0.1:{runner.addresses[0][1]}/api/messages", invoke)
        final = await teams.reply(count=2)
    finally:
        await runner.cleanup()

    assert status == 200 and "IT-1001" in card_text(body["value"])
    assert final.text == "Ticket raised." and final.conversation_id == posted.conversation_id


# --- feedback and the helpdesk --------------------------------------------------------------------


async def answered(teams: Teams) -> tuple[Recorded, dict[str, Any]]:
    teams.model.script(text("You get 25 days."))
    await teams.post(teams.channel.personal_message("How many vacation days?"))
    reply = await teams.reply()
    return reply, reply.cards[0]


async def test_feedback_is_stored_with_the_run(teams):
    reply, card = await answered(teams)

    seen = await click(teams, reply, "feedback", {"actions": [card["actions"][1]]})

    (run,) = await teams.service.store.runs.recent()
    assert (run.feedback, run.feedback_by) == ("not_helpful", ALICE["aadObjectId"])
    assert "Thanks for the feedback." in card_text(seen)
    assert [a["verb"] for a in seen["actions"]] == ["handoff"]


@dataclass
class Case:
    case_id: str
    message: str


async def test_still_need_help_hands_the_conversation_to_the_helpdesk(teams, monkeypatch):
    calls = []

    async def request_handoff(conversation_key, user, *, link=None):
        calls.append((conversation_key, user, link))
        return Case("HD-7", "I've passed this to the helpdesk; someone will reply here.")

    monkeypatch.setattr(teams.service, "request_handoff", request_handoff, raising=False)
    reply, card = await answered(teams)

    seen = await click(teams, reply, "handoff", card)
    told = await teams.reply(count=2)

    assert "helpdesk" in card_text(seen).lower()
    (run,) = await teams.service.store.runs.recent()
    ((key, user, link),) = calls
    assert key == run.conversation_key and user.id == ALICE["aadObjectId"] and user.email == "alice@contoso.example"
    assert link and link.startswith("https://teams.microsoft.com/l/message/")
    assert told.conversation_id == reply.conversation_id and "HD-7" in told.text


async def test_a_redelivered_handoff_invoke_posts_the_case_once(teams):
    reply, card = await answered(teams)
    data = next(a["data"] for a in card["actions"] if a["verb"] == "handoff")
    invoke = teams.channel.card_action("handoff", data, on=reply)
    await teams.post(invoke)
    told = await teams.reply(count=2)
    await teams.post(invoke)  # Teams resends an invoke it thinks went unanswered
    await asyncio.sleep(0.3)
    assert "HD-" in told.text and len(teams.channel.messages()) == 2


async def test_without_a_helpdesk_service_the_user_gets_the_run_reference(teams, monkeypatch):
    monkeypatch.setattr(teams.service, "request_handoff", None, raising=False)
    reply, card = await answered(teams)
    await click(teams, reply, "handoff", card)
    told = await teams.reply(count=2)
    (run,) = await teams.service.store.runs.recent()
    assert run.id in told.text


# --- a busy connector, a malformed click, a slow roster ----------------------------------------------


async def test_a_ticket_card_and_its_update_refused_once_are_still_delivered(teams):
    teams.channel.refuse_next(503)
    teams.model.script(propose(), text("Raised."))
    posted, card = await card_in_channel(teams)  # the card is posted and where it went is stored
    teams.channel.refuse_next(412)
    decided = await click(teams, posted, "confirm", card)
    update = await teams.channel.wait_for(lambda r: r.kind == "update")
    assert update.activity_id == posted.id and update.cards == [decided]
    assert teams.channel.refused == [("send", 503), ("update", 412)]


async def test_a_ticket_card_the_channel_will_not_take_is_withdrawn_and_handed_to_a_person(teams):
    teams.channel.refuse_next(403)  # not transient: the card is not posted, and no one can confirm it
    teams.model.script(propose())
    await teams.post(teams.channel.channel_message("my VPN says NG-809, please open a ticket"))
    notice = await teams.reply()
    assert not notice.cards and "couldn't show you the confirmation" in notice.text and "HD-1001" in notice.text
    assert teams.channel.refused == [("send", 403)]
    assert await teams.service.store.pending.find("open") == []
    (withdrawn,) = await teams.service.store.pending.find("expired")
    (case,) = await teams.service.store.cases.recent()
    assert (case.reason, case.origin) == ("card_not_shown", f"action:{withdrawn.id}")
    assert await teams.service.store.tickets.count() == 0


async def test_a_card_posted_on_a_channel_that_answers_without_an_id_stays_open(teams):
    teams.channel.answers_without_ids = True  # the card was shown: only its later update is impossible
    teams.model.script(propose())
    await teams.post(teams.channel.channel_message("my VPN says NG-809, please open a ticket"))
    posted = await teams.reply()
    await asyncio.sleep(0.5)  # time enough for a wrong withdrawal and its notice to arrive
    assert posted.cards and len(teams.channel.messages()) == 1
    (record,) = await teams.service.store.pending.find("open")
    assert record.platform_message is None
    assert await teams.service.store.cases.recent() == []


async def test_a_malformed_card_action_gets_the_no_longer_available_card(teams):
    on = Recorded("send", "a:personal-29:alice", None, {}, {}, "out-1")
    invokes = [teams.channel.card_action("confirm", data, on=on) for data in ("not-a-dict", ["x"])]
    invokes += [teams.channel.card_action("confirm", {}, on=on) for _ in range(2)]
    invokes[2]["value"] = "a string value"
    invokes[3]["value"] = {"action": ["not", "an", "action"]}
    for invoke in invokes:
        status, body = await teams.post(invoke)
        assert status == 200 and body["statusCode"] == 200, body
        assert card_text(body["value"]) == "This button is no longer available."
    assert await teams.service.store.pending.find("open") == [] and teams.model.requests == []


async def test_a_slow_roster_does_not_hold_up_the_answer_to_a_click(tmp_path, fake_openai, sample_index, monkeypatch):
    import adapters.teams.app as teams_module
    from tests.fakes.bot_connector import FakeBotConnector

    built = teams_module.options_from  # no profile cache: the click looks the roster up again
    monkeypatch.setattr(teams_module, "options_from", lambda s: replace(built(s), profile_ttl_s=0.0))
    released, member, timeline = asyncio.Event(), FakeBotConnector._member, []

    async def slow_member(self, request):
        if slow:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), 8.0)  # released once the click is answered
            timeline.append("roster answered")
        return await member(self, request)

    monkeypatch.setattr(FakeBotConnector, "_member", slow_member)
    slow = False
    async for teams in running_teams(tmp_path, fake_openai, sample_index, monkeypatch, invoke_wait_s=2.0):
        teams.model.script(propose(), text("Raised."))
        posted, card = await card_in_channel(teams)
        slow = True
        decided = await click(teams, posted, "confirm", card)
        timeline.append("click answered")
        released.set()
        # Answered while the roster was still looking (a click waiting for it answers after its 8 s, not before).
        assert timeline[0] == "click answered"
        assert "Only" not in card_text(decided)  # decided as Alice, by her AAD id from the activity
        assert (await teams.reply(count=2)).text == "Raised."
        assert (await teams.service.store.tickets.get(1))["requester_id"] == ALICE["aadObjectId"]


async def test_a_roster_lookup_slower_than_a_click_still_fills_the_profile_cache(
    tmp_path, fake_openai, sample_index, monkeypatch
):
    from tests.fakes.bot_connector import FakeBotConnector

    member, released, timeline = FakeBotConnector._member, asyncio.Event(), []

    async def slow_for_bob(self, request):
        if request.match_info["member"] == BOB["id"]:
            timeline.append("Bob's lookup started")
            with contextlib.suppress(TimeoutError):  # past the click's 1 s share of the 2 s invoke budget
                await asyncio.wait_for(released.wait(), 10.0)
            timeline.append("Bob's lookup answered")
        return await member(self, request)

    monkeypatch.setattr(FakeBotConnector, "_member", slow_for_bob)
    async for teams in running_teams(tmp_path, fake_openai, sample_index, monkeypatch, invoke_wait_s=2.0):
        teams.model.script(propose())
        posted, card = await card_in_channel(teams)
        first = await click(teams, posted, "confirm", card, sender=BOB)
        timeline.append("first click answered")
        released.set()  # the lookup finishes in the background
        for _ in range(100):
            if (posted.conversation_id.partition(";")[0], BOB["id"]) in teams.channel.member_lookups:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.1)  # for the bot to store the profile it was sent
        second = await click(teams, posted, "cancel", card, sender=BOB)
        timeline.append("second click answered")
        # The first click did not wait for the roster, and the second looked nobody up: the profile was cached.
        assert timeline == [
            "Bob's lookup started",
            "first click answered",
            "Bob's lookup answered",
            "second click answered",
        ]
        bob_lookups = [lookup for lookup in teams.channel.member_lookups if lookup[1] == BOB["id"]]
        assert len(bob_lookups) == 1
        for seen in (first, second):
            assert "Only Alice Example can confirm or cancel this request." in card_text(seen)
        assert len(await teams.service.store.pending.find("open")) == 1


async def test_a_click_whose_decision_fails_says_so_and_keeps_the_buttons(teams, monkeypatch):
    teams.model.script(propose())
    posted, card = await card_in_channel(teams)

    async def broken(*args, **kwargs):
        raise RuntimeError("database down")

    monkeypatch.setattr(teams.service, "decide", broken)
    seen = await click(teams, posted, "confirm", card)

    assert [a["verb"] for a in seen["actions"]] == ["confirm", "cancel"]  # not a dead "Working on it…"
    told = await teams.reply(count=2)
    assert told.text.startswith("Sorry, something went wrong") and told.conversation_id == posted.conversation_id
    update = await teams.channel.wait_for(lambda r: r.kind == "update")
    assert update.activity_id == posted.id and update.cards[0]["actions"] == card["actions"]
    assert len(await teams.service.store.pending.find("open")) == 1


async def test_a_click_that_fails_after_the_ticket_was_made_does_not_ask_to_try_again(teams, monkeypatch):
    teams.model.script(propose(), text("Raised."))
    posted, card = await card_in_channel(teams)
    decide = teams.service.decide

    async def fails_after(*args, **kwargs):
        await decide(*args, **kwargs)  # the ticket is created; then something breaks
        raise RuntimeError("lost the database after the ticket")

    monkeypatch.setattr(teams.service, "decide", fails_after)
    await click(teams, posted, "confirm", card)

    told = await teams.reply(count=2)
    assert "try again" not in told.text and "The card shows what was done" in told.text
    assert await teams.service.store.tickets.count() == 1


async def test_a_second_click_while_the_ticket_is_created_never_leaves_the_card_saying_creating(
    tmp_path, fake_openai, sample_index, monkeypatch
):
    async with FakeWebhook() as hook:
        hook.script(slow(1.0))
        harness = running_teams(tmp_path, fake_openai, sample_index, monkeypatch, invoke_wait_s=0.3,
                                tickets="webhook", tickets_webhook_url=hook.url, tickets_webhook_secret=hook.secret)
        teams = await anext(harness)
        try:
            teams.model.script(propose(), text("Done: your ticket is open."))
            posted, card = await card_in_channel(teams)
            await click(teams, posted, "confirm", card)
            teams.channel.refuse_next(429, retry_after="2")  # a throttled channel delays any update from here
            second = await click(teams, posted, "confirm", card)
            assert "Creating the ticket…" in card_text(second)
            await teams.reply(count=2)
            await asyncio.sleep(2.5)  # past the Retry-After of anything the second click sent
            assert "WH-1" in card_text(teams.channel.updates[-1].cards[0])
            assert len(hook.requests) == 1  # one ticket, however many clicks
        finally:
            await harness.aclose()
