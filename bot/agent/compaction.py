"""Thread history and compaction.

Compaction keeps, verbatim: everything up to and including the question this run answers (the system
prompt, earlier exchanges in the thread, the question) and the last ``keep_turns`` turns. Only the
turns in between are summarised, by one model call, into a single bridge message. A turn is an
assistant message together with the tool results that answer its calls: the two are kept or
summarised as one unit, never split, because a tool result without its call (or a call without its
result) is rejected by the chat completions API.

When the pinned head alone (with an empty summary) already reaches the threshold, no summary can get the
history under it: folding would run again on every later turn, summarising its own summary. Then nothing
is folded (``head_fills``, traced once a run); the history grows until the budget check before a model
call ends the run (``token_budget``, or whichever budget runs out first), as for any other run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from bot.agent.budget import estimate_tokens
from bot.types import ChatModel, Message, ModelReply

COMPACTION_PROMPT = (
    "You compress agent conversation history. Summarise the steps below for the assistant that will "
    "continue: what was searched, which passages (with their cites) were found, what was decided, and "
    "what is still open. Keep every cite and ticket id exactly. Do not answer the user's question."
)
BRIDGE_PREFIX = "Summary of my earlier steps in this run (compacted):\n"
HISTORY_MESSAGES = 12  # earlier messages of a thread given to a follow-up question
HEAD_FILLS = "not compacted: the system prompt, the thread and the question alone reach the threshold"


def thread_context(history: Sequence[Message], question: str) -> list[Message]:
    """The messages a run starts from: recent Q&A of this thread, then the new question."""
    return [*history[-HISTORY_MESSAGES:], {"role": "user", "content": question}]


def turns(messages: Sequence[Message]) -> list[list[Message]]:
    """Group messages into units: an assistant message with its tool results, or a single message."""
    units: list[list[Message]] = []
    for message in messages:
        if message.get("role") == "tool" and units:
            units[-1].append(message)
        else:
            units.append([message])
    return units


@dataclass(frozen=True)
class CompactionPlan:
    head: list[Message]
    middle: list[Message]
    tail: list[Message]


def plan_compaction(messages: Sequence[Message], question_index: int, keep_turns: int = 3) -> CompactionPlan | None:
    """Split history into pinned head, summarisable middle and verbatim tail; None if nothing to fold."""
    head = list(messages[: question_index + 1])
    units = turns(messages[question_index + 1 :])
    if len(units) <= keep_turns:
        return None
    middle = [m for unit in units[:-keep_turns] for m in unit]
    tail = [m for unit in units[-keep_turns:] for m in unit]
    return CompactionPlan(head=head, middle=middle, tail=tail)


def head_fills(plan: CompactionPlan, at_tokens: int) -> bool:
    """Whether the pinned head and an empty summary alone reach ``at_tokens``: no summary gets under it."""
    return estimate_tokens([*plan.head, bridge("")]) >= at_tokens


def summary_request(middle: Sequence[Message]) -> list[Message]:
    return [
        {"role": "system", "content": COMPACTION_PROMPT},
        {"role": "user", "content": json.dumps(list(middle), ensure_ascii=False)},
    ]


async def summarise(model: ChatModel, middle: Sequence[Message], *, max_tokens: int, timeout: float) -> ModelReply:
    return await model.complete(summary_request(middle), [], max_tokens=max_tokens, timeout=timeout)


def bridge(summary: str) -> Message:
    """The one message the folded turns become."""
    return {"role": "assistant", "content": BRIDGE_PREFIX + summary.strip()}


def apply_compaction(plan: CompactionPlan, summary: str) -> list[Message]:
    return [*plan.head, bridge(summary), *plan.tail]
