"""The store's handoff tables on SQLite and PostgreSQL: places, one case per origin, conversation reads."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta
from typing import Any

from bot.helpdesk import Helpdesk, case_number
from bot.pending import PendingActions
from bot.store import Place, RunRow, Store, utcnow
from bot.types import UserRef

KEY = "teams:tenant-1:19:general@thread.tacv2;messageid=1700001:1700001"
ALICE = UserRef("aad-alice", "Alice", "alice@example.com")


def _run(run_id: str, question: str, started_at: datetime, trace: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": run_id, "conversation_key": KEY, "platform": "teams", "user_id": ALICE.id, "question": question,
        "reason": "answered", "started_at": started_at, "steps": 1, "input_tokens": 10, "output_tokens": 5,
        "cost_usd": 0.0, "latency_ms": 5, "model": "gpt-4o-mini", "trace": trace, "owner": "host:1",
    }  # fmt: skip


async def test_the_first_place_of_a_conversation_wins(store: Store) -> None:
    first = Place(KEY, "teams", "tenant-1", "19:general@thread.tacv2", "1700001", "https://teams.example/l/1")
    await store.threads.remember_place(first)
    await store.threads.remember_place(Place(KEY, "teams", "tenant-1", "other", "2", None))
    assert await store.threads.get_place(KEY) == first
    assert await store.threads.get_place("slack:T:C:1") is None


async def test_a_case_reads_where_the_conversation_lives_and_its_runs_in_order(store: Store) -> None:
    await store.threads.remember_place(Place(KEY, "teams", "tenant-1", "19:general@thread.tacv2", "1700001", "https://l/1"))
    start = utcnow()
    for n in range(3):
        trace = [{"kind": "model", "name": "gpt-4o-mini", "text": f"answer {n}"}]
        await store.runs.record(_run(f"run_{n}", f"question {n}", start + timedelta(seconds=n), trace))
    case = await Helpdesk(store, ["teams"]).open_case(
        origin="run:run_2",
        reason="no_progress",
        user=ALICE,
        conversation_key=KEY,
        question="question 2",
        run_id="run_2",
    )
    assert (case.platform, case.channel, case.thread, case.link) == (
        "teams",
        "19:general@thread.tacv2",
        "1700001",
        "https://l/1",
    )
    assert [r["question"] for r in case.transcript["runs"]] == ["question 0", "question 1", "question 2"]
    assert case.transcript["totals"] == {"runs": 3, "steps": 3, "tokens": 45, "cost_usd": 0.0}


async def test_two_processes_opening_the_same_case_get_one_case_and_one_outbox_row(
    store: Store, second_store: Store
) -> None:
    async def open_on(s: Store):
        return await Helpdesk(s, ["webhook"]).open_case(
            origin="action:pa_1", reason="ticket_failed", user=ALICE, conversation_key=KEY, question="VPN?"
        )

    cases = await asyncio.gather(*(open_on(store if n % 2 else second_store) for n in range(6)))
    (case_id,) = {c.case_id for c in cases}  # one case; its number may skip one a loser drew on PostgreSQL
    assert len(await store.outbox.deliveries([case_number(case_id)])) == 1
    assert len(await store.cases.recent()) == 1


async def test_a_case_about_an_action_keeps_that_action_in_a_long_conversation(store: Store) -> None:
    pending = PendingActions(store)
    for n in range(52):  # a long-lived thread: more proposals than a transcript keeps
        last = await pending.propose(
            run_id=f"run_{n}", conversation_key=KEY, requester=ALICE.id, tool="create_it_ticket", call_id=f"c{n}",
            arguments={"summary": f"ticket {n}"}, text=f"Create ticket {n}?", run_state={},
        )  # fmt: skip
    case = await Helpdesk(store).open_case(
        origin=f"action:{last.id}", reason="ticket_failed", user=ALICE, conversation_key=KEY, question="ticket 51"
    )
    actions = [a["arguments"]["summary"] for a in case.transcript["actions"]]
    assert len(actions) == 50 and actions[-1] == "ticket 51" and actions[0] == "ticket 2"


async def test_a_case_opened_before_its_run_is_stored_carries_that_run_last(store: Store) -> None:
    start = utcnow()
    await store.runs.record(_run("run_0", "question 0", start, []))
    giving_up = RunRow(**_run("run_1", "question 1", start + timedelta(seconds=1), [{"kind": "model", "text": "?"}]),
                       status="finished", finished_at=None, feedback=None, feedback_by=None)  # fmt: skip
    giving_up = dataclasses.replace(giving_up, reason="step_budget", steps=4)
    case = await Helpdesk(store).open_case(
        origin="run:run_1", reason="step_budget", user=ALICE, conversation_key=KEY, question="question 1",
        run_id="run_1", current_run=giving_up,
    )  # fmt: skip
    runs = case.transcript["runs"]
    assert [r["run_id"] for r in runs] == ["run_0", "run_1"] and runs[1]["trace"] == [{"kind": "model", "text": "?"}]
    assert case.transcript["budgets"]["used"]["steps"] == 4  # the run that gave up, not the last stored one
    assert await store.runs.get("run_1") is None  # the case did not store it: its reply's commit does
