"""Build the service from settings: the one place that chooses model, index, store, tickets and helpdesk.

Destinations that need a platform client (Slack, Teams) are built by the composition root
(``adapters.destinations``) and passed in, so nothing in bot/ imports platform code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from bot.agent import AgentDeps, Budgets, LoopSettings, PriceTable, TurnLimits
from bot.config import Settings
from bot.delivery import DeliveryResult, Outbox, OutboxPolicy, SweepPolicy
from bot.errors import ConfigError, UnknownPrice
from bot.helpdesk import CaseDeliveries, Destination, Helpdesk, TranscriptLimits
from bot.index import OwnedIndex
from bot.models import OFFLINE_MODEL, OfflineModel
from bot.pending import PendingActions
from bot.policy_tools import Searcher, policy_tools
from bot.redaction import Redactor
from bot.runtime import Admission, Metrics, RunSlots, UserRateLimit
from bot.service import PolicyPal
from bot.store import Store
from bot.tickets import TicketBackend, build_ticket_backend
from bot.types import ChatModel

if TYPE_CHECKING:
    from retrieval import Embedder

log = logging.getLogger(__name__)

RUN_MARGIN_S = 60.0  # beyond the deadline: persisting and replying; no live run is older
SAMPLE_POLICIES = Path(__file__).resolve().parent / "sample_policies"  # package data: found installed too


def build_model(settings: Settings, embedder: Embedder | None = None) -> ChatModel:
    """The real client when an API key is configured, else the offline model: the bot always answers.

    ``embedder``: the index's embedding model, which the offline model shares to score by meaning.
    """
    if settings.openai_api_key is None or not settings.openai_api_key.get_secret_value():
        return OfflineModel(_dense(embedder) if embedder is not None else None)
    from bot.models import OpenAIChatModel  # the SDK loads only when a key is set

    return OpenAIChatModel(
        api_key=settings.openai_api_key.get_secret_value(),
        base_url=settings.openai_base_url,
        model=settings.model,
        max_tokens_param=settings.max_tokens_param,
    )


def budgets(settings: Settings) -> Budgets:
    return Budgets(
        max_steps=settings.max_steps,
        max_tokens=settings.max_tokens,
        deadline_s=settings.deadline_s,
        max_cost_usd=settings.max_cost_usd,
    )


def agent_deps(settings: Settings, model: ChatModel, searcher: Searcher, tickets: TicketBackend) -> AgentDeps:
    """Fixed run configuration; refuses at start a dollar cap on a model with no known price."""
    try:
        prices = PriceTable.from_json(settings.model_prices)
        price = prices.require(model.name) if settings.max_cost_usd is not None else prices.lookup(model.name)
    except (UnknownPrice, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    if price is None and model.name != OFFLINE_MODEL:
        log.warning(
            "No price is known for model %r and no dollar cap is set: traces record its cost as $0. "
            "Price it with POLICYPAL_MODEL_PRICES (use [0, 0] for a self-hosted model).",
            model.name,
        )
    loop = LoopSettings(
        max_output_tokens=settings.max_output_tokens,
        compact_at_tokens=settings.compact_at_tokens,
        turn=TurnLimits(max_searches=settings.max_searches, result_chars=settings.tool_result_chars),
    )
    return AgentDeps(
        model=model,
        tools=policy_tools(
            searcher, tickets, top_k=settings.top_k, guests_may_write=settings.guests_may_write,
            sections=_sections(searcher),
        ),
        budgets=budgets(settings),
        price=price or prices.lookup(OFFLINE_MODEL),  # type: ignore[arg-type]
        settings=loop,
    )


async def open_service(
    settings: Settings,
    *,
    searcher: Searcher | None = None,
    model: ChatModel | None = None,
    destinations: Sequence[Destination] | None = None,
    serving: bool = False,
) -> PolicyPal:
    """Open store, index, model, tickets and helpdesk; tests pass their own searcher or model.

    ``destinations``: where handoff cases go besides the local store (composition roots pass
    ``adapters.destinations.destinations(settings)``). ``serving``: apply the per-user rate
    limit and the per-process cap on concurrent runs (the server; the terminal has one user).
    """
    if destinations is None:
        _warn_if_destinations_configured(settings)
    destinations = list(destinations or [])
    owned_index = index = None
    if searcher is None:
        from retrieval import PolicyIndex

        index = PolicyIndex.open(settings.retrieval())
        searcher = owned_index = OwnedIndex(index)
    store = await Store.open(settings.resolved_database_url)
    embedder = getattr(index or searcher, "embedder", None)
    model = model or build_model(settings, embedder)
    try:
        tickets = build_ticket_backend(settings, store)
        deps = agent_deps(settings, model, searcher, tickets)
    except ConfigError:
        await store.close()
        if owned_index is not None:
            await owned_index.aclose()
        raise
    pending = PendingActions(store, ttl=timedelta(seconds=settings.pending_ttl_s))
    metrics = Metrics(tools=deps.tools.names())
    outbox, helpdesk = helpdesk_for(settings, store, destinations, deps.budgets, metrics)
    service = PolicyPal(
        deps,
        store,
        pending,
        searcher=owned_index,
        helpdesk=helpdesk,
        outbox=outbox,
        resources=[tickets, *destinations],
        admission=admission_for(settings, store) if serving else None,
        metrics=metrics,
        embed=_dense(embedder) if embedder is not None else None,
    )
    # No recovery here: whoever recovers an interrupted action must tell its requester, which only
    # the server's sweeper (every platform) or the terminal (no server alive) can do.
    return service


def admission_for(settings: Settings, store: Store) -> Admission:
    """The per-user limit (shared through the database) and this process's cap on runs at once."""
    return Admission(
        UserRateLimit(store, settings.user_runs_per_minute),
        RunSlots(settings.max_concurrent_runs, settings.queue_wait_s),
    )


