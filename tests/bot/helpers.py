"""Building a real service against the fake OpenAI server, for the loop and pending-flow tests."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.config import Settings
from bot.delivery import Delivery, Post, post_destination
from bot.service import PolicyPal, Reply
from bot.store import DeliveryRecord, InboxRecord, utcnow
from bot.types import Inbound, UserRef
from bot.wiring import open_service
from retrieval import Passage
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, tool_calls

ALICE = UserRef("U_ALICE", "Alice", "alice@example.com", groups=("all",))
BOB = UserRef("U_BOB", "Bob", groups=("all",))
_events = itertools.count()
PASSAGE = Passage(
    score=0.9,
    doc_id="expenses",
    title="Expenses Policy",
    heading="Expenses Policy > Receipts",
    source="https://intranet.example.com/policies/expenses",
    text="Keep receipts for every expense over 25 EUR.",
)


class OnePassage:
    """A searcher that always finds the same passage: the model or a platform, not retrieval, is under test."""

    def __init__(self, passage: Passage = PASSAGE) -> None:
        self.passage = passage
        self.queries: list[str] = []

    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Passage]:
        self.queries.append(query)
        return [self.passage]


def settings_for(tmp_path: Path, fake: FakeOpenAI, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "openai_api_key": "sk-test-abcdef123456",
        "openai_base_url": fake.base_url,
        "model": "gpt-4o-mini",
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@asynccontextmanager
async def service(tmp_path: Path, fake: FakeOpenAI, searcher: Any, **overrides: Any):
    svc = await open_service(settings_for(tmp_path, fake, **overrides), searcher=searcher)
    try:
        yield svc
    finally:
        await svc.close()


async def ask(svc: PolicyPal, text: str, user: UserRef = ALICE, thread: str = "t1") -> Reply:
    inbound = Inbound("console", "terminal", thread, user, text, event_id=f"ev{next(_events)}")
    reply = await svc.handle_message(inbound)
    assert reply is not None
    return reply


MESSAGE = "test.message"  # an inbox kind of the tests': an ``Inbound`` as JSON, answered by ``handle_message``


def inbound_json(inbound: Inbound) -> dict[str, Any]:
    return dataclasses.asdict(inbound)


def inbound_of(payload: dict[str, Any]) -> Inbound:
    user = payload["user"]
    return Inbound(**{**payload, "user": UserRef(**{**user, "groups": tuple(user["groups"])})})


def answer_messages(svc: PolicyPal) -> list[tuple[InboxRecord, Reply | None]]:
    """Let ``svc``'s inbox answer ``MESSAGE`` items as an adapter does; each item and its reply, in order."""
    answered: list[tuple[InboxRecord, Reply | None]] = []

    async def handle(record: InboxRecord) -> None:
        answered.append((record, await svc.handle_message(inbound_of(record.payload))))

    svc.inbox.register(MESSAGE, handle)
    return answered


async def deliver(svc: PolicyPal, inbound: Inbound) -> bool:
    """What an adapter does before its ack: the event into the inbox (its work starts at once)."""
    item_id = f"{inbound.platform}:{inbound.event_id}"
    return await svc.inbox.accept(item_id, inbound.platform, MESSAGE, inbound_json(inbound))


class RecordingSender:
    """A platform's outbox sender that records each post it sends (and how it was asked to).

    While ``error`` is set it raises it instead, for every post or only for the kinds in ``refuse``.
    """

    def __init__(
        self, platform: str = "slack", *, error: Exception | None = None, refuse: tuple[str, ...] | None = None
    ) -> None:
        self.destinations = (post_destination(platform),)
        self.error = error
        self.refuse = refuse
        self.sent: list[tuple[DeliveryRecord, Delivery]] = []
        self.failed: list[DeliveryRecord] = []

    @property
    def posts(self) -> list[Post]:
        return [Post.from_json(row.payload or {}) for row, _ in self.sent]

    def label(self, row: DeliveryRecord) -> str:
        return f"post {row.id}"

    async def send(self, row: DeliveryRecord, delivery: Delivery) -> str | None:
        kind = (row.payload or {}).get("kind")
        if self.error is not None and (self.refuse is None or kind in self.refuse):
            self.failed.append(row)
            raise self.error
        self.sent.append((row, delivery))
        return f"msg-{row.id}"


def tool_results(request: RecordedRequest) -> dict[str, Any]:
    """The tool messages of a request, by call id, decoded."""
    return {m["tool_call_id"]: json.loads(m["content"]) for m in request.messages if m["role"] == "tool"}


def last_tool_results(request: RecordedRequest) -> list[Any]:
    """Tool results after the last assistant message, in order."""
    tail: list[Any] = []
    for message in reversed(request.messages):
        if message["role"] != "tool":
            break
        tail.insert(0, json.loads(message["content"]))
    return tail


async def eventually(condition: Callable[[], object], timeout_s: float = 5.0) -> None:
    """Wait until ``condition()`` is true (background work a test cannot await directly)."""
    async with asyncio.timeout(timeout_s):
        for _ in itertools.count():
            if condition():
                return
            await asyncio.sleep(0.01)


async def wait_delivered(store: Any, case_number: int = 1, timeout: float = 5.0) -> None:
    """Wait until the server's outbox worker has recorded the case as delivered everywhere."""
    async with asyncio.timeout(timeout):
        while True:
            rows = await store.outbox.deliveries([case_number])
            if rows and all(r.state == "delivered" for r in rows):
                return
            await asyncio.sleep(0.02)


def two_searches() -> list[Any]:
    """A model that searches twice: with max_steps=2 the run gives up on the step budget."""
    return [
        tool_calls(("search_policies", {"query": "expense receipts"})),
        tool_calls(("search_policies", {"query": "taxi expenses"})),
    ]


async def left_executing_by_a_crash(svc: PolicyPal, question: str = "VPN broken with NG-809") -> Any:
    """Ask (the model must propose a ticket), then leave the action as a process killed mid-call does:
    executing, decided an hour ago. Returns the action."""
    reply = await ask(svc, question)
    action = reply.outcome.action  # type: ignore[union-attr]
    long_ago = utcnow() - timedelta(hours=1)
    assert await svc.store.pending.transition(action.id, ("open",), "executing", decided_at=long_ago, decider=ALICE.id)
    return action
