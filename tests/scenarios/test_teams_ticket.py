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
from adapters.teams.cards import CARD_CONTENT_TYPE, MESSAGE_CONTENT_TYPE
from adapters.teams.dedupe import inbox_id
from adapters.teams.handler import CLICK
from bot.cards import card_id
from bot.store import PendingRecord, utcnow
from tests.adapters.teams.test_app import TICKET, Teams, conversation_key_of, refuse_inbox_writes, running_teams
from tests.bot.helpers import eventually
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


async def updated_to(teams: Teams, words: str) -> Recorded:
    """The first update of a posted card that says ``words`` (the "working" state comes before the result)."""
    return await teams.channel.wait_for(lambda r: r.kind == "update" and words in card_text(r.cards[0]))


async def answered_invoke(teams: Teams, invoke: dict[str, Any]) -> Any:
    """Post an invoke; its answer body (a card that replaces the clicked one, or a message that keeps it)."""
    status, body = await teams.post(invoke)
    assert status == 200 and body["statusCode"] == 200, body
    return body


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
    bound = {"pending_id": pending.id, "args_hash": pending.args_hash, "card_id": card_id(pending.id)}
    assert confirm["data"] == cancel["data"] == bound
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
        update = await updated_to(teams, "IT-1001")
        assert update.activity_id == posted.id and update.conversation_id == posted.conversation_id
        assert update.cards == [decided]
        # For everyone: first the buttons go ("working"), then the result; never the other way round.
        working, result = teams.channel.updates
        assert "clicked Confirm" in card_text(working.cards[0]) and "actions" not in working.cards[0]
        assert result is update
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
            # The result was not in by the deadline: the card as it stood then, buttons gone.
            assert "Alice Example clicked Confirm at" in card_text(seen) and "Working on it…" in card_text(seen)
            assert "actions" not in seen
            update = await updated_to(teams, "WH-1")
            assert "actions" not in update.cards[0] and teams.channel.updates[-1] is update
            assert (await teams.reply(count=2)).text == "Done: your ticket is open."
        finally:
            await harness.aclose()


async def test_another_user_is_told_only_the_requester_can_decide_and_nothing_runs(teams):
    teams.model.script(propose())
    posted, card = await card_in_channel(teams)

    seen_by_bob = await click(teams, posted, "confirm", card, sender=BOB)

    assert "Only Alice Example can confirm this." in card_text(seen_by_bob)
    assert len(await teams.service.store.pending.find("open")) == 1
    assert await teams.service.store.tickets.count() == 0
    await teams.settle()
    assert teams.channel.updates == [] and len(teams.model.requests) == 1  # the posted card is left as it is
    assert len(teams.channel.messages()) == 1  # Bob's note is his invoke answer: nothing is posted in the thread


async def test_cancel_replaces_the_card_and_creates_no_ticket(teams):
    teams.model.script(propose(), text("OK, no ticket."))
    posted, card = await card_in_channel(teams)

    decided = await click(teams, posted, "cancel", card)

    assert "Cancelled by Alice Example" in card_text(decided) and "actions" not in decided
    update = await updated_to(teams, "Cancelled by Alice Example")
    assert update.cards == [decided]
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
    await teams.settle()
    assert len(teams.channel.messages()) == 2  # the card and one final reply
    teams.model.assert_script_consumed()


async def test_a_click_on_an_expired_card_says_so_and_runs_nothing(teams):
    teams.model.script(propose())
    posted, card = await card_in_channel(teams)
    (pending,) = await teams.service.store.pending.find("open")
    await teams.service.store.pending.update(pending.id, expires_at=utcnow() - timedelta(seconds=1))

    seen = await click(teams, posted, "confirm", card)

    assert "This request expired at" in card_text(seen) and "actions" not in seen
    assert card_text(seen).count("This request expired at") == 1  # said once, not as a notice and a state
    update = await updated_to(teams, "expired")  # the posted card says so too, for everyone
    assert update.activity_id == posted.id
    assert await teams.service.store.tickets.count() == 0


async def test_a_click_on_an_already_decided_card_shows_the_decision(teams):
    teams.model.script(propose(), text("Cancelled."))
    posted, card = await card_in_channel(teams)
    await click(teams, posted, "cancel", card)
    await teams.reply(count=2)

    later = await click(teams, posted, "confirm", card)

    assert "Already cancelled by Alice Example at" in card_text(later)  # why this click did nothing
    assert "Cancelled by Alice Example" in card_text(later) and "actions" not in later
    assert await teams.service.store.tickets.count() == 0


