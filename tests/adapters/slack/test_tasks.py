"""Work after the ack is held until it ends, and shutdown waits for it (within a deadline)."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from adapters.slack.tasks import AckFirst, BackgroundTasks

pytestmark = pytest.mark.asyncio


async def test_a_task_nobody_references_still_finishes():
    tasks, done = BackgroundTasks(), asyncio.Event()

    async def work() -> None:
        await asyncio.sleep(0.01)
        gc.collect()
        done.set()

    tasks.spawn(work(), name="w")
    await asyncio.wait_for(done.wait(), 1)
    await asyncio.sleep(0)
    assert len(tasks) == 0 and tasks.started == 1


async def test_drain_waits_for_tasks_started_by_tasks():
    tasks, finished = BackgroundTasks(), []

    async def run() -> None:
        await asyncio.sleep(0.05)
        finished.append("run")

    async def dispatch() -> None:
        await asyncio.sleep(0.01)
        tasks.spawn(run(), name="run")

    tasks.spawn(dispatch(), name="dispatch")
    await tasks.drain(1.0)
    assert finished == ["run"]


async def test_drain_cancels_what_outlives_the_deadline(caplog: pytest.LogCaptureFixture):
    tasks = BackgroundTasks()
    task = tasks.spawn(asyncio.sleep(10), name="slow")
    with caplog.at_level(logging.WARNING):
        await tasks.drain(0.05)
    assert task.cancelled()
    assert "cancelled 1 Slack task" in caplog.text


async def test_a_failing_task_is_logged_not_lost(caplog: pytest.LogCaptureFixture):
    tasks = BackgroundTasks()

    async def fail() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR):
        tasks.spawn(fail(), name="failing")
        await tasks.drain(1.0)
    assert "Slack task failing failed" in caplog.text


async def test_work_waits_while_requests_are_being_acknowledged():
    gate, order = AckFirst(patience_s=1.0), []

    async def work(name: str) -> None:
        order.append(name)

    with gate.acknowledging():
        waiting = [asyncio.create_task(gate.then(work(f"work{n}"))) for n in range(3)]
        await asyncio.sleep(0.02)
        order.append("ack")
    await asyncio.wait_for(asyncio.gather(*waiting), 1)
    assert order == ["ack", "work0", "work1", "work2"]  # after the ack, in the order they came


async def test_when_idle_work_starts_at_once_and_right_after_an_ack_once_it_settles():
    gate, started = AckFirst(settle_s=0.05), []

    async def work() -> None:
        started.append(asyncio.get_running_loop().time())

    await gate.then(work())
    assert len(started) == 1  # nothing acknowledged yet: no wait
    with gate.acknowledging():
        acked = asyncio.get_running_loop().time()
    await gate.then(work())
    assert 0.04 <= started[1] - acked < 0.5


async def test_sustained_acknowledging_delays_work_only_by_the_patience():
    gate, started = AckFirst(settle_s=0.01, patience_s=0.05), []

    async def work() -> None:
        started.append(asyncio.get_running_loop().time())

    with gate.acknowledging():
        begin = asyncio.get_running_loop().time()
        await asyncio.wait_for(gate.then(work()), 1)
    assert 0.04 <= started[0] - begin < 0.5


async def test_work_cancelled_while_queued_never_starts():
    gate, started = AckFirst(patience_s=1.0), []

    async def work() -> None:
        started.append(True)

    with gate.acknowledging():
        queued = asyncio.create_task(gate.then(work()))
        await asyncio.sleep(0.01)
        queued.cancel()
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.01)
    assert queued.cancelled() and started == []
