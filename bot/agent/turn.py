"""One turn's tool calls: guards first, then the permitted reads run concurrently, results in call order.

Every call in the assistant message gets exactly one result here, except the single write call that
becomes a pending action; its result arrives when the requester decides.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.agent.canonical import to_json
from bot.agent.state import RunState, call_key
from bot.agent.tools import Consequence, Tool, ToolContext, ToolRegistry
from bot.agent.trace import RunTrace, Step, Stopwatch
from bot.errors import ToolRefusal
from bot.types import Citation, ToolCall

log = logging.getLogger(__name__)

SEARCH_EXHAUSTED = "No further results. If the answer is not in what you have, say it is not in the policy."
REPEATED_CALL = "You already called {name} with exactly these arguments in this run. Use the earlier result."
ANOTHER_PENDING = "Not run: another action in this turn is already waiting for the user's confirmation."
AWAITING_CONFIRMATION = "proposed: waiting for the requester to confirm or cancel"
PREVIEW_CHARS = 1_000
ABSTRACT_CHARS = 300  # of a cited passage, kept with its citation (a platform shows less: Teams 160)
# The guards that refuse a call, as a refused call's step names them (``Step.guard``): traces and evals count them.
UNKNOWN_TOOL = "unknown_tool"
INVALID_ARGUMENTS = "invalid_arguments"
NOT_PERMITTED = "not_permitted"
REPEAT = "repeat"
SEARCH_CAP = "search_cap"
ANOTHER_WRITE = "another_write"
GUARDS = (UNKNOWN_TOOL, INVALID_ARGUMENTS, NOT_PERMITTED, REPEAT, SEARCH_CAP, ANOTHER_WRITE)


@dataclass(frozen=True)
class TurnLimits:
    max_searches: int = 3
    search_tool: str = "search_policies"
    result_chars: int = 4_000


@dataclass(frozen=True)
class ProposedWrite:
    call: ToolCall
    tool: Tool
    arguments: dict[str, Any]


@dataclass
class TurnResult:
    results: dict[str, str] = field(default_factory=dict)  # call id -> content (all but the pending one)
    pending: ProposedWrite | None = None
    denied_write: bool = False
    repeats: int = 0


@dataclass(frozen=True)
class _Ready:
    call: ToolCall
    tool: Tool
    arguments: dict[str, Any]


@dataclass(frozen=True)
class _Refused:
    """A call a guard refused: the observation the model reads instead of a result, and the guard."""

    observation: str
    guard: str
    denied_write: bool = False


async def run_turn(
    calls: tuple[ToolCall, ...],
    registry: ToolRegistry,
    state: RunState,
    limits: TurnLimits,
    trace: RunTrace,
    timeout_s: float,
    cancel: asyncio.Event | None = None,
) -> TurnResult:
    turn = TurnResult()
    ready: list[_Ready] = []
    steps: list[Step] = []
    for call in calls:  # one step per call, in call order
        outcome = _admit(call, registry, state, limits, turn)
        step = trace.add(Step("tool", call.name, call_id=call.id, arguments=call.arguments))
        if isinstance(outcome, _Ready):
            ready.append(outcome)
            steps.append(step)
        elif outcome is None:  # the write now waiting: the run continued after the click traces its decision
            step.text = AWAITING_CONFIRMATION
        else:
            turn.results[call.id] = _cap(outcome.observation, limits.result_chars)
            step.error, step.guard = outcome.observation, outcome.guard
    context = ToolContext(
        user=state.user, run_id=state.run_id, conversation_key=state.conversation_key, groups=state.reading_groups
    )
    runs = [_execute(r, step, context, state, limits) for r, step in zip(ready, steps, strict=True)]
    contents = await _all_within(runs, steps, ready, timeout_s, cancel)
    for item, content in zip(ready, contents, strict=True):
        turn.results[item.call.id] = content
    return turn


async def _all_within(
    runs: list[Coroutine[Any, Any, str]],
    steps: list[Step],
    ready: list[_Ready],
    timeout_s: float,
    cancel: asyncio.Event | None,
) -> list[str]:
    """Run the calls concurrently under one deadline; a call still running then, or when the run is
    cancelled, is cut off and becomes an observation."""
    if not runs:
        return []
    tasks = [asyncio.ensure_future(run) for run in runs]
    try:
        await _until_done_or_cancelled(tasks, timeout_s, cancel)
    except BaseException:  # the run's own task was cancelled: nobody is left to wait for the calls
        for task in tasks:
            task.cancel()
        raise
    cancelled = cancel is not None and cancel.is_set()
    contents = []
    for task, step, item in zip(tasks, steps, ready, strict=True):
        if task.done():
            contents.append(task.result())
        else:
            task.cancel()
            step.error = "cancelled" if cancelled else "timeout"
            contents.append(_error(f"{item.tool.name} {'was stopped' if cancelled else 'did not finish in time'}."))
    return contents


async def _until_done_or_cancelled(
    tasks: Sequence[asyncio.Future[str]], timeout_s: float, cancel: asyncio.Event | None
) -> None:
    """Wait for every task, but no longer than ``timeout_s`` and not past the run's cancel (a Stop, a shutdown)."""
    waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(asyncio.wait(tasks))}
    if cancel is not None:
        waits.add(asyncio.ensure_future(cancel.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()  # cancelling the wait over the tasks leaves the tasks themselves running


def _admit(
    call: ToolCall, registry: ToolRegistry, state: RunState, limits: TurnLimits, turn: TurnResult
) -> _Ready | _Refused | None:
    """Apply the guards in order; returns a ready call, a refusal, or None (now pending).

    Only a call that runs or becomes pending counts as made: one refused here (bad arguments, the
    search guard, another write already waiting) may be sent again later and be judged afresh.
    """
    checked = _checked(call, registry, state)
    if isinstance(checked, _Refused):
        turn.denied_write = turn.denied_write or checked.denied_write
        return checked
    tool, arguments = checked
    key = call_key(tool.name, arguments)
    if key in state.seen_calls:
        turn.repeats += 1
        return _Refused(_error(REPEATED_CALL.format(name=tool.name)), REPEAT)
    if (refused := _held_back(tool, limits, state, turn)) is not None:
        return refused
    state.seen_calls.add(key)
    if tool.consequence == Consequence.WRITE:
        turn.pending = ProposedWrite(call, tool, arguments)
        return None
    return _Ready(call, tool, arguments)


def _checked(call: ToolCall, registry: ToolRegistry, state: RunState) -> tuple[Tool, dict[str, Any]] | _Refused:
    """The tool and its decoded arguments, or the refusal naming the guard that stopped the call."""
    try:
        tool = registry.get(call.name)
    except ToolRefusal as refusal:
        return _Refused(_error(str(refusal)), UNKNOWN_TOOL)
    try:
        _, arguments = registry.parse(call.name, call.arguments)
        registry.validate(tool, arguments)
    except ToolRefusal as refusal:
        return _Refused(_error(str(refusal)), INVALID_ARGUMENTS)
    try:
        registry.authorise(tool, state.user)
    except ToolRefusal as refusal:
        return _Refused(_error(str(refusal)), NOT_PERMITTED, refusal.denied_write)
    return tool, arguments


def _held_back(tool: Tool, limits: TurnLimits, state: RunState, turn: TurnResult) -> _Refused | None:
    """The refusal of a valid call that may not run now (search guard, a write already waiting)."""
    if tool.name == limits.search_tool:
        if state.searches >= limits.max_searches:
            return _Refused(json.dumps({"results": [], "note": SEARCH_EXHAUSTED}), SEARCH_CAP)
        state.searches += 1
    if tool.consequence == Consequence.WRITE and turn.pending is not None:
        return _Refused(_error(ANOTHER_PENDING), ANOTHER_WRITE)
    return None


async def _execute(ready: _Ready, step: Step, context: ToolContext, state: RunState, limits: TurnLimits) -> str:
    watch = Stopwatch()
    try:
        result = await ready.tool.handler(ready.arguments, context)
        content = bounded_json(result, limits.result_chars)
        _collect_sources(result, state)
        if ready.tool.name == limits.search_tool and not _passages(result):
            state.empty_searches += 1
    except asyncio.CancelledError as exc:
        if _stopped_by_the_run():
            raise
        content = _failed(ready, step, state, limits, exc)  # an await of its own was cancelled by someone else
    except Exception as exc:  # a failing tool is an observation, never the end of the run
        content = _failed(ready, step, state, limits, exc)
    step.latency_ms = watch.ms()
    step.result_chars = len(content)
    step.text = content[:PREVIEW_CHARS]
    return content


def _stopped_by_the_run() -> bool:
    """Whether the cancel now unwinding this tool's task is the run's (deadline, Stop, shutdown)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _failed(ready: _Ready, step: Step, state: RunState, limits: TurnLimits, exc: BaseException) -> str:
    """The observation of a tool that raised; the step records why."""
    log.exception("tool %s raised", ready.tool.name, exc_info=exc)
    if ready.tool.name == limits.search_tool:
        state.failed_searches += 1
    why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    step.error = why[:PREVIEW_CHARS]
    return _cap(_error(f"{ready.tool.name} failed: {why}"), limits.result_chars)


async def execute_confirmed(tool: Tool, arguments: dict[str, Any], context: ToolContext) -> tuple[bool, dict[str, Any]]:
    """Run a frozen write exactly as stored: no model call in between; failure is a result, not a raise."""
    try:
        return True, await tool.handler(arguments, context)
    except Exception as exc:
        log.exception("confirmed %s failed", tool.name)
        return False, {"error": f"{tool.name} failed: {type(exc).__name__}: {exc}"}


def _collect_sources(result: dict[str, Any], state: RunState) -> None:
    """Remember where each cite came from, so a final answer's citations can link to the source."""
    for item in result.get("results", []) if isinstance(result, dict) else []:
        cite = item.get("cite") if isinstance(item, dict) else None
        if cite:
            title, _, heading = cite.partition(" › ")
            readers = tuple(str(group) for group in item.get("audience") or ())
            abstract = " ".join(str(item.get("text") or "").split())[:ABSTRACT_CHARS]
            state.sources[cite] = Citation(
                title, heading, str(item.get("source", "")), readers, abstract, str(item.get("classification") or "")
            )


def _passages(result: dict[str, Any]) -> list[Any]:
    items = result.get("results") if isinstance(result, dict) else None
    return items if isinstance(items, list) else []


def _error(message: str) -> str:
    return to_json({"error": message})


def bounded_json(result: dict[str, Any], limit: int) -> str:
    """A tool result within ``limit`` characters that is still valid JSON, with a visible marker.

    Every observation is re-sent on every later turn, so size is capped; whole trailing list items
    (search passages) are dropped first so the model never reads half a passage. The best one is
    never dropped: alone too long, its text is cut, since an empty result reads as "not in the policy".
    """
    content = to_json(result)
    items = result.get("results")
    if len(content) <= limit or not isinstance(items, list):
        return _cap(content, limit)
    kept = list(items)
    while len(kept) > 1:
        kept.pop()
        dropped = len(items) - len(kept)
        trimmed = {**result, "results": kept, "truncated": f"…[truncated: {dropped} more results not shown]"}
        content = to_json(trimmed)
        if len(content) <= limit:
            return content
    return _best_cut(result, items, limit) or _cap(to_json(result), limit)


def _best_cut(result: dict[str, Any], items: list[Any], limit: int) -> str | None:
    """The first (best) passage alone, its text cut to fit; None when it has no text or even none would not fit."""
    best = items[0] if items else None
    if not isinstance(best, dict) or not isinstance(best.get("text"), str):
        return None
    truncated = f"…[truncated: passage cut, {len(items) - 1} more results not shown]"

    def render(prefix: str) -> str:
        return to_json({**result, "results": [{**best, "text": prefix, "cut": True}], "truncated": truncated})

    content = _longest_fit(best["text"], render, limit)
    return content if len(content) <= limit else None


def _cap(content: str, limit: int) -> str:
    """``content`` cut to fit ``limit`` once wrapped as JSON, whose escaping (quotes, backslashes) adds length."""
    if len(content) <= limit:
        return content
    marker = f"…[truncated: {max(len(content) - limit, 0)} more characters]"
    return _longest_fit(content, lambda prefix: _partial(prefix, marker), limit)


def _longest_fit(text: str, render: Callable[[str], str], limit: int) -> str:
    """``render`` of the longest prefix of ``text`` within ``limit`` (of the empty prefix if none fits).

    A binary search: escaping grows monotonically with the prefix, so the rendered length does too.
    """
    low, high = 0, min(len(text), limit)
    while low < high:
        middle = (low + high + 1) // 2
        if len(render(text[:middle])) <= limit:
            low = middle
        else:
            high = middle - 1
    return render(text[:low])


def _partial(prefix: str, marker: str) -> str:
    return to_json({"partial": prefix, "truncated": marker})
