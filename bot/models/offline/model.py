"""The offline model: a deterministic stand-in for an LLM, used when no OPENAI_API_KEY is set.

It reads the chat-completions message list exactly as a hosted model would and answers in the same
shape (text, parallel tool calls, token usage), so the agent loop, budgets and traces run unchanged.
It knows nothing about retrieval beyond the JSON the tools return. One run is at most one round of
tool calls: once results are back after the last user message it answers, so it cannot loop.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

from bot.models.offline.answers import answer_from_results
from bot.models.offline.messages import current_turn, last_user_text, system_text, tool_names, tool_results
from bot.models.offline.planning import clean_question, is_problem_report, small_talk, split_question, ticket_arguments
from bot.models.offline.summary import summarize_history
from bot.types import Message, ModelReply, ToolCall, Usage

NAME = "policypal-offline"
COMPACTION_PREFIX = "You compress agent conversation history"
TICKET_PROPOSAL = "I can raise an IT ticket for this. Please confirm the details."
_CHARS_PER_TOKEN = 4


class OfflineModel:
    """ChatModel that answers from the messages alone: no network, no ML, same input, same output."""

    name = NAME

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int,
        timeout: float,
    ) -> ModelReply:
        """Decide the next turn; ``timeout`` is accepted for the protocol and unused (nothing waits)."""
        text, calls = decide(messages, tools)
        return _reply(text, calls, messages, tools, max_tokens)


def decide(messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> tuple[str | None, tuple[ToolCall, ...]]:
    """The whole policy of the offline model: compaction, a new question, or an answer to tool results."""
    if not tools and system_text(messages).startswith(COMPACTION_PREFIX):
        return summarize_history(last_user_text(messages)), ()
    turn = current_turn(messages)
    if any(message.get("role") == "tool" for message in turn):
        return answer_from_results(tool_results(turn)), ()
    return _plan(last_user_text(messages), tool_names(tools), salt=len(messages))


def estimate_usage(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    text: str | None,
    calls: Sequence[ToolCall] = (),
) -> Usage:
    """Token counts at about four characters a token: what budgets see when no real count exists."""
    prompt = _dumps([*messages, *tools])
    output = (text or "") + (_dumps([call.as_dict() for call in calls]) if calls else "")
    return Usage(input_tokens=_tokens(prompt), output_tokens=_tokens(output))


def _plan(question: str, offered: set[str], *, salt: int) -> tuple[str | None, tuple[ToolCall, ...]]:
    """A new question: small talk is answered, a problem report proposes a ticket, anything else is searched."""
    cleaned = clean_question(question)
    reply = small_talk(cleaned)
    if reply is not None:
        return reply, ()
    if "create_it_ticket" in offered and is_problem_report(cleaned):
        return TICKET_PROPOSAL, (_tool_call(0, "create_it_ticket", ticket_arguments(question), salt),)
    if "search_policies" not in offered:
        return "I can't search the policy documents right now, so I can't answer that reliably.", ()
    parts = split_question(cleaned)
    return None, tuple(_tool_call(n, "search_policies", {"query": part}, salt) for n, part in enumerate(parts))


# --- building the reply ---------------------------------------------------------------------------


def _tool_call(index: int, name: str, arguments: dict[str, Any], salt: int) -> ToolCall:
    """Deterministic ids, unique within a thread: the salt is the length of the history."""
    encoded = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    digest = hashlib.sha256(f"{salt}:{index}:{name}:{encoded}".encode()).hexdigest()[:8]
    return ToolCall(id=f"call_{index}_{digest}", name=name, arguments=encoded)


def _reply(
    text: str | None,
    calls: tuple[ToolCall, ...],
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    max_tokens: int,
) -> ModelReply:
    finish = "tool_calls" if calls else "stop"
    usage = estimate_usage(messages, tools, text, calls)
    if text and usage.output_tokens > max_tokens:
        # Like a real model: stop mid-text at the cap. Tool calls are kept whole (they are small).
        calls_chars = len(_dumps([call.as_dict() for call in calls])) if calls else 0
        text = text[: max(0, max_tokens * _CHARS_PER_TOKEN - calls_chars)]
        usage = estimate_usage(messages, tools, text, calls)
        finish = "length"
    return ModelReply(text=text, tool_calls=calls, usage=usage, finish_reason=finish, model=NAME)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / _CHARS_PER_TOKEN))
