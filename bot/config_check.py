"""Every configuration problem at once: what ``policypal config check`` prints and ``serve`` refuses on.

Each check looks at one thing and returns its problems as sentences an operator can act on, so a
broken database does not hide a half-configured Slack behind it. The checks here need nothing from
any platform; the composition root adds the platform checks (``adapters.checks``), since bot/ never
imports an adapter. Nothing is changed by a check: no table is created, no index, no file (but a
reranker not yet in the model cache is fetched into it, as the server's first search would).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bot.agent import PriceTable
from bot.config import Settings, without_secrets
from bot.errors import ConfigError, UnknownPrice
from bot.identity import GroupMap
from bot.store import migrate
from bot.tickets import build_ticket_backend
from bot.wiring import build_model

Check = Callable[[Settings], Awaitable[list[str]]]
DATABASE_TIMEOUT_S = 10.0
INDEX_TIMEOUT_S = 30.0  # loading the embedding model is part of opening the index
RERANK_TIMEOUT_S = 120.0  # a reranker not yet in the model cache is downloaded, as the server's first search would


async def find_problems(settings: Settings, extra: Sequence[Check] = ()) -> list[str]:
    """Run every check concurrently; the problems in a stable order (a crashed check is a problem too).

    A problem may quote a setting (a URL with its password, a token a remote echoed): secrets are starred.
    """
    checks = [check_database, check_index, check_reranker, check_model, check_tickets, check_groups, *extra]
    results = await asyncio.gather(*(_guarded(check, settings) for check in checks))
    return [without_secrets(problem, settings) for found in results for problem in found]


def report(problems: Sequence[str]) -> str:
    """One message listing every problem, numbered, multi-line problems indented under their number."""
    noun = "problem" if len(problems) == 1 else "problems"
    lines = [f"PolicyPal cannot start: {len(problems)} configuration {noun}."]
    for number, problem in enumerate(problems, start=1):
        first, *rest = problem.strip().splitlines()
        lines.append(f"  {number}. {first}")
        lines.extend(f"     {line.strip()}" for line in rest)
    lines.append("Fix these (environment variables or .env), then start again; `policypal config check` re-checks.")
    return "\n".join(lines)


async def _guarded(check: Check, settings: Settings) -> list[str]:
    try:
        return await check(settings)
    except Exception as exc:  # a check that crashed still says what it was checking
        return [f"{check.__name__.removeprefix('check_')} check failed: {type(exc).__name__}: {exc}"]


async def check_database(settings: Settings) -> list[str]:
    """Reachable, and at a revision this release can use (SQLite is upgraded at start, so only 'ahead' counts)."""
    url = settings.resolved_database_url  # Settings refused any URL without its async driver
    parsed = make_url(url)
    where = parsed.render_as_string(hide_password=True)
    sqlite = parsed.get_backend_name() == "sqlite"
    if sqlite and (missing := _missing_file(parsed.database or "")) is not None:
        return _creatable(missing, where)  # made (and migrated) at start
    return await _schema_problems(url, where, sqlite=sqlite)


def _missing_file(database: str) -> Path | None:
    if database in ("", ":memory:") or database.startswith("file:") or Path(database).exists():
        return None
    return Path(database)


def _creatable(path: Path, where: str) -> list[str]:
    parent = next((p for p in path.absolute().parents if p.exists()), Path("/"))
    if not parent.is_dir():  # e.g. POLICYPAL_DATA_DIR names a file: no folder can be made under it
        return [f"The database {where} does not exist and cannot be created: {parent} is not a directory"]
    if os.access(parent, os.W_OK):
        return []
    return [f"The database {where} does not exist and cannot be created: {parent} is not writable"]


async def _schema_problems(url: str, where: str, *, sqlite: bool) -> list[str]:
    connect_args: dict[str, Any] = {} if sqlite else {"timeout": DATABASE_TIMEOUT_S}
    engine = create_async_engine(url, poolclass=NullPool, connect_args=connect_args)
    try:
        async with asyncio.timeout(DATABASE_TIMEOUT_S):
            state = await migrate.schema_state(engine)
    except Exception as exc:
        return [f"Cannot reach the database {where}: {_reason(exc)}"]
    finally:
        await engine.dispose()
    if sqlite and state.current in (*state.known, None):
        return []  # the embedded default upgrades itself at start
    problem = migrate.problem(state, url)
    return [problem] if problem else []


async def check_index(settings: Settings) -> list[str]:
    """The index opens with the configured embedding model (built with the same one, not in use elsewhere)."""
    from retrieval import PolicyIndex  # retrieval loads onnxruntime: only when checked

    def open_and_close() -> None:
        PolicyIndex.open(settings.retrieval()).close()

    try:
        async with asyncio.timeout(INDEX_TIMEOUT_S):
            await asyncio.to_thread(open_and_close)
    except TimeoutError:
        return [f"The policy index did not open within {INDEX_TIMEOUT_S:.0f} s ({_index_location(settings)})"]
    except Exception as exc:
        return [_index_problem(exc, settings)]
    return []


async def check_reranker(settings: Settings) -> list[str]:
    """The configured reranker loads: it is only loaded by the first search, so a model directory missing
    its files, or a model that cannot be downloaded, would otherwise fail every question, not the start."""
    from retrieval import Reranker, RerankError

    try:
        reranker = Reranker.from_config(settings.retrieval())
    except RerankError:
        return []  # an unknown name fails opening the index too: check_index reports it once
    if reranker is None:
        return []
    try:
        async with asyncio.timeout(RERANK_TIMEOUT_S):
            await asyncio.to_thread(reranker.load)
    except TimeoutError:
        return [f"The reranker {reranker.model_name!r} did not load within {RERANK_TIMEOUT_S:.0f} s"]
    except RerankError as exc:
        return [str(exc)]  # retrieval's messages already say what to do
    return []


def _index_problem(exc: Exception, settings: Settings) -> str:
    from retrieval import EmbeddingError, PolicyIndexError

    if isinstance(exc, PolicyIndexError | EmbeddingError):
        return str(exc)  # retrieval's messages already say what to do
    return f"Cannot open the policy index at {_index_location(settings)}: {_reason(exc)}"


def _index_location(settings: Settings) -> str:
    return settings.qdrant_url or str(settings.retrieval().qdrant_path)


async def check_model(settings: Settings) -> list[str]:
    """An endpoint has its key, prices parse, and a dollar cap has a price to enforce it (it fails closed)."""
    if settings.openai_base_url and not settings.openai_api_key:
        return [
            f"OPENAI_BASE_URL is set ({settings.openai_base_url}) but OPENAI_API_KEY is not, so the offline "
            "model would answer instead. Set the key (any non-empty value for a server that needs none)."
        ]
    try:
        prices = PriceTable.from_json(settings.model_prices)
    except ValueError as exc:
        return [f"POLICYPAL_MODEL_PRICES: {exc}"]
    model = build_model(settings)
    try:
        if settings.max_cost_usd is not None:
            prices.require(model.name)
    except UnknownPrice as exc:
        return [str(exc)]
    finally:
        await _close(model)
    return []


async def check_tickets(settings: Settings) -> list[str]:
    """A remote ticket system has every setting it needs."""
    if settings.tickets == "local":
        return []
    try:
        backend = build_ticket_backend(settings, None)  # type: ignore[arg-type]  # the store is for "local" only
    except ConfigError as exc:
        return [str(exc)]
    await _close(backend)
    return []


async def check_groups(settings: Settings) -> list[str]:
    try:
        GroupMap.from_json(settings.user_groups)
    except ValueError as exc:
        return [str(exc)]
    return []


async def _close(resource: object) -> None:
    closer = getattr(resource, "aclose", None)
    if closer is not None:
        await closer()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
