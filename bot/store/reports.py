"""What operators read: runs by day and ending, percentiles, filtered pages of runs, gap candidates.

Read-only statements for the console (adapters/web), written to stay fast with many runs stored:
lists page by keyset (``started_at``, ``id``) rather than OFFSET, never select a trace they do not
show, and bound every scan they hand to Python (``SCAN_LIMIT``). The overview reads only the covering
index ``ix_runs_report_window`` (never a row with its trace), in four ``GROUP BY``s per range of days:
counts, and histograms of steps, tokens and cost (in millionths of a dollar) from which the
percentiles are exact. Days old enough to be settled are summed once per process, so a reload reads
only the last two days' rows; ratings, which come whenever someone clicks, are counted afresh on every
load (one per person and answer, ``run_feedback``). The same SQL runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, Select, and_, cast, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bot.store.cases import Cases
from bot.store.columns import utc_midnight
from bot.store.engine import Repository
from bot.store.outbox import OutboxRows
from bot.store.records import (
    DeliveryRecord,
    HandoffRecord,
    PendingRecord,
    Rating,
    to_pending_record,
)
from bot.store.tables import PendingActionRow, Run, RunFeedback
from bot.types import TerminationReason

SETTLED_AFTER_DAYS = 2  # a day this old gains no runs (a run is recorded within its deadline of its start)
MICRO_USD = 1_000_000  # cost histograms count millionths of a dollar: finer than the $0.0001 pages show
SCAN_LIMIT = 5_000  # rows a report reads into Python at most (the newest first)
HELPFUL, NOT_HELPFUL = "helpful", "not_helpful"
ID_BATCH = 1_000  # ids per IN list: well under any driver's limit on bound parameters
# Runs that ended without an answer for want of one: what a policy owner reads as a gap. A model or
# internal error says nothing about the documents, so it is not here.
GAVE_UP = (
    TerminationReason.STEP_BUDGET,
    TerminationReason.TOKEN_BUDGET,
    TerminationReason.DEADLINE,
    TerminationReason.COST_BUDGET,
    TerminationReason.NO_PROGRESS,
)
GAP_REASONS = (TerminationReason.NOT_COVERED, *GAVE_UP)
OPEN_ACTION_STATES = ("open", "executing", "unknown")


@dataclass(frozen=True)
class RunFilter:
    """The runs list's filters; None or empty: any."""

    platform: str | None = None
    place: str | None = None  # "private" | "shared"
    reason: str | None = None
    user: str | None = None
    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive


@dataclass(frozen=True)
class Ratings:
    """A run's ratings as one line shows them: the asker's own (None: they did not rate) and how many
    others (anyone else who saw the answer in a shared place) rated it helpful and not helpful."""

    asker: str | None = None
    others_helpful: int = 0
    others_not_helpful: int = 0

    @classmethod
    def of(cls, ratings: Sequence[Rating], asker: str) -> Ratings:
        """The summary of a run's ratings (``Runs.ratings``), ``asker`` being who asked."""
        own = [r.rating for r in ratings if r.user_id == asker]
        others = Counter(r.rating for r in ratings if r.user_id != asker)
        return cls(own[0] if own else None, others[HELPFUL], others[NOT_HELPFUL])

    def __str__(self) -> str:
        """The asker's rating, then others' counts when any: "helpful (others: 2 not_helpful)"; "" if no one rated."""
        counts = ((self.others_helpful, HELPFUL), (self.others_not_helpful, NOT_HELPFUL))
        others = ", ".join(f"{n} {rating}" for n, rating in counts if n)
        if not others:
            return self.asker or ""
        return f"{self.asker} (others: {others})" if self.asker else f"others: {others}"


@dataclass(frozen=True)
class RunSummary:
    """One line of the runs list: everything but the trace."""

    id: str
    started_at: datetime
    platform: str
    place: str | None
    user_id: str
    question: str
    status: str
    reason: str | None
    steps: int
    tokens: int
    cost_usd: float
    latency_ms: float
    ratings: Ratings
    audience: list[str] | None


@dataclass(frozen=True)
class Spread:
    """The median and 95th percentile of one measure over a set of runs."""

    median: float
    p95: float


