"""Pending actions waiting on a person: open cards, calls executing, and outcomes nobody knows (oldest first)."""

from __future__ import annotations

from aiohttp import web

from adapters.app_keys import SERVICE
from adapters.web.render import page
from bot.store import utcnow


async def listing(request: web.Request) -> web.Response:
    service = request.config_dict[SERVICE]
    actions = await service.store.reports.open_actions()
    shown = [(action, service.redactor.value(action.arguments)) for action in actions]
    return page(request, "actions.html", actions=shown, now=utcnow())
