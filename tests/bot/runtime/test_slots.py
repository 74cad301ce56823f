"""The cap on runs at once: beyond it messages wait in arrival order, each for a bounded time."""

from __future__ import annotations

import asyncio

from bot.runtime import RunSlots, SlotTurn, busy_text, queued_text


async def take(slots: RunSlots, name: str, order: list[str], leave: asyncio.Event) -> SlotTurn:
    """Wait for a slot, note who got it, hold it until ``leave``."""
    async with slots.slot() as turn:
        if turn.admitted:
            order.append(name)
            await leave.wait()
        return turn


async def until(condition: object, *, passes: int = 1000) -> None:
    """Let other tasks run until ``condition()`` holds (no clock involved)."""
    for _ in range(passes):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_waiters_get_their_slot_in_arrival_order_and_a_newcomer_queues_behind_them():
    slots, order, leave = RunSlots(1, wait_s=30), [], asyncio.Event()
    holder = asyncio.create_task(take(slots, "holder", order, leave))
    await until(lambda: order == ["holder"])
    waiters = []
    for name in ("a", "b", "c"):
        waiters.append(asyncio.create_task(take(slots, name, order, leave)))
        await until(lambda: slots.queued == len(waiters))
    leave.set()  # the holder leaves; before "a" wakes, a newcomer asks
    await until(lambda: holder.done())
    newcomer = asyncio.create_task(take(slots, "newcomer", order, leave))
    turns = await asyncio.gather(holder, *waiters, newcomer)
    assert order == ["holder", "a", "b", "c", "newcomer"]
    assert [turn.ahead for turn in turns[1:4]] == [0, 1, 2] and all(turn.admitted for turn in turns)
    assert (slots.busy, slots.queued) == (0, 0)


async def test_a_message_waits_at_most_the_queue_wait_then_is_refused_and_leaves_the_line():
    slots, order, leave = RunSlots(1, wait_s=0.05), [], asyncio.Event()
    holder = asyncio.create_task(take(slots, "holder", order, leave))
    await until(lambda: order == ["holder"])
    refused = await take(slots, "late", order, leave)
    assert (refused.admitted, refused.queued, slots.queued, slots.busy) == (False, True, 0, 1)
    assert refused.waited_s > 0
    leave.set()
    await holder
    assert (await take(slots, "later", order, leave)).admitted and order == ["holder", "later"]


async def test_no_queue_wait_admits_while_a_slot_is_free_and_refuses_at_once_when_none_is():
    slots, told = RunSlots(1, wait_s=0), []

    async def tell(ahead: int) -> None:
        told.append(ahead)

    async with slots.slot(tell) as first, slots.slot(tell) as second:
        assert (first.admitted, second.admitted, second.queued, told) == (True, False, False, [])


async def test_a_waiter_is_told_how_many_wait_ahead_of_it():
    slots, told, leave = RunSlots(1, wait_s=30), [], asyncio.Event()

    async def waiter() -> None:
        async def tell(ahead: int) -> None:
            told.append(ahead)

        async with slots.slot(tell):
            await leave.wait()

    tasks = [asyncio.create_task(waiter()) for _ in range(3)]
    await until(lambda: len(told) == 2)
    leave.set()
    await asyncio.gather(*tasks)
    assert told == [0, 1]  # the first took the free slot and was told nothing


async def test_a_waiter_cancelled_as_its_slot_came_passes_the_slot_on():
    slots, order, leave = RunSlots(1, wait_s=30), [], asyncio.Event()
    release = asyncio.Event()
    holder = asyncio.create_task(take(slots, "holder", order, release))
    await until(lambda: order == ["holder"])
    doomed = asyncio.create_task(take(slots, "doomed", order, leave))
    await until(lambda: slots.queued == 1)
    nxt = asyncio.create_task(take(slots, "next", order, leave))
    await until(lambda: slots.queued == 2)
    release.set()
    await until(lambda: holder.done())  # the slot is handed to "doomed", which has not woken yet
    doomed.cancel()
    await until(lambda: order == ["holder", "next"])
    leave.set()
    await nxt
    assert doomed.cancelled() and (slots.busy, slots.queued) == (0, 0)


async def test_a_cancelled_waiter_leaves_the_line_without_a_slot():
    slots, order, leave = RunSlots(1, wait_s=30), [], asyncio.Event()
    holder = asyncio.create_task(take(slots, "holder", order, leave))
    await until(lambda: order == ["holder"])
    gone = asyncio.create_task(take(slots, "gone", order, leave))
    await until(lambda: slots.queued == 1)
    gone.cancel()
    await until(lambda: gone.done())
    assert slots.queued == 0
    leave.set()
    await holder
    assert (slots.busy, order) == (0, ["holder"])


def test_the_refusal_says_how_long_the_message_waited():
    assert "waited 2 minutes for its turn" in busy_text(120.4)
    assert "waited 45 seconds" in busy_text(45.2) and "waited less than a second" in busy_text(0.05)
    assert "ask again in a few minutes" in busy_text(1)


def test_the_status_line_of_a_waiting_message_says_its_place():
    assert (queued_text(0), queued_text(3)) == ("Queued: you're next…", "Queued: 3 ahead of you…")
