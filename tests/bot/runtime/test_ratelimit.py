"""Admission: the per-user limit holds across replicas (one database); beyond the per-process cap messages
wait their turn, and only a message that waited the whole queue wait is refused, politely."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.agent import WORKING, Progress
from bot.delivery import Sweeper
from bot.runtime import Admission, RunSlots, UserRateLimit
from bot.service import PolicyPal, Reply
from bot.store import Store, utcnow
from bot.types import Answer, Inbound, TerminationReason, UserRef
from tests.bot.helpers import ALICE, BOB, answer_messages, ask, deliver, eventually, service
from tests.fakes.openai_server import Turn, delay, held, respond, text

pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self, now: float = 6_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class NoPassages:
    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Any]:
        return []


def person(n: int) -> UserRef:
    return UserRef(f"U_{n}", f"Person {n}", groups=("all",))


def about(body: dict[str, Any]) -> Turn:
    """The scripted model's answer names the question it answers."""
    (question,) = re.findall(r"question \d+", json.dumps(body["messages"]))
    return text(f"About {question}.")


def status_line(status: list[str], label: str) -> Progress:
    """A platform's status line that notes what it was told, in order, for every message at once."""

    async def show(line: str) -> None:
        status.append(f"{label}: {line}")

    return show


async def asking(
    svc: PolicyPal, question: str, user: UserRef, thread: str, status: list[str], label: str = "me"
) -> Reply:
    inbound = Inbound("console", "terminal", thread, user, question, event_id=f"ev-{label}-{thread}")
    reply = await svc.handle_message(inbound, progress=status_line(status, label))
    assert reply is not None
    return reply


async def test_the_limit_counts_every_replicas_hits_for_one_user(store: Store, second_store: Store):
    clock = Clock()
    replica_a, replica_b = UserRateLimit(store, 3, clock=clock), UserRateLimit(second_store, 3, clock=clock)
    verdicts = [await limit.allow("slack:T:U1") for limit in (replica_a, replica_b, replica_a, replica_b)]
    assert verdicts == [True, True, True, False]
    assert await replica_b.allow("slack:T:U2") is True  # another person has their own budget


async def test_concurrent_hits_on_two_replicas_are_all_counted(store: Store, second_store: Store):
    clock = Clock()
    limits = [UserRateLimit(s, 10, clock=clock) for s in (store, second_store)]
    verdicts = await asyncio.gather(*(limits[n % 2].allow("teams:T:U1") for n in range(14)))
    assert sorted(verdicts).count(True) == 10


async def test_the_window_slides_rather_than_resetting_at_the_minute(store: Store):
    clock = Clock(6_000.0)  # the start of a window
    limit = UserRateLimit(store, 4, clock=clock)
    assert [await limit.allow("u") for _ in range(4)] == [True] * 4
    clock.now += 61  # next window, 1 s in: the previous 4 still weigh almost fully
    assert await limit.allow("u") is False
    clock.now += 45  # 46 s into the window: ~1.2 of the old ones left, plus the refused one
    assert await limit.allow("u") is True
    clock.now += 200  # long quiet: both windows forgotten
    assert await limit.allow("u") is True


async def test_a_user_over_the_limit_gets_a_polite_reply_and_no_run(tmp_path, fake_openai):
    fake_openai.script(text("First answer."), text("Second answer."), text("Bob's answer."))
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        svc.admission = Admission(UserRateLimit(svc.store, 2), RunSlots(4))
        replies = [await ask(svc, f"question {n}", thread=f"t{n}") for n in range(3)]
        bobs = await ask(svc, "my question", BOB, thread="b")
        runs = await svc.store.runs.recent()
    refused = replies[2]
    assert [r.refused for r in replies] == [None, None, "rate_limited"] and bobs.refused is None
    assert isinstance(refused.outcome, Answer) and "2 questions in the last minute" in refused.outcome.text
    assert len(runs) == 3 and fake_openai.remaining == 0  # no run, no model call for the refused one
    text_metrics = svc.metrics.render().decode()
    assert 'policypal_refused_messages_total{platform="console",reason="rate_limited"} 1.0' in text_metrics