@dataclass(frozen=True)
class Overview:
    """How runs ended over a window: per day and reason, rates, spreads, feedback, guards."""

    since: datetime
    until: datetime
    runs: int
    by_day: dict[date, dict[str, int]]  # day -> reason -> runs
    by_reason: dict[str, int]
    steps: Spread
    tokens: Spread
    cost_usd: Spread
    feedback: dict[str, int]  # "helpful" / "not_helpful" -> ratings (one per person and answer)
    guards: dict[str, int]  # guard -> runs where it fired

    def rate(self, *reasons: str) -> float:
        """The share of runs that ended with one of ``reasons``."""
        return sum(self.by_reason.get(r, 0) for r in reasons) / self.runs if self.runs else 0.0


@dataclass(frozen=True)
class GapRun:
    """A run that shows a gap: not covered, gave up for want of an answer, or rated not helpful (by anyone)."""

    id: str
    question: str
    user_id: str
    reason: str | None
    rated_not_helpful: bool
    started_at: datetime


Readable = Callable[[list[str] | None], bool]  # whether the reader may see what a run built for this audience holds


@dataclass(frozen=True)
class CitedSources:
    """The documents cited by answers rated not helpful that the reader may see: (title, source, answers),
    most first; ``withheld``: the answers rated not helpful that cited something the reader may not see
    (runs built for restricted groups), counted in none of them."""

    documents: list[tuple[str, str, int]]
    withheld: int = 0


@dataclass(frozen=True)
class CaseSummary:
    """A helpdesk case with its deliveries, for the cases list."""

    case: HandoffRecord
    deliveries: list[DeliveryRecord] = field(default_factory=list)

    @property
    def status(self) -> str:
        """One word for the case's deliveries: failed, retrying, sending, delivered, or "stored only"."""
        states = [d.state for d in self.deliveries if d.state != "superseded"]
        if not states:
            return "stored only"  # no helpdesk destination was configured: the case is in the store
        if "failed" in states:
            return "failed"
        if all(s == "delivered" for s in states):
            return "delivered"
        if any(d.attempts > 0 and d.state == "pending" for d in self.deliveries):
            return "retrying"
        return "sending"


