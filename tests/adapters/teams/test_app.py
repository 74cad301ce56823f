"""Teams end to end: activities posted to the running app at /api/messages, replies read from a fake connector.

The harness here (``teams`` fixture) is shared by the other test_teams_* modules.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import adapters.teams.app as teams_module
from adapters.server import build_app
from adapters.teams.dedupe import inbox_id
from adapters.teams.handler import MESSAGE
from bot.config import Settings
from bot.delivery import POST_POLICY
from bot.service import PolicyPal
from bot.store import DeliveryRecord
from bot.wiring import open_service
from tests.bot.helpers import eventually, settings_for, two_searches
from tests.fakes.bot_connector import (
    ALICE,
    BOB,
    BOT_ID,
    CHANNEL,
    GUEST,
    PARTNER,
    PARTNER_MEMBER,
    TENANT,
    FakeBotConnector,
    Recorded,
)
from tests.fakes.openai_server import FakeOpenAI, Turn, respond, text, tool_calls

TICKET = {"category": "network_vpn", "summary": "NorthGate VPN fails with NG-809", "urgency": "high"}


@dataclass
class Teams:
    """The app under test on a loopback port, the channel that talks to it, and the service behind it."""

    url: str
    channel: FakeBotConnector
    service: PolicyPal
    model: FakeOpenAI
    settings: Settings

    async def post(self, activity: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, Any]:
        return await self.channel.post(self.url, activity, headers)

    async def reply(self, count: int = 1, **match: Any) -> Recorded:
        """The ``count``-th message the bot sent (not typing, not updates)."""
        return await self.channel.wait_for(
            lambda r: r.kind != "update" and r.type == "message" and _matches(r, match), count=count
        )

    async def settle(self) -> None:
        """Wait until the work started so far is done and the posts it committed are sent (none is left over)."""
        await self.service.inbox.drain(10.0)
        await self.service.outbox.drain(10.0)

    async def delivered(self, conversation_key: str, count: int = 1) -> list[DeliveryRecord]:
        """The conversation's outbox rows once ``count`` of them are there and every one is delivered."""
        async with asyncio.timeout(10):
            while True:
                rows = await self.service.store.outbox.of_conversation(conversation_key)
                if len(rows) >= count and all(row.state == "delivered" for row in rows):
                    return rows
                await asyncio.sleep(0.02)


def _matches(recorded: Recorded, match: dict[str, Any]) -> bool:
    return all(getattr(recorded, name) == value for name, value in match.items())


INBOX_WRITES = ("accept", "accept_many")  # the store's ways of writing inbox items (one, or a burst at once)


def refuse_inbox_writes(monkeypatch: pytest.MonkeyPatch, service: PolicyPal) -> None:
    """The database refuses every inbox write from now on (test-only)."""

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the database is not taking writes")

    for name in INBOX_WRITES:
        if hasattr(service.store.inbox, name):
            monkeypatch.setattr(service.store.inbox, name, refused)


def on_inbox_write(monkeypatch: pytest.MonkeyPatch, service: PolicyPal, then: Any) -> None:
    """Call ``then()`` as soon as each inbox write has committed (test-only)."""
    for name in INBOX_WRITES:
        if (write := getattr(service.store.inbox, name, None)) is not None:

            async def recorded(*args: Any, _write: Any = write, **kwargs: Any) -> Any:
                written = await _write(*args, **kwargs)
                then()
                return written

            monkeypatch.setattr(service.store.inbox, name, recorded)


def conversation_key_of(activity: dict[str, Any]) -> str:
    from adapters.teams.activity import conversation_key
    from bot.types import UserRef

    return conversation_key(activity, UserRef(""))




