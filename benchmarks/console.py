"""The operators' console with 100,000 runs stored: each page's latency over real HTTP, on SQLite or PostgreSQL.

The store is filled in bulk INSERTs with generated rows (``benchmarks/console_rows.py``: runs over 90
days with realistic traces, a helpdesk case per give-up with its deliveries, an outbox row per reply, a
pending action per proposed ticket). Then the real server app (``build_app``) runs in this process with
the console on, its service opened as production opens it (an embedded index of the sample policies,
whose model groups the gaps page's questions by meaning), on loopback. Each page is fetched
``--repeat`` times after two warm-ups, one request at a time on a kept-alive connection, with the
console secret as a bearer token; the gaps page's first load after start is timed once before any other
(it answers grouped by exact wording and starts the model embedding every wording in the background,
so the pages timed next share the machine with that embedding). Per page: p50/p95/max of the whole
request as the client saw it, the server's share, and the SQL it sent (timed at the driver). A page
whose p95 is over 200 ms (the console's target) gets its slowest statements and their plans
(EXPLAIN QUERY PLAN on SQLite, EXPLAIN ANALYZE on PostgreSQL). No figure is asserted: the machine may be shared.

    python benchmarks/console.py [--runs 100000] [--repeat 20] [--database-url postgresql+asyncpg://...]
                                 [--sqlite-analyze] [--no-gc-freeze] [--seed N]

The server's start-up objects are frozen out of the garbage collector's way (``gc.freeze()``) as
``policypal serve`` does; ``--no-gc-freeze`` skips that.

``--database-url``: a scratch PostgreSQL database is created beside the one named, filled, and dropped
at the end (the named one is untouched); PostgreSQL gets ``VACUUM ANALYZE`` after the fill, as its
autovacuum would do within a minute. SQLite gets no ANALYZE unless ``--sqlite-analyze``: nothing in
PolicyPal runs one, so a production file has no statistics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import functools
import gc
import html
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from aiohttp import web
from sqlalchemy import event, insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.server import build_app
from adapters.web import gaps
from adapters.web.gaps import questions_of
from benchmarks.console_rows import SAMPLE_POLICIES, Picks, Rows
from benchmarks.scratch import scratch_database
from bot.config import Settings
from bot.insights import gaps_csv, group_gaps, wording_key
from bot.service import PolicyPal
from bot.store import RunFilter, Store
from bot.store.tables import Handoff, OutboxRow, PendingActionRow, Run, RunFeedback
from bot.wiring import open_service
from retrieval import PolicyIndex

TARGET_MS = 200.0
SECRET = "x" * 24
WARMUPS = 2
BATCH = 2_000
EXPLAIN_AT_MS = 10.0  # statements at least this slow on a slow page get their plan printed
OLDER_RUNS = re.compile(r'<tr id="more"><td colspan="\d+"><a href="([^"]+)"')
ENVIRONMENT_PREFIXES = ("POLICYPAL_", "OPENAI_", "SLACK_", "MICROSOFTAPP")


# --- filling the store ------------------------------------------------------------------------------


@dataclass
class Filled:
    seconds: float = 0.0
    inserting_s: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)


async def fill(url: str, rows: Rows, *, sqlite_analyze: bool) -> Filled:
    """Every generated row, in executemany INSERTs of ``BATCH`` runs and what they left behind, one transaction each."""
    filled, started = Filled(), time.perf_counter()
    store = await Store.open(url, schema="upgrade")
    engine = store._engine  # a benchmark may: the repositories insert one row at a time
    try:
        for batch in rows.batches(BATCH):
            began = time.perf_counter()
            async with engine.begin() as conn:
                for table, values in (
                    (Run, batch.runs),
                    (Handoff, batch.cases),
                    (OutboxRow, batch.deliveries),
                    (PendingActionRow, batch.actions),
                    (RunFeedback, batch.ratings),
                ):
                    if values:
                        await conn.execute(insert(table), values)
                        filled.counts[table.__tablename__] = filled.counts.get(table.__tablename__, 0) + len(values)
            filled.inserting_s += time.perf_counter() - began
        await _after_fill(engine, sqlite_analyze)
    finally:
        await store.close()
    filled.seconds = time.perf_counter() - started
    return filled


async def _after_fill(engine: AsyncEngine, sqlite_analyze: bool) -> None:
    if engine.dialect.name == "sqlite":
        if sqlite_analyze:
            async with engine.begin() as conn:
                await conn.execute(text("ANALYZE"))
        return
    async with engine.begin() as conn:  # the case numbers were given: the sequence must follow them
        await conn.execute(
            text("SELECT setval(pg_get_serial_sequence('handoffs', 'number'), max(number)) FROM handoffs")
        )
    async with engine.connect() as conn:
        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await autocommit.execute(text("VACUUM ANALYZE"))


async def database_facts(url: str, data_dir: Path) -> str:
    """The engine's version and the database's size on disk."""
    store = await Store.open(url)
    try:
        async with store._engine.connect() as conn:
            if store._engine.dialect.name == "sqlite":
                version = (await conn.execute(text("select sqlite_version()"))).scalar_one()
                size = _file_sizes(data_dir, "policypal.db*")
                return f"SQLite {version}, {size / 2**20:.0f} MB on disk (with the WAL)"
            version = (await conn.execute(text("show server_version"))).scalar_one()
            size = (await conn.execute(text("select pg_database_size(current_database())"))).scalar_one()
            runs = (await conn.execute(text("select pg_total_relation_size('runs')"))).scalar_one()
            return f"PostgreSQL {version}, {size / 2**20:.0f} MB (runs and its indexes {runs / 2**20:.0f} MB)"
    finally:
        await store.close()


def _file_sizes(folder: Path, pattern: str) -> int:
    return sum(path.stat().st_size for path in folder.glob(pattern))


# --- the SQL each request sends -----------------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    sql: str
    parameters: Any
    ms: float


@dataclass
class Served:
    """One request as the server handled it."""

    ms: float = 0.0
    statements: list[Statement] = field(default_factory=list)


_REQUEST: contextvars.ContextVar[Served | None] = contextvars.ContextVar("console_request", default=None)


class SqlMeter:
    """Times each console request in the server and every statement it sends, at the driver.

    Statements are counted by the request they belong to (a context variable set by the middleware), so
    the outbox worker's polls on the same engine never count. The driver's time includes the fetch
    (aiosqlite and asyncpg read every row before ``execute`` returns).
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.last = Served()
        event.listen(engine.sync_engine, "before_cursor_execute", self._before)
        event.listen(engine.sync_engine, "after_cursor_execute", self._after)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Callable[..., Awaitable[Any]]) -> Any:
        served = Served()
        token = _REQUEST.set(served)
        began = time.perf_counter()
        try:
            return await handler(request)
        finally:
            served.ms = (time.perf_counter() - began) * 1000
            _REQUEST.reset(token)
            self.last = served

    def _before(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if _REQUEST.get() is not None:
            conn.info.setdefault("console_bench_started", []).append(time.perf_counter())

    def _after(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        served = _REQUEST.get()
        if served is not None and conn.info.get("console_bench_started"):
            began = conn.info["console_bench_started"].pop()
            served.statements.append(Statement(statement, parameters, (time.perf_counter() - began) * 1000))


# --- the server -----------------------------------------------------------------------------------------


def index_sample_policies(settings: Settings) -> None:
    """The embedded index the service opens, as `policypal index bot/sample_policies` leaves it."""
    with PolicyIndex.open(settings.retrieval(), create=True) as index:
        report = index.index_paths([SAMPLE_POLICIES])
    if not report.ok:
        raise SystemExit(f"indexing the sample policies failed: {report}")


@contextlib.asynccontextmanager
async def serving(
    settings: Settings, *, freeze_gc: bool = True
) -> AsyncIterator[tuple[str, web.Application, PolicyPal, SqlMeter]]:
    """The server app on a loopback port with the service production would open: its URL, app, service and meter."""
    service = await open_service(settings)
    if service.searcher is not None:  # what start-up's warm-up does: the model's session is built before ready
        await service.searcher.asearch("warm-up", 1)
    if freeze_gc:  # as `policypal serve` does after start-up (adapters/server/app.py), which a given service skips
        gc.collect()
        gc.freeze()
    app = build_app(settings, service)
    meter = SqlMeter(service.store._engine)
    app.middlewares.append(meter.middleware)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        yield f"http://127.0.0.1:{port}", app, service, meter
    finally:
        await runner.cleanup()
        await service.close()


# --- timing pages ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    label: str
    path: str
    once: bool = False  # timed on its first load only (no warm-up)


@dataclass
class Timing:
    page: Page
    ms: list[float] = field(default_factory=list)
    served: list[Served] = field(default_factory=list)
    size: int = 0
    load: float = 0.0  # the machine's 1-minute load average when the page's requests began

    @property
    def p95(self) -> float:
        return percentile(self.ms, 0.95)

    def typical(self) -> Served:
        """The request whose latency is the median's."""
        order = sorted(range(len(self.ms)), key=lambda i: self.ms[i])
        return self.served[order[len(order) // 2]]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def fetch(http: aiohttp.ClientSession, url: str) -> tuple[float, bytes]:
    began = time.perf_counter()
    async with http.get(url) as response:
        body = await response.read()
        if response.status != 200:
            raise SystemExit(f"GET {url}: {response.status}\n{body[:2000]!r}")
    return (time.perf_counter() - began) * 1000, body


async def measure(http: aiohttp.ClientSession, base: str, page: Page, repeat: int, meter: SqlMeter) -> Timing:
    timing = Timing(page, load=os.getloadavg()[0])
    for _ in range(0 if page.once else WARMUPS):
        await fetch(http, base + page.path)
    for _ in range(1 if page.once else repeat):
        ms, body = await fetch(http, base + page.path)
        timing.ms.append(ms)
        timing.served.append(meter.last)
        timing.size = len(body)
    return timing


def pages(picks: Picks, older_runs: str, days_ago_60: str, days_ago_53: str) -> list[Page]:
    """Every page of the console, with the filters an operator uses (the rarest user's filter scans the most)."""
    return [
        Page("overview, 30 days", "/console/"),
        Page("overview, 90 days", "/console/?days=90"),
        Page("runs, first page", "/console/runs"),
        Page("runs, reason=not_covered", "/console/runs?reason=not_covered"),
        Page("runs, reason=model_error", "/console/runs?reason=model_error"),
        Page("runs, busiest user", f"/console/runs?user={picks.busiest_user()}"),
        Page("runs, rarest user", f"/console/runs?user={picks.rarest_user()}"),
        Page("runs, place=shared", "/console/runs?place=shared"),
        Page("runs, teams + shared", "/console/runs?platform=teams&place=shared"),
        Page("runs, one week 60 days ago", f"/console/runs?since={days_ago_60}&until={days_ago_53}"),
        Page("runs, second page (?before=)", older_runs),
        Page("one run's trace", f"/console/runs/{picks.trace_run}"),
        Page("gaps (warm)", "/console/gaps"),
        Page("gaps.csv", "/console/gaps.csv"),
        Page("cases", "/console/cases"),
        Page("cases?failed=1", "/console/cases?failed=1"),
        Page("one case", f"/console/cases/{picks.case_number}"),
        Page("actions", "/console/actions"),
    ]


async def time_pages(base: str, picks: Picks, repeat: int, meter: SqlMeter) -> list[Timing]:
    headers = {"Authorization": f"Bearer {SECRET}"}
    connector = aiohttp.TCPConnector(limit=1)  # one kept-alive connection: requests one at a time
    async with aiohttp.ClientSession(headers=headers, connector=connector) as http:
        cold = await measure(http, base, Page("gaps (first, cold)", "/console/gaps", once=True), repeat, meter)
        _, first = await fetch(http, base + "/console/runs")
        older = OLDER_RUNS.search(first.decode())
        if older is None:
            raise SystemExit("the first runs page has no 'Older runs' link")
        today = datetime.now(UTC).date()
        week = (today - timedelta(days=60)).isoformat(), (today - timedelta(days=53)).isoformat()
        timings = [cold]
        for page in pages(picks, html.unescape(older.group(1)), *week):
            timings.append(await measure(http, base, page, repeat, meter))
    return timings


# --- the Reports methods, called directly ------------------------------------------------------------------


async def time_reports(service: PolicyPal, picks: Picks) -> list[tuple[str, float, int]]:
    """Each console read on the store itself, no HTTP or template: (call, median ms of 5, rows)."""
    reports, now = service.store.reports, datetime.now(UTC)
    until = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
    month, quarter = until - timedelta(days=30), until - timedelta(days=90)
    calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("overview(30 days)", lambda: reports.overview(month, until)),
        ("overview(90 days)", lambda: reports.overview(quarter, until)),
        ("runs(first page)", lambda: reports.runs(RunFilter(), limit=51)),
        ("runs(reason=not_covered)", lambda: reports.runs(RunFilter(reason="not_covered"), limit=51)),
        ("runs(user=busiest)", lambda: reports.runs(RunFilter(user=picks.busiest_user()), limit=51)),
        ("runs(user=rarest)", lambda: reports.runs(RunFilter(user=picks.rarest_user()), limit=51)),
        ("runs(place=shared)", lambda: reports.runs(RunFilter(place="shared"), limit=51)),
        ("platforms()", reports.platforms),
        ("runs.get(trace run)", lambda: service.store.runs.get(picks.trace_run)),
        ("gap_runs(30 days)", lambda: reports.gap_runs(month)),
        ("not_helpful_sources(30 days)", lambda: reports.not_helpful_sources(month)),
        ("cases()", lambda: reports.cases(limit=51)),
        ("cases(failed_only)", lambda: reports.cases(failed_only=True, limit=51)),
        ("case(n)", lambda: reports.case(picks.case_number)),
        ("open_actions()", reports.open_actions),
    ]
    timed = []
    for label, call in calls:
        await call()
        samples, result = [], None
        for _ in range(5):
            began = time.perf_counter()
            result = await call()
            samples.append((time.perf_counter() - began) * 1000)
        rows = len(result) if isinstance(result, list | dict) else getattr(result, "runs", 1 if result else 0)
        timed.append((label, statistics.median(samples), rows))
    return timed


async def gap_facts(service: PolicyPal) -> str:
    since = datetime.combine(datetime.now(UTC).date() - timedelta(days=29), datetime.min.time(), UTC)
    questions = questions_of(await service.store.reports.gap_runs(since))
    keys = {wording_key(q.text) for q in questions}
    runs = sum(q.count for q in questions)
    return f"{runs} gap runs read, {len(questions)} distinct questions, {len(keys)} wordings to embed"


# --- profiling a slow page -------------------------------------------------------------------------------------


async def explain(engine: AsyncEngine, statement: Statement) -> list[str]:
    """The plan of one statement as it was sent, with its parameters."""
    sqlite = engine.dialect.name == "sqlite"
    prefix = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN (ANALYZE, BUFFERS) "
    async with engine.connect() as conn:
        rows = [tuple(row) for row in await conn.exec_driver_sql(prefix + statement.sql, statement.parameters)]
    if sqlite:
        depth: dict[int, int] = {0: 0}
        lines = []
        for node, parent, _, detail in rows:
            depth[node] = depth.get(parent, 0) + 1
            lines.append("  " * depth[node] + str(detail))
        return lines
    return [str(row[0]) for row in rows]


async def profile(engine: AsyncEngine, timing: Timing) -> None:
    served = timing.typical()
    sql_ms = sum(s.ms for s in served.statements)
    print(f"\n{timing.page.label}: {timing.page.path}")
    print(f"  median request: server {served.ms:.1f} ms, of which SQL {sql_ms:.1f} ms in {len(served.statements)} "
          f"statements; the rest is Python in the handler")  # fmt: skip
    for statement in sorted(served.statements, key=lambda s: -s.ms)[:4]:
        print(f"  {statement.ms:8.1f} ms  {' '.join(statement.sql.split())[:300]}")
        print(f"              parameters {str(statement.parameters)[:200]}")
        if statement.ms >= EXPLAIN_AT_MS:
            for line in await explain(engine, statement):
                print(f"              | {line}")


async def profile_gaps(app: web.Application, service: PolicyPal) -> None:
    """The gaps page's work step by step, with the console's own (warm) embedding cache."""
    console = next(r.get_info()["app"] for r in app.router.resources() if isinstance(r, web.PrefixedSubAppResource))
    embed = console[gaps.GROUPER].embed_for(service)
    since = datetime.combine(datetime.now(UTC).date() - timedelta(days=29), datetime.min.time(), UTC)
    reports = service.store.reports
    runs = await reports.gap_runs(since)
    questions = questions_of(runs)
    groups = group_gaps(questions, embed)
    keys = list(dict.fromkeys(wording_key(q.text) for q in questions))
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("questions_of(5000 gap runs)", lambda: questions_of(runs)),
        ("group_gaps(warm cache)", lambda: group_gaps(questions, embed)),
        ("  of which the cache's vectors", lambda: embed(keys) if embed else None),
        ("gaps_csv(every group)", lambda: gaps_csv(groups)),
    ]
    print(f"\ngaps page step by step ({len(questions)} questions, {len(groups)} groups; median of 5, ms):")
    print(f"  {'gap_runs(30 days)':32} {await _median_ms(lambda: reports.gap_runs(since)):8.1f}")
    for label, work in steps:
        print(f"  {label:32} {await _median_ms(functools.partial(asyncio.to_thread, work)):8.1f}")


async def _median_ms(call: Callable[[], Awaitable[Any]], times: int = 5) -> float:
    samples = []
    for _ in range(times):
        began = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


# --- the report ----------------------------------------------------------------------------------------------


def print_pages(timings: list[Timing]) -> None:
    header = f"{'page':32} {'n':>3} {'p50':>8} {'p95':>8} {'max':>8}  {'server':>8} {'SQL':>8} {'stmts':>5} {'KB':>5}"
    print(f"\n{header} {'load':>5}")
    for timing in timings:
        served = timing.typical()
        sql_ms = sum(s.ms for s in served.statements)
        flag = f"  << p95 over {TARGET_MS:.0f} ms" if timing.p95 > TARGET_MS else ""
        print(
            f"{timing.page.label:32} {len(timing.ms):>3} {percentile(timing.ms, 0.5):>8.1f} {timing.p95:>8.1f} "
            f"{max(timing.ms):>8.1f}  {served.ms:>8.1f} {sql_ms:>8.1f} {len(served.statements):>5} "
            f"{timing.size / 1024:>5.0f} {timing.load:>5.2f}{flag}"
        )
    print("(ms; server, SQL and stmts: the request with the median latency, SQL timed at the driver; load: the")
    print(" 1-minute load average as the page began, on a machine others share)")


async def bench(args: argparse.Namespace, url: str, data_dir: Path) -> None:
    rows = Rows(args.runs, datetime.now(UTC), seed=args.seed)
    filled = await fill(url, rows, sqlite_analyze=args.sqlite_analyze)
    counts = ", ".join(f"{n:,} {table}" for table, n in filled.counts.items())
    print(f"filled:      {counts}")
    print(f"fill time:   {filled.seconds:.1f} s ({filled.inserting_s:.1f} s in INSERTs, "
          f"{args.runs / filled.inserting_s:,.0f} runs/s; the rest generating rows)")  # fmt: skip
    print(f"database:    {await database_facts(url, data_dir)}")
    settings = Settings(_env_file=None, data_dir=data_dir, database_url=url, console_secret=SECRET)  # type: ignore[call-arg,arg-type]
    began = time.perf_counter()
    await asyncio.to_thread(index_sample_policies, settings)
    print(f"index:       sample policies embedded in {time.perf_counter() - began:.1f} s")
    async with serving(settings, freeze_gc=args.gc_freeze) as (base, app, service, meter):
        print(f"gaps:        {await gap_facts(service)}")
        timings = await time_pages(base, rows.picks, args.repeat, meter)
        print_pages(timings)
        print(f"{os.cpu_count()} cores; load average after the pages {os.getloadavg()[0]:.2f}")
        print("\nReports methods called directly (median of 5 after one warm-up, no HTTP or template):")
        for label, ms, n in await time_reports(service, rows.picks):
            print(f"  {label:30} {ms:8.1f} ms  {n:>6} rows")
        slow = [t for t in timings if t.p95 > TARGET_MS]
        if slow:
            print(f"\nPages over {TARGET_MS:.0f} ms at p95: their median request's slowest statements")
        for timing in slow:
            await profile(service.store._engine, timing)
        if any(t.page.path.startswith("/console/gaps") for t in slow):
            await profile_gaps(app, service)


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        if args.database_url is None:
            await bench(args, f"sqlite+aiosqlite:///{data_dir / 'policypal.db'}", data_dir)
            return
        async with scratch_database(args.database_url) as url:
            await bench(args, url, data_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20, help="requests per page after two warm-ups")
    parser.add_argument("--database-url", metavar="URL", default=None,
                        help="PostgreSQL: a scratch database is made beside URL's, filled, and dropped")  # fmt: skip
    parser.add_argument("--sqlite-analyze", action="store_true", help="run ANALYZE on SQLite after the fill")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false",
                        help="skip the gc.freeze() that `policypal serve` does after start-up")  # fmt: skip
    args = parser.parse_args()
    for name in list(os.environ):  # this shell's settings must not change the figures
        if name.upper().startswith(ENVIRONMENT_PREFIXES):
            del os.environ[name]
    os.environ["HF_HUB_OFFLINE"] = "1"
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
