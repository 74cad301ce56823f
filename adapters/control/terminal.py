"""`policypal search|ask|chat|decide` through the server: each service call the terminal makes, made here.

The CLI keeps the conversation (it prompts, formats and prints); the server answers with its own service,
index, database and model, so the run is the live bot's. Once the server is draining for shutdown, new
requests are refused with a sentence saying so.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import cast

from adapters.control import protocol as wire
from adapters.control.listener import Action, Refused
from adapters.control.protocol import Json, Malformed
from bot.index import OwnedIndex
from bot.service import Choice, PolicyPal
from retrieval import MAX_K, SearchFilter

log = logging.getLogger(__name__)

MAX_DELIVERY_WAIT_S = 60.0  # the terminal waits 10 s for a case's delivery; the rest stays queued


def terminal_actions(
    service: PolicyPal, searcher: OwnedIndex, draining: Callable[[], bool]
) -> dict[str, Action]:
    """The routes a terminal command uses, on this server's service and index."""

    def open_for(action: Action, what: str | None) -> Action:
        async def guarded(body: Json) -> Json:
            if draining():
                raise Refused(503, "the server is shutting down; run the command again once it has stopped")
            if what is not None:
                log.info("%s through the control socket", what)
            return await action(body)

        return guarded

    async def hello(_body: Json) -> Json:
        return {"pid": os.getpid()}

    async def search(body: Json) -> Json:
        section = wire.optional_text(body, "section")
        passages = await searcher.asearch(
            wire.text_field(body, "query"),
            wire.count_field(body, "k", most=MAX_K),
            SearchFilter(section=section) if section else None,  # no audience: as `policypal search` alone
        )
        return {"passages": [wire.passage_to_json(p) for p in passages]}

    async def message(body: Json) -> Json:
        reply = await service.handle_message(wire.inbound_from_json(body.get("inbound")))
        return {"reply": wire.reply_to_json(reply) if reply is not None else None}

    async def decide(body: Json) -> Json:
        decided = await service.decide(
            wire.text_field(body, "pending_id"),
            wire.user_from_json(body.get("user")),
            _choice(body),
            wire.text_field(body, "args_hash"),
        )
        return {"decided": wire.decided_to_json(decided)}

    async def pending(body: Json) -> Json:
        record = await service.pending.get(wire.text_field(body, "pending_id"))
        return {"pending": {"id": record.id, "args_hash": record.args_hash} if record is not None else None}

    async def deliver(body: Json) -> Json:
        number = wire.count_field(body, "case_number")
        waited = wire.seconds_field(body, "timeout_s", most=MAX_DELIVERY_WAIT_S)
        results = await service.outbox.run_once(number, timeout_s=waited)
        return {"results": [wire.delivery_to_json(result) for result in results]}

    routes: dict[str, tuple[Action, str | None]] = {
        wire.HELLO: (hello, None),
        wire.SEARCH: (search, "search"),
        wire.MESSAGE: (message, "a terminal message"),
        wire.DECIDE: (decide, "a terminal decision"),
        wire.PENDING: (pending, "a pending action's lookup"),
        wire.DELIVER: (deliver, "a case's delivery"),
    }
    return {route: open_for(action, what) for route, (action, what) in routes.items()}


def _choice(body: Json) -> Choice:
    decision = body.get("decision")
    if decision not in ("confirm", "cancel"):
        raise Malformed('`decision` must be "confirm" or "cancel"')
    return cast(Choice, decision)