async def running_teams(
    tmp_path: Path,
    fake: FakeOpenAI,
    index: Any,
    monkeypatch: pytest.MonkeyPatch,
    invoke_wait_s: float = 4.0,
    **overrides: Any,
) -> AsyncIterator[Teams]:
    """Service, app and fake channel, started; everything closed afterwards."""
    # These 2 cores are shared: give a click's answer room so a busy machine does not turn a refusal
    # into "Working on it…" (the production default stays within Teams' invoke timeout).
    built = teams_module.options_from
    wait = invoke_wait_s
    monkeypatch.setattr(teams_module, "options_from", lambda settings: replace(built(settings), invoke_wait_s=wait))
    values = {"teams_allow_unauthenticated": True, "teams_allowed_tenants": f"{TENANT},tenant-other-ok", **overrides}
    settings = settings_for(tmp_path, fake, **values)
    async with FakeBotConnector() as channel:  # closed last: the app's shutdown still posts what it has
        service = await open_service(settings, searcher=index)
        runner = web.AppRunner(build_app(settings, service), shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/api/messages"
        try:
            yield Teams(url, channel, service, fake, settings)
        finally:
            await runner.cleanup()
            await service.close()


def answer_citing_first_passage() -> Turn:
    """A final answer that quotes the first search result's cite, as a well-behaved model would."""

    def answer(body: dict[str, Any]) -> Turn:
        result = json.loads(body["messages"][-1]["content"])
        return text(f"You get 25 days a year [{result['results'][0]['cite']}].")

    return respond(answer)


# --- personal chat ---------------------------------------------------------------------------------


async def test_personal_message_is_answered_in_the_chat_with_markdown_links_and_feedback(teams):
    teams.model.script(tool_calls(("search_policies", {"query": "annual leave days"})), answer_citing_first_passage())
    activity = teams.channel.personal_message("How many vacation days do I get?")

    status, _ = await teams.post(activity)
    reply = await teams.reply()

    assert status in (200, 201)
    assert reply.conversation_id == activity["conversation"]["id"] and reply.kind == "send"
    assert reply.json["textFormat"] == "markdown"
    assert reply.text == "You get 25 days a year [1]."  # the cite is Teams' citation marker
    (label,) = [e for e in reply.json["entities"] if e["type"] == "https://schema.org/Message"]
    (cited,) = label["citation"]
    assert label["additionalType"] == ["AIGeneratedContent"] and cited["position"] == 1
    assert cited["appearance"]["url"].startswith("https://intranet.northwind.example/")
    assert reply.json["channelData"]["feedbackLoopEnabled"] is True  # Teams' own thumbs
    (card,) = reply.cards
    assert [a["verb"] for a in card["actions"]] == ["handoff"]  # "Still need help?" stays
    assert teams.model.requests[0].messages[-1]["content"] == "How many vacation days do I get?"
    teams.model.assert_script_consumed()


async def test_a_message_is_acknowledged_before_the_run_and_typing_shows_while_it_works(teams):
    from tests.fakes.openai_server import held

    model_may_answer = asyncio.Event()
    teams.model.script(held(model_may_answer, text("Here is the answer.")))
    status, _ = await teams.post(teams.channel.personal_message("Is there a dress code?"))
    teams.model.mark("acknowledged")
    typing = await teams.channel.wait_for(lambda r: r.type == "typing")
    model_may_answer.set()  # the run ends only now; an ack that waited for it would come 10 s later, after it
    reply = await teams.reply()

    assert status in (200, 201)
    assert "reply 1" not in teams.model.events_until("acknowledged")  # acknowledged before the run answered
    assert typing.conversation_id == reply.conversation_id
    assert teams.channel.recorded.index(typing) < teams.channel.recorded.index(reply)
    assert reply.text == "Here is the answer."


async def test_the_user_is_identified_by_aad_id_with_email_from_the_roster(teams):
    teams.model.script(text("Hello."))
    await teams.post(teams.channel.personal_message("hi"))
    await teams.reply()
    (run,) = await teams.service.store.runs.recent()
    assert run.user_id == ALICE["aadObjectId"] and run.platform == "teams"
    assert run.conversation_key.startswith(f"teams:{TENANT}:a:personal-")
    assert teams.channel.member_lookups == [(f"a:personal-{ALICE['id']}", ALICE["id"])]


async def test_a_repeated_activity_id_never_starts_a_second_run(teams):
    teams.model.script(text("Only once."))
    activity = teams.channel.personal_message("How do I reset my password?")
    await teams.post(activity)
    await teams.reply()
    await teams.settle()
    status, _ = await teams.post(activity)  # Bot Framework redelivers after a timeout
    assert status == 201 and len(teams.service.inbox) == 0  # acknowledged, and no work was started for it
    await teams.settle()
    assert len(teams.model.requests) == 1
    assert len(teams.channel.messages()) == 1
    assert len(await teams.service.store.runs.recent()) == 1
    assert len(await teams.service.store.outbox.of_conversation(conversation_key_of(activity))) == 1


async def test_an_activity_is_written_down_before_it_is_acknowledged_and_one_that_cannot_be_gets_503(
    teams, monkeypatch
):
    teams.model.script(text("Answered once it was written down."))
    activity = teams.channel.personal_message("Is there a dress code?")
    with monkeypatch.context() as patched:
        refuse_inbox_writes(patched, teams.service)
        status, _ = await teams.post(activity)
        await teams.settle()
    assert status == 503  # not acknowledged: Bot Framework delivers it again
    assert teams.model.requests == [] and teams.channel.recorded == [] and teams.channel.member_lookups == []
    assert await teams.service.store.inbox.get(inbox_id(activity)) is None

    on_inbox_write(monkeypatch, teams.service, lambda: teams.model.mark("written down"))
    status, _ = await teams.post(activity)  # delivered again, and the database takes it now
    teams.model.mark("acknowledged")
    reply = await teams.reply()
    await teams.settle()
    assert status == 201 and "written down" in teams.model.events_until("acknowledged")
    assert reply.text == "Answered once it was written down." and len(teams.channel.messages()) == 1


async def test_an_item_left_by_a_dead_process_is_answered_once_by_the_process_that_takes_it_over(teams):
    teams.model.script(text("Answered after the takeover."))
    activity = teams.channel.personal_message("What is the travel policy?")
    key = inbox_id(activity)
    # A process wrote it down, acknowledged it and died before answering.
    assert await teams.service.store.inbox.accept(key, "teams", MESSAGE, {"activity": activity}, "dead-process")
    assert await teams.service.inbox.recover({"dead-process"}) == [key]  # the sweeper's pass, here
    reply = await teams.reply()
    status, _ = await teams.post(activity)  # and Teams delivers it again meanwhile
    await teams.settle()
    assert await teams.service.inbox.recover({"dead-process"}) == []  # answered: not handed out again
    assert status == 201 and reply.text == "Answered after the takeover."
    assert reply.conversation_id == activity["conversation"]["id"]
    assert len(teams.channel.messages()) == 1 and len(teams.model.requests) == 1
    assert len(await teams.service.store.runs.recent()) == 1
    taken = await teams.service.store.inbox.get(key)
    assert (taken.owner, taken.epoch) == (teams.service.inbox.owner, 2)


async def test_the_same_activity_id_in_two_personal_chats_runs_both(teams):
    teams.model.script(text("For Alice."), text("For Bob."))
    alice, bob = teams.channel.personal_message("hi"), teams.channel.personal_message("hello", sender=BOB)
    alice["id"] = bob["id"] = "1700000000999"  # ids are unique only within a conversation
    await teams.post(alice)
    await teams.reply()
    await teams.post(bob)
    second = await teams.reply(count=2)
    assert second.text == "For Bob." and len(await teams.service.store.runs.recent()) == 2


async def test_a_redelivery_of_an_activity_an_older_release_ran_does_not_run_again(teams):
    """Older releases claimed the bare activity id; an activity sent before the upgrade is checked against it."""
    teams.model.script(text("Answered."))
    sent_earlier = teams.channel.personal_message("How do I reset my password?")
    sent_earlier["timestamp"] = (datetime.now(UTC) - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    assert not await teams.service.inbox.seen_before(f"teams:{sent_earlier['id']}")  # what the older release stored
    await teams.post(sent_earlier)
    # The same id sent now in another chat is a new message: the old bare key does not block it.
    fresh = teams.channel.personal_message("And my VPN?", sender=BOB, timestamp=datetime.now(UTC).isoformat())
    fresh["id"] = sent_earlier["id"]
    await teams.post(fresh)
    reply = await teams.reply()
    await teams.settle()
    assert reply.text == "Answered." and reply.conversation_id == fresh["conversation"]["id"]
    assert len(teams.channel.messages()) == 1 and len(teams.model.requests) == 1


# --- replies without a run are sent once per activity ---------------------------------------------------


async def test_a_redelivered_bare_mention_gets_one_hint(teams):
    activity = teams.channel.channel_message("")
    await teams.post(activity)
    hint = await teams.reply()
    await teams.post(activity)  # Bot Framework redelivers
    await teams.settle()
    assert hint.text.startswith("Ask me about a company policy") and len(teams.channel.messages()) == 1


async def test_a_redelivered_refusal_is_sent_once(teams):
    activity = teams.channel.personal_message("hello")
    activity["conversation"]["tenantId"] = activity["channelData"]["tenant"]["id"] = "tenant-elsewhere"
    await teams.post(activity)
    await teams.reply()
    await teams.post(activity)
    await teams.settle()
    assert len(teams.channel.messages()) == 1


# --- channels and group chats ------------------------------------------------------------------------


async def test_channel_mention_is_answered_in_its_thread_with_the_mention_stripped(teams):
    teams.model.script(text("Yes, within the limits."))
    activity = teams.channel.channel_message("Can I expense a taxi?")

    await teams.post(activity)
    reply = await teams.reply()

    assert teams.model.requests[0].messages[-1]["content"] == "Can I expense a taxi?"
    assert reply.conversation_id == f"{CHANNEL};messageid={activity['id']}"
    assert reply.kind == "send" and "replyToId" not in reply.json


async def test_channel_messages_without_a_mention_are_ignored(teams):
    await teams.post(teams.channel.channel_message("lunch anyone?", mention=False))
    group = teams.channel.activity({"id": "19:group@thread.v2", "conversationType": "groupChat"}, ALICE, text="hi all")
    await teams.post(group)
    await teams.settle()
    assert teams.model.requests == [] and teams.channel.recorded == []
    assert await teams.service.store.inbox.get(inbox_id(group)) is None  # nothing to do, nothing written


async def test_a_follow_up_in_the_thread_continues_the_conversation(teams):
    teams.model.script(text("Taxis are fine after 9 pm."), text("Yes, with a receipt."))
    first = teams.channel.channel_message("Can I expense a taxi?")
    await teams.post(first)
    await teams.reply()
    follow_up = teams.channel.channel_message("Even at 10 pm?", root=first["id"])
    await teams.post(follow_up)
    second = await teams.reply(count=2)

    assert second.conversation_id == f"{CHANNEL};messageid={first['id']}"
    sent = teams.model.requests[1].messages
    assert [m["content"] for m in sent if m["role"] in ("user", "assistant")][-3:] == [
        "Can I expense a taxi?",
        "Taxis are fine after 9 pm.",
        "Even at 10 pm?",
    ]


async def test_the_same_activity_id_in_two_channels_runs_both(teams):
    """Channel message ids are epoch milliseconds: two channels can send the same one."""
    teams.model.script(text("Answer for Alice."), text("Answer for Bob."))
    here = teams.channel.channel_message("Can I expense a taxi?")
    there = teams.channel.channel_message("How many vacation days?", sender=BOB)
    here["id"] = there["id"] = "1700000000123"
    here["conversation"]["id"] = f"{CHANNEL};messageid=1700000000123"
    there["conversation"]["id"] = "19:finance@thread.tacv2;messageid=1700000000123"
    there["channelData"]["teamsChannelId"] = "19:finance@thread.tacv2"
    await teams.post(here)
    await teams.reply()
    await teams.post(there)
    second = await teams.reply(count=2)
    assert second.text == "Answer for Bob." and second.conversation_id == there["conversation"]["id"]


async def test_a_new_post_in_the_same_channel_is_a_new_conversation(teams):
    teams.model.script(text("One."), text("Two."))
    await teams.post(teams.channel.channel_message("first question"))
    await teams.reply()
    await teams.post(teams.channel.channel_message("second question"))
    await teams.reply(count=2)
    user_turns = [m for m in teams.model.requests[1].messages if m["role"] == "user"]
    assert [m["content"] for m in user_turns] == ["second question"]


# --- who may use it -------------------------------------------------------------------------------


async def test_a_tenant_outside_the_allow_list_gets_a_polite_refusal_and_no_run(teams):
    activity = teams.channel.personal_message("hello")
    activity["conversation"]["tenantId"] = "tenant-elsewhere"
    activity["channelData"]["tenant"]["id"] = "tenant-elsewhere"

    status, _ = await teams.post(activity)
    reply = await teams.reply()

    assert status in (200, 201)
    assert "isn't available for your organization" in reply.text
    await teams.settle()
    assert teams.model.requests == [] and await teams.service.store.runs.recent() == []


async def test_a_guest_may_not_propose_a_ticket(teams):
    teams.model.script(tool_calls(("create_it_ticket", TICKET)), text("Guests can't raise tickets here."))
    await teams.post(teams.channel.personal_message("my VPN is broken, open a ticket", sender=GUEST))
    reply = await teams.reply()
    assert not reply.cards or all(a["verb"] != "confirm" for a in reply.cards[0].get("actions", []))
    assert await teams.service.store.pending.find("open") == []


async def test_someone_from_another_organisation_may_not_propose_a_ticket(teams):
    """In a shared channel the partner's people are "user"s of their own tenant, not guests in Teams' eyes,
    but they are no employees here: the ticket tool is refused them as it is to guests."""
    teams.channel.roster[PARTNER["id"]] = PARTNER_MEMBER
    teams.model.script(tool_calls(("create_it_ticket", TICKET)), text("I can't raise that ticket."))
    await teams.post(teams.channel.channel_message("my VPN is broken, open a ticket", sender=PARTNER))
    reply = await teams.reply()
    assert not reply.cards or all(a["verb"] != "confirm" for a in reply.cards[0].get("actions", []))
    assert await teams.service.store.pending.find("open") == []
    (run,) = await teams.service.store.runs.recent()
    assert run.reason == "policy_denied"


async def test_without_the_roster_the_sender_is_treated_as_a_guest(teams):
    teams.channel.roster.clear()  # the member lookup fails: no write tools this time
    teams.model.script(tool_calls(("create_it_ticket", TICKET)), text("I can't raise that ticket."))
    await teams.post(teams.channel.personal_message("open a VPN ticket"))
    await teams.reply()
    assert await teams.service.store.pending.find("open") == []


async def test_work_that_keeps_failing_is_tried_again_then_the_person_gets_an_apology_with_a_reference(
    teams, monkeypatch
):
    attempts: list[str] = []

    async def broken(inbound, cancel=None, progress=None):
        attempts.append(inbound.event_id)
        raise RuntimeError("database down")

    monkeypatch.setattr(teams.service, "handle_message", broken)
    activity = teams.channel.personal_message("hello")
    await teams.post(activity)
    inbox = teams.service.inbox
    for tried in (1, 2):  # the sweeper's pass hands an unanswered item out again
        await eventually(lambda n=tried: len(attempts) == n and len(inbox) == 0)
        assert teams.channel.messages() == []  # nobody told yet: it is being retried
        assert await inbox.recover(set()) == [inbox_id(activity)]
    reply = await teams.reply()
    assert len(attempts) == 3 and len(set(attempts)) == 1  # the same activity, three times, never more
    assert reply.text.startswith("Sorry, something went wrong") and inbox_id(activity) in reply.text
    assert reply.conversation_id == activity["conversation"]["id"]
    assert await inbox.recover(set()) == []  # failed for good: not handed out again


# --- a busy connector ----------------------------------------------------------------------------


def record_retry_waits(monkeypatch: pytest.MonkeyPatch, channel: FakeBotConnector) -> list[tuple[str, float, int, int]]:
    """The connector's waits between attempts: ("wait" or "waited", seconds, calls refused, messages received).

    The retry loop's own ``asyncio.sleep`` is wrapped (the module's name for asyncio, not asyncio itself), so
    a test can tell what it waited for and what had happened on the channel when each wait began and ended.
    """
    retry_module = sys.modules[teams_module.with_retries.__module__]
    waits: list[tuple[str, float, int, int]] = []

    class RecordedSleep:
        def __getattr__(self, name: str) -> Any:
            return getattr(asyncio, name)

        async def sleep(self, seconds: float) -> None:
            waits.append(("wait", seconds, len(channel.refused), len(channel.messages())))
            await asyncio.sleep(seconds)
            waits.append(("waited", seconds, len(channel.refused), len(channel.messages())))

    monkeypatch.setattr(retry_module, "asyncio", RecordedSleep())
    return waits


async def test_a_reply_refused_once_with_429_is_sent_after_retry_after(teams, monkeypatch):
    waits = record_retry_waits(monkeypatch, teams.channel)
    teams.channel.refuse_next(429, retry_after="1")
    teams.model.script(text("Here is your answer."))
    await teams.post(teams.channel.personal_message("Is there a dress code?"))
    reply = await teams.reply()
    assert reply.text == "Here is your answer." and len(teams.channel.messages()) == 1
    assert teams.channel.refused == [("send", 429)]
    # Retry-After was honoured: after the refusal, one wait of the 1 s it asked for, and only then the reply.
    assert waits == [("wait", 1.0, 1, 0), ("waited", 1.0, 1, 0)]


@pytest.mark.parametrize("status", [412, 502, 503, 504])
async def test_the_connector_retries_a_transient_refusal(teams, status):
    teams.channel.refuse_next(status, times=2)
    sent = await fast_connector(teams).send(personal_reference(teams), {"type": "message", "text": "hi"})
    (reply,) = teams.channel.messages()
    assert sent == reply.id and reply.text == "hi" and teams.channel.refused == [("send", status)] * 2


async def test_the_connector_gives_up_in_bounded_time_and_logs_the_conversation(teams, caplog, monkeypatch):
    from bot.errors import DeliveryFailed

    waits = record_retry_waits(monkeypatch, teams.channel)
    teams.channel.refuse_next(429, times=10, retry_after="60")  # capped at max_wait_s
    connector, reference = fast_connector(teams), personal_reference(teams)
    with pytest.raises(DeliveryFailed):
        # 30 s only stops a hung test: a connector waiting out the 60 s Retry-After fails here
        await asyncio.wait_for(connector.update(reference, "out-7", {"type": "message", "text": "decided"}), 30)
    # Bounded: three attempts with the 60 s Retry-After capped at max_wait_s (0.1 s) between them, then no wait.
    assert [seconds for kind, seconds, *_ in waits if kind == "wait"] == [0.1, 0.1]
    assert teams.channel.refused == [("update", 429)] * 3 and teams.channel.updates == []
    (error,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert reference["conversation"]["id"] in error.getMessage() and "429" in error.getMessage()


async def test_a_refusal_that_cannot_change_is_not_retried(teams):
    teams.channel.refuse_next(403, times=2)
    with pytest.raises(Exception, match="fake refusal"):
        await fast_connector(teams).send(personal_reference(teams), {"type": "message", "text": "hi"})
    assert teams.channel.refused == [("send", 403)]


@pytest.mark.parametrize("status", [429, 503])
async def test_a_connector_refusing_for_a_while_delivers_the_reply_the_card_and_a_give_up_each_once(
    tmp_path, fake_openai, sample_index, monkeypatch, status
):
    """More refusals than one attempt's retries: the outbox tries again later, and nothing is posted twice."""
    refusals = teams_module.SEND_RETRY.attempts + 2  # the first attempt fails, the second gets through
    async for teams in running_teams(tmp_path, fake_openai, sample_index, monkeypatch, max_steps=2,
                                     helpdesk_poll_s=0.05):
        teams.service.outbox.post_policy = replace(POST_POLICY, backoff_s=0.05)  # retry soon, not in a second
        card_text = "I can raise a ticket for this. Please confirm."
        outcomes = {
            "reply": [text("Here is your answer.")],
            "card": [tool_calls(("create_it_ticket", TICKET), content=card_text)],
            "give-up": two_searches(),
        }
        for number, (what, script) in enumerate(outcomes.items(), start=1):
            teams.model.script(*script)
            teams.channel.refuse_next(status, times=refusals, retry_after="0")
            refused_before = len(teams.channel.refused)
            activity = teams.channel.channel_message(f"question {number}")
            await teams.post(activity)
            posted = await teams.reply(count=number)
            (row,) = await teams.delivered(conversation_key_of(activity))
            await teams.settle()
            assert posted.conversation_id == f"{CHANNEL};messageid={activity['id']}", what
            assert len(teams.channel.messages(posted.conversation_id)) == 1, what  # once, not once per attempt
            assert len(teams.channel.refused) - refused_before == refusals and row.attempts == 2, what
            if what == "card":
                assert posted.cards[0]["actions"][0]["verb"] == "confirm"
                (pending,) = await teams.service.store.pending.find("open")
                assert pending.platform_message["activity_id"] == posted.id  # clicks can update it
            if what == "give-up":
                assert "I couldn't finish this reliably" in posted.text and "HD-1001" in posted.text


def fast_connector(teams: Teams) -> teams_module.BotFrameworkConnector:
    """The production connector with a retry budget small enough for a test."""
    from bot.delivery import RetryPolicy

    policy = RetryPolicy(attempts=3, first_s=0.05, max_wait_s=0.1, total_s=2.0)
    return teams_module.BotFrameworkConnector(teams_module.build_adapter(teams.settings), None, retry=policy)


def personal_reference(teams: Teams) -> dict[str, Any]:
    from adapters.teams.activity import reference_of

    return reference_of(teams.channel.personal_message("hello"))


# --- install -----------------------------------------------------------------------------------------


def install(teams: Teams, member_id: str = BOT_ID, conversation_type: str = "personal", tenant: str = TENANT) -> dict:
    """The conversationUpdate Teams sends when the bot (or someone) joins a conversation."""
    conversation = {"id": f"a:install-{member_id}", "conversationType": conversation_type, "tenantId": tenant}
    activity = teams.channel.activity(conversation, ALICE, type="conversationUpdate", membersAdded=[{"id": member_id}])
    activity["channelData"]["tenant"] = {"id": tenant}
    activity.pop("text", None)
    return activity


async def test_installing_the_bot_in_personal_chat_sends_a_welcome(teams):
    activity = install(teams)
    status, _ = await teams.post(activity)
    welcome = await teams.reply()
    assert status in (200, 201)
    assert welcome.conversation_id == activity["conversation"]["id"]
    assert welcome.text.startswith("Hi, I'm **PolicyPal**") and "Confirm" in welcome.text
    assert teams.model.requests == []  # a greeting, not a run


async def test_a_redelivered_install_sends_one_welcome(teams):
    activity = install(teams)
    await teams.post(activity)
    await teams.reply()
    await teams.post(activity)
    await teams.settle()
    assert len(teams.channel.messages()) == 1


async def test_no_welcome_for_someone_else_joining_a_channel_install_or_a_foreign_tenant(teams):
    for activity in (install(teams, member_id="29:someone-else"), install(teams, conversation_type="channel"),
                     install(teams, tenant="tenant-not-allowed")):  # fmt: skip
        status, _ = await teams.post(activity)
        assert status in (200, 201)
    await teams.settle()
    assert teams.channel.messages() == []


# --- malformed requests ------------------------------------------------------------------------------


async def test_a_body_that_is_not_a_json_activity_gets_400_not_a_server_error(teams):
    import aiohttp

    bodies = [(b"not json", "application/json"), (b"[1, 2]", "application/json"), (b"", "application/json"),
              (b'{"type": "message"}', "text/plain")]  # fmt: skip
    async with aiohttp.ClientSession() as session:
        for body, content_type in bodies:
            async with session.post(teams.url, data=body, headers={"Content-Type": content_type}) as response:
                assert response.status == 400, (body, await response.text())
    assert teams.channel.recorded == [] and teams.model.requests == []
