"""Two server processes on one PostgreSQL: retries and double clicks spread over both still act once.

Slack redelivers an event it thinks was lost, possibly to another replica behind the load balancer,
and an impatient person clicks Confirm twice. Here every event goes to both servers twice (with and
without the retry headers) and every click four times, all at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text as sql
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from adapters.slack.blocks import CONFIRM
from tests.adapters.server.harness import Server, policypal, running_all, server_env, wait_calls, wait_until
from tests.fakes.openai_server import FakeOpenAI, respond, text, tool_calls
from tests.fakes.slack_api import FakeSlackAPI, SlackCall, dm_event, event_envelope

POSTGRES_URL = os.environ.get("POLICYPAL_TEST_POSTGRES_URL")
pytestmark = pytest.mark.postgres

TICKET = {"category": "network_vpn", "summary": "VPN fails with NG-412", "urgency": "high"}
EVENTS = 6


async def _admin(statement: str) -> None:
    engine = create_async_engine(str(POSTGRES_URL), poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(sql(statement))
    finally:
        await engine.dispose()


async def _scalar(url: str, query: str) -> Any:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(sql(query))).scalar_one()
    finally:
        await engine.dispose()


@pytest.fixture
def database_url() -> Iterator[str]:
    """A fresh database of its own, dropped afterwards."""
    if not POSTGRES_URL:
        pytest.skip("POLICYPAL_TEST_POSTGRES_URL not set; the two-replica test needs PostgreSQL")
    name = f"pp_replicas_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def scripted(body: dict[str, Any]) -> Any:
    """The model as the conversation asks: propose a ticket, finish after it, or just answer."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return text("Your ticket is raised.")
    if "ticket" in str(last["content"]):
        return tool_calls(("create_it_ticket", TICKET), content="Shall I raise a ticket?")
    return text(f"Answer to: {last['content']}")


def card_ts(url: str) -> str:
    """Where the card was posted, as the server stored it with the pending action (clicks carry it)."""
    query = "SELECT platform_message FROM pending_actions WHERE platform_message IS NOT NULL"
    wait_until(lambda: asyncio.run(_count(url, query.replace("platform_message FROM", "count(*) FROM"))))
    stored = asyncio.run(_scalar(url, query))
    return str((json.loads(stored) if isinstance(stored, str) else stored)["ts"])


async def _count(url: str, query: str) -> int:
    return int(await _scalar(url, query))


def button(card: SlackCall, action_id: str) -> str:
    elements = (e for b in card.blocks if b["type"] == "actions" for e in b["elements"])
    return next(e["value"] for e in elements if e["action_id"] == action_id)


def in_thread(event: dict[str, Any]) -> Any:
    return lambda call: call.get("thread_ts") == event["ts"]


def deliver_everywhere(servers: list[Server], events: list[dict[str, Any]]) -> None:
    """Every event to every server, first as a fresh delivery then as a retry, all concurrently."""
    jobs = [(server, envelope, retry) for envelope in events for server in servers for retry in (None, 1)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(lambda job: job[0].send_event(job[1], retry_num=job[2]), jobs))
    assert statuses == [200] * len(jobs)


def test_retries_and_double_clicks_across_two_replicas_act_once(
    tmp_path: Path, built_index: Path, model: FakeOpenAI, slack: FakeSlackAPI, database_url: str
):
    model.script(*[respond(scripted)] * (EVENTS * 4 + 8))
    envs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        envs.append(server_env(tmp_path / name, built_index, model, slack, POLICYPAL_DATABASE_URL=database_url))
    upgraded = policypal(["db", "upgrade"], envs[0], tmp_path)
    assert upgraded.returncode == 0 and "upgraded from nothing (empty) to" in upgraded.stdout, upgraded.stderr
    with running_all(envs, tmp_path, ["a", "b"]) as servers:
        events = [dm_event(f"U{n}", f"question {n}", channel=f"D{n}") for n in range(EVENTS)]
        deliver_everywhere(servers, [event_envelope(e, event_id=f"Ev{n:04d}") for n, e in enumerate(events)])
        for event in events:
            wait_calls(slack, "chat.postMessage", where=in_thread(event))

        asking = dm_event("U_ALICE", "my VPN says NG-412, please open a ticket", channel="D0ALICE")
        servers[0].send_event(event_envelope(asking))
        (card,) = wait_calls(slack, "chat.postMessage", where=in_thread(asking))
        where = {"channel": "D0ALICE", "message_ts": card_ts(database_url), "thread_ts": asking["ts"]}
        with ThreadPoolExecutor(max_workers=4) as pool:
            clicks = [pool.submit(s.click, "U_ALICE", CONFIRM, button(card, CONFIRM), **where) for s in servers * 2]
            assert [c.result() for c in clicks] == [200] * 4
        wait_calls(slack, "chat.postMessage", 2, where=in_thread(asking))
        wait_until(lambda: len(slack.calls_to("chat.postEphemeral")) >= 3, what="the losing clicks' notes")
        unsent = "SELECT count(*) FROM outbox WHERE state NOT IN ('delivered', 'superseded')"
        wait_until(lambda: asyncio.run(_count(database_url, unsent)) == 0, what="every outbox row sent")
        tickets = asyncio.run(_scalar(database_url, "SELECT count(*) FROM tickets"))
        runs = asyncio.run(_scalar(database_url, "SELECT count(*) FROM runs"))
        answering = asyncio.run(_scalar(database_url, "SELECT count(DISTINCT inbox_id) FROM runs"))
        items = asyncio.run(_scalar(database_url, "SELECT count(*) FROM inbox"))
        done = asyncio.run(_scalar(database_url, "SELECT count(*) FROM pending_actions WHERE state = 'done'"))
    for event in events:
        (answer,) = slack.calls_to("chat.postMessage", in_thread(event))
        assert f"Answer to: {event['text']}" in answer.get("text", "") + answer.block_text
    assert tickets == 1 and done == 1
    assert runs == EVENTS + 2  # one per event, the ticket question, and its continuation after Confirm
    assert answering == runs  # each run answers an inbox item of its own: none ran twice for one item
    assert items == EVENTS + 1 + 4  # each event once however often delivered; each click its own item
    assert len(model.requests) == EVENTS + 2
    assert len(slack.calls_to("chat.postMessage", in_thread(asking))) == 2  # the card, then one final reply
