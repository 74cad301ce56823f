"""Slack's work after the ack waits for the acks of a burst (AckFirst), in the order it came."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from adapters.slack.tasks import AckFirst


async def test_work_waits_while_requests_are_being_acknowledged():
    gate, order = AckFirst(patience_s=1.0), []

    async def work(name: str) -> None:
        order.append(name)

    with gate.acknowledging():
        waiting = [asyncio.create_task(gate.then(work(f"work{n}"))) for n in range(3)]
        await asyncio.sleep(0.02)
        order.append("ack")
    await asyncio.wait_for(asyncio.gather(*waiting), 30)  # a hang guard only
    assert order == ["ack", "work0", "work1", "work2"]  # after the ack, in the order they came


class VirtualClock(asyncio.SelectorEventLoop):
    """An event loop whose clock stands still while anything is ready to run and, when nothing is, jumps to
    the next timer. Timers fire in the order of their deadlines whatever the machine's load, and nothing
    waits for real: a test can put marks at chosen times beside the gate's own timers and compare the order.
    """

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def _run_once(self) -> None:
        live = [timer.when() for timer in self._scheduled if not timer.cancelled()]
        if not self._ready and live:
            self._now = max(self._now, min(live))
        super()._run_once()


def on_a_virtual_clock(scenario: Callable[[], Awaitable[list[str]]]) -> list[str]:
    with asyncio.Runner(loop_factory=VirtualClock) as runner:
        return runner.run(scenario())


def test_when_idle_work_starts_at_once_and_right_after_an_ack_once_it_settles():
    async def scenario() -> list[str]:
        gate, timeline, loop = AckFirst(settle_s=0.05, patience_s=10.0), [], asyncio.get_running_loop()

        async def work() -> None:
            timeline.append("work")

        await gate.then(work())  # nothing acknowledged yet: no wait
        with gate.acknowledging():
            timeline.append("ack")
        loop.call_later(0.049, timeline.append, "settle nearly over")
        loop.call_later(0.051, timeline.append, "settle over")
        await asyncio.wait_for(gate.then(work()), 30)  # in virtual time: a hang fails at once
        await asyncio.sleep(1)
        return timeline

    # At once when idle; after an ack, as the burst settles: not before, and not only at the 10 s patience.
    assert on_a_virtual_clock(scenario) == ["work", "ack", "settle nearly over", "work", "settle over"]


def test_sustained_acknowledging_delays_work_only_by_the_patience():
    async def scenario() -> list[str]:
        gate, timeline, loop = AckFirst(settle_s=0.01, patience_s=0.05), [], asyncio.get_running_loop()

        async def work() -> None:
            timeline.append("work")

        with gate.acknowledging():  # acknowledging all along: the burst never settles
            loop.call_later(0.049, timeline.append, "patience nearly over")
            loop.call_later(0.051, timeline.append, "patience over")
            await asyncio.wait_for(gate.then(work()), 30)  # in virtual time: a hang fails at once
            await asyncio.sleep(1)
        return timeline

    assert on_a_virtual_clock(scenario) == ["patience nearly over", "work", "patience over"]


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