def sweep_policy(settings: Settings) -> SweepPolicy:
    """Sweep often enough that a dead replica's users hear back within about half a minute."""
    return SweepPolicy(
        interval_s=settings.sweep_interval_s,
        stale_after_s=settings.worker_stale_s,
        # Earlier releases recorded a run before it waited for a slot, so its age may include that wait. (A
        # message queued now is only an inbox item leased by a live process: no sweep takes it for dead.)
        max_run_s=settings.queue_wait_s + settings.deadline_s + RUN_MARGIN_S,
    )


def outbox_policy(settings: Settings) -> OutboxPolicy:
    return OutboxPolicy(
        max_attempts=settings.helpdesk_max_attempts,
        backoff_s=settings.helpdesk_retry_base_s,
        deliver_timeout_s=settings.helpdesk_deliver_timeout_s,
        poll_s=settings.helpdesk_poll_s,
    )


def helpdesk_for(
    settings: Settings,
    store: Store,
    destinations: Sequence[Destination],
    budgets: Budgets | None = None,
    metrics: Metrics | None = None,
) -> tuple[Outbox, Helpdesk]:
    """The outbox that delivers cases and the helpdesk that opens them, sharing one redactor."""
    redactor = Redactor(settings.secret_values())
    count = delivery_counter(metrics, [d.name for d in destinations]) if metrics is not None else None
    outbox = Outbox(store, [CaseDeliveries(store, destinations)], outbox_policy(settings), redactor=redactor,
                    on_result=count)
    helpdesk = Helpdesk(
        store,
        [d.name for d in destinations],
        budgets=budgets,
        redactor=redactor,
        limits=TranscriptLimits(result_chars=settings.helpdesk_transcript_result_chars),
        reply_within=settings.helpdesk_reply_within,
        on_created=outbox.wake,
    )
    return outbox, helpdesk


def delivery_counter(metrics: Metrics, helpdesk: Sequence[str]) -> Callable[[DeliveryResult], None]:
    """Counts each outbox attempt: a case's under handoff deliveries, a Slack or Teams reply's under replies
    (the one outbox sends both)."""
    names = frozenset(helpdesk)

    def count(result: DeliveryResult) -> None:
        observe = metrics.observe_delivery if result.destination in names else metrics.observe_reply
        observe(result.destination, result.status)

    return count


def _dense(embedder: Embedder) -> Callable[[Sequence[str]], list[list[float]]]:
    """Texts to dense vectors with the index's embedding model (already loaded: nothing new downloads)."""
    return embedder.embed_dense


def _warn_if_destinations_configured(settings: Settings) -> None:
    names = ("helpdesk_slack_channel", "helpdesk_webhook_url", "helpdesk_teams_conversation_id", "helpdesk_smtp_host")
    configured = [name for name in names if getattr(settings, name)]
    if configured:
        log.warning("helpdesk destinations configured (%s) but none passed to open_service", ", ".join(configured))


def _sections(searcher: Searcher) -> Callable[[tuple[str, ...] | None], Sequence[str]]:
    """The index's sections readers with some groups may read, for the search tool's schema (cached a
    minute by the searcher); a searcher without sections has none."""
    sections = getattr(searcher, "sections", None)
    if not callable(sections):
        return lambda _groups: ()
    return lambda groups: list(sections(groups))
