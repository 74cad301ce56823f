"""Teams: the Bot Framework connector failing for a while (HTTP 503, or 429 with Retry-After), then recovering.

Through the real app on loopback, as test_app.py runs it: activities come in while the fake channel
refuses every post, reply and update (``FakeBotConnector.fail_for``), and after it recovers every
reply, card and give-up arrives exactly once, and a click on a card posted during the outage works.

The outage lasts until every reply it covers has been refused past the connector's own retries
(so the outbox's retry was refused too), and at least ``MIN_OUTAGE_S``: the tests depend on what
happened, never on how long it took. The connector's and the outbox's retry policies are the
production ones with shorter waits, so a test takes seconds instead of minutes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

import adapters.teams.app as teams_module
from adapters.teams.cards import CARD_CONTENT_TYPE
from bot.delivery import POST_POLICY
from bot.helpdesk.case import case_id_for
from bot.store import DeliveryRecord
from bot.types import GIVE_UP_MESSAGE
from tests.adapters.teams.test_app import TICKET, Teams, conversation_key_of, running_teams
from tests.bot.helpers import eventually
from tests.fakes.bot_connector import ALICE, BOB, Recorded
from tests.fakes.openai_server import Turn, respond, text, tool_calls

# The production policies with shorter waits: the connector tries twice per outbox attempt (honouring a
# Retry-After of up to 1 s), and the outbox tries again 0.2 s later, then 0.4 s, ... (9 attempts in all).
FAST_CONNECTOR = replace(teams_module.SEND_RETRY, attempts=2, first_s=0.05, max_wait_s=1.0, total_s=5.0)
FAST_OUTBOX = replace(POST_POLICY, backoff_s=0.2, max_backoff_s=1.0)
MIN_OUTAGE_S = 1.0
OUTAGE_CAP_S = 60.0  # only so a broken test cannot refuse forever; recovery comes from ``outage`` below
REFUSED_EACH = FAST_CONNECTOR.attempts + 1  # one outbox attempt refused in full, and the outbox's retry refused
WAIT_S = 20.0

OUTAGES = [pytest.param(503, None, id="503"), pytest.param(429, "1", id="429-retry-after")]
TICKET_WORDS = "please open a ticket"
GIVE_UP_WORDS = "search everything"
CARD_TEXT = "I can raise a ticket for this. Please confirm."


def model_turn(body: dict[str, Any]) -> Turn:
    """The model, by what it was asked: one scripted turn serves every conversation, in any order.

    A plain question gets an answer naming it (so a reply in the wrong thread shows); a ticket request
    gets the ticket proposal, and after the ticket's result a closing answer; a "search everything"
    keeps searching until the step budget stops the run (a give-up).
    """
    messages = body["messages"]
    question = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    searched = sum(1 for m in messages if m["role"] == "tool")
    if TICKET_WORDS in question:
        if messages[-1]["role"] == "tool":  # the ticket's result, after the click
            return text("Done: your ticket is open.")
        return tool_calls(("create_it_ticket", TICKET), content=CARD_TEXT)
    if GIVE_UP_WORDS in question:
        return tool_calls(("search_policies", {"query": f"travel rule {searched + 1}"}))
    return text(f"Answer to: {question}")


@pytest_asyncio.fixture
async def teams(
    tmp_path: Path, fake_openai: Any, sample_index: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Teams]:
    # max_steps 2: a run that searches twice gives up on the step budget; a ticket takes one step before
    # the click and one after it. helpdesk_poll_s: the outbox worker looks for due rows every 0.05 s.
    monkeypatch.setattr(teams_module, "SEND_RETRY", FAST_CONNECTOR)  # read when the app builds its connector
    async for harness in running_teams(
        tmp_path, fake_openai, sample_index, monkeypatch, max_steps=2, helpdesk_poll_s=0.05
    ):
        harness.service.outbox.post_policy = FAST_OUTBOX
        harness.model.script(*[respond(model_turn)] * 50)
        yield harness


# --- the outage -----------------------------------------------------------------------------------


def refused_posts(teams: Teams, conversation_id: str) -> int:
    """Message posts (not typing, not updates) the channel refused in a conversation: one an outbox attempt,
    a stream's final included (one refused for now is retried on the same stream, not posted plain)."""
    return sum(
        1
        for r in teams.channel.refusals
        if r.conversation_id == conversation_id and r.type == "message" and r.kind != "update"
    )


