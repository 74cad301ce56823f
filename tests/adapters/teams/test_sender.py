"""The outbox's Teams sender on its own: what each kind of post becomes, and how its failures read to the outbox."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from adapters.teams import TeamsSender
from adapters.teams.activity import address_of, conversation_key, reference_of
from bot.delivery import Delivery, Post, outcome_to_json
from bot.errors import DeliveryFailed, RemoteError
from bot.store import DeliveryRecord, Place, utcnow
from bot.types import Answer, Pending, PendingAction, UserRef
from tests.fakes.bot_connector import FakeBotConnector

CHANNEL_SIDE = FakeBotConnector()
ALICE = UserRef("aad-alice", "Alice Example")
ACTION = PendingAction("p-1", "create_it_ticket", {"summary": "VPN"}, "h" * 32, "aad-alice", "Shall I?",
                       datetime(2030, 1, 2, tzinfo=UTC))


class Connector:
    """Records what is posted; ``failures`` are raised, one per call, before anything is recorded."""

    def __init__(self, *failures: Exception, answer: str = "posted-1",
                 roster: dict[str, dict[str, Any]] | None = None) -> None:
        self.failures = list(failures)
        self.answer = answer
        self.roster = roster or {}
        self.sent: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.updated: list[tuple[dict[str, Any], str, dict[str, Any]]] = []
        self.opened: list[tuple[dict[str, Any], str]] = []  # personal chats opened: (from reference, Teams id)

    async def send(self, reference: dict[str, Any], activity: dict[str, Any]) -> str:
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append((reference, activity))
        return self.answer

    async def update(self, reference: dict[str, Any], activity_id: str, activity: dict[str, Any]) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.updated.append((reference, activity_id, activity))

    async def member(self, reference: dict[str, Any], user_id: str) -> dict[str, Any] | None:
        return self.roster.get(user_id)

    async def personal(self, reference: dict[str, Any], user_id: str) -> dict[str, Any]:
        if self.failures:
            raise self.failures.pop(0)
        self.opened.append((reference, user_id))
        return {"conversation": {"id": f"a:personal-{user_id}"}, "user": {"id": user_id}}


class Service:
    """What the sender reads and writes of the service: where cards were posted, and stored places."""

    def __init__(self, places: dict[str, Place] | None = None, refuse_card_store: int = 0) -> None:
        self.platform_messages: dict[str, dict[str, Any]] = {}
        self.refuse_card_store = refuse_card_store
        self.places = places or {}
        self.pending = SimpleNamespace(set_platform_message=self._set_platform_message)
        self.store = SimpleNamespace(threads=SimpleNamespace(get_place=self._get_place))

    async def _set_platform_message(self, pending_id: str, where: dict[str, Any]) -> None:
        if self.refuse_card_store:
            self.refuse_card_store -= 1
            raise OSError("database down")
        self.platform_messages[pending_id] = where

    async def _get_place(self, key: str) -> Place | None:
        return self.places.get(key)


def row(post: Post, key: str) -> DeliveryRecord:
    now = utcnow()
    return DeliveryRecord(
        id=3, kind="post", case_number=None, destination="teams:chat", payload=post.to_json(), conversation_key=key,
        inbox_id=None, coalesce_key=None, state="sending", attempts=1, next_attempt_at=now, claimed_by="me",
        claimed_at=now, last_error=None, external_ref=None, delivered_at=None, created_at=now, idempotency_key="k",
    )  # fmt: skip


class Attempts:
    """The row's saved progress across attempts, as the outbox keeps it."""

    def __init__(self) -> None:
        self.progress: str | None = None

    def next(self, *, uncertain: bool = False) -> Delivery:
        async def save(progress: str) -> None:
            self.progress = progress

        return Delivery(3, "k", self.progress, save, uncertain)


def channel_reply(outcome: Any, **fields: Any) -> tuple[Post, str]:
    activity = CHANNEL_SIDE.channel_message("open a VPN ticket", root="1700000")
    post = Post("reply", address_of(activity, ALICE), run_id="run_1", outcome=outcome_to_json(outcome), **fields)
    return post, conversation_key(activity, ALICE)


