"""The Bot Framework connector failing for 10 s (HTTP 503, then separately 429 with Retry-After), then recovering.

The server runs in its own process (the app from ``build_app``, the real service on SQLite, the real
botbuilder connector client, production retry policies: the connector's ``SEND_RETRY``, the outbox's
``POST_POLICY`` and its 5 s poll). This process plays the Bot Framework channel (tests/fakes/bot_connector.py,
which the server posts to at the activities' ``serviceUrl``) and the model (a scripted OpenAI-compatible
server). For each status, a fresh server gets ``--messages`` activities at once just as the channel starts
refusing every post, reply and update (typing included) for ``--outage`` seconds: questions in personal
chats and channel threads, a few asking for a ticket (the card) and a few that give up (the step budget,
a helpdesk case). Member lookups keep working, so ticket askers are not guests.

Prints, per outage: messages sent and acknowledged, replies delivered, duplicates, lost, replies in the
wrong thread or posted during the outage, what the channel refused, the outbox rows' final states and
attempts, and the time from recovery to the first and the last reply.

    python benchmarks/teams_outage.py [--messages 20] [--outage 10] [--retry-after 2] [--only 503|429]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from tests.fakes.bot_connector import ALICE, BOB, TENANT, FakeBotConnector
from tests.fakes.openai_server import FakeOpenAI, Turn, respond, text, tool_calls

REPO = Path(__file__).resolve().parent.parent
TICKET = {"category": "network_vpn", "summary": "NorthGate VPN fails with NG-809", "urgency": "high"}
TICKET_WORDS = "please open a ticket"
GIVE_UP_WORDS = "search everything"
REPLIES_WITHIN_S = 180.0  # after recovery; the outbox keeps trying posts for a few minutes
QUIET_S = 6.0  # after the last reply: more than one outbox poll (5 s), so a duplicate would have come


# --- the server process -----------------------------------------------------------------------------


class NoSearch:
    """An index that finds nothing: the channel, not retrieval, is under test."""

    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Any]:
        return []


def serve(port: int) -> None:
    """The server under test: settings from the environment, as ``policypal serve`` reads them."""
    from aiohttp import web

    from adapters.server import build_app
    from bot.config import load_settings
    from bot.wiring import open_service

    async def make_app() -> web.Application:
        settings = load_settings()
        service = await open_service(settings, searcher=NoSearch())
        app = build_app(settings, service)

        async def close_service(_: web.Application) -> None:
            await service.close()

        app.on_cleanup.append(close_service)
        return app

    web.run_app(make_app(), host="127.0.0.1", port=port, print=None, access_log=None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(data_dir: Path, model: FakeOpenAI) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "POLICYPAL_", "MICROSOFT"))},
        "OPENAI_API_KEY": "sk-benchmark-000000",
        "OPENAI_BASE_URL": model.base_url,
        "POLICYPAL_DATA_DIR": str(data_dir),
        "POLICYPAL_TEAMS_ALLOW_UNAUTHENTICATED": "1",
        "POLICYPAL_TEAMS_ALLOWED_TENANTS": TENANT,
        "POLICYPAL_MAX_STEPS": "1",  # a run that searches gives up on the step budget
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
    }


def start_server(port: int, env: dict[str, str], data_dir: Path) -> subprocess.Popen[bytes]:
    """The server process, its output in ``server.log`` (printed when a figure is off)."""
    with (data_dir / "server.log").open("wb") as log:
        command = [sys.executable, __file__, "--serve", str(port)]
        return subprocess.Popen(command, env=env, cwd=data_dir, stdout=log, stderr=subprocess.STDOUT)


async def wait_healthy(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise SystemExit(f"server exited with {server.returncode}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url + "/healthz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise SystemExit("server did not become healthy within 60 s")


# --- the model and the channel -----------------------------------------------------------------------


def model_turn(body: dict[str, Any]) -> Turn:
    """An answer naming the question; a ticket proposal; or a search, which the step budget ends (a give-up)."""
    question = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    if TICKET_WORDS in question:
        return tool_calls(("create_it_ticket", TICKET), content="I can raise a ticket for this. Please confirm.")
    if GIVE_UP_WORDS in question:
        return tool_calls(("search_policies", {"query": "travel rules"}))
    return text(f"Answer to: {question}")


@dataclass
class Asked:
    kind: str  # "answer", "card", "give-up"
    activity: dict[str, Any]

    @property
    def thread(self) -> str:
        return str(self.activity["conversation"]["id"])

    @property
    def question(self) -> str:
        return str(self.activity["text"]).removeprefix("<at>PolicyPal</at> ")


def questions(channel: FakeBotConnector, count: int) -> list[Asked]:
    """A tenth ask for a ticket, a tenth give up, the rest are questions; half in personal chats, half in channels."""
    special = max(count // 10, 1)
    asked: list[Asked] = []
    for n in range(count):
        if n < special:
            asked.append(
                Asked(
                    "card",
                    channel.channel_message(f"my VPN says NG-809 ({n}), {TICKET_WORDS}", sender=(ALICE, BOB)[n % 2]),
                )
            )
        elif n < 2 * special:
            asked.append(Asked("give-up", channel.channel_message(f"{GIVE_UP_WORDS} about travel ({n})")))
        elif n % 2:
            user = {"id": f"29:user{n}", "name": f"User {n}", "aadObjectId": f"aad-user{n}"}
            asked.append(Asked("answer", channel.personal_message(f"Question {n}: can I work abroad?", sender=user)))
        else:
            asked.append(Asked("answer", channel.channel_message(f"Question {n}: can I expense a taxi?")))
    return asked


# --- one outage ------------------------------------------------------------------------------------------


@dataclass
class Figures:
    title: str
    sent: int = 0
    acknowledged: int = 0
    delivered: int = 0
    duplicates: int = 0
    lost: int = 0
    wrong: int = 0  # a reply that is not the answer to its thread's question
    during_outage: int = 0  # posts that got through while the channel was refusing
    refused: Counter[str] = field(default_factory=Counter)
    rows: Counter[str] = field(default_factory=Counter)
    attempts: Counter[int] = field(default_factory=Counter)
    cases: int = 0
    cards_stored: int = 0
    first_s: float | None = None
    last_s: float | None = None
    by_kind: Counter[str] = field(default_factory=Counter)

    def report(self) -> None:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self.by_kind.items()))
        print(f"\n{self.title}")
        print(f"  messages sent:                 {self.sent} ({kinds}); acknowledged {self.acknowledged}")
        print(f"  replies delivered:             {self.delivered} of {self.sent} threads")
        print(f"  duplicates:                    {self.duplicates}")
        print(f"  lost:                          {self.lost}")
        print(f"  wrong reply for the thread:    {self.wrong}")
        print(f"  posted during the outage:      {self.during_outage}")
        refused = ", ".join(f"{n} {kind}" for kind, n in sorted(self.refused.items()))
        print(f"  refused by the channel:        {sum(self.refused.values())} calls ({refused})")
        rows = ", ".join(f"{n} {state}" for state, n in sorted(self.rows.items()))
        tries = ", ".join(f"{n} x {a}" for a, n in sorted(self.attempts.items()))
        print(f"  outbox rows:                   {rows}; attempts per row: {tries}")
        print(
            f"  helpdesk cases opened:         {self.cases}; ticket cards updatable (posted id stored): "
            f"{self.cards_stored}"
        )
        first = f"{self.first_s:.1f} s" if self.first_s is not None else "-"
        last = f"{self.last_s:.1f} s" if self.last_s is not None else "-"
        print(f"  recovery to first reply:       {first}")
        print(f"  recovery to last reply:        {last}")

    @property
    def ok(self) -> bool:
        return (
            self.delivered == self.sent
            and not (self.duplicates or self.lost or self.wrong or self.during_outage)
            and set(self.rows) == {"delivered"}
        )


async def one_outage(status: int, retry_after: str | None, args: argparse.Namespace) -> Figures:
    said = f"HTTP {status}" + (f" with Retry-After: {retry_after}" if retry_after else "")
    fig = Figures(f"connector answering {said} for {args.outage:g} s, {args.messages} messages at its start")
    model = FakeOpenAI.start_in_thread()
    model.script(*[respond(model_turn)] * (args.messages + 10))
    channel = FakeBotConnector.start_in_thread()
    with tempfile.TemporaryDirectory(prefix="policypal-teams-outage-") as tmp:
        data_dir, port = Path(tmp), free_port()
        url = f"http://127.0.0.1:{port}"
        server = start_server(port, server_env(data_dir, model), data_dir)
        try:
            await wait_healthy(url, server)
            asked = questions(channel, args.messages)
            fig.sent, fig.by_kind = len(asked), Counter(a.kind for a in asked)
            channel.fail_for(args.outage, status, retry_after=retry_after)
            assert channel.outage is not None
            recovered_at = channel.outage.until
            statuses = await asyncio.gather(*(channel.post(url + "/api/messages", a.activity) for a in asked))
            fig.acknowledged = sum(1 for s, _ in statuses if s in (200, 201))
            await asyncio.sleep(max(0.0, recovered_at - time.monotonic()))
            await every_thread_answered(channel, {a.thread for a in asked}, REPLIES_WITHIN_S)
            await asyncio.sleep(QUIET_S)
            figures_from(fig, channel, asked, recovered_at)
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
            from_database(fig, data_dir / "policypal.db")
            if not fig.ok:
                print((data_dir / "server.log").read_text()[-4000:], file=sys.stderr)
            model.stop()
            channel.stop()
    return fig


async def every_thread_answered(channel: FakeBotConnector, threads: set[str], timeout_s: float) -> None:
    """Until each thread has a reply, or ``timeout_s`` has passed (the figures then show what is lost)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if threads <= {r.conversation_id for r in channel.messages()}:
            return
        await asyncio.sleep(0.1)