async def outage(
    teams: Teams,
    status: int,
    retry_after: str | None,
    during: Callable[[], Awaitable[list[str]]],
    *,
    until: Callable[[str], bool] | None = None,
    roster: bool = False,
) -> None:
    """Fail the channel with ``status``, run ``during`` (it returns the conversations it expects replies in),
    and recover once ``until`` holds for each of them (by default: its reply was refused ``REFUSED_EACH``
    times) and ``MIN_OUTAGE_S`` has passed. ``roster``: member lookups fail too (the askers count as
    guests, so no ticket can be proposed meanwhile)."""
    loop = asyncio.get_running_loop()
    done = until or (lambda conversation: refused_posts(teams, conversation) >= REFUSED_EACH)
    teams.channel.fail_for(OUTAGE_CAP_S, status, retry_after=retry_after, roster=roster)
    began, seen = loop.time(), len(teams.channel.recorded)
    try:
        conversations = await during()
        await eventually(lambda: all(done(c) for c in conversations), WAIT_S)
        assert teams.channel.recorded[seen:] == []  # nothing got through meanwhile, not even typing
        await asyncio.sleep(max(0.0, MIN_OUTAGE_S - (loop.time() - began)))
    finally:
        teams.channel.fail_for(0)  # recovered


async def post_all(teams: Teams, activities: list[dict[str, Any]]) -> None:
    """Deliver activities at once, as Bot Framework would; each is acknowledged (written down) meanwhile."""
    statuses = await asyncio.gather(*(teams.post(activity) for activity in activities))
    assert [status for status, _ in statuses] == [201] * len(activities), statuses


def thread_of(activity: dict[str, Any]) -> str:
    """The conversation id a reply to ``activity`` is posted to: the chat, or the channel post's reply chain."""
    return str(activity["conversation"]["id"])


async def delivered(teams: Teams, activity: dict[str, Any], count: int = 1) -> list[DeliveryRecord]:
    """The activity's conversation's outbox rows, once ``count`` are there and all of them are delivered."""
    async with asyncio.timeout(WAIT_S):
        return await teams.delivered(conversation_key_of(activity), count)


async def replies_in(teams: Teams, conversation_id: str, count: int) -> list[Recorded]:
    await teams.channel.wait_for(
        lambda r: r.kind != "update" and r.type == "message" and r.conversation_id == conversation_id,
        count=count,
        timeout=WAIT_S,
    )
    return teams.channel.messages(conversation_id)


def card_text(card: dict[str, Any]) -> str:
    runs = [[block.get("text", "")] + [run["text"] for run in block.get("inlines", [])] for block in card["body"]]
    return " ".join(words for texts in runs for words in texts if words)


# --- messages -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "retry_after"), OUTAGES)
async def test_messages_during_an_outage_each_get_one_reply_after_it(teams, status, retry_after):
    asked = [
        teams.channel.personal_message("How many vacation days do I get?"),
        teams.channel.personal_message("Can I work from abroad?", sender=BOB),
        *(teams.channel.channel_message(f"Question {n} about expenses", sender=(ALICE, BOB)[n % 2]) for n in range(4)),
    ]
    threads = [thread_of(activity) for activity in asked]
    assert len(set(threads)) == len(asked)  # one thread each

    async def during() -> list[str]:
        await post_all(teams, asked)
        return threads

    await outage(teams, status, retry_after, during, roster=True)

    for activity, thread in zip(asked, threads, strict=True):
        (reply,) = await replies_in(teams, thread, 1)
        question = str(activity["text"]).removeprefix("<at>PolicyPal</at> ")
        assert reply.text == f"Answer to: {question}"  # its own answer, in its own thread
        (row,) = await delivered(teams, activity)
        assert row.attempts >= 2  # refused, retried by the outbox, delivered
    await teams.settle()
    # Once each: nothing was posted twice, no run was repeated, no reply was given up on.
    assert sorted(r.conversation_id for r in teams.channel.messages()) == sorted(threads)
    assert len(teams.model.requests) == len(asked) and len(await teams.service.store.runs.recent()) == len(asked)
    assert await teams.service.store.cases.recent() == []
    assert {r.status for r in teams.channel.refusals} == {status}
    assert {r.kind for r in teams.channel.refusals} >= {"send", "member"}  # replies, typing and the roster
    teams.model.assert_no_problems()


