"""The console's overview figures on SQLite and PostgreSQL: exact percentiles, and settled days summed once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.store import Ratings, RunFilter, Store
from bot.store.reports import SETTLED_AFTER_DAYS
from bot.store.tables import RunFeedback

pytestmark = pytest.mark.asyncio


def _run(n: int, started: datetime, *, steps: int, tokens: int, cost: float, reason: str = "answered", **extra):
    return {
        "id": f"run_{n:04d}",
        "conversation_key": f"slack::C1:{n}",
        "platform": "slack",
        "user_id": "U1",
        "question": "q",
        "reason": reason,
        "started_at": started,
        "steps": steps,
        "input_tokens": tokens,
        "output_tokens": 0,
        "cost_usd": cost,
        "latency_ms": 1.0,
        "model": "m",
        "trace": [],
        "owner": "",
        **extra,
    }


def midnight(days_ago: int) -> datetime:
    today = datetime.now(UTC).date() - timedelta(days=days_ago)
    return datetime.combine(today, datetime.min.time(), UTC)


async def test_the_overview_counts_by_day_and_gives_nearest_rank_percentiles(store: Store):
    start = midnight(10)
    for n in range(20):  # steps 1..20, tokens 100..2000, cost $0.0001..$0.0020, over two days
        await store.runs.record(
            _run(
                n,
                start + timedelta(hours=n * 2),
                steps=n + 1,
                tokens=100 * (n + 1),
                cost=0.0001 * (n + 1),
                reason="not_covered" if n % 4 == 0 else "answered",
                guards="repeat" if n < 2 else "",
            )
        )
    await store.runs.set_feedback("run_0003", "not_helpful", "U1")
    report = await store.reports.overview(midnight(10), midnight(-1))
    assert report.runs == 20 and report.by_reason == {"answered": 15, "not_covered": 5}
    assert sorted(report.by_day) == [start.date(), start.date() + timedelta(days=1)]
    assert sum(report.by_day[start.date()].values()) == 12  # hours 0..22 of the first day
    assert (report.steps.median, report.steps.p95) == (10, 19)  # ranks ceil(0.5 * 20) and ceil(0.95 * 20)
    assert (report.tokens.median, report.tokens.p95) == (1000, 1900)
    assert report.cost_usd.median == pytest.approx(0.0010) and report.cost_usd.p95 == pytest.approx(0.0019)
    assert report.feedback == {"not_helpful": 1} and report.guards == {"repeat": 2}


async def test_settled_days_are_read_once_and_recent_days_every_time(store: Store):
    old, recent = midnight(SETTLED_AFTER_DAYS + 3), midnight(0)
    await store.runs.record(_run(1, old + timedelta(hours=1), steps=2, tokens=10, cost=0.0))
    await store.runs.record(_run(2, recent + timedelta(minutes=1), steps=2, tokens=10, cost=0.0))
    window = (midnight(SETTLED_AFTER_DAYS + 5), midnight(-1))
    assert (await store.reports.overview(*window)).runs == 2
    # A run added afterwards on the settled day is not read again (such a day gains none in production);
    # one added today is.
    await store.runs.record(_run(3, old + timedelta(hours=2), steps=2, tokens=10, cost=0.0))
    await store.runs.record(_run(4, recent + timedelta(minutes=2), steps=2, tokens=10, cost=0.0))
    again = await store.reports.overview(*window)
    assert again.runs == 3 and sum(again.by_day[recent.date()].values()) == 2
    with pytest.raises(ValueError, match="whole UTC days"):
        await store.reports.overview(old + timedelta(hours=1), recent)


async def test_not_helpful_sources_count_only_the_runs_the_reader_may_read(store: Store):
    expenses = {"title": "Expenses Policy", "heading": "Receipts", "source": "expenses.md"}
    reorg = {"title": "Reorg Plan", "heading": "Team changes", "source": "reorg.md"}
    start = midnight(3)
    rated = [
        (["all"], [expenses]),  # public
        (["all"], [expenses, expenses]),  # one answer citing a document twice counts once
        (["all", "hr"], [reorg, expenses]),  # built for hr: may cite what only hr reads
        (None, [expenses]),  # recorded before audiences were: restricted
        (["all", "hr"], []),  # cited nothing: neither counted nor withheld
    ]
    for n, (audience, citations) in enumerate(rated):
        row = _run(n, start + timedelta(hours=n), steps=1, tokens=1, cost=0.0)
        await store.runs.record({**row, "audience": audience, "citations": citations})
        await store.runs.set_feedback(row["id"], "not_helpful", "U1")
    helpful = _run(9, start, steps=1, tokens=1, cost=0.0)
    await store.runs.record({**helpful, "audience": ["all"], "citations": [reorg]})
    await store.runs.set_feedback(helpful["id"], "helpful", "U1")  # not rated not helpful

    public_only = await store.reports.not_helpful_sources(midnight(4), readable=lambda a: a == ["all"])
    assert public_only.documents == [("Expenses Policy", "expenses.md", 2)] and public_only.withheld == 2
    everything = await store.reports.not_helpful_sources(midnight(4))
    assert everything.documents == [("Expenses Policy", "expenses.md", 4), ("Reorg Plan", "reorg.md", 1)]
    assert everything.withheld == 0


async def test_the_overview_the_runs_list_and_the_gaps_count_every_persons_rating(store: Store):
    old, recent = midnight(SETTLED_AFTER_DAYS + 3), midnight(0)
    await store.runs.record(_run(1, old + timedelta(hours=1), steps=1, tokens=1, cost=0.0))  # asked by U1
    await store.runs.record(_run(2, recent + timedelta(minutes=1), steps=1, tokens=1, cost=0.0))
    window = (midnight(SETTLED_AFTER_DAYS + 5), midnight(-1))
    assert (await store.reports.overview(*window)).feedback == {}  # the old day is settled now
    await store.runs.set_feedback("run_0001", "helpful", "U1")
    await store.runs.set_feedback("run_0001", "not_helpful", "U2")  # someone else in the channel
    await store.runs.set_feedback("run_0002", "not_helpful", "U2")
    await store.runs.set_feedback("run_0002", "not_helpful", "U3")
    report = await store.reports.overview(*window)
    rows = {r.id: r.ratings for r in await store.reports.runs(RunFilter())}
    gaps = await store.reports.gap_runs(window[0])
    assert report.feedback == {"helpful": 1, "not_helpful": 3}  # a rating on a settled day's run counts too
    assert rows == {"run_0001": Ratings("helpful", 0, 1), "run_0002": Ratings(None, 0, 2)}
    assert [str(rows["run_0001"]), str(rows["run_0002"])] == [
        "helpful (others: 1 not_helpful)",
        "others: 2 not_helpful",
    ]
    assert [(g.id, g.rated_not_helpful) for g in gaps] == [("run_0002", True), ("run_0001", True)]


async def test_an_answer_stays_a_gap_while_anyone_still_rates_it_not_helpful(store: Store):
    await store.runs.record(_run(1, midnight(1), steps=1, tokens=1, cost=0.0))
    await store.runs.set_feedback("run_0001", "not_helpful", "U2")
    await store.runs.set_feedback("run_0001", "helpful", "U3")  # another reader's thumbs-up clears nothing
    assert [g.id for g in await store.reports.gap_runs(midnight(2))] == ["run_0001"]
    before = await store.reports.gap_marker(midnight(2))
    await store.runs.set_feedback("run_0001", "helpful", "U2")  # U2 changes their mind
    assert await store.reports.gap_runs(midnight(2)) == []
    assert await store.reports.gap_marker(midnight(2)) != before


async def test_the_overview_counts_the_ratings_given_in_its_period(store: Store):
    """Ratings are counted when they are given: a click today on an answer from before the period is
    today's rating, and a click given before the period is not in it (read from the ratings' index,
    without joining every run of the period)."""
    await store.runs.record(_run(1, midnight(40), steps=1, tokens=1, cost=0.0))  # before the 30 days
    await store.runs.record(_run(2, midnight(28), steps=1, tokens=1, cost=0.0))
    await store.runs.set_feedback("run_0001", "not_helpful", "U2")  # given today
    await store.runs.set_feedback("run_0002", "helpful", "U1")
    await store.runs.set_feedback("run_0002", "not_helpful", "U3")
    async with store._engine.begin() as conn:  # U3 clicked 25 days ago, before a 20-day period
        await conn.execute(
            RunFeedback.__table__.update().where(RunFeedback.user_id == "U3").values(rated_at=midnight(25))
        )

    assert (await store.reports.overview(midnight(30), midnight(-1))).feedback == {"helpful": 1, "not_helpful": 2}
    assert (await store.reports.overview(midnight(20), midnight(-1))).feedback == {"helpful": 1, "not_helpful": 1}


async def test_gap_runs_merge_the_runs_that_ended_unanswered_and_those_rated_not_helpful_newest_first(store: Store):
    start = midnight(3)
    for n in range(6):  # every other run not covered; the others answered
        reason = "not_covered" if n % 2 == 0 else "answered"
        await store.runs.record(_run(n, start + timedelta(hours=n), steps=1, tokens=1, cost=0.0, reason=reason))
    await store.runs.set_feedback("run_0003", "not_helpful", "U2")  # an answer someone found wanting
    await store.runs.set_feedback("run_0004", "not_helpful", "U2")  # ... that also ended not covered
    await store.runs.set_feedback("run_0005", "helpful", "U2")

    gaps = await store.reports.gap_runs(midnight(4))
    newest_three = await store.reports.gap_runs(midnight(4), limit=3)

    assert [(g.id, g.reason, g.rated_not_helpful) for g in gaps] == [
        ("run_0004", "not_covered", True),
        ("run_0003", "answered", True),
        ("run_0002", "not_covered", False),
        ("run_0000", "not_covered", False),
    ]
    assert [g.id for g in newest_three] == ["run_0004", "run_0003", "run_0002"]
    assert await store.reports.gap_runs(midnight(0)) == []  # none started since today's midnight
