"""The offline model: a deterministic stand-in for an LLM, used when no OPENAI_API_KEY is set.

It reads the chat-completions message list exactly as a hosted model would and answers in the same
shape (text, parallel tool calls, token usage), so the agent loop, budgets and traces run unchanged.
It knows nothing about retrieval beyond the JSON the tools return, and, when given one, the embedding
model's vectors to score sentences by meaning. A run makes at most two rounds of tool calls: the
searches, then (for a problem report that also asks something) the ticket proposal beside the answer;
once results are back it answers, so it cannot loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import Sequence
from typing import Any

from bot.models.offline.answers import NOT_IN_POLICY, answer_from_results
from bot.models.offline.meaning import Embed, Meaning
from bot.models.offline.messages import (
    current_turn,
    last_user_text,
    offered_sections,
    previous_cites,
    previous_user_text,
    system_text,
    tool_names,
    tool_results,
)
from bot.models.offline.parts import Part, Plan, plan_message
from bot.models.offline.planning import MIN_QUERY, clean_question, small_talk, ticket_arguments
from bot.models.offline.summary import summarize_history
from bot.types import Message, ModelReply, ToolCall, Usage

NAME = "policypal-offline"
COMPACTION_PREFIX = "You compress agent conversation history"
TICKET_PROPOSAL = "I can raise an IT ticket for this. Please confirm the details."
TICKET_BESIDE_ANSWER = "For the problem you describe, I can raise an IT ticket. Please confirm the details."
SAY_MORE = "Could you say a little more? I can answer questions about company policies, or raise an IT ticket."
SEARCH_TOOL = "search_policies"
TICKET_TOOL = "create_it_ticket"
MAX_SEARCHES = 3  # the agent's search guard answers a fourth with "no further results"
_CHARS_PER_TOKEN = 4
_TICKET_SLACK = 80  # a shorter answer may name other documents in the ticket: room for them


class OfflineModel:
    """ChatModel that answers from the messages alone: no network, same input, same output.

    ``embed`` (texts to vectors, the index's own embedding model) lets it score sentences by meaning
    as well as by words; answers are then composed off the event loop, as embedding is CPU work.
    """

    name = NAME

    def __init__(self, embed: Embed | None = None) -> None:
        self._meaning = Meaning(embed) if embed is not None else None

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int,
        timeout: float,
    ) -> ModelReply:
        """Decide the next turn; ``timeout`` is accepted for the protocol and unused (nothing waits)."""
        room = max_tokens * _CHARS_PER_TOKEN
        if self._meaning is None:
            text, calls = decide(messages, tools, room=room)
        else:
            text, calls = await asyncio.to_thread(decide, messages, tools, self._meaning, room)
        return _reply(text, calls, messages, tools, max_tokens)


def decide(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    meaning: Meaning | None = None,
    room: int | None = None,
) -> tuple[str | None, tuple[ToolCall, ...]]:
    """The whole policy of the offline model: compaction, a new question, or an answer to tool results.

    ``room``: the characters the reply may take; an answer is composed to fit it, as a real model
    writes within its max_tokens rather than being cut off."""
    if not tools and system_text(messages).startswith(COMPACTION_PREFIX):
        return summarize_history(last_user_text(messages)), ()
    question, offered = last_user_text(messages), tool_names(tools)
    plan = plan_message(question, previous_user_text(messages))
    turn = current_turn(messages)
    if not any(message.get("role") == "tool" for message in turn):
        return _plan(question, plan, offered, offered_sections(tools, SEARCH_TOOL), salt=len(messages))
    results, cites = tool_results(turn), previous_cites(messages)
    answer = answer_from_results(results, plan.parts, meaning, cites, room)
    if plan.self_help and TICKET_TOOL in offered and answer.endswith(NOT_IN_POLICY):
        # The search was for self-service steps, not a question: finding none is not a gap to report.
        answer = answer.removesuffix(NOT_IN_POLICY).rstrip()
    if plan.problem and TICKET_TOOL in offered and not _called(turn, TICKET_TOOL):
        if not answer:
            return TICKET_PROPOSAL, (_ticket_beside(question, plan.problem, answer, len(messages)),)
        # A problem report that also asked something: the answer, and beside it the ticket to confirm.
        call = _ticket_beside(question, plan.problem, answer, len(messages))
        beside = len(TICKET_BESIDE_ANSWER) + 2 + len(_dumps(call.as_dict())) + _TICKET_SLACK
        if room is not None and len(answer) + beside > room:
            answer = answer_from_results(results, plan.parts, meaning, cites, room - beside)
            call = _ticket_beside(question, plan.problem, answer, len(messages))
        return f"{answer}\n\n{TICKET_BESIDE_ANSWER}", (call,)
    return answer, ()


def _ticket_beside(question: str, problem: str, answer: str, salt: int) -> ToolCall:
    """The ticket proposed beside an answer, its summary naming the documents the answer cites."""
    return _tool_call(0, TICKET_TOOL, ticket_arguments(question, problem, related=_cites_in(answer)), salt)


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


def _plan(
    question: str, plan: Plan, offered: set[str], sections: Sequence[str], *, salt: int
) -> tuple[str | None, tuple[ToolCall, ...]]:
    """A new question: small talk is answered, a bare problem report proposes a ticket, the rest is searched
    (a problem report that also asks is searched first; its ticket is proposed with the answer)."""
    cleaned = clean_question(question)
    reply = small_talk(cleaned, sections)
    if reply is not None:
        return reply, ()
    if plan.problem and TICKET_TOOL in offered and (not plan.parts or SEARCH_TOOL not in offered):
        told = f"{plan.problem}\n\n{question}" if plan.reported_before else question  # the ticket says what for
        return TICKET_PROPOSAL, (_tool_call(0, TICKET_TOOL, ticket_arguments(told, plan.problem), salt),)
    if SEARCH_TOOL not in offered:
        return "I can't search the policy documents right now, so I can't answer that reliably.", ()
    queries = [query for query in _searches(plan.parts or (Part(cleaned),)) if _searchable(query)]
    if not queries:
        return SAY_MORE, ()
    calls = (_tool_call(n, SEARCH_TOOL, {"query": query}, salt) for n, query in enumerate(queries))
    return None, tuple(calls)


def _searches(parts: Sequence[Part]) -> list[str]:
    """Every part's queries while they fit the search guard; past it, one per part (the part alone
    when it is searched both ways), so no part goes unsearched for another's second phrasing."""
    queries = list(dict.fromkeys(query for part in parts for query in part.queries))
    if len(queries) > MAX_SEARCHES:
        queries = list(dict.fromkeys(part.queries[-1] for part in parts))
    return queries[:MAX_SEARCHES]


def _searchable(query: str) -> bool:
    """At least as many letters or digits as the search tool takes: "y" or "?!" has nothing to look up."""
    return len(re.findall(r"\w", query)) >= MIN_QUERY


def _cites_in(answer: str) -> str:
    """The document titles an answer cites ("[Remote Access and VPN Standard › ...]")."""
    return " ".join(cite.split("›")[0] for cite in re.findall(r"\[([^\]]+)\]", answer))


def _called(turn: Sequence[Message], name: str) -> bool:
    """Whether this turn already asked for the tool (a ticket is proposed once per question)."""
    return any(
        (call.get("function") or {}).get("name") == name
        for message in turn
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or ()
    )


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