async def test_a_tampered_hash_is_refused(teams):
    teams.model.script(propose())
    posted, card = await card_in_channel(teams)
    card["actions"][0]["data"]["args_hash"] = "0" * 32

    seen = await click(teams, posted, "confirm", card)

    assert "does not match the stored request" in card_text(seen)
    restored = next(a["data"] for a in seen["actions"] if a["verb"] == "confirm")
    assert restored["args_hash"] != "0" * 32  # the real buttons are back, for the requester to use
    assert await teams.service.store.tickets.count() == 0


async def test_a_redelivered_confirm_invoke_runs_the_ticket_once(teams):
    teams.model.script(propose(), text("Ticket raised."))
    posted, card = await card_in_channel(teams)
    data = card["actions"][0]["data"]
    invoke = teams.channel.card_action("confirm", data, on=posted)

    await teams.post(invoke)
    _, again = await teams.post(invoke)

    assert "IT-1001" in card_text(again["value"])  # answered with the card as it stands
    await teams.reply(count=2)
    await teams.settle()
    assert await teams.service.store.tickets.count() == 1 and len(teams.channel.messages()) == 2


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
    teams.model.script(text("You get 25 days."))
    question = teams.channel.personal_message("How many vacation days?")
    await teams.post(question)
    reply = await teams.reply()
    assert reply.json["channelData"]["feedbackLoopEnabled"] is True  # Teams' own thumbs, under the answer
    assert [a["verb"] for a in reply.cards[0]["actions"]] == ["handoff"]  # and "Still need help?"
    await teams.delivered(conversation_key_of(question))  # the vote names the message the outbox posted

    status, _ = await teams.post(teams.channel.feedback("dislike", on=reply, comment="not what I asked"))

    assert status == 200
    (run,) = await teams.service.store.runs.recent()
    assert (run.feedback, run.feedback_by) == ("not_helpful", ALICE["aadObjectId"])


@dataclass
class Case:
    case_id: str
    message: str


async def test_still_need_help_hands_the_conversation_to_the_helpdesk(teams, monkeypatch):
    calls = []

    async def request_handoff(conversation_key, user, *, link=None, run_id=None):
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
    _, again = await teams.post(invoke)  # Teams resends an invoke it thinks went unanswered
    await teams.settle()
    assert "HD-" in told.text and len(teams.channel.messages()) == 2
    assert card_text(again["value"]) == cards.HANDOFF_STARTED


async def test_without_a_helpdesk_service_the_user_gets_the_run_reference(teams, monkeypatch):
    monkeypatch.setattr(teams.service, "request_handoff", None, raising=False)
    reply, card = await answered(teams)
    await click(teams, reply, "handoff", card)
    for _ in (1, 2):  # tried again twice (the sweeper's passes) before the person is told
        await eventually(lambda: len(teams.service.inbox) == 0)
        assert len(teams.channel.messages()) == 1
        assert len(await teams.service.inbox.recover(set())) == 1
    told = await teams.reply(count=2)
    (run,) = await teams.service.store.runs.recent()
    assert run.id in told.text and "couldn't reach the helpdesk" in told.text


# --- a busy connector, a malformed click, a slow roster ----------------------------------------------


async def test_a_ticket_card_and_its_update_refused_once_are_still_delivered(teams):
    teams.channel.refuse_next(503)
    teams.model.script(propose(), text("Raised."))
    posted, card = await card_in_channel(teams)  # the card is posted and where it went is stored
    teams.channel.refuse_next(412)  # the first update: the card's "working" state
    decided = await click(teams, posted, "confirm", card)
    update = await updated_to(teams, "IT-1001")
    assert update.activity_id == posted.id and update.cards == [decided]
    await teams.reply(count=2)
    await teams.settle()
    assert teams.channel.refused == [("send", 503), ("update", 412)]
    assert teams.channel.updates[-1] is update  # the result stays; the retried "working" never overtakes it


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
    await teams.settle()  # a wrong withdrawal and its notice would have been posted by now
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
        assert "Only Alice Example can confirm this." in card_text(first)
        assert "Only Alice Example can cancel this." in card_text(second)
        assert len(await teams.service.store.pending.find("open")) == 1


