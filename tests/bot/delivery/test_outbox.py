"""The outbox's platform writes on SQLite and PostgreSQL: sent now by their writer, cards coalesced, a dead
sender's rows sent again carefully, and a write that cannot be delivered handed to a person."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from sqlalchemy import event

from bot.delivery import Address, Outbox, OutboxPolicy, Post, post_destination
from bot.errors import RemoteError
from bot.helpdesk import REPLY_NOT_DELIVERED, Helpdesk
from bot.store import NewPost, Store, utcnow
from bot.types import Answer, TerminationReason
from tests.bot.helpers import ALICE, OnePassage, RecordingSender, service
from tests.fakes.openai_server import text

KEY = "slack:T1:C1:1700.1"
WHERE = Address("slack", "C1", "1700.1", None, "U_ALICE", "Alice")
CHAT = post_destination("slack")
QUICK = OutboxPolicy(max_attempts=3, backoff_s=0, deliver_timeout_s=1.0, stale_after_s=60)


def notice(text: str = "hello", **fields: Any) -> NewPost:
    return NewPost(CHAT, Post("notice", WHERE, text=text).to_json(), KEY, **fields)


def card(state: str, pending_id: str = "p1") -> NewPost:
    view = {"pending_id": pending_id, "state": state}
    post = Post("card", WHERE, card=view, target={"channel": "C1", "ts": "1700.2"})
    return NewPost(CHAT, post.to_json(), KEY, coalesce_key=f"card:{pending_id}")


def later(seconds: float):  # a clock that has moved on, for backoff and stale claims without sleeping
    return lambda: utcnow() + timedelta(seconds=seconds)


@contextlib.contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    """Every SQL statement the store sends while the block runs (its first word and table)."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()[:3]))

    engine = store._engine.sync_engine  # the one engine every repository of this store uses
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def test_rows_inserted_claimed_are_sent_at_once_by_their_writer_with_one_update(store: Store) -> None:
    sender = RecordingSender()
    outbox = Outbox(store, [sender], owner="writer")
    rows = await store.outbox.add_posts([notice("first"), notice("second")], claimed_by="writer")
    assert [(r.state, r.attempts, r.claimed_by) for r in rows] == [("sending", 1, "writer")] * 2
    with statements(store) as sent:
        outbox.send_now(rows)
        await outbox.drain(5)
    assert [p.text for p in sender.posts] == ["first", "second"]  # in the order they were written
    assert sent == ["UPDATE outbox SET"] * 2  # no claim, no read: one UPDATE per row, when it is sent
    assert all(d.uncertain is False and d.progress is None for _, d in sender.sent)
    for row in rows:
        stored = await store.outbox.get(row.id)
        assert stored is not None and (stored.state, stored.attempts, stored.external_ref) == (
            "delivered", 1, f"msg-{row.id}",
        )  # fmt: skip
    assert await outbox.run_once() == []  # and nobody sends them again


async def test_a_row_sent_now_that_fails_is_due_again_and_sent_by_any_worker(store: Store, second_store: Store) -> None:
    flaky = RecordingSender(error=RemoteError("Slack chat.postMessage in C1: internal_error", kind="unavailable"))
    writer = Outbox(store, [flaky], owner="writer", post_policy=QUICK)
    (row,) = await store.outbox.add_posts([notice()], claimed_by="writer")
    writer.send_now([row])
    await writer.drain(5)
    (failed,) = await store.outbox.of_conversation(KEY)
    assert (failed.state, failed.attempts) == ("pending", 1) and "internal_error" in (failed.last_error or "")

    healthy = RecordingSender()
    (result,) = await Outbox(second_store, [healthy], owner="other", post_policy=QUICK).run_once()
    (sent,) = await store.outbox.of_conversation(KEY)
    assert (result.label, result.status) == (f"post {row.id}", "delivered")
    assert (sent.state, sent.attempts, sent.claimed_by) == ("delivered", 2, "other")
    assert [d.uncertain for _, d in healthy.sent] == [False]  # its failure was recorded: nothing to look for


