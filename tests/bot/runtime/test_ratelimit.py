"""Admission: the per-user limit holds across replicas (one database), the per-process cap answers politely."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.runtime import BUSY_TEXT, Admission, RunSlots, UserRateLimit
from bot.store import Store
from bot.types import Answer, Inbound
from tests.bot.helpers import ALICE, BOB, answer_messages, ask, deliver, eventually, service
from tests.fakes.openai_server import delay, text

pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self, now: float = 6_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class NoPassages:
    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Any]:
        return []


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


async def test_a_full_process_says_so_after_a_short_wait_instead_of_queueing_forever():
    slots = RunSlots(1, wait_s=0.05)
    async with slots.slot() as first, slots.slot() as second:
        assert (first, second, slots.busy) == (True, False, 1)
    async with slots.slot() as again:
        assert again is True


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


async def test_when_every_run_slot_is_taken_the_next_person_hears_so(tmp_path, fake_openai):
    fake_openai.script(delay(1.0, text("Slow answer.")))
    async with service(tmp_path, fake_openai, NoPassages()) as svc:
        svc.admission = Admission(UserRateLimit(svc.store, 0), RunSlots(1, wait_s=0.1))
        slow = asyncio.create_task(ask(svc, "a slow one"))
        await eventually(lambda: fake_openai.requests)
        busy = await ask(svc, "me too", BOB, thread="b")
        assert (await slow).refused is None
        runs = await svc.store.runs.recent()
    assert busy.refused == "busy" and busy.outcome.text == BUSY_TEXT
    assert [run.question for run in runs] == ["a slow one"]  # the refusal left no run behind


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
