"""The inbox on SQLite and PostgreSQL: each event's work runs once, failed work is retried a few times, and
an item taken over from a dead process can only be concluded by its new holder."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from bot.delivery import Inbox, Lease, current_lease
from bot.errors import RemoteError
from bot.store import InboxRecord, Store, utcnow
from bot.types import Inbound, TerminationReason
from tests.bot.helpers import ALICE, OnePassage, RecordingSender, answer_messages, deliver, eventually, service
from tests.fakes.openai_server import delay, text

KIND = "test.kind"


class Handler:
    """Records each item it works on with the lease it ran under; fails while ``failing``."""

    def __init__(self, failing: bool = False) -> None:
        self.failing = failing
        self.seen: list[tuple[InboxRecord, Lease | None]] = []

    async def __call__(self, record: InboxRecord) -> None:
        lease = current_lease()
        self.seen.append((record, Lease(lease.item_id, lease.epoch, lease.attempt) if lease else None))
        if self.failing:
            raise ConnectionResetError("the database went away mid-run")


def inbox(store: Store, handler: Handler, owner: str = "me", **kwargs: Any) -> Inbox:
    box = Inbox(store, owner=owner, **kwargs)
    box.register(KIND, handler)
    return box


def run_row(run_id: str) -> dict[str, Any]:
    return {
        "id": run_id, "conversation_key": "slack:T1:D1:1.0", "platform": "slack", "user_id": "U1", "question": "q",
        "reason": "answered", "started_at": utcnow(), "model": "m", "trace": [],
    }  # fmt: skip


async def test_an_event_is_worked_on_once_however_often_and_wherever_it_is_delivered(
    store: Store, second_store: Store
) -> None:
    here, there = Handler(), Handler()
    first, second = inbox(store, here), inbox(second_store, there, owner="other")
    accepted = await asyncio.gather(*(box.accept("slack:Ev1", "slack", KIND, {"n": 1}) for box in (first, second) * 3))
    await first.drain(5)
    await second.drain(5)
    assert accepted.count(True) == 1
    ((record, lease),) = here.seen + there.seen
    assert (record.id, record.payload, record.epoch, record.attempts) == ("slack:Ev1", {"n": 1}, 1, 1)
    assert lease is not None and (lease.item_id, lease.epoch) == ("slack:Ev1", 1)  # the work knows its lease
    stored = await store.inbox.get("slack:Ev1")
    assert stored is not None and stored.state == "done"  # answered nothing of its own: finished by the inbox


async def test_a_redelivery_after_the_work_is_done_runs_nothing(store: Store) -> None:
    handler = Handler()
    box = inbox(store, handler)
    assert await box.accept("slack:Ev1", "slack", KIND, {})
    await box.drain(5)
    assert not await box.accept("slack:Ev1", "slack", KIND, {})  # Slack retried: it never saw our ack
    await box.drain(5)
    assert await box.recover(set()) == []  # and nothing is left over for the sweeper
    assert len(handler.seen) == 1


async def test_failed_work_is_retried_up_to_max_attempts_then_the_person_is_told(store: Store) -> None:
    handler = Handler(failing=True)
    told: list[tuple[InboxRecord, str]] = []

    async def on_failure(record: InboxRecord, error: str) -> None:
        told.append((record, error))

    box = Inbox(store, owner="me", max_attempts=3)
    box.register(KIND, handler, on_failure=on_failure)
    await box.accept("slack:Ev1", "slack", KIND, {})
    await box.drain(5)
    assert told == []  # one failure is not the end: the item waits, unanswered, for the next pass
    for _ in range(3):
        await box.recover(set())  # a sweep: our own failed item is worked on again
        await box.drain(5)
    assert [(r.epoch, r.attempts) for r, _ in handler.seen] == [(1, 1), (2, 2), (3, 3)]
    ((record, error),) = told
    assert record.attempts == 3 and error == "ConnectionResetError: the database went away mid-run"
    stored = await store.inbox.get("slack:Ev1")
    assert stored is not None and (stored.state, stored.attempts) == ("failed", 3)
    assert "went away" in (stored.last_error or "")


async def test_an_item_whose_every_attempt_killed_its_process_is_handed_to_a_person_not_run_again(
    store: Store, second_store: Store
) -> None:
    # An event whose work kills the process (out of memory on a huge attachment): each restart's sweep
    # takes it over and dies with it again. After max_attempts it must end, and the person be told.
    await second_store.inbox.accept("slack:Ev1", "slack", KIND, {}, "dead-1")
    assert await second_store.inbox.relet("slack:Ev1", 1, "dead-2") == 2  # it killed that process too
    assert await second_store.inbox.relet("slack:Ev1", 2, "dead-3") == 3  # and the third
    handler, told = Handler(), []

    async def on_failure(record: InboxRecord, error: str) -> None:
        told.append((record.id, record.attempts, error))

    box = Inbox(store, owner="me", max_attempts=3)
    box.register(KIND, handler, on_failure=on_failure)
    taken = await box.recover({"dead-3"})
    await box.drain(5)
    assert taken == ["slack:Ev1"] and handler.seen == []  # not a fourth process killed
    ((item_id, attempts, error),) = told
    assert (item_id, attempts) == ("slack:Ev1", 4) and "3 attempts" in error
    stored = await store.inbox.get("slack:Ev1")
    assert stored is not None and (stored.state, stored.owner) == ("failed", "me")
    assert await box.recover({"dead-3"}) == [] and len(told) == 1


class PlatformDown(Handler):
    """Fails as a Slack Web API incident does: a retryable ``RemoteError`` (users.info: internal_error)."""

    async def __call__(self, record: InboxRecord) -> None:
        await super().__call__(record)
        raise RemoteError("Slack users.info: internal_error", kind="unavailable")


async def test_while_the_platform_refuses_an_item_keeps_being_retried_then_the_person_is_told(store: Store) -> None:
    handler, told = PlatformDown(), []

    async def on_failure(record: InboxRecord, error: str) -> None:
        told.append(record.attempts)

    box = Inbox(store, owner="me", max_attempts=3, retry_window=timedelta(seconds=60))
    box.register(KIND, handler, on_failure=on_failure)
    await box.accept("slack:Ev1", "slack", KIND, {})
    await box.drain(5)
    for _ in range(5):  # past max_attempts: an outage is not a bug, the item waits for Slack
        await box.recover(set())
        await box.drain(5)
    assert len(handler.seen) == 6 and told == []
    box.retry_window = timedelta(0)  # the window is over: the next failure is the last
    await box.recover(set())
    await box.drain(5)
    assert told == [7]
    stored = await store.inbox.get("slack:Ev1")
    assert stored is not None and stored.state == "failed"


async def test_an_item_being_worked_on_here_is_not_taken_again(store: Store) -> None:
    release = asyncio.Event()
    started: list[int] = []

    async def slow(record: InboxRecord) -> None:
        started.append(record.epoch)
        await release.wait()

    box = Inbox(store, owner="me")
    box.register(KIND, slow)
    await box.accept("slack:Ev1", "slack", KIND, {})
    await eventually(lambda: started)
    assert await box.recover(set()) == [] and await box.recover({"me"}) == []
    release.set()
    await box.drain(5)
    assert started == [1]


async def test_an_item_of_a_dead_process_is_taken_over_and_its_old_epoch_can_no_longer_conclude(
    store: Store, second_store: Store
) -> None:
    assert await second_store.inbox.accept("slack:Ev1", "slack", KIND, {"n": 1}, "dead-process")  # then it froze
    checked = asyncio.Event()
    ran: list[tuple[InboxRecord, Lease]] = []

    async def conclude(record: InboxRecord) -> None:  # the new holder's work: a run, recorded under its lease
        lease = current_lease()
        assert lease is not None
        ran.append((record, lease))
        await checked.wait()
        assert await store.runs.record(run_row("run_new"), fence=lease.fence)
        lease.answered = True

    live = Inbox(store, owner="me")
    live.register(KIND, conclude)
    assert await live.recover(set()) == []  # a live process's item is its own
    assert await live.recover({"dead-process"}) == ["slack:Ev1"]
    await eventually(lambda: ran)
    ((record, lease),) = ran
    assert (record.owner, record.epoch, record.attempts) == ("me", 2, 2) and lease.fence == ("slack:Ev1", 2)
    # The frozen process wakes and tries to conclude under epoch 1: fenced off, whatever it tries.
    assert not await second_store.inbox.holds("slack:Ev1", 1)
    assert not await second_store.runs.record(run_row("run_late"), fence=("slack:Ev1", 1))
    assert not await second_store.inbox.finish("slack:Ev1", 1)
    assert await second_store.inbox.relet("slack:Ev1", 1, "dead-process") is None
    checked.set()
    await live.drain(5)
    assert await store.runs.get("run_late") is None
    stored = await store.runs.get("run_new")
    assert stored is not None and stored.inbox_id == "slack:Ev1"
    assert await live.recover({"dead-process"}) == []  # answered: nothing left to take over


async def test_two_replicas_recovering_one_dead_item_work_on_it_once(store: Store, second_store: Store) -> None:
    await store.inbox.accept("slack:Ev1", "slack", KIND, {}, "dead-process")
    handlers = [Handler(), Handler()]
    boxes = [inbox(store, handlers[0], "a"), inbox(second_store, handlers[1], "b")]
    started = await asyncio.gather(*(box.recover({"dead-process"}) for box in boxes))
    for box in boxes:
        await box.drain(5)
    assert sorted(len(s) for s in started) == [0, 1]
    assert len(handlers[0].seen + handlers[1].seen) == 1


async def test_an_item_without_a_handler_here_waits_for_a_process_that_has_one(store: Store) -> None:
    teams_only = Inbox(store, owner="me")  # this process runs Slack; the item is Teams'
    await store.inbox.accept("teams:a1", "teams", "teams.activity", {}, "dead-process")
    assert await teams_only.recover({"dead-process"}) == []
    stored = await store.inbox.get("teams:a1")
    assert stored is not None and (stored.owner, stored.epoch) == ("dead-process", 1)


async def test_an_event_id_an_earlier_release_handled_is_seen_and_never_worked_on(store: Store) -> None:
    handler = Handler()
    box = inbox(store, handler)
    assert not await box.seen_before("slack:Ev-old")  # the first time: remembered as done
    assert await box.seen_before("slack:Ev-old")
    assert not await box.accept("slack:Ev-old", "slack", KIND, {})
    assert await box.recover(set()) == [] and handler.seen == []


# -- the service under a lease ---------------------------------------------------------------------


def message(text: str, event_id: str = "Ev1") -> Inbound:
    return Inbound("slack", "D1", "1700.1", ALICE, text, event_id=event_id, tenant="T1")


async def test_a_message_is_answered_once_with_its_run_naming_the_item_and_one_reply(tmp_path, fake_openai) -> None:
    fake_openai.script(text("Keep every receipt."))
    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        sender = RecordingSender()
        svc.outbox.register(sender)
        answered = answer_messages(svc)
        inbound = message("receipts?")
        assert await deliver(svc, inbound) and not await deliver(svc, inbound)
        await svc.inbox.drain(5)
        await svc.outbox.drain(5)
        ((_, reply),) = answered
        run = await svc.store.runs.get(reply.run_id)
        rows = await svc.store.outbox.of_conversation(inbound.conversation_key)
        left = await svc.inbox.recover(set())
    assert run is not None and run.inbox_id == "slack:Ev1" and run.status == "finished"
    ((row, _),) = sender.sent
    assert [r.id for r in rows] == [row.id] and row.inbox_id == "slack:Ev1" and rows[0].state == "delivered"
    (post,) = sender.posts
    assert post.kind == "reply" and post.run_id == reply.run_id and post.reply_outcome().text == "Keep every receipt."
    assert left == [] and len(fake_openai.requests) == 1


async def test_a_process_whose_item_was_taken_over_mid_run_writes_nothing_when_it_wakes(
    tmp_path, fake_openai, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.script(delay(0.5, text("Too late.")))
    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        sender = RecordingSender()
        svc.outbox.register(sender)
        answered = answer_messages(svc)
        inbound = message("receipts?")
        await deliver(svc, inbound)
        await eventually(lambda: fake_openai.requests)  # mid-run: another replica takes the item over
        assert await svc.store.inbox.relet("slack:Ev1", 1, "other-replica") == 2
        await svc.inbox.drain(10)
        await svc.outbox.drain(5)
        ((_, reply),) = answered
        runs = await svc.store.runs.of_conversation(inbound.conversation_key)
        history = await svc.store.threads.load_history(inbound.conversation_key)
        rows = await svc.store.outbox.of_conversation(inbound.conversation_key)
        stored = await svc.store.inbox.get("slack:Ev1")
    assert reply is None and runs == [] and history == [] and rows == [] and sender.sent == []
    assert stored is not None and (stored.owner, stored.epoch, stored.state) == ("other-replica", 2, "leased")
    assert "taken over by another process" in caplog.text


async def test_a_give_up_whose_item_was_taken_over_opens_no_case(tmp_path, fake_openai) -> None:
    fake_openai.script(delay(0.5, text("")))  # an empty answer: the run gives up
    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        answered = answer_messages(svc)
        await deliver(svc, message("receipts?"))
        await eventually(lambda: fake_openai.requests)
        await svc.store.inbox.relet("slack:Ev1", 1, "other-replica")
        await svc.inbox.drain(10)
        ((_, reply),) = answered
        cases = await svc.store.cases.recent()
    assert reply is None and cases == []  # the new holder's run opens the case, if it gives up too


async def test_a_request_for_a_person_is_answered_without_a_run_and_finishes_its_item(tmp_path, fake_openai) -> None:
    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        sender = RecordingSender()
        svc.outbox.register(sender)
        answered = answer_messages(svc)
        await deliver(svc, message("I want a human"))
        await svc.inbox.drain(5)
        await svc.outbox.drain(5)
        ((_, reply),) = answered
        stored = await svc.store.inbox.get("slack:Ev1")
        left = await svc.inbox.recover(set())
    assert reply is not None and reply.reason == TerminationReason.ANSWERED and reply.run_id == "HD-1001"
    assert stored is not None and stored.state == "done" and left == []  # no run names it: finished instead
    (post,) = sender.posts
    assert post.kind == "reply" and post.from_a_run is False and "HD-1001" in post.reply_outcome().text
    assert fake_openai.requests == []


async def test_an_item_waiting_for_its_turn_to_start_here_is_not_taken_again(store: Store) -> None:
    # A platform may hold work back before it starts (Slack lets a burst's acks go first): the item is
    # this process's all the same, and a sweep meanwhile must not start it a second time.
    turn = asyncio.Event()

    async def admit(work: Any) -> Any:
        await turn.wait()
        return await work

    handler = Handler()
    box = Inbox(store, owner="me")
    box.register(KIND, handler, admit=admit)
    await box.accept("slack:Ev1", "slack", KIND, {})
    taken = await box.recover(set())  # a sweep while the work waits for its turn
    turn.set()
    await box.drain(5)
    assert taken == [] and [r.epoch for r, _ in handler.seen] == [1]
