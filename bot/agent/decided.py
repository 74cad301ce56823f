"""A write its requester decided: the run that continues after the click starts from it.

It carries the ``decision`` trace step (who decided, how long the call took, what it returned), and
the reply written from the result itself for when that run has no model call left (see
``bot.agent.run_agent``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from bot.agent.canonical import canonical_json, to_json
from bot.agent.trace import Step
from bot.policy_tools import TICKET_TOOL, ticket_result_text
from bot.store.records import PendingRecord

Verdict = Literal["confirm", "cancel"]
PREVIEW_CHARS = 1_000


@dataclass(frozen=True)
class DecidedWrite:
    tool: str
    decision: Verdict
    result: dict[str, Any]
    step: Step


def decided_write(
    record: PendingRecord, decider: str, decision: Verdict, result: dict[str, Any], latency_ms: float
) -> DecidedWrite:
    """The decision on a pending action and its frozen call's result, with the trace step."""
    content = to_json(result)
    step = Step(
        "decision",
        record.tool,
        latency_ms=latency_ms,
        call_id=record.call_id,
        arguments=canonical_json(record.arguments),
        result_chars=len(content),
        error=str(result["error"]) if "error" in result else None,
        text=content[:PREVIEW_CHARS],
        decider=decider,
        decision=decision,
    )
    return DecidedWrite(record.tool, decision, result, step)


def reply_from_result(decided: DecidedWrite) -> str:
    """What happened, said from the result alone: the ticket and its link, the cancel, or the error."""
    if decided.tool == TICKET_TOOL:
        return ticket_result_text(decided.result)
    if decided.decision == "cancel":
        return "OK, cancelled: nothing was done."
    if "error" in decided.result:
        return f"That did not go through: {decided.result['error']}. {decided.result.get('handoff') or ''}".strip()
    return "Done."
