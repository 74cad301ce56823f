"""Slack end to end: a channel answer uses what the channel may read; the asker's private part goes to their DM.

Retrieval's own filtering is tested on a real index (tests/bot/test_audiences.py); here the searcher
returns the HR passage only to searches whose groups include ``hr``, so what is checked is which
groups each run searched with and where each reply was posted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from adapters.server import build_app
from adapters.slack.blocks import CONFIRM
from bot.replies import PRIVATE_PART
from bot.service import PRIVATE_PART_SENT
from bot.wiring import open_service
from retrieval import Passage
from tests.adapters.slack.test_app import SECRET, SlackRig, running_slack, search
from tests.bot.helpers import settings_for
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import event_envelope, mention_event
from tests.scenarios.test_slack_ticket import TICKET, button, stored_where_posted

HANA, HUGO, BOB = "U_HANA", "U_HUGO", "U_BOB"
GROUPS = json.dumps({"hana@example.com": ["hr"], "hugo@example.com": ["hr"]})
PUBLIC = Passage(
    0.9,
    "leave",
    "Leave Policy",
    "Team changes",
    "/policies/leave.md",
    "Team changes are announced on the intranet.",
    audience=("all",),
)
HR_ONLY = Passage(
    0.8,
    "reorg",
    "Reorg Plan",
    "Team changes",
    "/policies/reorg.md",
    "Finance and facilities merge into one Operations team.",
    audience=("hr",),
)


class AudienceSearcher:
    """The HR passage for searches that may read ``hr``; the groups of every search, in order."""

    def __init__(self) -> None:
        self.searched_with: list[tuple[str, ...]] = []

    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Passage]:
        groups = tuple(filter.groups or ()) if filter is not None else ()
        self.searched_with.append(groups)
        return [PUBLIC, HR_ONLY] if "hr" in groups else [PUBLIC]


async def rig(
    tmp_path: Path, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, searcher: AudienceSearcher, **settings: Any
) -> Any:
    started = running_slack(tmp_path, model, monkeypatch, searcher, user_groups=GROUPS, **settings)
    slack = await anext(started)
    for user_id, name in ((HANA, "hana"), (HUGO, "hugo"), (BOB, "bob")):
        slack.slack.add_user(user_id, name, f"{name}@example.com")
    return started, slack


async def test_an_hr_mention_in_a_channel_answers_publicly_there_and_privately_in_her_dm(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = AudienceSearcher()
    fake_openai.script(
        search(),
        text("Announced on the intranet [Leave Policy › Team changes]."),
        search(),
        text("They merge into one Operations team [Reorg Plan › Team changes]."),
    )
    started, slack = await rig(tmp_path, fake_openai, monkeypatch, searcher)
    try:
        event = mention_event(HANA, "<@UBOT> what team changes are planned?")
        await slack.send(event_envelope(event))
        thread_reply, direct = await slack.replies(2)
    finally:
        await anext(started, None)
    assert searcher.searched_with == [("all",), ("all", "hr")]  # the channel's run, then hers
    assert thread_reply["channel"] == "C0GENERAL" and thread_reply["thread_ts"] == event["ts"]
    assert PRIVATE_PART_SENT in thread_reply.block_text and "Operations" not in thread_reply.block_text
    assert direct["channel"] == HANA and "Operations team" in direct.block_text  # her DM with the app
    assert "<#C0GENERAL>" in direct.block_text and PRIVATE_PART not in direct.block_text


async def test_with_members_audience_a_channel_of_hr_people_gets_the_hr_answer_in_the_thread(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = AudienceSearcher()
    fake_openai.script(search(), text("They merge into one Operations team [Reorg Plan › Team changes]."))
    started, slack = await rig(tmp_path, fake_openai, monkeypatch, searcher, shared_audience="members")
    slack.slack.members = {"C_HR": [HANA, HUGO, slack.slack.bot_user_id], "C0GENERAL": [HANA, BOB]}
    try:
        event = mention_event(HANA, "<@UBOT> what team changes are planned?", channel="C_HR")
        await slack.send(event_envelope(event))
        (reply,) = await slack.replies(1)
    finally:
        await anext(started, None)
    assert searcher.searched_with == [("all", "hr")]  # everyone there may read HR documents: one run
    assert reply["channel"] == "C_HR" and "Operations team" in reply.block_text
    assert PRIVATE_PART_SENT not in reply.block_text


async def test_the_private_part_in_her_dm_is_slack_formatting_not_raw_markdown(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The private part is the model's Markdown: Slack shows ``**``, ``[label](url)`` and ``##`` literally."""
    searcher = AudienceSearcher()
    private = (
        "## Plan\n**Finance and facilities** merge into [one team](https://intranet.example.com/reorg) "
        "in <Q3> & Q4 [Reorg Plan › Team changes]."
    )
    fake_openai.script(
        search(), text("Announced on the intranet [Leave Policy › Team changes]."), search(), text(private)
    )
    started, slack = await rig(tmp_path, fake_openai, monkeypatch, searcher)
    try:
        await slack.send(event_envelope(mention_event(HANA, "<@UBOT> what team changes are planned?")))
        _, direct = await slack.replies(2)
    finally:
        await anext(started, None)
    shown = direct.block_text
    assert direct["channel"] == HANA and "<#C0GENERAL>" in shown
    assert "*Plan*\n*Finance and facilities* merge" in shown and "**" not in shown and "##" not in shown
    assert "<https://intranet.example.com/reorg|one team>" in shown and "](" not in shown
    assert "&lt;Q3&gt; &amp; Q4" in shown  # never read as a link or markup


