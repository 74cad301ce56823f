"""Work after the platform's ack is held until it ends, and shutdown waits for it (within a deadline)."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from bot.runtime import BackgroundTasks

pytestmark = pytest.mark.asyncio


async def test_a_task_nobody_references_still_finishes():
    tasks, done = BackgroundTasks("Slack"), asyncio.Event()

    async def work() -> None:
        await asyncio.sleep(0.01)
        gc.collect()
        done.set()

    tasks.spawn(work(), name="w")
    await asyncio.wait_for(done.wait(), 30)  # a hang guard only
    await asyncio.sleep(0)
    assert len(tasks) == 0 and tasks.started == 1


async def test_drain_waits_for_tasks_started_by_tasks():
    tasks, finished = BackgroundTasks("Slack"), []

    async def run() -> None:
        await asyncio.sleep(0.05)
        finished.append("run")

    async def dispatch() -> None:
        await asyncio.sleep(0.01)
        tasks.spawn(run(), name="run")

    tasks.spawn(dispatch(), name="dispatch")
    await tasks.drain(30.0)
    assert finished == ["run"]


async def test_drain_cancels_what_outlives_the_deadline(caplog: pytest.LogCaptureFixture):
    tasks = BackgroundTasks("Slack")
    task = tasks.spawn(asyncio.sleep(10), name="slow")
    with caplog.at_level(logging.WARNING):
        await tasks.drain(0.05)
    assert task.cancelled()
    assert "cancelled 1 Slack task" in caplog.text


async def test_a_failing_task_is_logged_not_lost(caplog: pytest.LogCaptureFixture):
    tasks = BackgroundTasks("Slack")

    async def fail() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR):
        tasks.spawn(fail(), name="failing")
        await tasks.drain(30.0)
    assert "Slack task failing failed" in caplog.text