async def test_of_several_rows_for_one_card_only_the_newest_is_sent_and_the_rest_are_retired(store: Store) -> None:
    older = await store.outbox.add_posts([card("open"), card("executing")])
    newest = await store.outbox.add_posts([card("done")])
    other = await store.outbox.add_posts([card("expired", pending_id="p2")])
    sender = RecordingSender()
    results = await Outbox(store, [sender], post_policy=QUICK).run_once()
    assert sorted(r.label for r in results) == sorted(f"post {r.id}" for r in [*newest, *other])
    assert sorted((p.card or {})["state"] for p in sender.posts) == ["done", "expired"]
    states = {r.id: r.state for r in await store.outbox.of_conversation(KEY)}
    assert [states[r.id] for r in older] == ["superseded", "superseded"]
    assert states[newest[0].id] == states[other[0].id] == "delivered"
    assert await Outbox(store, [sender], post_policy=QUICK).run_once() == []  # the retired rows stay retired


async def test_an_older_card_row_retried_after_a_newer_one_was_shown_is_retired_not_sent(store: Store) -> None:
    # The older state failed once and waits for its retry; meanwhile the newer state was sent. The
    # retry must not put the older state back on the card.
    (old,) = await store.outbox.add_posts([card("executing")], claimed_by="writer")
    await store.outbox.settle(old.id, "writer", 1, "pending", next_attempt_at=utcnow() + timedelta(seconds=1))
    (new,) = await store.outbox.add_posts([card("done")], claimed_by="writer")
    sender = RecordingSender()
    outbox = Outbox(store, [sender], owner="writer", post_policy=QUICK)
    outbox.send_now([new])
    await outbox.drain(5)
    await Outbox(store, [sender], post_policy=QUICK, clock=later(2)).run_once()
    assert [(p.card or {})["state"] for p in sender.posts] == ["done"]
    stored = await store.outbox.get(old.id)
    assert stored is not None and stored.state == "superseded"


async def delivered(store: Store) -> None:
    """Wait until the conversation's one row is marked delivered (after its send returned)."""
    async with asyncio.timeout(5):
        while True:
            (row,) = await store.outbox.of_conversation(KEY)
            if row.state == "delivered":
                return
            await asyncio.sleep(0.01)