class Reports(Repository):
    """The console's reads; nothing here writes."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self._cases, self._outbox = Cases(engine), OutboxRows(engine)  # the cases page reads theirs
        # Days that can no longer change (``SETTLED_AFTER_DAYS`` old), summed once per process: a reload of
        # the overview then reads only the last days' rows, however long its window.
        self._settled: dict[date, DayTotals] = {}

    async def overview(self, since: datetime, until: datetime) -> Overview:
        """Finished runs that started in [since, until), two UTC midnights: counts by day and reason, spreads
        (from the days' histograms), their ratings (everyone's) and guards."""
        first, last = since.date(), (until - timedelta(microseconds=1)).date()
        if since != utc_midnight(first) or until != utc_midnight(last + timedelta(days=1)):
            raise ValueError("the overview covers whole UTC days: since and until must be midnights")
        days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
        settled_before = datetime.now(UTC).date() - timedelta(days=SETTLED_AFTER_DAYS)
        wanted = [d for d in days if d not in self._settled or d >= settled_before]
        fresh = await self._day_totals(wanted[0], wanted[-1]) if wanted else {}
        for day in days:
            if wanted and wanted[0] <= day <= wanted[-1] and day < settled_before:
                self._settled[day] = fresh.get(day, DayTotals())  # a day without runs is settled too
        per_day = {d: fresh[d] if d in fresh else self._settled.get(d, DayTotals()) for d in days}
        whole = DayTotals()
        for totals in per_day.values():
            whole.add(totals)
        total = whole.runs
        return Overview(
            since,
            until,
            total,
            {d: dict(t.reasons) for d, t in per_day.items() if t.runs},
            dict(whole.reasons.most_common()),
            _spread_of(whole.steps, total),
            _spread_of(whole.tokens, total),
            _spread_of(whole.micro_usd, total, scale=1 / MICRO_USD),
            await self._ratings(since, until),
            dict(whole.guards.most_common()),
        )

    async def _ratings(self, since: datetime, until: datetime) -> dict[str, int]:
        """Everyone's ratings given in [since, until), by rating (a person's latest click on an answer).

        The ratings given in the window, not those of the runs started in it: a range of the ratings'
        own index on any database, where joining every run of the window cost a 90-day overview tens
        of milliseconds on PostgreSQL and hundreds on SQLite at 100,000 runs (benchmarks/console.py).
        """
        stmt = (
            select(RunFeedback.rating, func.count())
            .where(RunFeedback.rating.in_((HELPFUL, NOT_HELPFUL)))
            .where(RunFeedback.rated_at >= since, RunFeedback.rated_at < until)
            .group_by(RunFeedback.rating)
        )
        async with self._engine.connect() as conn:
            return {rating: n for rating, n in await conn.execute(stmt)}

    async def _day_totals(self, first: date, last: date) -> dict[date, DayTotals]:
        """Each day's counts and histograms from first to last, in four GROUP BYs over the covering index."""
        window = and_(
            Run.started_at >= utc_midnight(first),
            Run.started_at < utc_midnight(last + timedelta(days=1)),
            Run.status == "finished",
        )
        day = self._day(Run.started_at)
        totals: dict[date, DayTotals] = {}

        def of(when: Any) -> DayTotals:
            return totals.setdefault(_as_date(when), DayTotals())

        keys = (day, Run.reason, Run.guards)
        micro_usd = cast(func.round(Run.cost_usd * MICRO_USD), BigInteger)
        async with self._engine.connect() as conn:
            for when, reason, fired, n in await conn.execute(select(*keys, func.count()).where(window).group_by(*keys)):
                of(when).count(reason, fired, n)
            for name, measure in (("steps", Run.steps), ("tokens", Run.input_tokens + Run.output_tokens),
                                  ("micro_usd", micro_usd)):  # fmt: skip
                rows = await conn.execute(select(day, measure, func.count()).where(window).group_by(day, measure))
                for when, value, n in rows:
                    getattr(of(when), name)[int(value or 0)] += n
        return totals

    async def runs(
        self, where: RunFilter, *, before: tuple[datetime, str] | None = None, limit: int = 50
    ) -> list[RunSummary]:
        """A page of runs, newest first; ``before`` is the last row of the previous page."""
        columns = (
            Run.id,
            Run.started_at,
            Run.platform,
            Run.place,
            Run.user_id,
            Run.question,
            Run.status,
            Run.reason,
            Run.steps,
            (Run.input_tokens + Run.output_tokens).label("tokens"),
            Run.cost_usd,
            Run.latency_ms,
            Run.feedback,  # the asker's own rating
            Run.audience,
        )
        stmt = select(*columns).where(*_run_conditions(where))
        if before is not None:
            at, run_id = before
            stmt = stmt.where(or_(Run.started_at < at, and_(Run.started_at == at, Run.id < run_id)))
        stmt = stmt.order_by(Run.started_at.desc(), Run.id.desc()).limit(limit)
        async with self._engine.connect() as conn:
            page = list(await conn.execute(stmt))
            rated = await _ratings_of(conn, [row.id for row in page])
        return [_summary(row, Ratings.of(rated.get(row.id, []), row.user_id)) for row in page]

    async def platforms(self) -> list[str]:
        """The platforms runs came from, for the filter's choices."""
        async with self._engine.connect() as conn:
            return sorted(p for p in (await conn.execute(select(Run.platform).distinct())).scalars())

    async def gap_marker(self, since: datetime) -> tuple[Any, ...]:
        """What changes whenever the gap runs since ``since`` do: how many ended for want of an answer and the
        newest of them, how many ratings say not helpful and the latest such click. Counts over two indexes,
        so a page can tell its grouped gaps are still current without reading them."""
        ended = select(func.count(), func.max(Run.started_at)).where(
            Run.started_at >= since, Run.reason.in_([r.value for r in GAP_REASONS])
        )
        unhelpful = select(func.count(), func.max(RunFeedback.rated_at)).where(
            RunFeedback.rating == NOT_HELPFUL, RunFeedback.rated_at >= since
        )
        async with self._engine.connect() as conn:
            return (*(await conn.execute(ended)).one(), *(await conn.execute(unhelpful)).one())

    async def gap_runs(self, since: datetime, limit: int = SCAN_LIMIT) -> list[GapRun]:
        """The newest runs since ``since`` that ended not covered or gave up, or that someone rated not helpful.

        Each half from its own index, merged here: the runs that ended for want of an answer (newest
        ``limit``), and the few rated not helpful, looked up by key. One query over the union of both
        made the database sort the id union and look each run up again (twice the time at 100,000 runs).
        """
        columns = (Run.id, Run.question, Run.user_id, Run.reason, Run.started_at)
        ended = (
            select(*columns)
            .where(Run.started_at >= since, Run.reason.in_([r.value for r in GAP_REASONS]))
            .order_by(Run.started_at.desc(), Run.id.desc())
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rated = set((await conn.execute(_not_helpful_since(since))).scalars())
            rows = {row.id: row for row in await conn.execute(ended)}
            missing = sorted(rated - rows.keys())
            for start in range(0, len(missing), ID_BATCH):
                batch = select(*columns).where(Run.id.in_(missing[start : start + ID_BATCH]), Run.started_at >= since)
                rows.update({row.id: row for row in await conn.execute(batch)})
        newest = sorted(rows.values(), key=lambda row: (row.started_at, row.id), reverse=True)[:limit]
        return [GapRun(r.id, r.question, r.user_id, r.reason, r.id in rated, r.started_at) for r in newest]

    async def not_helpful_sources(
        self, since: datetime, limit: int = 10, *, readable: Readable | None = None
    ) -> CitedSources:
        """The documents most cited by answers someone rated not helpful, most first, counted over the runs whose
        audience ``readable`` accepts (every run without it); the others are only counted, as ``withheld``.

        Citations carry no audience of their own: a run built for restricted groups may cite documents
        only they may read, so, as on a run's page, what such a run cited is the reader's to see only
        when they may read the run. Its citations are then left out of every document's count, not only
        of restricted documents' (a count that grew by a restricted run would say what that run cited),
        so the counts shown are honest for the runs they cover, and ``withheld`` says how many were not."""
        stmt = (
            select(Run.citations, Run.audience)
            .where(Run.started_at >= since, Run.id.in_(_not_helpful_since(since)), Run.citations.is_not(None))
            .order_by(Run.started_at.desc())
            .limit(SCAN_LIMIT)
        )
        counts = Counter[tuple[str, str]]()
        withheld = 0
        async with self._engine.connect() as conn:
            for row in await conn.execute(stmt):
                if not row.citations:
                    continue  # cited nothing: neither counted nor withheld
                if readable is not None and not readable(row.audience):
                    withheld += 1
                    continue
                counts.update({(c.get("title", ""), c.get("source", "")) for c in row.citations})
        return CitedSources([(title, source, n) for (title, source), n in counts.most_common(limit)], withheld)

    async def traces(self, run_ids: Sequence[str]) -> dict[str, tuple[list[dict[str, Any]], list[str] | None]]:
        """Some runs' traces with the audience each was built for (which decides who may read them)."""
        if not run_ids:
            return {}
        stmt = select(Run.id, Run.trace, Run.audience).where(Run.id.in_(list(run_ids)))
        async with self._engine.connect() as conn:
            return {row.id: (row.trace or [], row.audience) for row in await conn.execute(stmt)}

    async def cases(
        self, *, before: int | None = None, failed_only: bool = False, limit: int = 50
    ) -> list[CaseSummary]:
        """A page of helpdesk cases, newest first, each with its deliveries; ``before``: the last number shown."""
        cases = await self._cases.recent(limit, failed_only=failed_only, before=before)
        deliveries = await self._deliveries([c.number for c in cases])
        return [CaseSummary(c, deliveries.get(c.number, [])) for c in cases]

    async def case(self, number: int) -> CaseSummary | None:
        """One case with its deliveries."""
        case = await self._cases.get(number)
        return CaseSummary(case, (await self._deliveries([number])).get(number, [])) if case else None

    async def audiences(self, run_ids: Sequence[str]) -> dict[str, list[str] | None]:
        """The audience each run was built for (runs not found are absent)."""
        if not run_ids:
            return {}
        stmt = select(Run.id, Run.audience).where(Run.id.in_(list(run_ids)))
        async with self._engine.connect() as conn:
            return {row.id: row.audience for row in await conn.execute(stmt)}

    async def open_actions(self, limit: int = 200) -> list[PendingRecord]:
        """Pending actions still open, executing or unknown, oldest first: what waits on a person."""
        table = PendingActionRow
        stmt = select(table.__table__).where(table.state.in_(OPEN_ACTION_STATES)).order_by(table.created_at, table.id)
        async with self._engine.connect() as conn:
            return [to_pending_record(row) for row in await conn.execute(stmt.limit(limit))]

    async def actions_of_run(self, run_id: str) -> list[PendingRecord]:
        """The pending actions (cards) a run proposed, oldest first."""
        table = PendingActionRow
        stmt = select(table.__table__).where(table.run_id == run_id).order_by(table.created_at, table.id)
        async with self._engine.connect() as conn:
            return [to_pending_record(row) for row in await conn.execute(stmt)]

    async def _deliveries(self, numbers: list[int]) -> dict[int, list[DeliveryRecord]]:
        found: dict[int, list[DeliveryRecord]] = {}
        for row in await self._outbox.deliveries(numbers) if numbers else []:
            found.setdefault(row.case_number or 0, []).append(row)
        return found

    def _day(self, column: Any) -> Any:
        """The UTC calendar day of a timestamp column, in this database's SQL."""
        if self._engine.dialect.name == "sqlite":
            return func.date(column)
        return func.date(func.timezone("UTC", column))


@dataclass
class DayTotals:
    """One day's finished runs: counts by reason and guard, and histograms of each spread's measure."""

    reasons: Counter[str] = field(default_factory=Counter)
    guards: Counter[str] = field(default_factory=Counter)
    steps: Counter[int] = field(default_factory=Counter)
    tokens: Counter[int] = field(default_factory=Counter)
    micro_usd: Counter[int] = field(default_factory=Counter)  # cost in millionths of a dollar

    @property
    def runs(self) -> int:
        return sum(self.reasons.values())

    def count(self, reason: str | None, fired: str | None, n: int) -> None:
        self.reasons[reason or "unknown"] += n
        if fired:
            self.guards.update({name: n for name in fired.split(",")})

    def add(self, other: DayTotals) -> None:
        for name in ("reasons", "guards", "steps", "tokens", "micro_usd"):
            getattr(self, name).update(getattr(other, name))


def _spread_of(histogram: Counter[int], total: int, scale: float = 1.0) -> Spread:
    """The nearest-rank median and p95 of the values a histogram counts."""
    wanted, found, seen = [_rank(0.5, total), _rank(0.95, total)], list[float](), 0
    for value in sorted(histogram):
        seen += histogram[value]
        while wanted and wanted[0] < seen:
            found.append(value * scale)
            wanted.pop(0)
    return Spread(*found) if len(found) == 2 else Spread(0.0, 0.0)


def _rank(fraction: float, total: int) -> int:
    """The nearest-rank percentile's row: rank ceil(p * n) counted from 1, as an offset from 0."""
    return max(int(-(-fraction * total // 1)) - 1, 0)


def _not_helpful_since(since: datetime) -> Select[Any]:
    """The runs someone rated not helpful since ``since`` (a rating comes after its run started): the index only."""
    return select(RunFeedback.run_id).where(RunFeedback.rating == NOT_HELPFUL, RunFeedback.rated_at >= since)


async def _ratings_of(conn: AsyncConnection, run_ids: list[str]) -> dict[str, list[Rating]]:
    """Everyone's ratings of the runs of a page, by run: one read by key after the page (a count per row
    in the page's query made the database count for every row it sorted, not only the page's)."""
    rated: dict[str, list[Rating]] = {}
    if run_ids:
        for row in await conn.execute(select(RunFeedback.__table__).where(RunFeedback.run_id.in_(run_ids))):
            rated.setdefault(row.run_id, []).append(Rating(**row._mapping))
    return rated


def _summary(row: Any, rated: Ratings) -> RunSummary:
    """A runs-list line: the asker's rating as the run keeps it, and how many others rated it each way."""
    values = dict(row._mapping)
    ratings = Ratings(values.pop("feedback"), rated.others_helpful, rated.others_not_helpful)
    return RunSummary(**values, ratings=ratings)


def _run_conditions(where: RunFilter) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if where.platform:
        conditions.append(Run.platform == where.platform)
    if where.place:
        conditions.append(Run.place == where.place)
    if where.reason:
        conditions.append(Run.reason == where.reason if where.reason != "running" else Run.status != "finished")
    if where.user:
        conditions.append(Run.user_id == where.user)
    if where.since is not None:
        conditions.append(Run.started_at >= where.since)
    if where.until is not None:
        conditions.append(Run.started_at < where.until)
    return conditions


def _as_date(value: Any) -> date:
    """SQLite's date() is text, PostgreSQL's a date."""
    return value if isinstance(value, date) else date.fromisoformat(str(value))
