"""Fault scenarios for `policypal serve`, shared by tests/adapters/server/test_faults.py (small sizes)
and benchmarks/faults.py (the issue's sizes).

Each scenario runs the real server process(es) with the fake model and the fake Slack Web API in
threads of this process, plays Slack (signed events, clicks, redeliveries after a 503), breaks
something (kill -9, a Slack outage, a frozen replica, PostgreSQL refusing connections, a crash or a
timeout during a confirmed ticket) and returns its ``Figures``: events sent and acknowledged, lost and
duplicated replies, replies per thread, time from the fault to the last reply. ``Figures.verify``
raises (with every figure) when a promise was broken: every thread gets exactly one delivered reply
(``slack.delivered("chat.postMessage")`` per ``thread_ts``), and no Web API call or run happens
beyond what the scenario should cause.

Nothing here asserts a wall-clock duration: waits are for outcomes, with generous timeouts that only
stop a hung scenario; times are reported, never judged.

1. ``kill_after_ack``: kill -9 after a burst's acks (K ms later, during a slow users.info, or while
   Slack holds half the replies), restart on the same data dir.
2. ``slack_outage``: chat.postMessage and chat.update failing, then recovering; answers, cards,
   give-ups and a card decided during it. (``users_info_failing_once``: one users.info blip.)
3. ``stalled_replica``: two replicas on PostgreSQL, one frozen (SIGSTOP) while its runs wait, then
   resumed; ``frozen_between_commit_and_send`` and ``frozen_inside_a_transaction``: frozen at worse
   moments.
4. ``postgres_outage``: PostgreSQL refusing connections with runs in flight and events arriving.
5. ``crash_during_ticket``: kill -9 while the ticket webhook holds a confirmed ticket;
   ``ticket_webhook_timeout``: the webhook answering after the timeout, in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import signal
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text as sql
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from adapters.slack.blocks import CONFIRM, parse_button_value
from tests.adapters.server.harness import Server, running, running_all, server_env, wait_until
from tests.fakes.helpdesk_servers import FakeWebhook, slow
from tests.fakes.openai_server import FakeOpenAI, Turn, delay, error, respond, text, tool_calls
from tests.fakes.slack_api import FakeSlackAPI, SlackCall, event_envelope, mention_event

POSTGRES_ENV = "POLICYPAL_TEST_POSTGRES_URL"
ALICE = "U_ALICE"
CHANNEL = "C0GENERAL"
TICKET = {"category": "network_vpn", "summary": "VPN fails with NG-412", "urgency": "high"}
# Bursts of 50 from 50 people: neither the per-user limit nor the per-process cap is what is measured.
BURST_ENV = {"POLICYPAL_USER_RUNS_PER_MINUTE": "0", "POLICYPAL_MAX_CONCURRENT_RUNS": "64"}
SWEEP_S = 1.0  # the harness's POLICYPAL_SWEEP_INTERVAL_S
REPLY_TIMEOUT_S = 120.0  # only stops a hung scenario
UNKNOWN_CARD = "not known whether it went through"
UNKNOWN_NOTICE = "couldn't tell whether your confirmed request went through"
UNKNOWN_REPLY = "couldn't tell whether the ticket was created"
NOT_CREATED = ("not created", "couldn't raise", "couldn't create", "but it failed", "Nothing was created")
CASE_ID = re.compile(r"HD-\d+")


# --- figures ---------------------------------------------------------------------------------------


@dataclass
class Figures:
    """What one scenario did, and what it found wrong (``problems``: empty when every promise held)."""

    scenario: str
    sent: int = 0  # questions asked
    acknowledged: int = 0  # that got their 200 (first delivery or a redelivery)
    refused: int = 0  # 503s answered, each delivered again by "Slack"
    lost: int = 0  # threads without a reply
    duplicated: int = 0  # threads with more than one
    replies: Counter[int] = field(default_factory=Counter)  # replies in a thread -> threads
    last_reply_s: float | None = None  # from the fault to the last reply
    notes: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def expect(self, ok: object, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return bool(ok)

    def count(self, per_thread: dict[str, list[SlackCall]], expected: int = 1) -> None:
        """Lost and duplicated replies, and the histogram, from each thread's delivered replies."""
        self.replies = Counter(len(calls) for calls in per_thread.values())
        self.lost = sum(1 for calls in per_thread.values() if len(calls) < expected)
        self.duplicated = sum(1 for calls in per_thread.values() if len(calls) > expected)
        for thread, calls in per_thread.items():
            self.expect(len(calls) == expected, f"thread {thread}: {len(calls)} replies delivered, not {expected}")

    def timed_from(self, fault_at: float, calls: Sequence[SlackCall]) -> None:
        if calls:
            self.last_reply_s = round(max(c.at for c in calls) - fault_at, 2)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "sent": self.sent,
            "acknowledged": self.acknowledged,
            "refused": self.refused,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "replies_per_thread": {str(k): v for k, v in sorted(self.replies.items())},
            "last_reply_s": self.last_reply_s,
            **self.notes,
            "problems": self.problems,
        }

    def summary(self) -> str:
        per_thread = (
            ", ".join(f"{n} reply x{t}" if n == 1 else f"{n} replies x{t}" for n, t in sorted(self.replies.items()))
            or "-"
        )
        last = f"{self.last_reply_s:.1f} s" if self.last_reply_s is not None else "-"
        if self.last_reply_s is not None and self.last_reply_s < 0:
            last += " (every reply came before the fault)"
        lines = [
            f"{self.scenario}",
            f"  sent {self.sent}, acknowledged {self.acknowledged}, refused (503, redelivered) {self.refused}",
            f"  lost {self.lost}, duplicated {self.duplicated}; replies per thread: {per_thread}",
            f"  time from the fault to the last reply: {last}",
        ]
        lines += [f"  {name.replace('_', ' ')}: {value}" for name, value in self.notes.items()]
        lines += [f"  PROBLEM: {problem}" for problem in self.problems]
        return "\n".join(lines)

    def verify(self) -> Figures:
        """Raise with every figure when a promise was broken; the figures otherwise."""
        if self.problems:
            raise ScenarioFailed(self)
        return self


class ScenarioFailed(AssertionError):
    def __init__(self, figures: Figures) -> None:
        super().__init__(figures.summary())
        self.figures = figures


# --- the fakes, the database, Slack's side ---------------------------------------------------------


@contextmanager
def fakes(*people: str) -> Iterator[tuple[FakeOpenAI, FakeSlackAPI]]:
    """A fresh fake model and fake Slack, each in a thread of this process."""
    model, slack = FakeOpenAI.start_in_thread(), FakeSlackAPI.start_in_thread()
    slack.add_user(ALICE, "alice", "alice@example.com")
    for person in people:
        slack.add_user(person, person.lower())
    try:
        yield model, slack
    finally:
        model.stop()
        slack.stop()


@contextmanager
def webhook() -> Iterator[FakeWebhook]:
    hook = FakeWebhook()
    hook.start_in_thread()
    try:
        yield hook
    finally:
        hook.stop()