async def joins(slack: SlackRig, user: str, channel: str) -> None:
    """``user`` joins ``channel``: Slack's member list has them, and its member_joined_channel event is worked on."""
    slack.slack.members[channel].append(user)
    envelope = event_envelope(
        {
            "type": "member_joined_channel",
            "user": user,
            "channel": channel,
            "channel_type": "C",
            "team": "T0TEAM",
            "inviter": HANA,
            "event_ts": "1700000500.000100",
        }
    )
    status, _, _ = await slack.send(envelope)
    assert status == 200
    for _ in range(3_000):  # a cap of a minute for a busy machine; no duration is asserted
        item = await slack.service.store.inbox.get(f"slack:{envelope['event_id']}")
        if item is not None and item.state == "done":
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the member_joined_channel event was never worked on")


def script_before_and_after_bob_joins(fake_openai: FakeOpenAI) -> None:
    """The model's answers: for HR people only, then for the channel Bob joined, then Hana's private part."""
    fake_openai.script(
        search(),
        text("They merge into one Operations team [Reorg Plan › Team changes]."),  # only HR people there
        search(),
        text("Announced on the intranet [Leave Policy › Team changes]."),  # Bob has joined
        search(),
        text("They merge into one Operations team [Reorg Plan › Team changes]."),  # Hana's private part
    )


@contextlib.asynccontextmanager
async def another_replica(
    rig: SlackRig, tmp_path: Path, searcher: AudienceSearcher, **settings: Any
) -> AsyncIterator[SlackRig]:
    """A second app on the same database and the same Slack workspace: another replica behind the load balancer."""
    values = {
        "slack_bot_token": rig.slack.token,
        "slack_signing_secret": SECRET,
        "slack_api_url": rig.slack.base_url,
        "user_groups": GROUPS,
        **settings,
    }
    config = settings_for(tmp_path, rig.model, **values)  # the same data_dir: the same database
    service = await open_service(config, searcher=searcher)
    app = build_app(config, service)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield replace(rig, url=str(server.make_url("")).rstrip("/"), service=service, app=app)
    finally:
        await server.close()
        await service.close()


@pytest.mark.parametrize("elsewhere", [False, True], ids=["join seen here", "join seen by another replica"])
async def test_with_members_audience_someone_who_joined_the_channel_reads_the_next_answer_there(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, elsewhere: bool
) -> None:
    """The join is worked on by this app, or by another replica on the same database (Slack sent the
    member_joined_channel event there): either way the next answer here is built for the newcomer too."""
    searcher = AudienceSearcher()
    script_before_and_after_bob_joins(fake_openai)
    started, here = await rig(tmp_path, fake_openai, monkeypatch, searcher, shared_audience="members")
    here.slack.members = {"C_HR": [HANA, HUGO, here.slack.bot_user_id]}
    replica = another_replica(here, tmp_path, searcher, shared_audience="members")
    try:
        async with replica if elsewhere else contextlib.nullcontext(here) as there:
            await here.send(event_envelope(mention_event(HANA, "<@UBOT> what team changes?", channel="C_HR")))
            await here.replies(1)
            await joins(there, BOB, "C_HR")
            again = mention_event(HANA, "<@UBOT> and now?", channel="C_HR")
            await here.send(event_envelope(again))
            (thread_reply,) = await here.replies(1, channel="C_HR", thread_ts=again["ts"])
            assert searcher.searched_with[:2] == [("all", "hr"), ("all",)]  # the second answer is built for Bob too
            assert "Operations" not in thread_reply.block_text and PRIVATE_PART_SENT in thread_reply.block_text
            await here.replies(1, channel=HANA)  # the HR part, privately
    finally:
        await anext(started, None)
    assert searcher.searched_with == [("all", "hr"), ("all",), ("all", "hr")]  # the second thread's, then hers
    assert len(here.slack.calls_to("conversations.members")) == 2  # read again after the join, not from the cache


async def test_a_ticket_confirmed_after_someone_joined_the_channel_is_answered_for_them_too(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = AudienceSearcher()
    fake_openai.script(
        search(),
        tool_calls(("create_it_ticket", TICKET), content="I can raise a ticket for this. Please confirm."),
        search(),
        text("Your ticket is open; changes are announced on the intranet [Leave Policy › Team changes]."),
    )
    started, slack = await rig(tmp_path, fake_openai, monkeypatch, searcher, shared_audience="members")
    slack.slack.members = {"C_HR": [HANA, HUGO, slack.slack.bot_user_id]}
    try:
        event = mention_event(HANA, "<@UBOT> what team changes are planned? my VPN fails too", channel="C_HR")
        await slack.send(event_envelope(event))
        (card,) = await slack.replies(1)
        await stored_where_posted(slack)
        await joins(slack, BOB, "C_HR")
        status, _, _ = await slack.click(
            HANA, CONFIRM, button(card, CONFIRM), channel="C_HR", message_ts=card.answer["ts"], thread_ts=event["ts"]
        )
        _, reply = await slack.replies(2)
    finally:
        await anext(started, None)
    assert status == 200
    assert searcher.searched_with == [("all", "hr"), ("all",)]  # the card's run, then the run after the click
    after_the_click = json.dumps(fake_openai.requests[2].messages)
    assert "Operations" in json.dumps(fake_openai.requests[1].messages) and "Operations" not in after_the_click
    assert reply["thread_ts"] == event["ts"] and "Your ticket is open" in reply.block_text
