"""Teams end to end: a channel answer uses what everyone in the channel may read.

The roster comes from the fake connector (GET /v3/conversations/{id}/members); the searcher returns
the HR passage only to searches whose groups include ``hr`` (retrieval's own filtering is tested on
a real index in tests/bot/test_audiences.py).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from adapters.server import build_app
from bot.service import PRIVATE_PART_SENT
from bot.wiring import open_service
from tests.adapters.slack.test_audience import AudienceSearcher
from tests.adapters.teams.test_app import TICKET, Teams, running_teams
from tests.fakes.bot_connector import ALICE, CHANNEL, TENANT
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.scenarios.test_teams_ticket import card_in_channel, click

HR_EVERYONE = json.dumps({"alice@contoso.example": ["hr"], "bob@contoso.example": ["hr"], "aad-gwen": ["hr"]})
HR_BUT_GWEN = json.dumps({"alice@contoso.example": ["hr"], "bob@contoso.example": ["hr"]})
DAVE = {"id": "29:dave", "name": "Dave Example", "aadObjectId": "aad-dave"}  # in no group: public documents only
TEAM = "19:team@thread.tacv2"


async def started(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, searcher: AudienceSearcher, **settings: Any
) -> AsyncIterator[Teams]:
    async for harness in running_teams(tmp_path, fake, searcher, monkeypatch, **settings):
        yield harness


def script(fake: FakeOpenAI, *answers: str) -> None:
    turns = []
    for answer in answers:
        turns += [tool_calls(("search_policies", {"query": "team changes"})), text(answer)]
    fake.script(*turns)


async def ask_in_channel(harness: Teams) -> str:
    status, _ = await harness.post(harness.channel.channel_message("what team changes are planned?", sender=ALICE))
    assert status in (200, 201)
    reply = await harness.reply()
    await harness.settle()
    return json.dumps(reply.json)


@pytest.mark.parametrize(
    ("groups", "searched", "says_sent_privately"),
    [
        pytest.param(HR_EVERYONE, [("all", "hr")], False, id="every-member-in-hr"),
        pytest.param(HR_BUT_GWEN, [("all",), ("all", "hr")], True, id="one-member-outside-hr"),
    ],
)
async def test_with_members_audience_a_channel_answer_uses_what_every_member_may_read(
    tmp_path: Path,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    groups: str,
    searched: list[tuple[str, ...]],
    says_sent_privately: bool,
) -> None:
    searcher = AudienceSearcher()
    script(fake_openai, "They merge [Reorg Plan › Team changes].", "They merge [Reorg Plan › Team changes].")
    async for harness in started(
        tmp_path, fake_openai, monkeypatch, searcher, user_groups=groups, shared_audience="members"
    ):
        said = await ask_in_channel(harness)
        roster_reads = [member for _, member in harness.channel.member_lookups if member == "*"]
    assert roster_reads == ["*"]  # read once: Alice, Bob and Gwen, the channel's readers
    assert searcher.searched_with == searched
    assert (PRIVATE_PART_SENT in said) is says_sent_privately


async def test_by_default_a_channel_answer_uses_public_documents_and_sends_the_rest_to_a_personal_chat(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = AudienceSearcher()
    script(
        fake_openai,
        "Announced on the intranet [Leave Policy › Team changes].",
        "They merge [Reorg Plan › Team changes].",
    )
    async for harness in started(tmp_path, fake_openai, monkeypatch, searcher, user_groups=HR_EVERYONE):
        said = await ask_in_channel(harness)
        lookups = list(harness.channel.member_lookups)
    assert searcher.searched_with == [("all",), ("all", "hr")]
    assert PRIVATE_PART_SENT in said and "merge" not in said  # the HR part went to her personal chat
    assert all(member != "*" for _, member in lookups)  # the roster is only read when members decide


def script_before_and_after_dave_joins(fake_openai: FakeOpenAI) -> None:
    """The model's answers: for HR people only, then for the channel Dave joined, then Alice's private part."""
    script(
        fake_openai,
        "They merge [Reorg Plan › Team changes].",  # Alice, Bob and Gwen: all in HR
        "Announced on the intranet [Leave Policy › Team changes].",  # Dave has joined
        "They merge [Reorg Plan › Team changes].",  # Alice's private part
    )


async def dave_joins_the_team(harness: Teams) -> None:
    """Dave is added to the channel's team: its roster has him, and Teams says so (conversationUpdate, in the
    team's General channel, whose id is the team's: not the channel the questions are asked in)."""
    harness.channel.roster[DAVE["id"]] = {**DAVE, "email": "dave@contoso.example", "userRole": "user"}
    activity = harness.channel.activity(
        {"id": TEAM, "conversationType": "channel"}, ALICE, type="conversationUpdate", membersAdded=[{"id": DAVE["id"]}]
    )
    activity["channelData"].update({"eventType": "teamMemberAdded", "team": {"id": TEAM}, "tenant": {"id": TENANT}})
    status, _ = await harness.post(activity)
    assert status in (200, 201)


@contextlib.asynccontextmanager
async def another_replica(harness: Teams, searcher: AudienceSearcher) -> AsyncIterator[Teams]:
    """A second app on the same database, talking to the same channel: another replica behind the load balancer."""
    service = await open_service(harness.settings, searcher=searcher)  # the same settings: the same database
    runner = web.AppRunner(build_app(harness.settings, service), shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield replace(harness, url=f"http://127.0.0.1:{runner.addresses[0][1]}/api/messages", service=service)
    finally:
        await runner.cleanup()
        await service.close()


@pytest.mark.parametrize("elsewhere", [False, True], ids=["join seen here", "join seen by another replica"])
async def test_with_members_audience_someone_added_to_the_team_reads_the_next_channel_answer(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, elsewhere: bool
) -> None:
    """The conversationUpdate reaches this app, or another replica on the same database: either way the next
    answer in the channel here is built for the newcomer too."""
    searcher = AudienceSearcher()
    script_before_and_after_dave_joins(fake_openai)
    async for here in started(
        tmp_path, fake_openai, monkeypatch, searcher, user_groups=HR_EVERYONE, shared_audience="members"
    ):
        async with another_replica(here, searcher) if elsewhere else contextlib.nullcontext(here) as there:
            await ask_in_channel(here)
            await dave_joins_the_team(there)
            await here.post(here.channel.channel_message("and now?", sender=ALICE))
            await here.reply(count=2)  # the thread's answer and, in her personal chat, the HR part
            await here.settle()
            in_channel = [m for m in here.channel.messages() if m.conversation_id.startswith(CHANNEL)]
            roster_reads = [member for _, member in here.channel.member_lookups if member == "*"]
    assert searcher.searched_with == [("all", "hr"), ("all",), ("all", "hr")]  # the second answer is for Dave too
    assert roster_reads == ["*", "*"]  # read again after the join, not from the cache
    said = json.dumps(in_channel[-1].json)
    assert len(in_channel) == 2 and PRIVATE_PART_SENT in said and "merge" not in said


async def test_a_ticket_confirmed_after_someone_joined_the_team_is_answered_for_them_too(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = AudienceSearcher()
    fake_openai.script(
        tool_calls(("search_policies", {"query": "team changes"})),
        tool_calls(("create_it_ticket", TICKET), content="I can raise a ticket for this. Please confirm."),
        tool_calls(("search_policies", {"query": "team changes"})),  # after the click
        text("Your ticket is open; changes are announced on the intranet [Leave Policy › Team changes]."),
    )
    async for harness in started(
        tmp_path, fake_openai, monkeypatch, searcher, user_groups=HR_EVERYONE, shared_audience="members"
    ):
        posted, card = await card_in_channel(harness)
        await dave_joins_the_team(harness)
        await click(harness, posted, "confirm", card)
        reply = await harness.reply(count=2)
        await harness.settle()
    assert searcher.searched_with == [("all", "hr"), ("all",)]  # the card's run, then the run after the click
    after_the_click = json.dumps(fake_openai.requests[2].messages)
    assert "Operations" in json.dumps(fake_openai.requests[1].messages) and "Operations" not in after_the_click
    assert "Your ticket is open" in reply.text