class Database:
    """The server's database read from this process: the SQLite file (read-only) or PostgreSQL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._sqlite = make_url(url).get_backend_name() == "sqlite"

    @classmethod
    def of(cls, data_dir: Path, url: str | None = None) -> Database:
        return cls(url or f"sqlite+aiosqlite:///{data_dir / 'policypal.db'}")

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        if self._sqlite:
            path = make_url(self.url).database
            if not path or not Path(path).exists():
                return []
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as conn:
                return [tuple(row) for row in conn.execute(query).fetchall()]
        return asyncio.run(_pg_rows(self.url, query))

    def scalar(self, query: str) -> Any:
        rows = self.rows(query)
        return rows[0][0] if rows else None

    def busy(self) -> tuple[int, int]:
        """Inbox items nobody answered yet, and platform writes not settled yet."""
        unanswered = self.scalar(
            "SELECT count(*) FROM inbox i WHERE i.state = 'leased' "
            "AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.inbox_id = i.id)"
        )
        unsent = self.scalar("SELECT count(*) FROM outbox WHERE kind = 'post' AND state IN ('pending', 'sending')")
        return int(unanswered or 0), int(unsent or 0)

    def runs(self) -> list[tuple[str, str | None]]:
        """(owner, inbox item) of every run."""
        return [(str(owner), inbox) for owner, inbox in self.rows("SELECT owner, inbox_id FROM runs")]


async def _pg_rows(url: str, query: str) -> list[tuple[Any, ...]]:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return [tuple(row) for row in await conn.execute(sql(query))]
    finally:
        await engine.dispose()


async def _admin(url: str, *statements: str) -> None:
    """Statements run from the ``postgres`` database (never the one they are about)."""
    admin = make_url(url).set(database="postgres").render_as_string(hide_password=False)
    engine = create_async_engine(admin, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(sql(statement))
    finally:
        await engine.dispose()


@contextmanager
def scratch_postgres(url: str) -> Iterator[str]:
    """A database of its own beside the one named, upgraded to head, dropped afterwards
    (as benchmarks/scratch.py does; the shared database's settings are never touched)."""
    from bot.store import Store

    name = f"pp_faults_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(url, f'CREATE DATABASE "{name}"'))
    scratch = make_url(url).set(database=name).render_as_string(hide_password=False)
    try:

        async def upgrade() -> None:
            await (await Store.open(scratch, schema="upgrade")).close()

        asyncio.run(upgrade())
        yield scratch
    finally:
        asyncio.run(
            _admin(
                url, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true', f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
            )
        )


def refuse_connections(url: str, refuse: bool) -> None:
    """PostgreSQL refuses (or accepts again) connections to this one database; refusing drops open ones."""
    name = make_url(url).database
    if refuse:
        asyncio.run(
            _admin(
                url,
                f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false',
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
            )
        )
        admin = Database(make_url(url).set(database="postgres").render_as_string(hide_password=False))
        wait_until(
            lambda: not admin.scalar(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'"),
            30,
            "every connection to the database gone",
        )
    else:
        asyncio.run(_admin(url, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))


def postgres_url() -> str | None:
    return os.environ.get(POSTGRES_ENV) or None


def burst(server: Server, envelopes: Sequence[dict[str, Any]]) -> list[int | None]:
    """Every event at once, as Slack sends a burst; the status of each (None: no answer at all)."""

    def send(envelope: dict[str, Any]) -> int | None:
        try:
            return server.send_event(envelope)
        except OSError:
            return None

    with ThreadPoolExecutor(max_workers=min(16, max(len(envelopes), 1))) as pool:
        return list(pool.map(send, envelopes))


def deliver(
    server: Server, envelope: dict[str, Any], *, every_s: float = 0.5, timeout_s: float = REPLY_TIMEOUT_S
) -> tuple[int | None, int]:
    """Slack's side: deliver again (with the retry headers) until the event gets its 200.

    The final status and how many deliveries were refused.
    """
    refused, retry, deadline = 0, None, time.monotonic() + timeout_s
    while True:
        try:
            status = server.send_event(envelope, retry_num=retry)
        except OSError:
            status = None
        if status == 200 or time.monotonic() > deadline:
            return status, refused
        refused += 1
        retry = refused
        time.sleep(every_s)


def replies_in(
    slack: FakeSlackAPI, threads: Sequence[str], method: str = "chat.postMessage"
) -> dict[str, list[SlackCall]]:
    """Each thread's delivered messages (what Slack accepted), oldest first."""
    delivered = slack.delivered(method)
    return {t: [c for c in delivered if c.get("thread_ts") == t] for t in threads}


def said(call: SlackCall) -> str:
    return f"{call.get('text', '')}\n{call.block_text}"


def _line(call: SlackCall, limit: int = 160) -> str:
    """What a message shows, on one line (its fallback text first)."""
    shown = " ".join(said(call).split())
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def has_button(message: SlackCall, action_id: str = CONFIRM) -> bool:
    return any(e.get("action_id") == action_id for b in message.blocks if b["type"] == "actions" for e in b["elements"])


def button(card: SlackCall, action_id: str = CONFIRM) -> str:
    elements = (e for b in card.blocks if b["type"] == "actions" for e in b["elements"])
    return next(e["value"] for e in elements if e["action_id"] == action_id)


def wait_replies(
    slack: FakeSlackAPI, threads: Sequence[str], count: int = 1, timeout_s: float = REPLY_TIMEOUT_S
) -> bool:
    """Wait until every thread has ``count`` delivered replies; False when the time ran out (the figures say)."""
    try:
        wait_until(
            lambda: all(len(c) >= count for c in replies_in(slack, threads).values()),
            timeout_s,
            "a reply in every thread",
        )
    except AssertionError:
        return False
    return True


def settle(db: Database, timeout_s: float = 90.0, grace_s: float = SWEEP_S) -> bool:
    """Wait until nothing is left to do (every item answered, every write settled), then a sweep more,
    so a duplicate that would come late has its chance to show. False when it never settled."""
    deadline = time.monotonic() + timeout_s
    while db.busy() != (0, 0):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    time.sleep(grace_s)
    return True


def requests_after(model: FakeOpenAI, mark: str) -> int:
    events = model.events
    return sum(1 for e in events[events.index(mark) + 1 :] if e.startswith("request "))


def owned_by(owner: str, server: Server) -> bool:
    """Whether a run's owner (host:pid namespace:pid:boot) is that server's process."""
    parts = owner.rsplit(":", 3)
    return len(parts) == 4 and parts[2] == str(server.proc.pid)


def log_count(server: Server, *fragments: str) -> int:
    return sum(1 for line in server.log_lines() if any(f in str(line.get("message", "")) for f in fragments))


def questions(count: int, prefix: str = "question") -> list[dict[str, Any]]:
    """One mention per person, each starting its own thread."""
    return [mention_event(f"U{n:04d}", f"<@UBOT> {prefix} {n}", channel=CHANNEL) for n in range(count)]


def question_of(body: dict[str, Any]) -> str:
    return str(body["messages"][-1].get("content") or "")


def answering(seconds: Callable[[str], float] | float = 0.0) -> Turn:
    """The model answering the question it was asked, after ``seconds`` (or ``seconds(question)``)."""

    def answer(body: dict[str, Any]) -> Turn:
        question = question_of(body)
        pause = seconds(question) if callable(seconds) else seconds
        return delay(pause, text(f"Answer to: {question}")) if pause else text(f"Answer to: {question}")

    return respond(answer)


def check_answers(fig: Figures, per_thread: dict[str, list[SlackCall]], asked: Sequence[dict[str, Any]]) -> None:
    for event in asked:
        question = event["text"].replace("<@UBOT> ", "")
        for call in per_thread.get(event["ts"], []):
            fig.expect(f"Answer to: {question}" in said(call), f"thread {event['ts']}: not the answer: {said(call)!r}")


def no_calls(fig: Figures, slack: FakeSlackAPI, *methods: str) -> None:
    for method in methods:
        calls = slack.calls_to(method)
        fig.expect(not calls, f"{len(calls)} {method} calls, expected none")


# --- 1. kill -9 after the ack ------------------------------------------------------------------------


HOLDS = ("users.info", "posts", "everything")


def kill_after_ack(
    root: Path, index: Path, *, events: int = 4, kill_after_ms: int = 0, hold: str | None = None, hold_s: float = 2.0
) -> Figures:
    """A burst of mentions, one per person and thread, the model answering each after 0.3-1.2 s;
    kill -9 then restart on the same data dir. When is the kill:

    - ``hold=None``: ``kill_after_ms`` after the last 200;
    - ``"users.info"``: while Slack holds every users.info (``hold_s``), before any run;
    - ``"posts"``: while Slack holds half the replies' chat.postMessage (it posts them after the
      sender died) and the other half of the runs wait for the model;
    - ``"everything"``: a third of each: users.info held, the model thinking, the reply held.

    Every event gets exactly one reply, each item exactly one run, only the items without a run are
    run again, and a reply Slack already has is found in its thread and not posted again.
    """
    if hold not in (None, *HOLDS):
        raise ValueError(f"hold: one of {HOLDS}, or None")
    group = {  # which part of the work each event is in when the process dies
        None: lambda n: "model",
        "users.info": lambda n: "lookup",
        "posts": lambda n: "post" if n < events // 2 else "model",
        "everything": lambda n: ("lookup", "model", "post")[n % 3],
    }[hold]
    names = {
        None: f"{kill_after_ms} ms after the last ack",
        "users.info": f"during a slow users.info ({hold_s:g} s)",
        "posts": f"while Slack holds half the replies ({hold_s:g} s) and the other runs wait for the model",
        "everything": "while a third wait for users.info, a third for the model and Slack holds a third's replies",
    }
    fig = Figures(f"kill -9 {names[hold]}, {events} events", sent=events)
    asked = questions(events)
    threads = [e["ts"] for e in asked]
    users = {e["user"]: group(n) for n, e in enumerate(asked)}
    posting = {e["ts"] for n, e in enumerate(asked) if group(n) == "post"}
    counts = Counter(users.values())
    db = Database.of(root)
    pace = {"killed": False}

    def answer_after(question: str) -> float:
        number = int(question.rsplit(" ", 1)[-1])
        if pace["killed"]:
            return 0.2
        if hold is None:
            return 0.3 + (number % 10) * 0.1
        return 0.1 if group(number) == "post" else 60.0  # answered and posting, or still waiting at the kill

    with fakes() as (model, slack):
        model.script(*[answering(answer_after)] * (2 * events + 10))
        env = server_env(root, index, model, slack, **BURST_ENV)

        def looking_up(params: dict[str, Any]) -> bool:
            return users.get(str(params.get("user"))) == "lookup"

        def replying(params: dict[str, Any]) -> bool:
            return str(params.get("thread_ts")) in posting

        slack.slow_when("users.info", hold_s, looking_up)
        slack.slow_when("chat.postMessage", hold_s, replying)
        with running(env, root, "first") as first:
            statuses = burst(first, [event_envelope(e) for e in asked])
            fig.acknowledged = statuses.count(200)
            if hold is None:
                time.sleep(kill_after_ms / 1000)
            else:  # every lookup held, every run thinking, every reply held: kill now
                wait_until(
                    lambda: (
                        len(slack.calls_to("users.info")) >= events
                        and len(model.requests) >= counts["model"] + counts["post"]
                        and len(slack.calls_to("chat.postMessage")) >= counts["post"]
                    ),
                    60,
                    "the work in flight",
                )
            first.stop(signal.SIGKILL)
            killed_at = time.monotonic()
            pace["killed"] = True
        before = sum(len(c) for c in replies_in(slack, threads).values())
        wait_until(
            lambda: len(slack.delivered("chat.postMessage")) >= counts["post"], 60, "Slack posting the replies it held"
        )
        slack.slow_when("chat.postMessage", 0, replying)  # Slack is quick again
        runs_before = len(db.runs())
        model.mark("restarted")
        with running(env, root, "restarted") as second:
            fig.expect(wait_replies(slack, threads), "not every thread got a reply after the restart")
            fig.expect(settle(db), "the restarted server never settled")
            per_thread = replies_in(slack, threads)
            runs = db.runs()
            rerun = requests_after(model, "restarted")
            checked = len(slack.calls_to("conversations.replies"))
            by_second = sum(1 for owner, _ in runs if owned_by(owner, second))
    fig.expect(fig.acknowledged == events, f"{events - fig.acknowledged} events not acknowledged: {statuses}")
    fig.count(per_thread)
    fig.timed_from(killed_at, [c for calls in per_thread.values() for c in calls])
    check_answers(fig, per_thread, asked)
    posts = slack.calls_to("chat.postMessage")
    fig.expect(len(posts) == sum(len(c) for c in per_thread.values()), f"{len(posts)} chat.postMessage calls")
    fig.expect(
        len(runs) == events and len({inbox for _, inbox in runs}) == events,
        f"{len(runs)} runs for {events} inbox items ({len({i for _, i in runs})} distinct)",
    )
    fig.expect(
        by_second == events - runs_before,
        f"{by_second} runs by the restarted server, but {events - runs_before} items were left without one",
    )
    fig.expect(
        rerun == events - runs_before,
        f"{rerun} model calls after the restart for "
        f"{events - runs_before} items without a run: a run was repeated or skipped",
    )
    fig.expect(
        checked >= counts["post"],
        f"{checked} threads looked at for the {counts['post']} replies Slack had when their sender died",
    )
    no_calls(fig, slack, "chat.update", "chat.postEphemeral")
    fig.notes |= {
        "replies before the kill": before,
        "runs committed before the kill": runs_before,
        "runs again after the restart": rerun,
        "threads checked before re-posting": checked,
    }
    return fig.verify()


# --- 2. the Slack Web API failing, then recovering --------------------------------------------------


def _outage_model(body: dict[str, Any]) -> Turn:
    question = question_of(body)
    if body["messages"][-1]["role"] == "tool":
        return text("Your ticket is raised.")
    if "ticket" in question:
        return tool_calls(("create_it_ticket", TICKET), content="Shall I raise a ticket?")
    if "search" in question:
        return tool_calls(("search_policies", {"query": "working abroad"}))
    return text(f"Answer to: {question}")


Outage = tuple[str, int]  # Slack's error code, and the HTTP status it comes with
OUTAGES: tuple[Outage, ...] = (("internal_error", 200), ("service_unavailable", 503))


def slack_outage(
    root: Path,
    index: Path,
    *,
    outage_s: float = 10.0,
    outages: Sequence[Outage] = OUTAGES[:1],
    methods: Sequence[str] = ("chat.postMessage", "chat.update"),
    per_kind: int = 1,
) -> Figures:
    """``methods`` of the Web API fail for ``outage_s``, once per outage in ``outages`` (one after the other,
    on one server), each with its error code and HTTP status.

    Before each, a ticket card is posted; during it, that card is confirmed and ``per_kind`` questions
    of each kind come in: answered, ending in a ticket card, giving up (POLICYPAL_MAX_STEPS=1, the
    model searches). The outage lasts until every reply has failed once, and at least ``outage_s``.
    After it, each reply, card and give-up arrives exactly once, the decided card is updated exactly
    once (to its final state), no run is repeated, and every reply was tried during the outage and
    delivered after it.
    """
    kinds = " then ".join(f"{code} (HTTP {status})" for code, status in outages)
    fig = Figures(
        f"Slack Web API ({', '.join(methods)}) failing for {outage_s:g} s: {kinds}, "
        f"{3 * per_kind} questions and a click during it"
    )
    db = Database.of(root)
    threads: list[str] = []
    attempts: Counter[int] = Counter()
    gaps: set[float] = set()
    with fakes() as (model, slack):
        model.script(*[respond(_outage_model)] * ((3 * per_kind + 2) * len(outages) + 5))
        env = server_env(root, index, model, slack, POLICYPAL_MAX_STEPS="1", **BURST_ENV)
        with running(env, root) as server:
            for round_, (code, status) in enumerate(outages):
                tag = f"(outage {round_ + 1})"
                before = mention_event(ALICE, f"<@UBOT> please open a ticket for my VPN {tag}", channel=CHANNEL)
                during = {
                    kind: [
                        mention_event(f"U{round_}{n}{k:03d}", f"<@UBOT> {words} {k} {tag}", channel=CHANNEL)
                        for k in range(per_kind)
                    ]
                    for n, (kind, words) in enumerate(
                        (
                            ("answer", "can I work abroad?"),
                            ("card", "please open a ticket for my laptop"),
                            ("give_up", "search everything about travel"),
                        )
                    )
                }
                everyone = [e for events in during.values() for e in events]
                server.send_event(event_envelope(before))
                fig.expect(wait_replies(slack, [before["ts"]], timeout_s=30), f"{tag}: no card before the outage")
                posted = replies_in(slack, [before["ts"]])[before["ts"]][0]
                _remembered(db, posted)
                for method in methods:  # until every reply has failed once, and at least outage_s
                    slack.fail_for(method, REPLY_TIMEOUT_S, error=code, status=status)
                outage_at = time.monotonic()
                statuses = burst(server, [event_envelope(e) for e in everyone])
                clicked = server.click(
                    ALICE,
                    CONFIRM,
                    button(posted),
                    channel=CHANNEL,
                    message_ts=posted.answer["ts"],
                    thread_ts=before["ts"],
                )
                fig.sent += len(everyone) + 1
                fig.acknowledged += [*statuses, clicked].count(200)
                asked = [e["ts"] for e in everyone]
                threads += asked
                try:
                    wait_until(
                        lambda card=before["ts"], asking=everyone: _failed_in(slack, card)
                        and all(_refused_during(slack, e) for e in asking),
                        60,
                        "every reply failing once",
                    )
                    time.sleep(max(0.0, outage_s - (time.monotonic() - outage_at)))
                finally:
                    for method in methods:
                        slack.fail_for(method, 0)
                fig.notes[f"outage {round_ + 1} lasted"] = f"{time.monotonic() - outage_at:.1f} s"
                fig.expect(wait_replies(slack, asked), f"{tag}: not every question was answered after the outage")
                fig.expect(wait_replies(slack, [before["ts"]], 2), f"{tag}: the decided card's reply never came")
                with contextlib.suppress(AssertionError):
                    wait_until(lambda card=posted: _card_updates(slack, card), REPLY_TIMEOUT_S, "the card's update")
                fig.expect(settle(db), f"{tag}: the server never settled")
                per_thread = replies_in(slack, asked)
                so_far = fig.last_reply_s
                fig.timed_from(outage_at, [c for calls in per_thread.values() for c in calls])
                fig.last_reply_s = max(filter(None, (so_far, fig.last_reply_s)), default=None)
                _check_outage_round(fig, tag, slack, per_thread, during, before, posted)
                for thread in asked:
                    tried = [c for c in slack.calls_to("chat.postMessage") if c.get("thread_ts") == thread]
                    attempts[len(tried)] += 1
                    gaps.update(round(b.at - a.at, 1) for a, b in itertools.pairwise(tried))
            runs = db.runs()
    fig.count(replies_in(slack, threads))
    calls, recorded = (3 * per_kind + 1) * len(outages), (3 * per_kind + 2) * len(outages)
    fig.expect(len(model.requests) == calls, f"{len(model.requests)} model calls, expected {calls}: a run was repeated")
    fig.expect(
        len(runs) == recorded,
        f"{len(runs)} runs, expected {recorded} (the questions, each card and the run after its click)",
    )
    no_calls(fig, slack, "chat.postEphemeral")
    fig.notes |= {
        "post attempts per reply": dict(sorted(attempts.items())),
        "seconds between a reply's attempts": sorted(gaps),
        "chat.update attempts": len(slack.calls_to("chat.update")),
    }
    return fig.verify()


def _remembered(db: Database, card: SlackCall) -> None:
    """Wait until the card's pending action knows the message it was posted as (clicks update it)."""
    pending_id = parse_button_value(button(card))[0].replace("'", "")
    wait_until(
        lambda: db.scalar(
            f"SELECT count(*) FROM pending_actions WHERE id = '{pending_id}' AND platform_message IS NOT NULL"
        ),
        30,
        "the card's message remembered",
    )


def _failed_in(slack: FakeSlackAPI, thread: str) -> bool:
    """Whether a post in ``thread`` was refused."""
    return any(c.get("thread_ts") == thread and not c.answer.get("ok") for c in slack.calls_to("chat.postMessage"))


def _lookup_refused(slack: FakeSlackAPI, user: str) -> bool:
    """Whether users.info was refused for ``user`` (with users.info down, no run starts: nothing is posted)."""
    return any(c.get("user") == user and not c.answer.get("ok") for c in slack.calls_to("users.info"))


def _refused_during(slack: FakeSlackAPI, event: dict[str, Any]) -> bool:
    """The question's work met the outage: its reply was refused, or looking its asker up was."""
    return _failed_in(slack, event["ts"]) or _lookup_refused(slack, event["user"])


def _check_outage_round(
    fig: Figures,
    tag: str,
    slack: FakeSlackAPI,
    per_thread: dict[str, list[SlackCall]],
    during: dict[str, list[dict[str, Any]]],
    before: dict[str, Any],
    card: SlackCall,
) -> None:
    card_thread = replies_in(slack, [before["ts"]])[before["ts"]]
    fig.expect(len(card_thread) == 2, f"{tag}: the card decided during the outage: {len(card_thread)} messages, not 2")
    expected: dict[str, tuple[str, Callable[[SlackCall], object]]] = {
        "answer": ("the answer", lambda reply: "Answer to: can I work abroad?" in said(reply)),
        "card": ("a ticket card", has_button),
        "give_up": ("a give-up with a helpdesk case", lambda reply: CASE_ID.search(said(reply))),
    }
    for kind, events in during.items():
        what, right = expected[kind]
        replies = [(per_thread[e["ts"]] or [None])[0] for e in events]
        wrong = [reply for reply in replies if reply is None or not right(reply)]
        example = _line(wrong[0]) if wrong and wrong[0] is not None else None
        fig.expect(not wrong, f"{tag}: {len(wrong)} of {len(events)} replies are not {what}; one says: {example}")
    updates = _card_updates(slack, card)
    fig.expect(
        len(updates) == 1 and "IT-" in said(updates[0]),
        f"{tag}: the decided card: {len(updates)} updates delivered: {[_line(u) for u in updates]}",
    )
    askers = {e["ts"]: e["user"] for events in during.values() for e in events}
    for thread in per_thread:  # tried during the outage, delivered after it, then never again
        tried = [c for c in slack.calls_to("chat.postMessage") if c.get("thread_ts") == thread]
        met = (tried and not tried[0].answer.get("ok")) or _lookup_refused(slack, askers.get(thread, ""))
        fig.expect(met, f"{tag}: thread {thread}: its work never met the outage")
        fig.expect(tried and tried[-1].answer.get("ok"), f"{tag}: thread {thread}: a post after the delivered one")


def users_info_failing_once(root: Path, index: Path) -> Figures:
    """One users.info fails (Slack's ``internal_error``, a blip) as a person asks for a ticket: they must
    still get the ticket card, not a refusal; the person is an employee whatever the blip."""
    fig = Figures("users.info failing once as an employee asks for a ticket", sent=1)
    db = Database.of(root)
    ask = mention_event(ALICE, "<@UBOT> my VPN says NG-412, please open a ticket", channel=CHANNEL)
    with fakes() as (model, slack):
        model.script(*[respond(_outage_model)] * 3)
        slack.fail("users.info", "internal_error")
        with running(server_env(root, index, model, slack, **BURST_ENV), root) as server:
            fig.acknowledged = int(server.send_event(event_envelope(ask)) == 200)
            fig.expect(wait_replies(slack, [ask["ts"]], timeout_s=60), "no reply")
            wait_until(lambda: db.scalar("SELECT count(*) FROM runs"), 30, "the run recorded")
            reasons = [reason for (reason,) in db.rows("SELECT reason FROM runs")]
    per_thread = replies_in(slack, [ask["ts"]])
    fig.count(per_thread)
    reply = per_thread[ask["ts"]][0] if per_thread[ask["ts"]] else None
    fig.expect(
        reply is not None and has_button(reply),
        f"no ticket card; the run ended {reasons} and said: {reply and _line(reply)}",
    )
    fig.notes |= {"run ended": reasons, "reply": reply and _line(reply)}
    return fig.verify()


# --- 3. two replicas on one PostgreSQL database, one frozen then resumed -----------------------------


def stalled_replica(
    root: Path,
    index: Path,
    postgres: str,
    *,
    events: int = 3,
    stall_s: float = 5.0,
    stale_s: float | None = 3.0,
    sweep_s: float = SWEEP_S,
) -> Figures:
    """Events go to replica A; A is frozen (SIGSTOP) once its runs wait for the model; B takes them over
    when A's heartbeat is older than ``stale_s`` (None: the default, 30 s) and answers; A resumes after
    ``stall_s`` (not before B answered) and writes nothing. One reply per thread, one run per item,
    every run B's."""
    stale_text = f"{stale_s:g} s" if stale_s is not None else "the default"
    fig = Figures(f"replica A frozen {stall_s:g} s (worker stale after {stale_text}), {events} events", sent=events)
    asked = questions(events)
    threads = [e["ts"] for e in asked]
    pace = {"delay": 2.0}  # A's runs wait for the model; its answers arrive while A is frozen
    extra = {**BURST_ENV, "POLICYPAL_SWEEP_INTERVAL_S": f"{sweep_s:g}"}
    if stale_s is not None:
        extra["POLICYPAL_WORKER_STALE_S"] = f"{stale_s:g}"
    with scratch_postgres(postgres) as url, fakes() as (model, slack):
        db = Database(url)
        model.script(*[answering(lambda _q: pace["delay"])] * (3 * events + 10))
        envs = []
        for name in ("a", "b"):
            (root / name).mkdir(exist_ok=True)
            envs.append(server_env(root / name, index, model, slack, POLICYPAL_DATABASE_URL=url, **extra))
        with running_all(envs, root, ["a", "b"]) as (a, b):
            statuses = burst(a, [event_envelope(e) for e in asked])
            fig.acknowledged = statuses.count(200)
            wait_until(lambda: len(model.requests) >= events, 60, "A's runs waiting for the model")
            a.proc.send_signal(signal.SIGSTOP)
            stopped_at = time.monotonic()
            model.mark("A frozen")
            pace["delay"] = 0.2
            try:
                fig.expect(wait_replies(slack, threads), "B did not answer every thread while A was frozen")
                answered_s = time.monotonic() - stopped_at
                if (left := stall_s - (time.monotonic() - stopped_at)) > 0:
                    time.sleep(left)
            finally:
                a.proc.send_signal(signal.SIGCONT)
            resumed_at = time.monotonic()
            model.mark("A resumed")
            dropped = ("was taken over by another process", "its inbox item was taken over")
            with contextlib.suppress(AssertionError):  # A wakes, finds every item taken over, writes nothing
                wait_until(lambda: log_count(a, *dropped) >= events, 60, "A dropping its outcomes")
            fig.expect(settle(db), "the replicas never settled")
            runs, items = db.runs(), db.rows("SELECT owner, epoch FROM inbox")
            dropped_by_a = log_count(a, *dropped)
            by_b = sum(1 for owner, _ in runs if owned_by(owner, b))
            b_requests = requests_after(model, "A frozen")
    per_thread = replies_in(slack, threads)
    fig.count(per_thread)
    fig.timed_from(stopped_at, [c for calls in per_thread.values() for c in calls])
    check_answers(fig, per_thread, asked)
    fig.expect(fig.acknowledged == events, f"{events - fig.acknowledged} events not acknowledged")
    fig.expect(len(runs) == events and len({i for _, i in runs}) == events, f"{len(runs)} runs for {events} items")
    fig.expect(by_b == events, f"{by_b} of {len(runs)} runs are B's; the rest: {[o for o, _ in runs]}")
    fig.expect(all(epoch == 2 for _, epoch in items), f"inbox epochs {[e for _, e in items]}, expected 2 each")
    fig.expect(b_requests == events, f"{b_requests} model calls after A froze, expected {events} (B's runs)")
    posts = slack.calls_to("chat.postMessage")
    fig.expect(len(posts) == events, f"{len(posts)} chat.postMessage calls for {events} threads")
    fig.notes |= {
        "B answered every thread after": f"{answered_s:.1f} s",
        "A resumed after": f"{resumed_at - stopped_at:.1f} s",
        "A's outcomes dropped (logged)": dropped_by_a,
    }
    return fig.verify()


def frozen_between_commit_and_send(
    root: Path,
    index: Path,
    postgres: str,
    *,
    stall_s: float = 5.0,
    stale_s: float | None = 3.0,
    sweep_s: float = SWEEP_S,
) -> Figures:
    """Replica A frozen after it committed a click's outcome (the card's final state, then the reply)
    and before it posted the reply: A is stopped while Slack holds the card's chat.update, the first
    of the two rows (both card updates shown at the click failed, so the card goes through the
    outbox). B reclaims A's rows once A's heartbeat is stale and sends them; then A resumes. The
    thread must still get exactly one reply after the card."""
    stale_text = f"{stale_s:g} s" if stale_s is not None else "the default"
    fig = Figures(
        f"replica A frozen {stall_s:g} s between its commit and its post (worker stale after {stale_text})", sent=2
    )
    extra = {**BURST_ENV, "POLICYPAL_SWEEP_INTERVAL_S": f"{sweep_s:g}"}
    if stale_s is not None:
        extra["POLICYPAL_WORKER_STALE_S"] = f"{stale_s:g}"
    ask = mention_event(ALICE, "<@UBOT> my VPN says NG-412, please open a ticket", channel=CHANNEL)
    with scratch_postgres(postgres) as url, fakes() as (model, slack):
        db = Database(url)
        model.script(
            tool_calls(("create_it_ticket", TICKET), content="Shall I raise a ticket?"),
            delay(1.5, text("Your ticket is raised.")),
            *[text("Your ticket is raised.")] * 3,
        )
        envs = []
        for name in ("a", "b"):
            (root / name).mkdir(exist_ok=True)
            envs.append(server_env(root / name, index, model, slack, POLICYPAL_DATABASE_URL=url, **extra))
        with running_all(envs, root, ["a", "b"]) as (a, b):
            card = _card(a, slack, db, ask)
            slack.fail("chat.update", "internal_error", times=2)  # both card states shown at the click
            clicked = a.click(
                ALICE, CONFIRM, button(card), channel=CHANNEL, message_ts=card.answer["ts"], thread_ts=ask["ts"]
            )
            fig.acknowledged = 1 + (clicked == 200)
            wait_until(lambda: len(model.requests) >= 2, 60, "the run after the click")
            slack.slow("chat.update", 3.0)  # the card row, sent first, is held: A is frozen meanwhile
            wait_until(lambda: len(slack.calls_to("chat.update")) >= 3, 60, "A sending the card row")
            a.proc.send_signal(signal.SIGSTOP)
            stopped_at = time.monotonic()
            slack.slow("chat.update", 0)
            try:
                fig.expect(wait_replies(slack, [ask["ts"]], 2), "B never sent the reply A had committed")
                if (left := stall_s - (time.monotonic() - stopped_at)) > 0:
                    time.sleep(left)
            finally:
                a.proc.send_signal(signal.SIGCONT)
            resumed_at = time.monotonic()
            with contextlib.suppress(AssertionError):  # A wakes: its held update settles late, or not at all
                wait_until(
                    lambda: (
                        log_count(
                            a,
                            "after its claim was taken over",
                            "taken over by another worker",
                            "while this process was paused",
                        )
                        >= 1
                    ),
                    30,
                    "A noticing",
                )
            fig.expect(settle(db), "the replicas never settled")
            senders = db.rows("SELECT claimed_by FROM outbox WHERE kind = 'post' AND state = 'delivered'")
            noticed = log_count(a, "while this process was paused")
    thread = replies_in(slack, [ask["ts"]])[ask["ts"]]
    fig.count({ask["ts"]: thread[1:]})
    fig.timed_from(stopped_at, thread[1:])
    fig.expect(all("Your ticket is raised." in said(c) for c in thread[1:]), "not the reply after the ticket")
    fig.notes |= {
        "A resumed after": f"{resumed_at - stopped_at:.1f} s",
        "rows delivered by B": sum(1 for (owner,) in senders if owned_by(str(owner), b)),
        "A saw it had been taken over while paused (logged)": noticed,
        "reply posts": len(slack.calls_to("chat.postMessage", lambda c: c.get("thread_ts") == ask["ts"])) - 1,
    }
    return fig.verify()


class TableLock:
    """A table lock held from this process (its own connection, on a loop in a thread) until ``release``."""

    def __init__(self, url: str, table: str, mode: str = "SHARE") -> None:
        self._url, self._statement = url, f"LOCK TABLE {table} IN {mode} MODE"
        self._held = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._release: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._hold(),), daemon=True)

    def __enter__(self) -> TableLock:
        self._thread.start()
        if not self._held.wait(30):
            raise RuntimeError(f"could not {self._statement}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        if self._release is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._release.set)
            self._thread.join(30)

    async def _hold(self) -> None:
        self._release = asyncio.Event()
        engine = create_async_engine(self._url, poolclass=NullPool)
        try:
            async with engine.connect() as conn, conn.begin():
                await conn.execute(sql(self._statement))
                self._held.set()
                await self._release.wait()
        finally:
            await engine.dispose()


def _backends(db: Database, where: str) -> int:
    name = make_url(db.url).database
    return int(db.scalar(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}' AND {where}") or 0)


def frozen_inside_a_transaction(
    root: Path,
    index: Path,
    postgres: str,
    *,
    stall_s: float = 12.0,
    stale_s: float = 2.0,
    sweep_s: float = 0.5,
    until_taken_over: bool = False,
) -> Figures:
    """Replica A frozen while its connection holds a transaction open: the commit of an outcome without
    a run (the hint for an empty mention), which marks its inbox item done (a row lock) before it
    writes the reply. A second question on A waits for the model. B must take that second question
    over once A's heartbeat is stale, as it does when A is frozen outside a transaction; then A
    resumes. Each thread gets exactly one reply.

    ``until_taken_over``: A resumes as soon as B has answered (``stall_s`` is then only the most it
    waits), so a test checks the order of events, not how fast a busy machine sweeps; otherwise A stays
    frozen ``stall_s`` whatever happens, as the benchmark measures it."""
    fig = Figures(f"replica A frozen {stall_s:g} s inside a transaction (worker stale after {stale_s:g} s)", sent=2)
    extra = {**BURST_ENV, "POLICYPAL_SWEEP_INTERVAL_S": f"{sweep_s:g}", "POLICYPAL_WORKER_STALE_S": f"{stale_s:g}"}
    empty = mention_event("U0001", "<@UBOT>", channel=CHANNEL)
    asked = mention_event("U0002", "<@UBOT> question 2", channel=CHANNEL)
    pace = {"delay": 60.0}  # A's run waits for the model for good; B's is answered at once
    with scratch_postgres(postgres) as url, fakes() as (model, slack):
        db = Database(url)
        model.script(*[answering(lambda _q: pace["delay"])] * 5)
        envs = []
        for name in ("a", "b"):
            (root / name).mkdir(exist_ok=True)
            envs.append(server_env(root / name, index, model, slack, POLICYPAL_DATABASE_URL=url, **extra))
        with running_all(envs, root, ["a", "b"]) as (a, _b):
            with TableLock(url, "outbox") as lock:  # A's commit waits for it, its inbox row already updated
                fig.acknowledged = int(a.send_event(event_envelope(empty)) == 200)
                wait_until(
                    lambda: _backends(db, "wait_event_type = 'Lock' AND query ILIKE 'INSERT INTO outbox%'"),
                    30,
                    "A's commit waiting, its inbox item marked done",
                )
                fig.acknowledged += int(a.send_event(event_envelope(asked)) == 200)
                wait_until(lambda: model.requests, 30, "A's run of the second question waiting for the model")
                a.proc.send_signal(signal.SIGSTOP)
                stopped_at = time.monotonic()
                pace["delay"] = 0.0
                lock.release()
            try:
                # A's backend: a write done (a transaction id), waiting for the frozen client's next message
                wait_until(
                    lambda: _backends(db, "backend_xid IS NOT NULL AND wait_event = 'ClientRead'"),
                    30,
                    "A's transaction left open",
                )
                taken_over = wait_replies(slack, [asked["ts"]], timeout_s=stall_s)
                waiting = _backends(db, "wait_event_type = 'Lock' AND query ILIKE 'UPDATE inbox%'")
                if not until_taken_over and (left := stall_s - (time.monotonic() - stopped_at)) > 0:
                    time.sleep(left)
            finally:
                a.proc.send_signal(signal.SIGCONT)
            resumed_at = time.monotonic()
            fig.expect(wait_replies(slack, [empty["ts"], asked["ts"]]), "not every thread was answered after A resumed")
            fig.expect(settle(db), "the replicas never settled")
    per_thread = replies_in(slack, [empty["ts"], asked["ts"]])
    fig.count(per_thread)
    fig.timed_from(stopped_at, [c for calls in per_thread.values() for c in calls])
    answer = (per_thread[asked["ts"]] or [None])[0]
    answered = f"{answer.at - stopped_at:.1f} s" if answer else "never"
    fig.expect(
        taken_over,
        f"B did not take the second question over in the {stall_s:g} s A was frozen "
        f"(worker stale after {stale_s:g} s): its sweeper waited for A's row lock ({waiting} backend "
        f"waiting on UPDATE inbox); answered {answered} after the freeze, {resumed_at - stopped_at:.1f} s "
        "being when A resumed",
    )
    fig.notes |= {
        "B took the second question over while A was frozen": taken_over,
        "B's backends waiting on A's lock": waiting,
        "A resumed after": f"{resumed_at - stopped_at:.1f} s",
    }
    return fig.verify()


# --- 4. PostgreSQL refusing connections ------------------------------------------------------------


def postgres_outage(
    root: Path,
    index: Path,
    postgres: str,
    *,
    before: int = 2,
    during: int = 2,
    outage_s: float = 4.0,
    model_delay_s: float = 1.0,
    redeliver_every_s: float = 0.5,
) -> Figures:
    """Events accepted just before PostgreSQL refuses connections for ``outage_s`` (their runs wait for
    the model, and conclude during the outage); more sent during it get 503s, and "Slack" delivers
    each again until it gets its 200. After recovery every question is answered exactly once."""
    fig = Figures(
        f"PostgreSQL refusing connections for {outage_s:g} s, {before} events in flight, {during} sent during it",
        sent=before + during,
    )
    early, late = questions(before, "early question"), questions(during, "late question")
    for n, event in enumerate(late):  # other people than the early ones
        event["user"] = f"U1{n:03d}"
    threads = [e["ts"] for e in [*early, *late]]
    with scratch_postgres(postgres) as url, fakes() as (model, slack):
        db = Database(url)
        model.script(*[answering(model_delay_s)] * (3 * (before + during) + 10))
        env = server_env(root, index, model, slack, POLICYPAL_DATABASE_URL=url, **BURST_ENV)
        with running(env, root) as server:
            statuses = burst(server, [event_envelope(e) for e in early])
            wait_until(lambda: len(model.requests) >= before, 60, "the early runs waiting for the model")
            refuse_connections(url, True)
            outage_at = time.monotonic()
            model.mark("outage")
            outcomes: list[tuple[int | None, int]] = []
            with ThreadPoolExecutor(max_workers=max(during, 1)) as pool:
                delivering = [pool.submit(deliver, server, event_envelope(e), every_s=redeliver_every_s) for e in late]
                try:
                    time.sleep(max(0.0, outage_s - (time.monotonic() - outage_at)))
                finally:
                    refuse_connections(url, False)
                recovered_at = time.monotonic()
                outcomes = [job.result() for job in delivering]
            fig.acknowledged = statuses.count(200) + sum(1 for status, _ in outcomes if status == 200)
            fig.refused = sum(refused for _, refused in outcomes)
            fig.expect(wait_replies(slack, threads), "not every question was answered after the outage")
            fig.expect(settle(db), "the server never settled")
            runs = db.runs()
            failed_runs = log_count(server, "failed; it will be retried")
    per_thread = replies_in(slack, threads)
    fig.count(per_thread)
    fig.timed_from(outage_at, [c for calls in per_thread.values() for c in calls])
    check_answers(fig, per_thread, [*early, *late])
    fig.expect(fig.acknowledged == before + during, f"{before + during - fig.acknowledged} events never acknowledged")
    fig.expect(all(refused >= 1 for _, refused in outcomes), "an event sent during the outage was not refused")
    fig.expect(
        len(runs) == before + during and len({i for _, i in runs}) == before + during,
        f"{len(runs)} runs for {before + during} items",
    )
    posts = slack.calls_to("chat.postMessage")
    fig.expect(len(posts) == before + during, f"{len(posts)} chat.postMessage calls")
    fig.notes |= {
        "outage ended after": f"{recovered_at - outage_at:.1f} s",
        "model calls": len(model.requests),
        "runs that failed and were run again": failed_runs,
    }
    return fig.verify()


# --- 5. a crash during a confirmed ticket, and a ticket webhook that times out ------------------------


def _ticket_env(
    root: Path, index: Path, model: FakeOpenAI, slack: FakeSlackAPI, hook: FakeWebhook, **extra: str
) -> dict[str, str]:
    return server_env(
        root,
        index,
        model,
        slack,
        POLICYPAL_TICKETS="webhook",
        POLICYPAL_TICKETS_WEBHOOK_URL=f"{hook.url}/tickets",
        POLICYPAL_TICKETS_WEBHOOK_SECRET=hook.secret,
        **BURST_ENV,
        **extra,
    )


def _card(server: Server, slack: FakeSlackAPI, db: Database, ask: dict[str, Any]) -> SlackCall:
    """Ask for a ticket; the card, once posted and its message remembered (its buttons come back to it)."""
    server.send_event(event_envelope(ask))
    wait_until(lambda: replies_in(slack, [ask["ts"]])[ask["ts"]], 60, "the ticket card")
    card = replies_in(slack, [ask["ts"]])[ask["ts"]][0]
    _remembered(db, card)
    return card


def _card_updates(slack: FakeSlackAPI, card: SlackCall) -> list[SlackCall]:
    return [u for u in slack.delivered("chat.update") if u.get("ts") == card.answer["ts"]]


def crash_during_ticket(root: Path, index: Path, *, hold_s: float = 60.0) -> Figures:
    """Confirm clicked on a ticket card; kill -9 while the ticket webhook holds the request (it made
    the ticket, it has not answered); restart. The card says it is not known whether the ticket was
    created, with a helpdesk case; the requester is told in the thread; the webhook got exactly one
    request (never re-run), and the run is not continued."""
    fig = Figures("kill -9 while the ticket webhook holds a confirmed ticket", sent=2)
    db = Database.of(root)
    ask = mention_event(ALICE, "<@UBOT> my VPN says NG-412, please open a ticket", channel=CHANNEL)
    with fakes() as (model, slack), webhook() as hook:
        hook.script(slow(hold_s))
        model.script(
            tool_calls(("create_it_ticket", TICKET), content="Shall I raise a ticket?"),
            *[text("Your ticket is raised.")] * 3,
        )
        env = _ticket_env(root, index, model, slack, hook, POLICYPAL_TICKETS_TIMEOUT_S=f"{2 * hold_s:g}")
        with running(env, root, "first") as first:
            card = _card(first, slack, db, ask)
            clicked = first.click(
                ALICE, CONFIRM, button(card), channel=CHANNEL, message_ts=card.answer["ts"], thread_ts=ask["ts"]
            )
            fig.acknowledged = 1 + (clicked == 200)
            wait_until(lambda: hook.to("POST"), 30, "the webhook holding the ticket request")
            first.stop(signal.SIGKILL)
            killed_at = time.monotonic()
        with running(env, root, "restarted"):
            try:
                wait_until(
                    lambda: any(UNKNOWN_CARD in said(u) for u in _card_updates(slack, card)),
                    REPLY_TIMEOUT_S,
                    "the card saying it is not known",
                )
                wait_until(
                    lambda: len(replies_in(slack, [ask["ts"]])[ask["ts"]]) >= 2,
                    REPLY_TIMEOUT_S,
                    "the requester told in the thread",
                )
            except AssertionError as exc:
                fig.problems.append(str(exc))
            fig.expect(settle(db), "the restarted server never settled")
            state = db.scalar("SELECT state FROM pending_actions")
    thread = replies_in(slack, [ask["ts"]])[ask["ts"]]
    updates = _card_updates(slack, card)
    fig.count({ask["ts"]: thread[1:]})  # the card, then exactly one message telling the requester
    fig.timed_from(killed_at, [*thread[1:], *updates])
    unknown = [u for u in updates if UNKNOWN_CARD in said(u)]
    card_case = CASE_ID.search(said(unknown[-1])) if unknown else None
    told_case = CASE_ID.search(said(thread[1])) if len(thread) > 1 else None
    fig.expect(
        len(unknown) == 1 and updates[-1] is unknown[0],
        f"card updates: {[said(u)[:90] for u in updates]}; expected the last, and only one, to say unknown",
    )
    fig.expect(card_case, "the card names no helpdesk case")
    fig.expect(len(thread) > 1 and UNKNOWN_NOTICE in said(thread[1]), "the requester was not told it is unknown")
    cases = [found.group() if found else None for found in (card_case, told_case)]
    fig.expect(cases[0] and cases[0] == cases[1], f"the card names case {cases[0]}, the thread {cases[1]}")
    for call in [*thread[1:], *updates]:
        fig.expect(not any(word in said(call) for word in NOT_CREATED), f"says it was not created: {said(call)!r}")
    posts = hook.to("POST")
    fig.expect(len(posts) == 1, f"the ticket webhook got {len(posts)} requests: the confirmed call was re-run")
    fig.expect(state == "unknown", f"the action is {state!r}, not unknown")
    fig.expect(len(model.requests) == 1, f"{len(model.requests)} model calls: the run went on after the crash")
    no_calls(fig, slack, "chat.postEphemeral")
    fig.notes |= {
        "case": card_case.group() if card_case else None,
        "webhook requests": len(posts),
        "card updates": len(updates),
        "the card says": _line(updates[-1]) if updates else None,
        "the thread says": _line(thread[1]) if len(thread) > 1 else None,
    }
    return fig.verify()


def ticket_webhook_timeout(
    root: Path, index: Path, *, timeout_s: float = 1.0, answers_after_s: float = 3.0, attempts: int = 2
) -> Figures:
    """The ticket webhook makes the ticket but answers only after POLICYPAL_TICKETS_TIMEOUT_S (every
    attempt). In one process: the card and the reply say it is not known whether the ticket was
    created (with a case), never that it was not; every attempt carries the same Idempotency-Key."""
    fig = Figures(f"ticket webhook answering after {answers_after_s:g} s, timeout {timeout_s:g} s", sent=2)
    db = Database.of(root)
    ask = mention_event(ALICE, "<@UBOT> my VPN says NG-412, please open a ticket", channel=CHANNEL)
    with fakes() as (model, slack), webhook() as hook:
        hook.script(*[slow(answers_after_s)] * (attempts + 2))
        # After the click the model is down: the reply is the product's own words about the result.
        model.script(
            tool_calls(("create_it_ticket", TICKET), content="Shall I raise a ticket?"),
            error(500, "model down", headers={"x-should-retry": "false"}),
        )
        env = _ticket_env(
            root,
            index,
            model,
            slack,
            hook,
            POLICYPAL_TICKETS_TIMEOUT_S=f"{timeout_s:g}",
            POLICYPAL_TICKETS_ATTEMPTS=str(attempts),
        )
        with running(env, root) as server:
            card = _card(server, slack, db, ask)
            clicked_at = time.monotonic()
            clicked = server.click(
                ALICE, CONFIRM, button(card), channel=CHANNEL, message_ts=card.answer["ts"], thread_ts=ask["ts"]
            )
            fig.acknowledged = 1 + (clicked == 200)
            fig.expect(wait_replies(slack, [ask["ts"]], 2), "no reply after the click")
            fig.expect(settle(db), "the server never settled")
            state = db.scalar("SELECT state FROM pending_actions")
    thread = replies_in(slack, [ask["ts"]])[ask["ts"]]
    updates = _card_updates(slack, card)
    fig.count({ask["ts"]: thread[1:]})
    fig.timed_from(clicked_at, thread[1:])
    reply = said(thread[1]) if len(thread) > 1 else ""
    final = said(updates[-1]) if updates else ""
    fig.expect(UNKNOWN_REPLY in reply and CASE_ID.search(reply), f"the reply does not say it is unknown: {reply!r}")
    fig.expect(UNKNOWN_CARD in final and CASE_ID.search(final), f"the final card does not say it is unknown: {final!r}")
    for call in [*thread[1:], *updates]:
        fig.expect(not any(word in said(call) for word in NOT_CREATED), f"says it was not created: {said(call)!r}")
    sent_to_model = [m for r in model.requests[1:] for m in r.messages if m.get("role") == "tool"]
    fig.expect(
        sent_to_model
        and all("It is not known whether the ticket was created" in str(m.get("content")) for m in sent_to_model),
        f"the model was told: {sent_to_model}",
    )
    posts = hook.to("POST")
    keys = {p.headers.get("idempotency-key") for p in posts}
    fig.expect(
        len(posts) == attempts and len(keys) == 1,
        f"{len(posts)} webhook requests with {len(keys)} keys, expected {attempts} with one",
    )
    fig.expect(state == "unknown", f"the action is {state!r}, not unknown")
    no_calls(fig, slack, "chat.postEphemeral")
    fig.notes |= {
        "webhook requests": len(posts),
        "card updates": len(updates),
        "action": state,
        "the card says": _line(updates[-1]) if updates else None,
        "the reply says": _line(thread[1]) if len(thread) > 1 else None,
    }
    return fig.verify()
