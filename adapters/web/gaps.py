"""Knowledge gaps: what people asked that the policies did not answer, grouped by meaning, exportable as CSV.

A gap is a run that ended not covered, gave up for want of an answer, or was rated not helpful.
Questions are grouped by similar wording with the bundled embedding model (``bot.insights``), each
group with its counts, an example run's searches and what they found (when the operator may read
that run), and, beside them, the documents most cited by answers rated not helpful (of the runs the
operator may read: ``_cited``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web

from adapters.app_keys import SERVICE
from adapters.web import params
from adapters.web.keys import ACCESS
from adapters.web.render import operator_of, page
from bot.insights import Embed, EmbeddingCache, GapGroup, GapQuestion, gaps_csv, group_gaps, wording_key
from bot.redaction import bounded
from bot.service import PolicyPal
from bot.store import NOT_HELPFUL, CitedSources, GapRun

log = logging.getLogger(__name__)

GROUPS_SHOWN = 30
SEARCH_TOOL = "search_policies"
FOUND_CHARS = 600  # of each search result shown beside a group
EXAMPLE_RUNS = 5
REGROUP_S = 60.0  # a grouping is reused while its gap runs are unchanged, at most this long
RELOAD_S = 5  # while the model embeds new wordings, the page reloads itself this often
WARM_AFTER_S = 10.0  # after start, when the gaps are grouped ahead of a visit (once the server is ready)


@dataclass
class Grouper:
    """The console's question embeddings and its last grouping, kept between page loads: a reload embeds
    nothing new, and regroups only when the gap runs changed (``Reports.gap_marker``) or ``REGROUP_S`` passed."""

    cache: EmbeddingCache | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last: tuple[tuple[Any, ...], float, list[GapGroup]] | None = None  # (since and marker, when, groups)
    preparing: asyncio.Task[list[GapGroup]] | None = None  # grouping by meaning while a page shows exact wording

    def current(self, key: tuple[Any, ...]) -> list[GapGroup] | None:
        if self.last is not None and self.last[0] == key and time.monotonic() - self.last[1] < REGROUP_S:
            return self.last[2]
        return None

    def embed_for(self, service: PolicyPal) -> Embed | None:
        if service.embed is None:
            return None  # no embedding model in this process: the same wording only
        if self.cache is None:
            self.cache = EmbeddingCache(service.embed)
        return self.cache


GROUPER: web.AppKey[Grouper] = web.AppKey("console_gap_grouper", Grouper)


async def show(request: web.Request) -> web.Response:
    since, _, first, last = params.window(request)
    groups, preparing = await grouped_now(request.config_dict[SERVICE], request.app[GROUPER], since)
    shown = groups[:GROUPS_SHOWN]
    found = await _searches(request, [g.run_ids[0] for g in shown if g.run_ids])
    sources = await _cited(request, since)
    return page(
        request,
        "gaps.html",
        groups=shown,
        total_groups=len(groups),
        found=found,
        sources=sources.documents,
        withheld_sources=sources.withheld,
        days=(last - first).days + 1,
        preparing=preparing,
        reload_s=RELOAD_S,
    )


async def _cited(request: web.Request, since: datetime) -> CitedSources:
    """The documents cited by answers rated not helpful, over the runs this operator may read.

    A run built for restricted groups may cite documents only they may read (an HR-only plan), and its
    citations hold no audience of their own; so, as on the run's page, what it cited is shown only to the
    operators in ``POLICYPAL_CONSOLE_RESTRICTED_OPERATORS``. For the others such runs count towards no
    document, not even a public one (a count one higher than the public answers explain would say what a
    restricted run cited); the page says how many answers were left out, a total like the run counts every
    operator sees, without a title or file name."""
    access, operator = request.app[ACCESS], operator_of(request)
    return await request.config_dict[SERVICE].store.reports.not_helpful_sources(
        since, readable=lambda audience: access.may_read(operator, audience)
    )


async def export(request: web.Request) -> web.Response:
    since, _, first, last = params.window(request)
    body = "\ufeff" + gaps_csv(await _groups(request, since))  # the BOM: spreadsheets then read it as UTF-8
    name = f"policypal-gaps-{first.isoformat()}-to-{last.isoformat()}.csv"
    return web.Response(
        text=body,
        content_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"},
    )


async def _groups(request: web.Request, since: Any) -> list[GapGroup]:
    return await grouped_since(request.config_dict[SERVICE], request.app[GROUPER], since)


async def grouped_now(service: PolicyPal, grouper: Grouper, since: datetime) -> tuple[list[GapGroup], str]:
    """The gaps grouped without waiting for the model: by meaning when every wording is embedded already,
    else by exact wording while the model embeds the new ones in the background. The state: "" (by meaning),
    "preparing", or why the last grouping by meaning failed (the next load tries again)."""
    key = (since, *await service.store.reports.gap_marker(since))
    if (groups := grouper.current(key)) is not None:
        return groups, ""
    questions = questions_of(await service.store.reports.gap_runs(since))
    embed = grouper.embed_for(service)
    new = grouper.cache.missing(wording_key(q.text) for q in questions) if grouper.cache is not None else []
    if embed is None or (not new and not grouper.lock.locked()):
        return await grouped_since(service, grouper, since), ""
    state = "preparing"
    previous = grouper.preparing
    if previous is not None and previous.done() and not previous.cancelled() and previous.exception() is not None:
        state = f"{type(previous.exception()).__name__}: {previous.exception()}"
    if previous is None or previous.done():
        grouper.preparing = asyncio.create_task(grouped_since(service, grouper, since), name="console-gaps")
        grouper.preparing.add_done_callback(_log_failure)
    return group_gaps(questions, None), state


def _log_failure(task: asyncio.Task[list[GapGroup]]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("grouping the knowledge gaps by meaning failed", exc_info=task.exception())


async def grouped_since(service: PolicyPal, grouper: Grouper, since: datetime) -> list[GapGroup]:
    """The gap runs since ``since`` grouped, or the last grouping while they have not changed."""
    async with grouper.lock:  # one page groups at a time; the next finds the caches warm
        key = (since, *await service.store.reports.gap_marker(since))
        if (current := grouper.current(key)) is not None:
            return current
        questions = questions_of(await service.store.reports.gap_runs(since))
        groups = await asyncio.to_thread(group_gaps, questions, grouper.embed_for(service))
        grouper.last = (key, time.monotonic(), groups)
        return groups


async def warm_up(service: PolicyPal, grouper: Grouper, *, after_s: float = WARM_AFTER_S) -> None:
    """Some seconds after start, group the default window's gaps once, off the event loop: the first
    operator to open the page then finds the wordings embedded (1,200 new ones take seconds)."""
    await asyncio.sleep(after_s)
    if service.embed is None:
        return
    try:
        await grouped_since(service, grouper, params.window_of(params.DEFAULT_DAYS)[0])
    except Exception:  # the page will say what is wrong when someone opens it
        log.warning("grouping the knowledge gaps ahead of the first visit failed", exc_info=True)


def questions_of(runs: Sequence[GapRun]) -> list[GapQuestion]:
    """One ``GapQuestion`` per distinct question text, from gap runs newest first."""
    by_text: dict[str, list[GapRun]] = {}
    for run in runs:
        by_text.setdefault(run.question, []).append(run)
    return [
        GapQuestion(
            text=text,
            count=len(asked),
            askers=len({r.user_id for r in asked}),
            last_asked=asked[0].started_at,
            reasons=tuple(_why(r) for r in asked),  # one per run, so a group counts runs per reason
            run_ids=tuple(r.id for r in asked[:EXAMPLE_RUNS]),
        )
        for text, asked in by_text.items()
    ]


def _why(run: GapRun) -> str:
    return NOT_HELPFUL if run.rated_not_helpful else run.reason or "unknown"


async def _searches(request: web.Request, run_ids: list[str]) -> dict[str, list[dict[str, Any]] | None]:
    """Per example run, its searches (query and what came back); None where the operator may not read it."""
    service = request.config_dict[SERVICE]
    traces = await service.store.reports.traces(run_ids)
    access, operator = request.app[ACCESS], operator_of(request)
    found: dict[str, list[dict[str, Any]] | None] = {}
    for run_id, (steps, audience) in traces.items():
        if not access.may_read(operator, audience):
            found[run_id] = None
            continue
        found[run_id] = [
            {
                "arguments": bounded(service.redactor.text(str(step.get("arguments") or "")), FOUND_CHARS),
                "text": bounded(service.redactor.text(step.get("text") or ""), FOUND_CHARS),
            }
            for step in steps
            if step.get("kind") == "tool" and step.get("name") == SEARCH_TOOL
        ]
    return found