async def test_a_ticket_card_is_posted_once_and_where_it_went_is_recorded_even_when_recording_fails_once():
    post, key = channel_reply(Pending("Shall I?", ACTION))
    connector, service, attempts = Connector(), Service(refuse_card_store=1), Attempts()
    sender = TeamsSender(connector, service)  # type: ignore[arg-type]

    with pytest.raises(OSError):
        await sender.send(row(post, key), attempts.next())  # posted; then the database went away
    posted = await sender.send(row(post, key), attempts.next())  # the outbox's retry

    assert len(connector.sent) == 1 and posted == "posted-1" and attempts.progress == "posted-1"
    (_reference, activity) = connector.sent[0]
    assert activity["attachments"][0]["content"]["actions"][0]["verb"] == "confirm"
    assert "Only Alice Example can confirm" in str(activity)  # the requester's name, from the post's address
    where = service.platform_messages["p-1"]
    assert where == {"reference": post.address.reference, "activity_id": "posted-1", "requester_name": "Alice Example"}


async def test_a_card_posted_on_a_channel_that_answers_without_an_id_records_nothing():
    post, key = channel_reply(Pending("Shall I?", ACTION))
    service = Service()
    assert await TeamsSender(Connector(answer=""), service).send(row(post, key), Attempts().next()) is None  # type: ignore[arg-type]
    assert service.platform_messages == {}


async def test_private_notes_post_nothing_and_direct_messages_go_to_the_personal_chat():
    post, key = channel_reply(Answer("x"))
    connector = Connector()
    sender = TeamsSender(connector, Service())  # type: ignore[arg-type]
    private = Post("private", post.address, text="Thanks, your feedback is saved.")
    assert await sender.send(row(private, key), Attempts().next()) is None and connector.sent == []
    posted = await sender.send(row(Post("direct", post.address, text="hello"), key), Attempts().next())
    ((chat, activity),) = connector.sent
    assert posted == "posted-1" and chat["conversation"]["id"] == "a:personal-29:alice"
    assert "hello" in activity["text"]


class Refused(Exception):
    """A connector refusal as msrest raises it: the HTTP response is kept on the exception."""

    def __init__(self, status: int) -> None:
        super().__init__(f"Operation returned an invalid status code {status}")
        self.response = SimpleNamespace(status_code=status, headers={})


def http_error(status: int) -> Exception:
    return Refused(status)


@pytest.mark.parametrize(
    ("failure", "retryable"),
    [
        (http_error(403), False),  # the bot was removed from the conversation: a person follows up at once
        (http_error(404), False),
        (http_error(400), False),
        (http_error(500), True),  # Teams broke for now: the outbox tries again later
        (ConnectionError("no route"), True),
        (DeliveryFailed("throttled until the connector gave up", kind="unavailable", status=429), True),
    ],
)
async def test_a_failed_post_is_a_remote_error_the_outbox_can_act_on(failure: Exception, retryable: bool):
    post, key = channel_reply(Answer("Here you go."))
    sender = TeamsSender(Connector(failure), Service())  # type: ignore[arg-type]
    with pytest.raises(RemoteError) as raised:
        await sender.send(row(post, key), Attempts().next())
    assert raised.value.retryable is retryable


async def test_a_reply_whose_address_names_another_thread_goes_to_the_conversations_stored_thread():
    """A click on a card whose invoke named the channel without its reply chain: the row's conversation knows."""
    first = CHANNEL_SIDE.channel_message("open a VPN ticket", root="1700000")
    key = conversation_key(first, ALICE)
    place = Place(key, "teams", "t", "19:general@thread.tacv2", "1700000", None, reference_of(first))
    click = CHANNEL_SIDE.channel_message("(click)", root="out-9")  # the card's own id taken for the thread root
    post = Post("reply", address_of(click, ALICE), run_id="run_2", outcome=outcome_to_json(Answer("Raised.")))
    connector = Connector()
    await TeamsSender(connector, Service({key: place})).send(row(post, key), Attempts().next())  # type: ignore[arg-type]
    ((reference, _activity),) = connector.sent
    assert reference["conversation"]["id"] == first["conversation"]["id"]
