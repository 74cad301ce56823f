"""A write its requester decided: the run that continues after the click starts from it.

It carries the ``decision`` trace step (who decided, how long the call took, what it returned), and
the reply written from the result itself for when that run has no model call left (see
``bot.agent.loop.run_agent``). Who words that reply is the caller's business (``bot.policy_tools``
knows the ticket tool), so the loop depends on no tool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from bot.agent.canonical import canonical_json, to_json
from bot.agent.trace import Step

Verdict = Literal["confirm", "cancel"]
PREVIEW_CHARS = 1_000


@dataclass(frozen=True)
class DecidedWrite:
    tool: str
    decision: Verdict
    result: dict[str, Any]
    step: Step
    reply: str  # what happened, said from the result alone


def decided_write(
    *,
    tool: str,
    call_id: str,
    arguments: dict[str, Any],
    decider: str,
    decision: Verdict,
    result: dict[str, Any],
    latency_ms: float,
    reply: str,
) -> DecidedWrite:
    """The decision on a pending action and its frozen call's result, with the trace step."""
    content = to_json(result)
    step = Step(
        "decision",
        tool,
        latency_ms=latency_ms,
        call_id=call_id,
        arguments=canonical_json(arguments),
        result_chars=len(content),
        error=str(result["error"]) if "error" in result else None,
        text=content[:PREVIEW_CHARS],
        decider=decider,
        decision=decision,
    )
    return DecidedWrite(tool, decision, result, step, reply)