class FailingFirst(RecordingSender):
    """Refuses the first ``times`` sends with a transient error, then sends."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.left = times

    async def send(self, row: Any, delivery: Any) -> str | None:
        if self.left > 0:
            self.left -= 1
            self.failed.append(row)
            raise RemoteError("Slack chat.postMessage in C1: internal_error", kind="unavailable")
        return await super().send(row, delivery)


async def test_a_failed_row_is_retried_when_its_backoff_ends_not_at_the_next_poll(store: Store) -> None:
    never_polls = OutboxPolicy(max_attempts=5, backoff_s=0.01, poll_s=600, stale_after_s=60)
    sender = FailingFirst(times=2)
    outbox = Outbox(store, [sender], policy=never_polls, post_policy=never_polls)
    await store.outbox.add_posts([notice("waiting")])
    loop = asyncio.create_task(outbox.run_forever())
    try:
        await delivered(store)  # the poll is 10 minutes away: only the retry's wake-up can send it
    finally:
        outbox.stop()
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
    (row,) = await store.outbox.of_conversation(KEY)
    assert len(sender.failed) == 2 and (row.state, row.attempts) == ("delivered", 3)


class RateLimited(RecordingSender):
    async def send(self, row: Any, delivery: Any) -> str | None:
        raise RemoteError("Slack chat.postMessage in C1: ratelimited", kind="rate_limited", status=429, retry_after=45)


async def test_a_rate_limited_row_waits_at_least_the_retry_after_the_platform_asked_for(store: Store) -> None:
    await store.outbox.add_posts([notice("waiting")])
    before = utcnow()
    (result,) = await Outbox(store, [RateLimited()], policy=QUICK, post_policy=QUICK).run_once()
    (row,) = await store.outbox.of_conversation(KEY)
    assert result.status == "retrying" and row.state == "pending"
    assert row.next_attempt_at is not None and row.next_attempt_at >= before + timedelta(seconds=45)
    assert await Outbox(store, [RecordingSender()], policy=QUICK, post_policy=QUICK, clock=later(30)).run_once() == []


async def test_a_backlog_longer_than_a_batch_is_sent_in_one_pass(store: Store) -> None:
    small_batches = OutboxPolicy(max_attempts=3, backoff_s=0, batch=2, stale_after_s=60)
    await store.outbox.add_posts([notice(f"n{n}") for n in range(5)])
    sender = RecordingSender()
    results = await Outbox(store, [sender], policy=small_batches, post_policy=QUICK).run_once()
    assert sorted(p.text or "" for p in sender.posts) == [f"n{n}" for n in range(5)]
    assert [r.status for r in results] == ["delivered"] * 5


async def test_a_conversations_messages_are_sent_in_order_after_a_failure_but_card_updates_do_not_wait(
    store: Store,
) -> None:
    (first,) = await store.outbox.add_posts([notice("asked first")], claimed_by="w")
    await store.outbox.settle(first.id, "w", 1, "pending", next_attempt_at=utcnow() + timedelta(seconds=30))
    await store.outbox.add_posts([notice("asked second"), card("done")])
    sender = RecordingSender()
    await Outbox(store, [sender], post_policy=QUICK).run_once()
    assert [p.kind for p in sender.posts] == ["card"]  # the second answer waits for the first

    await Outbox(store, [sender], post_policy=QUICK, clock=later(31)).run_once()
    assert [p.text for p in sender.posts if p.kind == "notice"] == ["asked first", "asked second"]


async def test_a_row_a_dead_process_was_sending_is_sent_again_saying_it_may_have_gone_through(
    store: Store, second_store: Store
) -> None:
    (row,) = await store.outbox.add_posts([notice("reply")], claimed_by="dead-process")
    fresh = await store.outbox.add_posts([notice("never claimed")])
    assert await store.outbox.reclaim(["dead-process"], utcnow()) == 1  # the sweeper: its process is gone
    sender = RecordingSender()
    results = await Outbox(second_store, [sender], owner="survivor", post_policy=QUICK).run_once()
    assert sorted(r.status for r in results) == ["delivered", "delivered"]
    uncertain = {r.id: d.uncertain for r, d in sender.sent}
    assert uncertain == {row.id: True, fresh[0].id: False}  # look before posting the first again
    stored = await store.outbox.get(row.id)
    assert stored is not None and (stored.state, stored.attempts, stored.claimed_by) == ("delivered", 2, "survivor")


async def test_a_claim_gone_quiet_is_taken_over_as_uncertain_and_its_late_outcome_ignored(store: Store) -> None:
    (row,) = await store.outbox.add_posts([notice()], claimed_by="stalled")
    sender = RecordingSender()
    assert await Outbox(store, [sender], owner="survivor", post_policy=QUICK).run_once() == []  # still young
    (result,) = await Outbox(store, [sender], owner="survivor", post_policy=QUICK, clock=later(61)).run_once()
    assert result.status == "delivered" and [d.uncertain for _, d in sender.sent] == [True]
    assert not await store.outbox.settle(row.id, "stalled", 1, "failed", last_error="late")  # fenced off
    stored = await store.outbox.get(row.id)
    assert stored is not None and stored.state == "delivered"


async def test_a_post_refused_for_good_is_handed_over_once_and_retried_no_more(store: Store) -> None:
    refused = RecordingSender(error=RemoteError("Slack chat.postMessage in C1: not_in_channel", kind="validation"))
    handed: list[tuple[int, str]] = []
    outbox = Outbox(store, [refused], post_policy=QUICK)

    async def undeliverable(row: Any, error: str) -> None:
        handed.append((row.id, error))

    outbox.on_undeliverable = undeliverable
    (row,) = await store.outbox.add_posts([notice()])
    (result,) = await outbox.run_once()  # a refusal no retry can change: at the first attempt
    assert result.status == "failed" and handed == [(row.id, "Slack chat.postMessage in C1: not_in_channel")]
    assert await outbox.run_once() == [] and len(refused.failed) == 1
    stored = await store.outbox.get(row.id)
    assert stored is not None and (stored.state, stored.attempts) == ("failed", 1)


async def test_a_post_that_keeps_failing_is_handed_over_after_its_last_attempt_only(store: Store) -> None:
    down = RecordingSender(error=RemoteError("Slack chat.postMessage in C1: internal_error", kind="unavailable"))
    handed: list[str] = []
    outbox = Outbox(store, [down], post_policy=QUICK)

    async def undeliverable(row: Any, error: str) -> None:
        handed.append(error)

    outbox.on_undeliverable = undeliverable
    await store.outbox.add_posts([notice()])
    statuses = []
    for _ in range(4):
        statuses += [r.status for r in await outbox.run_once()]
        assert len(handed) == (1 if "failed" in statuses else 0)
    assert statuses == ["retrying", "retrying", "failed"]
    assert await outbox.retry_failed() == 0  # `policypal handoffs --retry` puts back helpdesk deliveries only


async def test_a_case_delivery_that_fails_for_good_is_not_handed_to_on_undeliverable(store: Store) -> None:
    class Down:
        name = "hook"

        async def deliver(self, case: Any) -> str | None:
            raise RemoteError("the helpdesk webhook refused it (400)", kind="validation")

    from bot.helpdesk import CaseDeliveries

    handed: list[object] = []
    outbox = Outbox(store, [CaseDeliveries(store, [Down()])], QUICK)

    async def undeliverable(row: Any, error: str) -> None:
        handed.append(row)

    outbox.on_undeliverable = undeliverable
    await Helpdesk(store, ["hook"]).open_case(
        origin="run:r1", reason="step_budget", user=ALICE, conversation_key=KEY, question="VPN?"
    )
    (result,) = await outbox.run_once()
    assert result.status == "failed" and handed == []  # it stays failed for `policypal handoffs --retry`


async def test_a_reply_that_cannot_be_posted_opens_a_case_and_the_person_is_told_in_the_thread(
    tmp_path, fake_openai
) -> None:
    fake_openai.script(text("unused"))
    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        too_long = RemoteError("Slack chat.postMessage in C1: msg_too_long", kind="validation")
        refused = RecordingSender(error=too_long, refuse=("reply",))
        svc.outbox.register(refused)
        post = Post("reply", WHERE, run_id="run_1", reason=TerminationReason.ANSWERED.value,
                    outcome={"type": "answer", "text": "Keep receipts.", "citations": []})  # fmt: skip
        (row,) = await svc.store.outbox.add_posts([NewPost(CHAT, post.to_json(), KEY)])
        await svc.outbox.run_once()  # the reply fails for good: a case, and a notice about it
        await svc.outbox.drain(5)
        (case,) = await svc.store.cases.recent()
        rows = await svc.store.outbox.of_conversation(KEY)
    assert (case.reason, case.origin, case.user_id, case.run_id) == (
        REPLY_NOT_DELIVERED, f"undelivered:{row.id}", "U_ALICE", "run_1",
    )  # fmt: skip
    assert "msg_too_long" in case.transcript["detail"]
    reply, told = rows
    assert reply.state == "failed"
    said = Post.from_json(told.payload or {})
    assert (said.kind, said.case_id, said.reason, said.address) == ("notice", "HD-1001", REPLY_NOT_DELIVERED, WHERE)
    assert "HD-1001" in said.text and "reply in this thread" not in said.text  # the thread is out of reach


async def test_when_the_thread_takes_nothing_the_person_is_told_directly(tmp_path, fake_openai) -> None:
    fake_openai.script(text("unused"))
    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        not_in = RemoteError("Slack chat.postMessage in C1: not_in_channel", kind="validation")
        refused = RecordingSender(error=not_in, refuse=("reply", "notice"))  # the thread takes nothing
        svc.outbox.register(refused)
        reply = Post("reply", WHERE, run_id="run_1", reason="answered", outcome={"type": "answer", "text": "Yes."})
        await svc.store.outbox.add_posts([NewPost(CHAT, reply.to_json(), KEY)])
        await svc.outbox.run_once()  # the reply fails for good: a case, and a notice in the thread, sent now
        await svc.outbox.drain(5)  # the notice fails too: a message to the person, sent now
        await svc.outbox.drain(5)
        rows = await svc.store.outbox.of_conversation(KEY)
        cases = await svc.store.cases.recent()
    posts = [Post.from_json(r.payload or {}) for r in rows]
    assert [(p.kind, r.state) for p, r in zip(posts, rows, strict=True)] == [
        ("reply", "failed"), ("notice", "failed"), ("direct", "delivered"),
    ]  # fmt: skip
    assert len(cases) == 1  # one case for the reply; the failed notice about it opens none
    direct = posts[2]
    assert (direct.address.user, direct.case_id) == ("U_ALICE", "HD-1001") and "HD-1001" in direct.text
    assert direct.reason is not None and "not_in_channel" in direct.reason
    assert [p.kind for p in refused.posts] == ["direct"]


def test_a_post_round_trips_through_its_row() -> None:
    answer = {"type": "answer", "text": "Hi", "citations": []}
    post = Post("reply", WHERE, run_id="r1", reason="answered", outcome=answer)
    again = Post.from_json(post.to_json())
    assert again == post and again.reply_outcome() == Answer("Hi")


class Stalls(RecordingSender):
    """Freezes inside its send until released, then fails as a slow platform does."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = asyncio.Event()
        self.release = asyncio.Event()

    async def send(self, row: Any, delivery: Any) -> str | None:
        self.inside.set()
        await self.release.wait()
        raise RemoteError("Slack chat.postMessage in C1: internal_error", kind="unavailable")


