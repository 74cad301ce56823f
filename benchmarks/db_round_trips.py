"""Database round trips per Slack message and per Confirm click, counted on the real path.

The real app (``build_app``) on loopback with the real service on SQLite (or PostgreSQL with
``--postgres URL``), the scripted OpenAI-compatible server and the fake Slack Web API. Every SQL
statement the store's engine sends is counted from the moment the signed event is posted until the
reply is in Slack (and the work behind it has settled): what a normal message costs the database.

    python benchmarks/db_round_trips.py [--messages 5] [--postgres postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from aiohttp.test_utils import TestServer
from sqlalchemy import event

from adapters.server import build_app
from adapters.slack import EVENTS_PATH
from benchmarks.scratch import scratch_database
from bot.config import Settings
from bot.wiring import open_service
from tests.fakes.openai_server import FakeOpenAI, fake_openai_server, text, tool_calls
from tests.fakes.slack_api import FakeSlackAPI, block_actions, dm_event, event_envelope, form_body, signed_headers

SECRET = "round-trips-signing-secret"
ALICE = "U_ALICE"
SETTLE_S = 0.5  # after the reply: the outbox marks it sent, nothing else should follow


class NoSearch:
    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Any]:
        return []


class Statements:
    """Counts what the engine sends, by the statement's first word and table, between ``start`` and ``stop``."""

    def __init__(self, *engines: Any) -> None:
        self.counting = False
        self.seen: list[str] = []
        for engine in engines:  # the store's engine and its ack engine (the inbox writes)
            event.listen(engine.sync_engine, "before_cursor_execute", self._on_statement)

    def _on_statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self.counting:
            self.seen.append(" ".join(statement.split()[:4])[:60])

    def start(self) -> None:
        self.seen, self.counting = [], True

    def stop(self) -> list[str]:
        self.counting = False
        return self.seen


async def post(session: aiohttp.ClientSession, url: str, body: str, headers: dict[str, str]) -> int:
    async with session.post(url + EVENTS_PATH, data=body.encode(), headers=headers) as response:
        return response.status


async def main(messages: int, postgres: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeSlackAPI() as slack:
            slack.add_user(ALICE, "alice", "alice@example.com")
            async for model in fake_openai_server():
                if postgres is None:
                    await measure(Path(tmp), slack, model, messages, None)
                    continue
                async with scratch_database(postgres) as url:
                    await measure(Path(tmp), slack, model, messages, url)


async def measure(tmp: Path, slack: FakeSlackAPI, model: FakeOpenAI, messages: int, postgres: str | None) -> None:
    values: dict[str, Any] = {
        "data_dir": tmp,
        "openai_api_key": "sk-bench-0000000000",
        "openai_base_url": model.base_url,
        "slack_bot_token": slack.token,
        "slack_signing_secret": SECRET,
        "slack_api_url": slack.base_url,
        "helpdesk_poll_s": 3600,  # no background polling inside the measured windows
    }
    if postgres:
        values["database_url"] = postgres
    settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
    service = await open_service(settings, searcher=NoSearch(), serving=True)  # as `policypal serve`: rate limits on
    counter = Statements(service.store._engine, service.store._ack_engine)
    server = TestServer(build_app(settings, service), host="127.0.0.1")
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    per_message, per_follow_up, per_click = [], [], []
    kinds, click_kinds = Counter[str](), Counter[str]()
    try:
        async with aiohttp.ClientSession() as session:
            for n in range(messages):
                model.script(text(f"Answer {n}."))
                counter.start()
                thread_ts = await send_message(session, url, slack, f"question {n}")
                seen = counter.stop()
                per_message.append(len(seen))
                kinds.update(seen)
                model.script(text(f"Follow-up answer {n}."))
                counter.start()
                await send_message(session, url, slack, f"and a follow-up {n}?", thread_ts=thread_ts)
                per_follow_up.append(len(counter.stop()))
                model.script(tool_calls(("create_it_ticket", {
                    "category": "hardware", "summary": f"Laptop stolen {n}", "urgency": "high"})), text("Raised."))
                card = await send_message(session, url, slack, f"my laptop was stolen {n}", card=True)
                counter.start()
                await click_confirm(session, url, slack, card, thread_ts)
                clicked = counter.stop()
                per_click.append(len(clicked))
                click_kinds.update(clicked)
    finally:
        await server.close()
        await service.close()
    print(f"database: {'PostgreSQL' if postgres else 'SQLite'}")
    print(f"statements per message opening a thread: {per_message}, median {statistics.median(per_message)}")
    print(f"statements per follow-up in a thread: {per_follow_up}, median {statistics.median(per_follow_up)}")
    print(f"statements per Confirm click (ticket, continued run, card updates): {per_click}, "
          f"median {statistics.median(per_click)}")
    print("message statements, by kind:", json.dumps(dict(kinds.most_common()), indent=1))
    print("click statements, by kind:", json.dumps(dict(click_kinds.most_common()), indent=1))


async def send_message(
    session: aiohttp.ClientSession, url: str, slack: FakeSlackAPI, question: str, *, card: bool = False,
    thread_ts: str | None = None,
) -> Any:
    before = len(slack.calls_to("chat.postMessage"))
    event = dm_event(ALICE, question, **({"thread_ts": thread_ts} if thread_ts else {}))
    body = json.dumps(event_envelope(event))
    assert await post(session, url, body, signed_headers(SECRET, body)) == 200
    posted = (await slack.wait_for("chat.postMessage", before + 1))[-1]
    await asyncio.sleep(SETTLE_S)
    return posted if card else event["ts"]


async def click_confirm(session: aiohttp.ClientSession, url: str, slack: FakeSlackAPI, card: Any, thread: Any) -> None:
    value = next(
        element["value"] for block in card.blocks if block["type"] == "actions"
        for element in block["elements"] if element["action_id"] == "pp_confirm"
    )
    before = len(slack.calls_to("chat.postMessage"))
    payload = block_actions(ALICE, "pp_confirm", value, channel=card.answer["channel"], message_ts=card.answer["ts"],
                            thread_ts=card.get("thread_ts"))
    body = form_body(payload)
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    assert await post(session, url, body, headers) == 200
    await slack.wait_for("chat.postMessage", before + 1)
    await asyncio.sleep(SETTLE_S)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--postgres", default=None, help="a postgresql+asyncpg:// URL (its schema is upgraded)")
    args = parser.parse_args()
    asyncio.run(main(args.messages, args.postgres))
