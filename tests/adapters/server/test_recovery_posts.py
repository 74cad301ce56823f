"""The service's recovery posts on Slack, through the outbox: what the sweeper says after a request ended
(a recovered run's give-up, an expired card), and a post a dead process may already have made."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aiohttp
import pytest

from adapters.slack import SlackSender
from adapters.slack.blocks import notice_message
from adapters.slack.inbound import BotIdentity
from adapters.slack.post import SlackWriter, web_client
from bot.delivery import Address, Post, post_destination
from bot.store import NewPost, PendingRecord, Place, utcnow
from tests.bot.helpers import OnePassage, service
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.asyncio

SLACK_KEY = "slack:T0TEAM:C1:1700.1"
SLACK_PLACE = Place(SLACK_KEY, "slack", "T0TEAM", "C1", "1700.1", None)


def expired_record(platform_message: dict[str, Any], key: str = SLACK_KEY) -> PendingRecord:
    now = utcnow()
    return PendingRecord(
        id="p1", run_id="r1", conversation_key=key, requester="U_ALICE", tool="create_it_ticket",
        call_id="c1", arguments={"summary": "VPN"}, args_hash="h", text="Confirm?", state="expired",
        created_at=now - timedelta(days=1), expires_at=now, decided_at=None, decider=None, executor=None,
        finished_at=now, result=None, run_state={}, platform_message=platform_message,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def slack_service(tmp_path: Any, fake_openai: Any) -> AsyncIterator[tuple[Any, FakeSlackAPI, SlackWriter]]:
    """A service whose outbox posts to the fake Slack through the Slack sender, as the server wires it."""
    async with FakeSlackAPI() as slack, aiohttp.ClientSession() as session:
        writer = SlackWriter(web_client(slack.token, session, slack.base_url), BotIdentity("UBOT", "BBOT", "T0TEAM"))
        async with service(tmp_path, fake_openai, OnePassage()) as svc:
            svc.outbox.register(SlackSender(writer, svc))
            await svc.store.threads.remember_place(SLACK_PLACE)
            yield svc, slack, writer
            await svc.outbox.drain(5)


async def test_slack_gets_the_give_up_in_the_thread_and_the_expired_card_updated_in_place(tmp_path, fake_openai):
    async with slack_service(tmp_path, fake_openai) as (svc, slack, _):
        told = await svc.tell(SLACK_KEY, "This request was stopped. Case HD-1001.", run_id="run_1", case_id="HD-1001")
        message = {"platform": "slack", "channel": "C1", "ts": "1700.2", "thread_ts": "1700.1"}
        await svc.card_expired(expired_record(message))
        await svc.outbox.drain(5)
        rows = await svc.store.outbox.of_conversation(SLACK_KEY)
    (post,) = slack.calls_to("chat.postMessage")
    (update,) = slack.calls_to("chat.update")
    assert told and (post["channel"], post["thread_ts"]) == ("C1", "1700.1") and "HD-1001" in post.block_text
    assert (update["channel"], update["ts"]) == ("C1", "1700.2")
    assert "This request expired at" in update.block_text
    assert [(row.destination, row.state) for row in rows] == [("slack:chat", "delivered")] * 2  # each once, recorded


async def test_a_conversation_no_platform_here_can_reach_is_not_told_and_says_so(tmp_path, fake_openai, caplog):
    async with slack_service(tmp_path, fake_openai) as (svc, slack, _):
        told = await svc.tell("teams:t:c:c", "This request was stopped.", run_id="run_1", case_id="HD-1001")
        rows = await svc.store.outbox.of_conversation("teams:t:c:c")
    assert told is False and rows == [] and slack.calls_to("chat.postMessage") == []
    assert "no way to post on teams" in caplog.text


async def test_a_slack_post_a_dead_process_made_before_it_could_record_it_is_not_posted_twice(tmp_path, fake_openai):
    async with slack_service(tmp_path, fake_openai) as (svc, slack, writer):
        post = Post("notice", Address("slack", "C1", "1700.1"), text="Your answer.")
        new = NewPost(post_destination("slack"), post.to_json(), SLACK_KEY)
        (row,) = await svc.store.outbox.add_posts([new], claimed_by="dead-process")
        posted = await writer.post("C1", "1700.1", notice_message(post.text), row=row.id, part=0)
        # ... and it died before recording that it had: the sweeper gives the row back
        assert await svc.store.outbox.reclaim(["dead-process"], utcnow()) == 1
        (result,) = await svc.outbox.run_once()
        stored = await svc.store.outbox.get(row.id)
    assert result.status == "delivered" and len(slack.calls_to("chat.postMessage")) == 1  # found, not posted again
    assert slack.calls_to("conversations.replies")  # it looked first
    assert stored is not None and (stored.state, stored.external_ref) == ("delivered", posted)


async def test_a_slack_post_a_dead_process_never_made_is_posted_once_after_looking(tmp_path, fake_openai):
    async with slack_service(tmp_path, fake_openai) as (svc, slack, _):
        post = Post("notice", Address("slack", "C1", "1700.1"), text="Your answer.")
        new = NewPost(post_destination("slack"), post.to_json(), SLACK_KEY)
        await svc.store.outbox.add_posts([new], claimed_by="dead-process")  # it died before posting
        await svc.store.outbox.reclaim(["dead-process"], utcnow())
        (result,) = await svc.outbox.run_once()
    (posted,) = slack.calls_to("chat.postMessage")
    assert result.status == "delivered" and posted["thread_ts"] == "1700.1" and "Your answer." in posted.block_text
    assert slack.calls_to("conversations.replies")