@pytest.mark.parametrize(("status", "retry_after"), OUTAGES)
async def test_a_roster_lookup_during_an_outage_is_tried_once_and_the_run_goes_on(teams, status, retry_after):
    """Who is asking is looked up once; unanswered, the asker is a guest for this turn. The SDK's own retries
    (msrest retries a GET on 5xx, and sleeps out any Retry-After, uncapped) would hold the run before it began."""
    asked = teams.channel.personal_message("Is there a dress code?")
    chat = thread_of(asked)

    async def during() -> list[str]:
        await post_all(teams, [asked])
        return [chat]

    await outage(teams, status, retry_after, during, roster=True)
    (reply,) = await replies_in(teams, chat, 1)
    await teams.settle()
    assert [(r.kind, r.conversation_id) for r in teams.channel.refusals if r.kind == "member"] == [("member", chat)]
    assert reply.text == "Answer to: Is there a dress code?"


async def test_two_questions_in_one_chat_during_an_outage_are_answered_once_each(teams):
    """The second asked while the first's reply is still refused: both answered, neither twice."""
    first = teams.channel.personal_message("Is there a dress code?")
    second = teams.channel.personal_message("And on Fridays?")
    chat = thread_of(first)

    async def during() -> list[str]:
        await post_all(teams, [first])
        await eventually(lambda: refused_posts(teams, chat) >= 1, WAIT_S)
        await post_all(teams, [second])
        await eventually(lambda: len(teams.model.requests) == 2, WAIT_S)
        return [chat]

    await outage(teams, 503, None, during, until=lambda c: refused_posts(teams, c) >= 2 * REFUSED_EACH)
    replies = await replies_in(teams, chat, 2)
    await delivered(teams, first, 2)
    await teams.settle()
    assert sorted(r.text for r in teams.channel.messages(chat)) == sorted(
        ["Answer to: Is there a dress code?", "Answer to: And on Fridays?"]
    )
    assert len(replies) == 2 and len(teams.model.requests) == 2  # in either order: see the next test


async def rows_failed(teams: Teams, activity: dict[str, Any], attempts: int) -> list[DeliveryRecord]:
    """The conversation's outbox rows once the newest has failed ``attempts`` times and waits for its next."""
    async with asyncio.timeout(WAIT_S):
        while True:
            rows = await teams.service.store.outbox.of_conversation(conversation_key_of(activity))
            newest = max(rows, key=lambda row: row.id) if rows else None
            if newest is not None and newest.state == "pending" and newest.attempts >= attempts:
                return rows
            await asyncio.sleep(0.02)


async def test_replies_in_one_chat_keep_their_order_after_an_outage(teams):
    # The first reply has failed four times (its next try 1.6 s away), the second once (0.2 s away) when the
    # channel recovers: whichever is due first is posted first.
    teams.service.outbox.post_policy = replace(FAST_OUTBOX, max_backoff_s=10.0)
    first = teams.channel.personal_message("Is there a dress code?")
    second = teams.channel.personal_message("And on Fridays?")
    teams.channel.fail_for(OUTAGE_CAP_S)
    try:
        await post_all(teams, [first])
        await rows_failed(teams, first, 4)
        await post_all(teams, [second])
        await rows_failed(teams, second, 1)
    finally:
        teams.channel.fail_for(0)
    replies = await replies_in(teams, thread_of(first), 2)
    assert [r.text for r in replies] == ["Answer to: Is there a dress code?", "Answer to: And on Fridays?"]


# --- a ticket card --------------------------------------------------------------------------------


async def posted_card(teams: Teams, thread: str) -> tuple[Recorded, dict[str, Any]]:
    """The ticket card in ``thread``, once the bot has stored where it was posted (clicks update it there)."""
    (posted,) = await replies_in(teams, thread, 1)
    (card,) = posted.cards
    async with asyncio.timeout(WAIT_S):
        while True:
            pending = await teams.service.store.pending.find("open")
            if pending and pending[0].platform_message:
                break
            await asyncio.sleep(0.02)
    return posted, card


async def click_confirm(teams: Teams, posted: Recorded, card: dict[str, Any]) -> dict[str, Any]:
    data = next(a["data"] for a in card["actions"] if a["verb"] == "confirm")
    status, body = await teams.post(teams.channel.card_action("confirm", data, on=posted))
    assert status == 200 and body["statusCode"] == 200, body
    return body


