"""Graceful shutdown of the runs in flight: the grace period is the whole budget, for every run."""

from __future__ import annotations

import asyncio

import pytest

from bot.runtime import InFlight

pytestmark = pytest.mark.asyncio


async def test_a_run_that_starts_after_the_grace_period_is_stopped_at_once():
    # A run queued for a slot through the whole grace period used to get its full deadline after it,
    # so SIGTERM outlasted the container's stop period and the run was killed before it replied.
    inflight = InFlight()
    first_started, later_stops = asyncio.Event(), []

    async def first_run() -> None:
        with inflight.track("first") as stop:
            first_started.set()
            await stop.wait()  # a run that only ends when it is cancelled
        with inflight.track("queued") as stop:  # the slot it held goes to the next run
            later_stops.append(stop.is_set())

    task = asyncio.create_task(first_run())
    await first_started.wait()
    cancelled = await inflight.drain(grace_s=0.1, finish_s=1.0)
    await task
    assert cancelled == 1 and later_stops == [True]


async def test_a_run_that_starts_during_the_grace_period_may_still_finish():
    inflight = InFlight()

    async def run(name: str, seconds: float) -> bool:
        with inflight.track(name) as stop:
            await asyncio.sleep(seconds)
            return stop.is_set()

    slow = asyncio.create_task(run("slow", 0.3))
    await asyncio.sleep(0)
    drained = asyncio.create_task(inflight.drain(grace_s=1.0))
    await asyncio.sleep(0.05)
    assert await run("quick", 0.05) is False  # started in the grace period, finished within it
    assert await slow is False and await drained == 0


async def test_a_run_that_starts_within_the_grace_period_is_not_stopped_because_the_others_finished_early():
    # The drain stops waiting as soon as nothing is in flight, well inside the grace period. A run
    # that starts then (the continuation of a confirmed click whose ticket call was still going) has
    # time left: it used to be stopped at once and hand off as if the grace period were over.
    inflight = InFlight()
    assert await inflight.drain(grace_s=5.0) == 0
    with inflight.track("after a confirmed call") as stop:
        assert not stop.is_set()