async def test_a_worker_whose_claim_was_taken_over_hands_nothing_over_when_its_last_attempt_fails(
    store: Store, second_store: Store
) -> None:
    last = OutboxPolicy(max_attempts=1, backoff_s=0, deliver_timeout_s=30.0, stale_after_s=60)
    stalled_sender, handed, events = Stalls(), [], []
    stalled = Outbox(store, [stalled_sender], owner="stalled", post_policy=last)

    async def undeliverable(row: Any, error: str) -> None:
        handed.append(row.id)

    stalled.on_undeliverable = undeliverable
    (row,) = await store.outbox.add_posts([notice("the answer")])
    frozen = asyncio.create_task(stalled.run_once())  # its last attempt: it freezes mid-send
    await stalled_sender.inside.wait()
    survivor_sender = RecordingSender()
    survivor = Outbox(second_store, [survivor_sender], owner="survivor", post_policy=last, clock=later(61))
    (result,) = await survivor.run_once()  # the claim went quiet: taken over and delivered
    events.append(result.status)
    stalled_sender.release.set()  # the stalled worker wakes to a failure of an attempt no longer its own
    events += [r.status for r in await frozen]
    assert events == ["delivered"] and handed == []  # no case, no "not delivered" notice for a delivered reply
    stored = await store.outbox.get(row.id)
    assert stored is not None and (stored.state, stored.claimed_by) == ("delivered", "survivor")


