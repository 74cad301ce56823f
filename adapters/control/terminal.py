"""`policypal search|ask|chat|decide` through the server: each service call the terminal makes, made here.

The CLI keeps the conversation (it prompts, formats and prints); the server answers with its own service,
index, database and model, so the run is the live bot's. Once the server is draining for shutdown, new
requests are refused with a sentence saying so.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from adapters.control import protocol as wire
from adapters.control.listener import Action, Refused
from adapters.control.protocol import Json
from bot.index import OwnedIndex
from bot.service import PolicyPal
from retrieval import SearchFilter

log = logging.getLogger(__name__)

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
        asked = wire.read(wire.SearchRequest, body)
        filter = SearchFilter(section=asked.section) if asked.section else None  # no audience: as `search` alone
        passages = await searcher.asearch(asked.query, asked.k, filter)
        return {"passages": [wire.passage_to_json(p) for p in passages]}

    async def message(body: Json) -> Json:
        reply = await service.handle_message(wire.read(wire.MessageRequest, body).inbound.inbound())
        return {"reply": wire.reply_to_json(reply) if reply is not None else None}

    async def decide(body: Json) -> Json:
        asked = wire.read(wire.DecideRequest, body)
        decided = await service.decide(asked.pending_id, asked.user.user(), asked.decision, asked.args_hash)
        return {"decided": wire.decided_to_json(decided)}

    async def pending(body: Json) -> Json:
        record = await service.pending.get(wire.read(wire.PendingRequest, body).pending_id)
        return {"pending": {"id": record.id, "args_hash": record.args_hash} if record is not None else None}

    async def deliver(body: Json) -> Json:
        asked = wire.read(wire.DeliverRequest, body)
        results = await service.outbox.run_once(asked.case_number, timeout_s=asked.timeout_s)
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

