"""The Stop button across replicas: pressed on one, it ends the conversation's run on another (one store,
SQLite or PostgreSQL), and a message after it runs as any other."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bot.pending import PendingActions
from bot.service import PolicyPal
from bot.tickets import build_ticket_backend
from bot.types import GaveUp, Inbound, TerminationReason
from bot.wiring import agent_deps, build_model
from tests.bot.helpers import ALICE, OnePassage, RecordingSender, eventually, settings_for
from tests.databases import Database
from tests.fakes.openai_server import FakeOpenAI, held, text

pytestmark = pytest.mark.asyncio

UNWANTED = "The answer nobody waits for any more."


@asynccontextmanager
async def replica(database: Database, tmp_path: Path, model: FakeOpenAI) -> AsyncIterator[PolicyPal]:
    """A service on the shared test database, as each replica of a deployment opens one."""
    settings = settings_for(tmp_path, model)
    store = await database.open()
    tickets = build_ticket_backend(settings, store)
    deps = agent_deps(settings, build_model(settings), OnePassage(), tickets)
    svc = PolicyPal(deps, store, PendingActions(store), resources=[tickets])
    try:
        yield svc
    finally:
        await svc.close()


def question(text_: str, event_id: str) -> Inbound:
    return Inbound("slack", "D0ALICE", "1.0", ALICE, text_, event_id=event_id, tenant="T1")


async def test_a_stop_pressed_on_another_replica_ends_the_run_cancelled_with_no_answer_and_a_later_one_runs(
    database: Database, tmp_path: Path, fake_openai: FakeOpenAI
):
    release = asyncio.Event()
    fake_openai.script(held(release, text(UNWANTED)), text("Keep every receipt over 25 EUR."))
    first = question("Which receipts do I keep?", "Ev1")
    async with replica(database, tmp_path, fake_openai) as a, replica(database, tmp_path, fake_openai) as b:
        sender = RecordingSender()  # what A posts to Slack
        a.outbox.register(sender)
        running = asyncio.create_task(a.handle_message(first))
        await eventually(lambda: fake_openai.requests)  # A's run waits on the model
        stopped_on_b = await b.stop(first.conversation_key)  # the stop event reached the other replica
        release.set()
        stopped = await running
        later = await a.handle_message(question("And for taxis?", "Ev2"))
        await a.outbox.drain(5)
        runs = await b.store.runs.of_conversation(first.conversation_key)
    assert stopped_on_b == 0  # nothing ran on B: only the store carried the stop to A
    assert stopped is not None and stopped.reason is TerminationReason.CANCELLED
    assert isinstance(stopped.outcome, GaveUp) and stopped.outcome.case_id  # the give-up and its handoff
    posted = [(post.reason, json.dumps(post.outcome)) for post in sender.posts]
    assert [reason for reason, _ in posted] == ["cancelled", "answered"]
    assert stopped.outcome.case_id in posted[0][1] and not any(UNWANTED in outcome for _, outcome in posted)
    assert later is not None and later.reason is TerminationReason.ANSWERED
    assert later.outcome.text == "Keep every receipt over 25 EUR."
    assert sorted(run.reason for run in runs) == ["answered", "cancelled"]