def figures_from(fig: Figures, channel: FakeBotConnector, asked: list[Asked], recovered_at: float) -> None:
    posts = channel.messages()
    replies = [r for r in posts if r.at >= recovered_at]
    fig.during_outage = len(posts) - len(replies)
    for a in asked:
        mine = [r for r in posts if r.conversation_id == a.thread]
        fig.delivered += bool(mine)
        fig.lost += not mine
        fig.duplicates += max(len(mine) - 1, 0)
        if mine and not right_reply(a, mine[0].text, mine[0].cards):
            fig.wrong += 1
    fig.refused = Counter(f"{r.kind} {r.type}".strip() for r in channel.refusals)
    if replies:
        fig.first_s = min(r.at for r in replies) - recovered_at
        fig.last_s = max(r.at for r in replies) - recovered_at


def right_reply(asked: Asked, text_: str, cards: list[dict[str, Any]]) -> bool:
    if asked.kind == "card":
        return any(a.get("verb") == "confirm" for card in cards for a in card.get("actions", []))
    if asked.kind == "give-up":
        return "I couldn't finish this reliably" in text_ and "HD-" in text_
    return text_ == f"Answer to: {asked.question}"


def from_database(fig: Figures, path: Path) -> None:
    if not path.exists():
        return
    with contextlib.closing(sqlite3.connect(path)) as db:
        for state, attempts in db.execute("select state, attempts from outbox where kind = 'post'"):
            fig.rows[state] += 1
            fig.attempts[attempts] += 1
        fig.cases = int(db.execute("select count(*) from handoffs").fetchone()[0])
        fig.cards_stored = int(
            db.execute("select count(*) from pending_actions where platform_message is not null").fetchone()[0]
        )


async def run(args: argparse.Namespace) -> int:
    outages = {"503": (503, None), "429": (429, args.retry_after)}
    chosen = [outages[args.only]] if args.only else list(outages.values())
    results = []
    for status, retry_after in chosen:
        results.append(await one_outage(status, retry_after, args))
        results[-1].report()
    print(
        "\nproduction policies: connector SEND_RETRY (4 tries, waits 0.5 s doubling, Retry-After capped at 5 s, "
        "15 s in all), then the outbox (POST_POLICY: 1 s doubling, 9 attempts; polled every 5 s)"
    )
    return 0 if all(fig.ok for fig in results) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--outage", type=float, default=10.0, help="seconds the channel refuses every call")
    parser.add_argument("--retry-after", default="2", help="the 429's Retry-After, seconds (default 2)")
    parser.add_argument("--only", choices=("503", "429"))
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stops the server process
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
