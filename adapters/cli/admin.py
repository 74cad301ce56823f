"""`policypal config check` and `policypal db upgrade|current`: operators' commands, printing only.

The composition root's platform checks come in lazily (the CLI is the one place allowed to).
"""

from __future__ import annotations

import sys
from typing import TextIO

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bot.config import Settings, without_secrets
from bot.config_check import find_problems, report
from bot.store import migrate, prepare_sqlite_file


async def config_check(settings: Settings, out: TextIO | None = None) -> int:
    """Print every problem (exit 2) or what is configured (exit 0); starts nothing, changes nothing."""
    from adapters.checks import PLATFORM_CHECKS

    problems = await find_problems(settings, PLATFORM_CHECKS)
    if problems:
        print(report(problems), file=sys.stderr)
        return 2
    (out or sys.stdout).write(summary(settings) + "\n")
    return 0


def summary(settings: Settings) -> str:
    """What a server with these settings would run on, one line each."""
    database = make_url(settings.resolved_database_url).render_as_string(hide_password=True)
    model = settings.model if settings.openai_api_key else "the offline model (no OPENAI_API_KEY)"
    slack = "on" if settings.slack_bot_token else "off"
    teams = "on" if settings.microsoft_app_id or settings.teams_allow_unauthenticated else "off"
    lines = "\n".join(
        [
            "Configuration OK.",
            f"  database: {database}",
            f"  index:    {settings.qdrant_url or settings.retrieval().qdrant_path} ({settings.embedding_model})",
            f"  model:    {model}",
            f"  Slack:    {slack}; Teams: {teams}",
            f"  limits:   {settings.user_runs_per_minute} runs/min per user, {settings.max_concurrent_runs} at once",
        ]
    )
    return without_secrets(lines, settings)  # POLICYPAL_QDRANT_URL may carry a password


async def db_command(settings: Settings, action: str, out: TextIO | None = None) -> int:
    """`upgrade`: bring the database to this release's head (safe to repeat, or to run from two replicas).

    `current`: print where it stands; exit 1 unless at head.
    """
    url = settings.resolved_database_url
    where = make_url(url).render_as_string(hide_password=True)
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        if make_url(url).get_backend_name() == "sqlite":
            prepare_sqlite_file(url)  # fails when POLICYPAL_DATA_DIR names a file: reported like a refused connection
        line, code = await (_upgrade(engine) if action == "upgrade" else _current(engine))
    except (SQLAlchemyError, OSError) as exc:
        print(f"Cannot reach the database {where}: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1
    finally:
        await engine.dispose()
    (out or sys.stdout).write(f"{where}: {line}\n")
    return code


async def _upgrade(engine: AsyncEngine) -> tuple[str, int]:
    before = await migrate.upgrade(engine)
    after = await migrate.schema_state(engine)
    if before.current == after.current:
        return f"already at {after.current}", 0
    return f"upgraded from {before.current or 'nothing (empty)'} to {after.current}", 0


async def _current(engine: AsyncEngine) -> tuple[str, int]:
    state = await migrate.schema_state(engine)
    return f"at {state.current or 'nothing (empty)'}; this release needs {state.head}", 0 if state.at_head else 1