@pytest.mark.parametrize(("status", "retry_after"), OUTAGES)
async def test_a_ticket_card_posted_during_an_outage_arrives_once_and_a_click_after_it_works(
    teams, status, retry_after
):
    asked = teams.channel.channel_message(f"my VPN says NG-809, {TICKET_WORDS}")
    thread = thread_of(asked)

    async def during() -> list[str]:
        await post_all(teams, [asked])
        return [thread]

    await outage(teams, status, retry_after, during)
    posted, card = await posted_card(teams, thread)
    (card_row,) = await delivered(teams, asked)
    assert card_row.attempts >= 2 and card_row.external_ref == posted.id
    assert [a["verb"] for a in card["actions"]] == ["confirm", "cancel"]
    (pending,) = await teams.service.store.pending.find("open")
    assert pending.platform_message["activity_id"] == posted.id  # where the click will update it

    answer = await click_confirm(teams, posted, card)
    final = (await replies_in(teams, thread, 2))[1]
    await delivered(teams, asked, 2)
    await teams.settle()

    assert answer["type"] == CARD_CONTENT_TYPE and "Confirmed by Alice Example" in card_text(answer["value"])
    assert final.text == "Done: your ticket is open."
    assert [r.id for r in teams.channel.messages(thread)] == [posted.id, final.id]  # the card once, then the reply
    # The posted card changed once per state, in order: the buttons went ("working"), then the result.
    working, result = teams.channel.updates
    assert {working.activity_id, result.activity_id} == {posted.id}
    assert "clicked Confirm" in card_text(working.cards[0]) and "actions" not in working.cards[0]
    assert "Confirmed by Alice Example" in card_text(result.cards[0]) and result.cards == [answer["value"]]
    assert await teams.service.store.tickets.count() == 1
    assert (await teams.service.store.pending.get(pending.id)).state == "done"
    teams.model.assert_no_problems()


@pytest.mark.parametrize(("status", "retry_after"), OUTAGES)
async def test_a_click_during_an_outage_is_answered_and_the_card_shows_its_result_once_after_it(
    teams, status, retry_after
):
    """The invoke's answer is the HTTP response (no connector call); the posted card and the reply wait."""
    asked = teams.channel.channel_message(f"my laptop is broken, {TICKET_WORDS}")
    thread = thread_of(asked)
    await post_all(teams, [asked])
    posted, card = await posted_card(teams, thread)

    def held_back(conversation: str) -> bool:
        """The "working" and the result's updates refused in full, the outbox's retry of the result's card
        refused too, and so was the reply that follows the ticket."""
        updates = sum(1 for r in teams.channel.refusals if r.kind == "update" and r.conversation_id == conversation)
        return updates > 2 * FAST_CONNECTOR.attempts and refused_posts(teams, conversation) >= REFUSED_EACH

    answers: list[dict[str, Any]] = []

    async def during() -> list[str]:
        answers.append(await click_confirm(teams, posted, card))
        return [thread]

    await outage(teams, status, retry_after, during, until=held_back)
    final = (await replies_in(teams, thread, 2))[1]
    await eventually(lambda: len(teams.channel.updates) >= 1, WAIT_S)
    rows = await delivered(teams, asked, 3)  # the card, the card as the click left it, the reply
    await teams.settle()

    (answer,) = answers
    assert [(row.payload or {}).get("kind") for row in rows] == ["reply", "card", "reply"]
    assert answer["type"] == CARD_CONTENT_TYPE and "actions" not in answer["value"]
    assert final.text == "Done: your ticket is open."
    assert [r.id for r in teams.channel.messages(thread)] == [posted.id, final.id]
    # Only the result is shown after the outage (the "working" state was refused and is not worth repeating).
    (update,) = teams.channel.updates
    assert update.activity_id == posted.id and "Confirmed by Alice Example" in card_text(update.cards[0])
    assert await teams.service.store.tickets.count() == 1
    teams.model.assert_no_problems()


# --- a give-up ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "retry_after"), OUTAGES)
async def test_a_give_up_during_an_outage_arrives_once_with_its_case_id(teams, status, retry_after):
    gives_up = teams.channel.channel_message(f"{GIVE_UP_WORDS} about travel rules")
    answered = teams.channel.personal_message("Is there a dress code?")
    threads = [thread_of(gives_up), thread_of(answered)]

    async def during() -> list[str]:
        await post_all(teams, [gives_up, answered])
        return threads

    await outage(teams, status, retry_after, during, roster=True)
    (reply,) = await replies_in(teams, threads[0], 1)
    (other,) = await replies_in(teams, threads[1], 1)
    (row,) = await delivered(teams, gives_up)
    await delivered(teams, answered)
    await teams.settle()

    (case,) = await teams.service.store.cases.recent()
    assert reply.text.startswith(GIVE_UP_MESSAGE.split(".")[0]) and case_id_for(case.number) in reply.text, reply.text
    assert row.attempts >= 2 and other.text == "Answer to: Is there a dress code?"
    assert len(teams.channel.messages()) == 2  # the give-up once, the answer once
    (run,) = [r for r in await teams.service.store.runs.recent() if r.conversation_key == row.conversation_key]
    assert run.reason == "step_budget"
    teams.model.assert_no_problems()