async def test_asking_for_a_human_counts_towards_the_limit_too(tmp_path, fake_openai):
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        svc.admission = Admission(UserRateLimit(svc.store, 2), RunSlots(4))
        replies = [await ask(svc, "I want to talk to a human", thread=f"t{n}") for n in range(4)]
        cases = await svc.store.cases.recent()
    assert [r.refused for r in replies] == [None, None, "rate_limited", "rate_limited"]
    assert len(cases) == 2  # each case goes to every helpdesk destination: no flooding them


async def test_a_message_that_waited_the_whole_queue_wait_hears_how_long_it_waited(tmp_path, fake_openai):
    released = asyncio.Event()
    fake_openai.script(held(released, text("Slow answer.")))
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        svc.admission = Admission(UserRateLimit(svc.store, 0), RunSlots(1, wait_s=0.1))
        slow = asyncio.create_task(ask(svc, "a slow one"))
        await eventually(lambda: fake_openai.requests)
        status: list[str] = []
        busy = await asking(svc, "me too", BOB, "b", status)
        released.set()
        assert (await slow).refused is None
        runs = await svc.store.runs.recent()
    assert busy.refused == "busy" and status == ["me: Queued: you're next…"]
    assert "waited less than a second for its turn" in busy.outcome.text and "ask again in a few" in busy.outcome.text
    assert [run.question for run in runs] == ["a slow one"]  # the refusal left no run behind


async def test_a_burst_beyond_the_cap_is_all_answered_in_arrival_order(tmp_path, fake_openai):
    """Two slots, six messages: the first two hold their slots until the other four have queued."""
    released = asyncio.Event()
    fake_openai.script(*[held(released, respond(about))] * 2, *[respond(about)] * 4)
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        slots = RunSlots(2, wait_s=60)
        svc.admission = Admission(UserRateLimit(svc.store, 0), slots)
        status: list[str] = []
        asked = []
        for n in range(6):  # one at a time, so the order they arrive in is known
            asked.append(asyncio.create_task(asking(svc, f"question {n}", person(n), f"t{n}", status, f"m{n}")))
            await eventually(lambda n=n: len(fake_openai.requests) == n + 1 if n < 2 else slots.queued == n - 1)
        queued_then = svc.metrics.registry.get_sample_value("policypal_runs_queued")
        released.set()
        replies = await asyncio.gather(*asked)
        queued_after = svc.metrics.registry.get_sample_value("policypal_runs_queued")
    assert [reply.outcome.text for reply in replies] == [f"About question {n}." for n in range(6)]
    assert all(reply.refused is None and reply.reason is TerminationReason.ANSWERED for reply in replies)
    assert [line for line in status if "Queued" in line] == [
        "m2: Queued: you're next…",
        "m3: Queued: 1 ahead of you…",
        "m4: Queued: 2 ahead of you…",
        "m5: Queued: 3 ahead of you…",
    ]
    assert [line for line in status if line.endswith(WORKING)] == [f"m{n}: {WORKING}" for n in range(2, 6)]
    assert (queued_then, queued_after) == (4.0, 0.0)


async def test_a_run_that_waited_longer_than_its_deadline_still_gets_its_whole_deadline(tmp_path, fake_openai):
    fake_openai.script(text("Worth the wait."))
    # The run itself has 3 s after its wait, ample on a busy machine; the wait alone outlasts the deadline.
    async with service(tmp_path, fake_openai, NoPassages(), deadline_s=3.0) as svc:
        slots = RunSlots(1, wait_s=60)
        svc.admission = Admission(UserRateLimit(svc.store, 0), slots)
        async with slots.slot():  # the only slot, held for longer than the run's deadline
            waiting = asyncio.create_task(ask(svc, "a patient question"))
            await eventually(lambda: slots.queued == 1)
            await asyncio.sleep(3.3)
        reply = await waiting
    assert reply.reason is TerminationReason.ANSWERED and reply.outcome.text == "Worth the wait."


