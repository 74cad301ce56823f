"""Pending actions waiting on a person: open cards, calls executing, and outcomes nobody knows (oldest first).

A card's arguments may quote what its run read, so they show only to operators who may read that run.
"""

from __future__ import annotations

from aiohttp import web

from adapters.app_keys import SERVICE
from adapters.web.keys import ACCESS
from adapters.web.render import operator_of, page
from bot.store import utcnow


async def listing(request: web.Request) -> web.Response:
    service = request.config_dict[SERVICE]
    actions = await service.store.reports.open_actions()
    audiences = await service.store.reports.audiences(sorted({action.run_id for action in actions}))
    access, operator = request.app[ACCESS], operator_of(request)
    shown = [
        (
            action,
            service.redactor.value(action.arguments)
            if access.may_read(operator, audiences.get(action.run_id))
            else None,
        )
        for action in actions
    ]
    return page(request, "actions.html", actions=shown, now=utcnow())
