"""Runs: a filterable, paged list (htmx swaps the rows; plain links work without scripts) and one run's trace."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from adapters.app_keys import SERVICE
from adapters.web import params
from adapters.web.keys import ACCESS
from adapters.web.render import operator_of, page
from bot.redaction import bounded_value
from bot.store import Ratings, RunFilter, RunSummary, utc_midnight
from bot.types import TerminationReason

PAGE = 50
SHOWN_CHARS = 2_000  # of any one trace value: the stored trace is bounded already, a page more so
REASONS = frozenset({*(r.value for r in TerminationReason), "running"})
PLACES = frozenset({"private", "shared"})
FILTERS = ("platform", "place", "reason", "user", "since", "until")


async def listing(request: web.Request) -> web.Response:
    reports = request.config_dict[SERVICE].store.reports
    where = _filter(request)
    rows = await reports.runs(where, before=_cursor(request), limit=PAGE + 1)
    more, rows = len(rows) > PAGE, rows[:PAGE]
    kept = {name: request.query[name] for name in FILTERS if request.query.get(name)}
    next_page = _next_page(kept, rows[-1]) if more else None
    template = "runs_rows.html" if request.headers.get("HX-Request") and request.query.get("before") else "runs.html"
    return page(
        request,
        template,
        rows=rows,
        next_page=next_page,
        kept=kept,
        reasons=sorted(REASONS),
        places=sorted(PLACES),
        platforms=await reports.platforms(),
    )


async def show(request: web.Request) -> web.Response:
    service = request.config_dict[SERVICE]
    run = await service.store.runs.get(request.match_info["run_id"])
    if run is None:
        raise web.HTTPNotFound(text=f"No run {request.match_info['run_id']}.")
    readable = request.app[ACCESS].may_read(operator_of(request), run.audience)
    steps = [_shown(service.redactor.value(step)) for step in run.trace] if readable else []
    cards = await service.store.reports.actions_of_run(run.id) if readable else []
    # Frozen arguments are stored as the tool will run them, unredacted: redact them as they are shown.
    actions = [
        replace(a, arguments=service.redactor.value(a.arguments), result=service.redactor.value(a.result))
        for a in cards
    ]
    ratings = Ratings.of(await service.store.runs.ratings(run.id), run.user_id)
    return page(request, "run.html", run=run, ratings=ratings, readable=readable, steps=steps, actions=actions)


def _shown(step: dict[str, Any]) -> dict[str, Any]:
    shown: dict[str, Any] = bounded_value(step, SHOWN_CHARS)
    return shown


def _filter(request: web.Request) -> RunFilter:
    since, until = params.day(request, "since"), params.day(request, "until")
    return RunFilter(
        platform=params.text(request, "platform", 32),
        place=params.choice(request, "place", PLACES),
        reason=params.choice(request, "reason", REASONS),
        user=params.text(request, "user"),
        since=utc_midnight(since) if since else None,
        until=utc_midnight(until + timedelta(days=1)) if until else None,  # the until day included
    )


def _cursor(request: web.Request) -> tuple[datetime, str] | None:
    raw = request.query.get("before", "").strip()
    if not raw:
        return None
    at, _, run_id = raw.partition("|")
    try:
        when: datetime | None = datetime.fromisoformat(at)
        when = when.astimezone(UTC) if when and when.tzinfo else None
    except (ValueError, OverflowError):
        when = None
    if when is None or not run_id:  # our links always carry an offset and an id
        raise web.HTTPBadRequest(text="before must be a cursor from a runs page's next link")
    return when, run_id


def _next_page(kept: dict[str, str], last: RunSummary) -> str:
    return "?" + urlencode({**kept, "before": f"{last.started_at.isoformat()}|{last.id}"})
