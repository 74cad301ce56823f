"""One aiohttp app for every surface: /slack/events (and Socket Mode), /api/messages, /console, /healthz, /readyz,
/metrics.

The composition root of ``policypal serve``. Start-up checks the whole configuration first and
refuses, listing every problem, rather than start half-working (``bot.config_check``). Then the
service is opened once and shared; each platform adds its routes only when configured; the handoff
outbox and the sweeper (heartbeat, crash recovery, expired cards) run beside them.

Shutdown (SIGTERM or Ctrl-C): aiohttp stops listening and Slack leaves Socket Mode (new events go
to another replica), then ``_drain`` gives runs in flight ``POLICYPAL_SHUTDOWN_GRACE_S`` to finish
and cancels the rest, which give up with a helpdesk case and a reply (a message still queued for a slot
is not begun: it stays in the inbox for the next process); only then do the platforms drain their
reply tasks and the service close.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from adapters.app_keys import READINESS, SERVICE, SETTINGS
from adapters.checks import PLATFORM_CHECKS
from adapters.control import INDEX, index_action, serving, socket_path, terminal_actions
from adapters.destinations import destinations
from adapters.server.health import QuietProbesAccessLogger, add_health_routes, count_platform_requests, register_probes
from bot.config import Settings
from bot.config_check import find_problems, report
from bot.delivery import Sweeper
from bot.identity import known_groups
from bot.models import OpenAIChatModel
from bot.redaction import Redactor
from bot.runtime import configure_json_logging, release_freed_memory
from bot.service import PolicyPal
from bot.wiring import open_service, sweep_policy

__all__ = ["SERVICE", "SETTINGS", "build_app", "run_server"]

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 1024  # a burst of Slack events opens hundreds of connections at once; 128 drops some
HTTP_SHUTDOWN_S = 5.0  # requests in progress at shutdown (acks are immediate; runs are drained separately)
SWEEPER_STOP_S = 10.0


def build_app(settings: Settings, service: PolicyPal | None = None, *, sweep: bool | None = None) -> web.Application:
    """The app; tests pass a service they built, production lets start-up open one from settings.

    ``sweep``: run the sweeper (heartbeat, crash recovery, expiry); by default only when the app
    opens its own service, so a test's service sees no background passes it did not ask for.
    """
    app = web.Application(middlewares=[count_platform_requests])
    app[SETTINGS] = settings
    add_health_routes(app)
    app.cleanup_ctx.append(_service_context(service))
    app.cleanup_ctx.append(_outbox_worker)
    app.cleanup_ctx.append(_control_socket)
    from adapters.slack import add_slack_routes
    from adapters.teams import add_teams_routes

    add_slack_routes(app, settings)
    add_teams_routes(app, settings)
    if settings.console_enabled:  # the operators' pages (adapters/web); nothing of them loads otherwise
        from adapters.web import add_console_routes

        add_console_routes(app, settings)
    # After the platforms' contexts: probes and notifiers need their clients started.
    app.cleanup_ctx.append(_operations(service is None if sweep is None else sweep))
    # After the platforms' own shutdown hooks (Slack leaves Socket Mode there): drain only once no
    # new event can arrive, or runs started during the drain are cut short at its end.
    app.on_shutdown.append(_drain)
    return app


def _service_context(given: PolicyPal | None) -> Callable[[web.Application], AsyncIterator[None]]:
    async def context(app: web.Application) -> AsyncIterator[None]:
        settings = app[SETTINGS]
        service = given or await open_service(settings, destinations=destinations(settings), serving=True)
        warming = None
        if given is None:
            # Start-up objects (index, SDKs, and soon the model) never die: keep them out of every later
            # full collection, whose pauses (0.1-0.2 s over the imports' objects) otherwise land in the
            # middle of a burst of acks. No collection first: it would find a few dozen unreachable
            # objects and cost 0.1-0.2 s of start-up.
            gc.freeze()
            warming = asyncio.create_task(_warm_up(service), name="warm-up")
        app[SERVICE] = service
        yield
        if warming is not None:
            await warming  # its search runs in a thread on the index, which must outlive it
            await service.close()

    return context


async def _warm_up(service: PolicyPal) -> None:
    """Load the embedding model, and the openai SDK where a key is set, while the server already takes messages.

    The first search imports fastembed and builds both ONNX sessions: about 0.9 s of CPU, almost
    half of start-up (benchmarks/serve.py: ready in 1.2-1.5 s instead of 1.9-2.5 s). Readiness does
    not wait for it: events are acknowledged and queued durably from the moment the store and index
    are open, and a run that searches before the model is loaded waits for it (the embedder's lock),
    a one-off delay well inside the run's deadline. Acks share the process with the loading: a burst
    of 200 sent the moment /readyz says 200 was acked in p99 81-120 ms, against 49 ms with the model
    loaded first (``benchmarks/slack_ack.py --at-start``), where before those events met a port not
    yet listening.
    """
    if service.searcher is not None:
        try:
            await service.searcher.asearch("warm-up", 1)
        except Exception:  # readiness reports a broken index; serving need not stop here
            log.warning("warming up the index failed", exc_info=True)
    if isinstance(service.deps.model, OpenAIChatModel):
        await service.deps.model.warm()  # the SDK's import (about 0.4 s) before the first question, not in it
    gc.freeze()  # the model's objects join the start-up's, out of the collector's way
    release_freed_memory()  # the model's load-time temporaries: about 55 MB of idle RSS


async def _outbox_worker(app: web.Application) -> AsyncIterator[None]:
    """Deliver outbox rows while the server runs (any number of replicas may run one)."""
    outbox = app[SERVICE].outbox
    task = asyncio.create_task(outbox.run_forever(), name="handoff-outbox")
    yield
    outbox.stop()  # finish what is in flight, so a half-posted case is not posted again after a restart
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(task, outbox.policy.deliver_timeout_s + 1)
    await outbox.drain(outbox.post_policy.deliver_timeout_s)


async def _control_socket(app: web.Application) -> AsyncIterator[None]:
    """Let `policypal index|search|ask|chat|decide` reach the embedded index this server holds (adapters/control)."""
    settings = app[SETTINGS]
    cfg, service = settings.retrieval(), app[SERVICE]
    owned = service.searcher
    if cfg.qdrant_url or owned is None:
        yield  # a Qdrant server takes every process; a test's searcher indexes nothing
        return
    actions = {
        INDEX: index_action(owned, known_groups(settings.user_groups)),  # this server's groups decide readers
        **terminal_actions(service, owned, draining=lambda: app[READINESS].draining),
    }
    async with serving(socket_path(cfg), actions):
        try:
            yield
        finally:  # before the socket closes, which waits for the request: indexing a folder takes minutes
            owned.stop_writes()


def _operations(sweep: bool) -> Callable[[web.Application], AsyncIterator[None]]:
    async def context(app: web.Application) -> AsyncIterator[None]:
        service = app[SERVICE]
        register_probes(app, service)
        if not sweep:
            yield
            return
        sweeper = Sweeper(service, sweep_policy(app[SETTINGS]))
        task = asyncio.create_task(sweeper.run_forever(), name="sweeper")
        yield
        sweeper.stop()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, SWEEPER_STOP_S)
        with contextlib.suppress(Exception):  # a database already gone: our heartbeat simply ages out
            await sweeper.forget_me()

    return context


async def _drain(app: web.Application) -> None:
    """No new connections by now; let runs in flight finish, then make the rest give up and hand off."""
    app[READINESS].draining = True
    if SERVICE not in app:
        return
    cancelled = await app[SERVICE].inflight.drain(app[SETTINGS].shutdown_grace_s)
    if cancelled:
        log.warning("%d run(s) gave up at shutdown; each has a helpdesk case and a reply", cancelled)


def run_server(settings: Settings, host: str = "0.0.0.0", port: int = 3000) -> int:
    """`policypal serve`: check the configuration, then serve until SIGTERM or Ctrl-C."""
    configure_json_logging(logging.getLevelName(settings.log_level.upper()), Redactor(settings.secret_values()))
    problems = asyncio.run(find_problems(settings, PLATFORM_CHECKS))
    if problems:
        print(report(problems), file=sys.stderr)
        return 2
    web.run_app(
        build_app(settings),
        host=host,
        port=port,
        shutdown_timeout=HTTP_SHUTDOWN_S,
        backlog=LISTEN_BACKLOG,
        access_log_class=QuietProbesAccessLogger,
        print=lambda line: log.info("%s", " ".join(line.split())),
    )
    log.info("stopped")
    return 0
