"""Telling a thread something after its request ended (crash recovery, expired cards), on each platform."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import aiohttp
import pytest

from adapters.slack import SlackNotifier
from adapters.slack.inbound import BotIdentity
from adapters.slack.post import SlackPoster, web_client
from adapters.teams import TeamsNotifier
from adapters.teams.activity import reference_of, to_inbound
from bot.delivery import Notice
from bot.store import PendingRecord, Place, utcnow
from bot.types import UserRef
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.asyncio

ACTIVITY = {
    "type": "message",
    "id": "1700000000001",
    "channelId": "msteams",
    "serviceUrl": "https://smba.trafficmanager.net/emea/",
    "from": {"id": "29:alice", "aadObjectId": "aad-alice", "name": "Alice"},
    "recipient": {"id": "28:bot", "name": "PolicyPal"},
    "conversation": {"id": "a:1personal", "conversationType": "personal", "tenantId": "tenant-1"},
    "text": "Can I work abroad?",
}


class Connector:
    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.updated: list[tuple[dict[str, Any], str, dict[str, Any]]] = []

    async def send(self, reference: dict[str, Any], activity: dict[str, Any]) -> str:
        self.sent.append((reference, activity))
        return "posted-1"

    async def update(self, reference: dict[str, Any], activity_id: str, activity: dict[str, Any]) -> None:
        self.updated.append((reference, activity_id, activity))

    async def member(self, reference: dict[str, Any], user_id: str) -> dict[str, Any] | None:
        return None


async def test_a_recovered_run_is_told_through_the_reference_kept_from_the_first_message():
    inbound = to_inbound(ACTIVITY, UserRef("aad-alice", "Alice"))
    assert inbound.address == reference_of(ACTIVITY)  # kept with the conversation's place
    place = Place(inbound.conversation_key, "teams", "tenant-1", "a:1personal", "a:1personal", None, inbound.address)
    connector = Connector()
    told = await TeamsNotifier(connector).notify(place, Notice("I was restarted. Case HD-1001.", "run_1", "HD-1001"))
    ((reference, activity),) = connector.sent
    assert told and reference["serviceUrl"] == "https://smba.trafficmanager.net/emea/"
    assert "HD-1001" in activity["text"] and "run_1" in activity["text"]


async def test_a_place_without_a_reference_is_not_told_and_says_so(caplog: pytest.LogCaptureFixture):
    place = Place("teams:t:c:c", "teams", "t", "c", "c", None)
    assert await TeamsNotifier(Connector()).notify(place, Notice("hello")) is False
    assert "no conversation reference" in caplog.text


async def test_an_expired_teams_card_is_replaced_where_it_was_posted():
    where = {"reference": reference_of(ACTIVITY), "activity_id": "card-9", "requester_name": "Alice"}
    record = expired_record(where)
    connector = Connector()
    assert await TeamsNotifier(connector).card_expired(record)
    ((_, activity_id, activity),) = connector.updated
    assert activity_id == "card-9" and "request expired at" in str(activity)


def expired_record(platform_message: dict[str, Any], key: str = "teams:t:c:c") -> PendingRecord:
    now = utcnow()
    return PendingRecord(
        id="p1", run_id="r1", conversation_key=key, requester="U_ALICE", tool="create_it_ticket",
        call_id="c1", arguments={"summary": "VPN"}, args_hash="h", text="Confirm?", state="expired",
        created_at=now - timedelta(days=1), expires_at=now, decided_at=None, decider=None, finished_at=now,
        result=None, run_state={}, platform_message=platform_message,
    )  # fmt: skip


async def test_slack_gets_the_give_up_in_the_thread_and_the_expired_card_updated_in_place():
    async with FakeSlackAPI() as slack, aiohttp.ClientSession() as session:
        poster = SlackPoster(web_client(slack.token, session, slack.base_url), BotIdentity("UBOT", "BBOT", "T0TEAM"))
        notifier = SlackNotifier(poster)
        place = Place("slack:T0TEAM:C1:1700.1", "slack", "T0TEAM", "C1", "1700.1", None)
        told = await notifier.notify(place, Notice("This request was stopped. Case HD-1001.", "run_1", "HD-1001"))
        message = {"platform": "slack", "channel": "C1", "ts": "1700.2", "thread_ts": "1700.1"}
        updated = await notifier.card_expired(expired_record(message, "slack:T0TEAM:C1:1700.1"))
    (post,) = slack.calls_to("chat.postMessage")
    (update,) = slack.calls_to("chat.update")
    assert told and (post["channel"], post["thread_ts"]) == ("C1", "1700.1") and "HD-1001" in post.block_text
    assert updated and (update["channel"], update["ts"]) == ("C1", "1700.2")
    assert "This request expired at" in update.block_text