async def bob_queued_behind_alice(svc: PolicyPal, fake_openai: Any) -> list[tuple[Any, Reply | None]]:
    """One slot: Alice's message runs (its model call held by the script), Bob's waits in line for the slot.
    Returns the inbox's answers as they come."""
    answered = answer_messages(svc)
    slots = RunSlots(1, wait_s=3600)
    svc.admission = Admission(UserRateLimit(svc.store, 0), slots)
    assert await deliver(svc, Inbound("console", "terminal", "a", ALICE, "a slow one", event_id="q1"))
    await eventually(lambda: fake_openai.requests)
    assert await deliver(svc, Inbound("console", "terminal", "b", BOB, "me too", event_id="q2"))
    await eventually(lambda: slots.queued == 1)
    return answered


async def test_a_queued_message_is_never_taken_for_abandoned_however_long_it_waits(tmp_path, fake_openai):
    released = asyncio.Event()
    fake_openai.script(held(released, text("Slow answer.")), text("Bob's answer."))
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        answered = await bob_queued_behind_alice(svc, fake_openai)
        an_hour_on = await Sweeper(svc, clock=lambda: utcnow() + timedelta(hours=1)).sweep_once()
        released.set()
        await eventually(lambda: len(answered) == 2)
        await svc.inbox.drain(5)
    assert an_hour_on.taken_over == [] and len(fake_openai.requests) == 2
    assert [reply.outcome.text for _, reply in answered if reply] == ["Slow answer.", "Bob's answer."]


async def test_a_message_waiting_for_a_slot_is_already_in_the_inbox_so_a_crash_cannot_lose_it(tmp_path, fake_openai):
    fake_openai.script(delay(1.0, text("Slow answer.")), text("Bob's answer."))
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        answered = answer_messages(svc)
        svc.admission = Admission(UserRateLimit(svc.store, 0), RunSlots(1, wait_s=5.0))
        since = datetime.now(UTC) - timedelta(minutes=1)
        assert await deliver(svc, Inbound("console", "terminal", "a", ALICE, "a slow one", event_id="e1"))
        await eventually(lambda: fake_openai.requests)
        assert await deliver(svc, Inbound("console", "terminal", "b", BOB, "me too", event_id="e2"))
        waiting = await svc.store.inbox.unanswered(since)
        assert len(fake_openai.requests) == 1  # Bob's message waits for the slot, yet a sweeper can see it
        await eventually(lambda: len(answered) == 2)
        left = await svc.store.inbox.unanswered(since)
    assert [item.payload["text"] for item in waiting] == ["a slow one", "me too"]
    assert [reply.outcome.text for _, reply in answered if reply] == ["Slow answer.", "Bob's answer."]
    assert left == []


async def test_a_message_still_queued_when_the_shutdown_grace_ends_is_left_for_the_restart_not_given_up(
    tmp_path, fake_openai
):
    """A run in flight past the grace period gives up (it began, and says so with a case); a message still
    waiting for a slot never began: no run, reply or case, its attempt given back, and the restart answers it."""
    released = asyncio.Event()
    fake_openai.script(held(released, text("Slow answer.")), text("Bob's answer."))
    since = datetime.now(UTC) - timedelta(minutes=1)
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        answered = await bob_queued_behind_alice(svc, fake_openai)
        cancelled = await svc.inflight.drain(0.05)
        await svc.inbox.drain(5)
        (left,) = await svc.store.inbox.unanswered(since)
        cases_then = await svc.store.cases.recent(10)
    async with service(tmp_path, fake_openai, NoPassages()) as restarted:
        answered_after = answer_messages(restarted)
        taken = await Sweeper(restarted).sweep_once()
        await eventually(lambda: answered_after)
        await restarted.inbox.drain(5)
    assert cancelled == 1 and [reply.reason for _, reply in answered if reply] == [TerminationReason.CANCELLED]
    assert [record.payload["text"] for record, _ in answered] == ["a slow one"]  # Bob's never reached a reply
    assert left.payload["text"] == "me too" and left.attempts == 0 and len(cases_then) == 1
    assert taken.taken_over == [left.id] and answered_after[0][0].attempts == 1
    assert [reply.outcome.text for _, reply in answered_after if reply] == ["Bob's answer."]