async def test_a_post_whose_hand_over_failed_is_tried_again_until_a_person_has_it(store: Store) -> None:
    refused = RecordingSender(error=RemoteError("Slack chat.postMessage in C1: not_in_channel", kind="validation"))
    calls: list[str] = []
    outbox = Outbox(store, [refused], post_policy=QUICK)

    async def undeliverable(row: Any, error: str) -> None:
        if not calls:
            calls.append("database down")
            raise ConnectionResetError("the database went away while the case was opened")
        calls.append(f"handed {row.id}")

    outbox.on_undeliverable = undeliverable
    (row,) = await store.outbox.add_posts([notice()])
    first = [r.status for r in await outbox.run_once()]
    later_pass = Outbox(store, [refused], post_policy=QUICK, clock=later(120))
    later_pass.on_undeliverable = undeliverable
    second = [r.status for r in await later_pass.run_once()]  # not silence: tried again, handed over this time
    assert calls == ["database down", f"handed {row.id}"]
    assert first == ["failed"] and second == ["failed"]
    assert await later_pass.run_once() == [] and len(calls) == 2  # handed over once: retried no more
    stored = await store.outbox.get(row.id)
    assert stored is not None and stored.state == "failed"


async def test_an_answer_written_on_another_replica_waits_for_the_earlier_answer_that_failed_there(
    store: Store, second_store: Store
) -> None:
    (first,) = await store.outbox.add_posts([notice("asked first")], claimed_by="a")  # replica a's reply
    await store.outbox.settle(first.id, "a", 1, "pending", next_attempt_at=utcnow() + timedelta(seconds=30))
    sender = RecordingSender()
    b = Outbox(second_store, [sender], owner="b", post_policy=QUICK)
    rows = await second_store.outbox.add_posts([notice("asked second")], claimed_by="b")  # replica b's reply
    b.send_now(rows)
    await b.drain(5)
    await b.run_once()
    assert sender.posts == []  # not above the first answer, still waiting for its retry
    await Outbox(second_store, [sender], owner="b", post_policy=QUICK, clock=later(31)).run_once()
    assert [p.text for p in sender.posts] == ["asked first", "asked second"]
    assert {r.state for r in await store.outbox.of_conversation(KEY)} == {"delivered"}
