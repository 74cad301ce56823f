"""Helpdesk cases: reason, deliveries (sent, retrying, failed) and the transcript; retry what failed."""

from __future__ import annotations

from aiohttp import web

from adapters.app_keys import SERVICE
from adapters.web import params
from adapters.web.keys import ACCESS
from adapters.web.render import operator_of, page
from bot.helpdesk import HandoffCase, case_markdown
from bot.store import HandoffRecord

PAGE = 50


async def listing(request: web.Request) -> web.Response:
    failed_only = request.query.get("failed") == "1"
    raw = request.query.get("before", "").strip()
    before = params.number(raw, "before") if raw else None
    reports = request.config_dict[SERVICE].store.reports
    cases = await reports.cases(before=before, failed_only=failed_only, limit=PAGE + 1)
    more, cases = len(cases) > PAGE, cases[:PAGE]
    return page(
        request, "cases.html", cases=cases, failed_only=failed_only, next_before=cases[-1].case.number if more else None
    )


async def show(request: web.Request) -> web.Response:
    service = request.config_dict[SERVICE]
    number = _number(request)
    summary = await service.store.reports.case(number) if number is not None else None
    if summary is None:
        raise web.HTTPNotFound(text=f"No case {request.match_info['number']}.")
    readable = await _readable(request, summary.case)
    text = case_markdown(HandoffCase.from_record(summary.case)) if readable else ""
    return page(
        request,
        "case.html",
        summary=summary,
        readable=readable,
        transcript=service.redactor.text(text),
        retried=request.query.get("retried"),
    )


def _number(request: web.Request) -> int | None:
    """The path's case number; None (no such case) past what the database can hold."""
    number = int(request.match_info["number"])
    return number if number <= params.MAX_NUMBER else None


async def _readable(request: web.Request, case: HandoffRecord) -> bool:
    """A transcript holds every run of its conversation: readable only if each of them is (and one exists)."""
    run_ids = [str(run.get("run_id")) for run in case.transcript.get("runs") or []]
    if case.run_id and case.run_id not in run_ids:
        run_ids.append(case.run_id)
    audiences = await request.config_dict[SERVICE].store.reports.audiences(run_ids)
    access, operator = request.app[ACCESS], operator_of(request)
    return all(access.may_read(operator, audiences.get(run_id)) for run_id in run_ids)


async def retry(request: web.Request) -> web.Response:
    """Put this case's failed deliveries back in the outbox; the server's outbox worker sends them."""
    number = _number(request)
    service = request.config_dict[SERVICE]
    if number is None or await service.store.cases.get(number) is None:
        raise web.HTTPNotFound(text=f"No case {number}.")
    reset = await service.outbox.retry_failed(number)
    location = request.app.router["case"].url_for(number=str(number)).with_query(retried=str(reset))
    return web.Response(status=303, headers={"Location": str(location)})
