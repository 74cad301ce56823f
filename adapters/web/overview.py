"""The overview: how runs ended per day, answer and not-covered rates, spreads, feedback and guards."""

from __future__ import annotations

from aiohttp import web

from adapters.app_keys import SERVICE
from adapters.web import params
from adapters.web.chart import runs_per_day
from adapters.web.render import page
from bot.types import TerminationReason

# Every other ending gave the person the give-up message and a helpdesk case.
ENDED_WITHOUT_GIVING_UP = (
    TerminationReason.ANSWERED,
    TerminationReason.NOT_COVERED,
    TerminationReason.PENDING_CONFIRMATION,
)


async def show(request: web.Request) -> web.Response:
    since, until, first, last = params.window(request)
    report = await request.config_dict[SERVICE].store.reports.overview(since, until)
    return page(
        request,
        "overview.html",
        report=report,
        days=(last - first).days + 1,
        chart=runs_per_day(report.by_day, first, last),
        answer_rate=report.rate(TerminationReason.ANSWERED),
        not_covered_rate=report.rate(TerminationReason.NOT_COVERED),
        give_ups=report.runs - sum(report.by_reason.get(r, 0) for r in ENDED_WITHOUT_GIVING_UP),
    )
