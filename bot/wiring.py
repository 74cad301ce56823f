"""Build the service from settings: the one place that chooses model, index, store and tickets."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.agent import AgentDeps, LoopSettings
from bot.budget import Budgets
from bot.config import ConfigError, Settings
from bot.llm import build_model
from bot.pending import PendingActions
from bot.policy_tools import Searcher, policy_tools
from bot.pricing import PriceTable, UnknownPrice
from bot.service import PolicyPal
from bot.store import Store
from bot.tickets import LocalTickets
from bot.turn import TurnLimits
from bot.types import ChatModel

log = logging.getLogger(__name__)

SAMPLE_POLICIES = Path(__file__).resolve().parent.parent / "examples" / "policies"


def budgets(settings: Settings) -> Budgets:
    return Budgets(
        max_steps=settings.max_steps,
        max_tokens=settings.max_tokens,
        deadline_s=settings.deadline_s,
        max_cost_usd=settings.max_cost_usd,
    )


def agent_deps(settings: Settings, model: ChatModel, searcher: Searcher, tickets: LocalTickets) -> AgentDeps:
    """Fixed run configuration; refuses at start a dollar cap on a model with no known price."""
    try:
        prices = PriceTable.from_json(settings.model_prices)
        price = prices.require(model.name) if settings.max_cost_usd is not None else prices.lookup(model.name)
    except (UnknownPrice, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    loop = LoopSettings(
        max_output_tokens=settings.max_output_tokens,
        compact_at_tokens=settings.compact_at_tokens,
        turn=TurnLimits(max_searches=settings.max_searches, result_chars=settings.tool_result_chars),
    )
    return AgentDeps(
        model=model,
        tools=policy_tools(searcher, tickets, top_k=settings.top_k, guests_may_write=settings.guests_may_write),
        budgets=budgets(settings),
        price=price or prices.lookup("policypal-offline"),  # type: ignore[arg-type]
        settings=loop,
    )


async def open_service(
    settings: Settings, *, searcher: Searcher | None = None, model: ChatModel | None = None
) -> PolicyPal:
    """Open store, index and model; tests pass their own searcher or model, production passes none."""
    owned_index = None
    if searcher is None:
        from retrieval.index import PolicyIndex

        searcher = owned_index = OwnedIndex(PolicyIndex.open(settings.retrieval()))
    store = await Store.open(settings.resolved_database_url)
    model = model or build_model(settings)
    try:
        deps = agent_deps(settings, model, searcher, LocalTickets(store))
    except ConfigError:
        await store.close()
        if owned_index is not None:
            await owned_index.aclose()
        raise
    pending = PendingActions(store, ttl=timedelta(seconds=settings.pending_ttl_s))
    service = PolicyPal(deps, store, pending, searcher=owned_index)
    await service.recover()
    return service


class OwnedIndex:
    """A PolicyIndex the service opened itself, so the service also closes it (releasing its lock)."""

    def __init__(self, index: Any) -> None:
        self._index = index

    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> Any:
        return await self._index.asearch(query, k, filter)

    async def aclose(self) -> None:
        self._index.close()
