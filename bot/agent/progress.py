"""What a run is doing, in plain words, for the status line a person watches while they wait.

The loop tells a ``Progress`` hook before each turn of tool calls ("Searching the travel policy…") and
while it reads what they found. The hook is an adapter's (Slack's status line, Teams' informative stream
update), handed in through ``AgentDeps``; the core never knows which. Progress is best-effort: a hook
that fails or hangs is logged and cut short, and the run goes on as if nothing had been shown.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bot.agent.tools import ToolRegistry
from bot.errors import ToolRefusal
from bot.types import ToolCall

log = logging.getLogger(__name__)

Progress = Callable[[str], Awaitable[None]]
PROGRESS_TIMEOUT_S = 2.0  # a status line is worth far less than the answer: never wait long for one
WORKING = "Reading the policies…"
READING = "Reading what I found…"  # after a turn of tools, before the next model call


def activity(calls: Sequence[ToolCall], tools: ToolRegistry) -> str:
    """One line for a turn's calls: each tool's own words (``Tool.activity``), joined; WORKING when none."""
    lines = list(dict.fromkeys(line for call in calls if (line := _line(call, tools))))
    if len(lines) <= 1:
        return lines[0] if lines else WORKING
    first, *rest = (line.rstrip("…") for line in lines)
    return ", ".join([first, *(line[:1].lower() + line[1:] for line in rest)]) + "…"


def _line(call: ToolCall, tools: ToolRegistry) -> str | None:
    try:
        tool = tools.get(call.name)
        arguments: Any = json.loads(call.arguments or "{}")
    except (ToolRefusal, ValueError, RecursionError):
        return None  # the call is refused in the turn; nothing worth showing about it
    if tool.activity is None or not isinstance(arguments, dict):
        return None
    return tool.activity(arguments)


async def tell(progress: Progress | None, text: str, *, within: float = PROGRESS_TIMEOUT_S) -> None:
    """Show ``text`` through the hook, if there is one; never raises, never waits past PROGRESS_TIMEOUT_S.

    ``within`` is what is left of the run's deadline: a status line never holds a run past it, and
    with no time left it is not sent at all.
    """
    limit = min(PROGRESS_TIMEOUT_S, within)
    if progress is None or limit <= 0:
        return
    try:
        await asyncio.wait_for(progress(text), limit)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # TimeoutError included: the run goes on without the status line
        log.info("progress %r not shown: %s", text, type(exc).__name__)