async def test_a_click_whose_work_keeps_failing_is_retried_then_says_so_and_the_card_keeps_its_buttons(
    teams, monkeypatch
):
    teams.model.script(propose())
    posted, card = await card_in_channel(teams)
    tries: list[str] = []

    async def broken(pending_id: str, *args: Any, **kwargs: Any) -> Any:
        tries.append(pending_id)
        raise RuntimeError("database down")

    monkeypatch.setattr(teams.service, "click", broken)
    data = next(a["data"] for a in card["actions"] if a["verb"] == "confirm")
    seen = await answered_invoke(teams, teams.channel.card_action("confirm", data, on=posted))

    # Not a dead "Working on it…" card: a message for the clicker, and the card left as it is.
    assert seen["type"] == MESSAGE_CONTENT_TYPE and "trying again" in seen["value"]
    for tried in (1, 2):  # each sweeper pass hands the unanswered click out again
        await eventually(lambda n=tried: len(tries) == n and len(teams.service.inbox) == 0)
        assert len(teams.channel.messages()) == 1  # nobody told yet: it is being retried
        await teams.service.inbox.recover(set())
    told = await teams.reply(count=2)
    assert len(tries) == 3 and told.text.startswith("Sorry, something went wrong")
    assert told.conversation_id == posted.conversation_id and "teams:" in told.text  # with a reference to quote
    assert teams.channel.updates == []  # nothing was decided: the buttons never went away
    assert len(await teams.service.store.pending.find("open")) == 1


async def test_a_click_that_fails_after_the_ticket_was_made_is_not_run_again_and_asks_nobody_to_retry(
    teams, monkeypatch
):
    teams.model.script(propose(), text("Raised."))
    posted, card = await card_in_channel(teams)
    click_once = teams.service.click

    async def fails_after(*args, **kwargs):
        await click_once(*args, **kwargs)  # the ticket is created and the reply committed; then something breaks
        raise RuntimeError("lost the database after the ticket")

    monkeypatch.setattr(teams.service, "click", fails_after)
    await click(teams, posted, "confirm", card)

    told = await teams.reply(count=2)
    await teams.settle()
    assert await teams.service.inbox.recover(set()) == []  # its reply is committed: the click is answered
    await teams.settle()
    assert told.text == "Raised." and len(teams.channel.messages()) == 2  # no apology, no "try again"
    assert await teams.service.store.tickets.count() == 1


async def test_a_click_that_cannot_be_written_down_gets_503_and_decides_nothing(teams, monkeypatch):
    teams.model.script(propose())
    posted, card = await card_in_channel(teams)
    data = next(a["data"] for a in card["actions"] if a["verb"] == "confirm")
    refuse_inbox_writes(monkeypatch, teams.service)

    status, _ = await teams.post(teams.channel.card_action("confirm", data, on=posted))
    await teams.settle()

    assert status == 503  # Teams tells the clicker it failed, and the card keeps its buttons
    assert len(await teams.service.store.pending.find("open")) == 1 and await teams.service.store.tickets.count() == 0
    assert teams.channel.updates == [] and len(teams.model.requests) == 1


async def test_a_click_left_by_a_dead_process_is_decided_once_and_its_reply_posted_once(teams):
    teams.model.script(propose(), text("Ticket raised."))
    posted, card = await card_in_channel(teams)
    invoke = teams.channel.card_action("confirm", card["actions"][0]["data"], on=posted)
    # Another process wrote the click down, answered the invoke and died before deciding.
    await teams.service.store.inbox.accept(inbox_id(invoke), "teams", CLICK, {"activity": invoke}, "dead-process")

    assert await teams.service.inbox.recover({"dead-process"}) == [inbox_id(invoke)]
    final = await teams.reply(count=2)
    update = await updated_to(teams, "IT-1001")  # the posted card, for everyone
    again = await answered_invoke(teams, invoke)  # Teams delivers the invoke again meanwhile
    await teams.settle()

    assert final.text == "Ticket raised." and final.conversation_id == posted.conversation_id
    assert update.activity_id == posted.id and "actions" not in update.cards[0]
    assert again["type"] == MESSAGE_CONTENT_TYPE  # already received: the card is left to say what happened
    assert await teams.service.store.tickets.count() == 1 and len(teams.channel.messages()) == 2
    assert teams.model.remaining == 0 and len(teams.model.requests) == 2


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
            assert "Creating it now…" in card_text(second) and "Already confirmed by Alice Example" in card_text(second)
            await updated_to(teams, "WH-1")
            await teams.reply(count=2)
            await teams.settle()  # whatever either click sent has landed (its Retry-After included)
            assert "WH-1" in card_text(teams.channel.updates[-1].cards[0])
            assert len(hook.requests) == 1  # one ticket, however many clicks
        finally:
            await harness.aclose()
