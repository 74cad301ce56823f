"""Thread history under concurrency: messages answered at once, by one process or several, all stay."""

from __future__ import annotations

import asyncio

import pytest

from bot.store import Store
from bot.types import Inbound
from tests.bot.helpers import ALICE, OnePassage, answer_messages, deliver, service
from tests.fakes.openai_server import delay, text

pytestmark = pytest.mark.asyncio

KEY = "slack:T1:C1:1.0"


def exchange(n: int, by: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"question {n} via {by}"}, {"role": "assistant", "content": f"answer {n}"}]


async def test_concurrent_appends_from_two_processes_all_stay_each_exchange_whole(
    store: Store, second_store: Store
) -> None:
    await store.threads.append_history(KEY, exchange(0, "first"))
    stores = (second_store, store)
    writes = [stores[n % 2].threads.append_history(KEY, exchange(n, str(n % 2))) for n in range(1, 41)]
    await asyncio.gather(*writes)

    history = await second_store.threads.load_history(KEY)

    assert len(history) == 82
    pairs = [(history[i]["content"], history[i + 1]["content"]) for i in range(0, len(history), 2)]
    assert all(q.startswith("question ") and a == "answer " + q.split()[1] for q, a in pairs)
    assert sorted(int(q.split()[1]) for q, _ in pairs) == list(range(41))
    assert pairs[0] == ("question 0 via first", "answer 0")


async def test_two_messages_answered_at_once_in_one_thread_both_stay_in_its_history(tmp_path, fake_openai):
    fake_openai.script(delay(0.3, text("Answer one.")), delay(0.3, text("Answer two.")))
    async with (
        service(tmp_path, fake_openai, OnePassage()) as replica_a,
        service(tmp_path, fake_openai, OnePassage()) as replica_b,  # the same database: another process
    ):
        replies = [answer_messages(replica_a), answer_messages(replica_b)]
        one = Inbound("slack", "D1", "1.0", ALICE, "Question one?", event_id="Ev1", tenant="T1")
        two = Inbound("slack", "D1", "1.0", ALICE, "Question two?", event_id="Ev2", tenant="T1")
        assert await deliver(replica_a, one) and await deliver(replica_b, two)
        await asyncio.gather(replica_a.inbox.drain(10), replica_b.inbox.drain(10))
        history = await replica_a.store.threads.load_history(one.conversation_key)
    (((_, first),), ((_, second),)) = replies
    assert first is not None and second is not None and first.conversation_key == second.conversation_key
    contents = [m["content"] for m in history]
    assert sorted(contents) == ["Answer one.", "Answer two.", "Question one?", "Question two?"]
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]  # each exchange whole
