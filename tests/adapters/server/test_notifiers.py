"""Telling a Teams thread something after its request ended (crash recovery, expired cards).

Slack's recovery posts, through the service and the outbox, are in ``test_recovery_posts``.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from adapters.teams import TeamsSender
from adapters.teams.activity import reference_of, to_inbound
from bot.cards import CardView
from bot.delivery import Address, Delivery, Post
from bot.errors import RemoteError
from bot.store import DeliveryRecord, PendingRecord, utcnow
from bot.types import UserRef

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


async def _no_place(key: str) -> None:
    return None


def no_places() -> Any:
    """The service as the Teams sender reads it: no place stored for any conversation."""
    return SimpleNamespace(store=SimpleNamespace(threads=SimpleNamespace(get_place=_no_place)))


def teams_row(post: Post, key: str = "teams:t:c:c") -> DeliveryRecord:
    """An outbox row as the outbox hands it to the Teams sender (claimed, first attempt)."""
    now = utcnow()
    return DeliveryRecord(
        id=7, kind="post", case_number=None, destination="teams:chat", payload=post.to_json(), conversation_key=key,
        inbox_id=None, coalesce_key=None, state="sending", attempts=1, next_attempt_at=now, claimed_by="me",
        claimed_at=now, last_error=None, external_ref=None, delivered_at=None, created_at=now, idempotency_key="k",
    )  # fmt: skip


async def _saved(progress: str) -> None:
    pass


FIRST_ATTEMPT = Delivery(row_id=7, key="k", progress=None, save=_saved)


async def test_a_recovered_run_is_told_through_the_reference_kept_from_the_first_message():
    inbound = to_inbound(ACTIVITY, UserRef("aad-alice", "Alice"))
    assert inbound.address == reference_of(ACTIVITY)  # kept with the conversation's place
    address = Address("teams", inbound.channel, inbound.thread, inbound.address)  # as the sweeper's post has it
    post = Post("notice", address, text="I was restarted. Case HD-1001.", run_id="run_1", case_id="HD-1001")
    connector = Connector()
    sent = await TeamsSender(connector, no_places()).send(teams_row(post, inbound.conversation_key), FIRST_ATTEMPT)
    ((reference, activity),) = connector.sent
    assert sent == "posted-1" and reference["serviceUrl"] == "https://smba.trafficmanager.net/emea/"
    assert "HD-1001" in activity["text"] and "run_1" in activity["text"]


async def test_a_place_without_a_reference_is_not_told_and_says_so():
    post = Post("notice", Address("teams", "c", "c"), text="hello")
    with pytest.raises(RemoteError, match="no conversation reference") as refused:
        await TeamsSender(Connector(), no_places()).send(teams_row(post), FIRST_ATTEMPT)
    assert not refused.value.retryable  # the outbox gives up on it at once, and logs it


async def test_an_expired_teams_card_is_replaced_where_it_was_posted():
    where = {"reference": reference_of(ACTIVITY), "activity_id": "card-9", "requester_name": "Alice"}
    record = expired_record(where)
    post = Post("card", Address("teams", "c", "c"), card=CardView.of(record).to_json(), target=where)
    connector = Connector()
    assert await TeamsSender(connector, no_places()).send(teams_row(post), FIRST_ATTEMPT) == "card-9"
    ((_, activity_id, activity),) = connector.updated
    assert activity_id == "card-9" and "request expired at" in str(activity)


def expired_record(platform_message: dict[str, Any], key: str = "teams:t:c:c") -> PendingRecord:
    now = utcnow()
    return PendingRecord(
        id="p1", run_id="r1", conversation_key=key, requester="U_ALICE", tool="create_it_ticket",
        call_id="c1", arguments={"summary": "VPN"}, args_hash="h", text="Confirm?", state="expired",
        created_at=now - timedelta(days=1), expires_at=now, decided_at=None, decider=None, executor=None,
        finished_at=now,
        result=None, run_state={}, platform_message=platform_message,
    )  # fmt: skip

