"""Reading the chat-completions message list for the offline model: who said what, and what the tools returned."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.types import Message

_CITE = re.compile(r"\[([^\[\]\n]+?›[^\[\]\n]+?)\]")


@dataclass(frozen=True)
class ToolResult:
    """One tool result paired with the call that asked for it."""

    name: str
    arguments: dict[str, Any]
    payload: dict[str, Any]


def system_text(messages: Sequence[Message]) -> str:
    """The system prompt, which tells a compaction request apart from a conversation."""
    return next((content_text(m.get("content")) for m in messages if m.get("role") == "system"), "").lstrip()


def _last_user_index(messages: Sequence[Message]) -> int:
    return max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)


def last_user_text(messages: Sequence[Message]) -> str:
    """The message the model is answering; empty when the user has said nothing yet."""
    index = _last_user_index(messages)
    return content_text(messages[index].get("content")) if index >= 0 else ""


def previous_user_text(messages: Sequence[Message]) -> str:
    """The user's message before the one being answered: what a follow-up ("and after 5 years?") continues."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    return content_text(messages[users[-2]].get("content")) if len(users) > 1 else ""


def previous_cites(messages: Sequence[Message]) -> frozenset[str]:
    """The cites ("[Title › Section]") of the answer before the message being answered."""
    index = _last_user_index(messages)
    earlier = [m for m in messages[: max(index, 0)] if m.get("role") == "assistant" and not m.get("tool_calls")]
    return frozenset(_CITE.findall(content_text(earlier[-1].get("content")))) if earlier else frozenset()


def current_turn(messages: Sequence[Message]) -> Sequence[Message]:
    """Everything after the last user message: this run's tool calls and their results."""
    return messages[_last_user_index(messages) + 1 :]


def tool_results(turn: Sequence[Message]) -> list[ToolResult]:
    """The turn's tool results, each with the name and arguments of the call it answers."""
    calls = {
        call.get("id"): call.get("function", {})
        for message in turn
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or ()
    }
    results = []
    for message in turn:
        if message.get("role") != "tool":
            continue
        function = calls.get(message.get("tool_call_id"), {})
        name = str(function.get("name") or message.get("name") or "")
        results.append(ToolResult(name, _json_object(function.get("arguments")), _payload(message.get("content"))))
    return results


def _payload(content: Any) -> dict[str, Any]:
    """A tool result as a dict; plain text becomes ``{"text": ...}``, error strings stay errors."""
    text = content_text(content)
    loaded = _json_object(text) or _salvage_results(text)
    if loaded:
        return loaded
    return {"error": text} if text.lower().startswith("error") else {"text": text}


def _salvage_results(text: str) -> dict[str, Any]:
    """The passages of a search result the agent cut short (its JSON no longer parses): whole ones, then
    the cite and text of the one that was cut."""
    match = re.match(r'\s*\{\s*"results"\s*:\s*\[', text)
    if not match:
        return {}
    decoder = json.JSONDecoder()
    passages: list[Any] = []
    position = match.end()
    while True:
        position += len(text[position:]) - len(text[position:].lstrip(" ,\n\t"))
        try:
            passage, position = decoder.raw_decode(text, position)
        except ValueError:
            break
        passages.append(passage)
    cut = _partial_passage(text[position:])
    return {"results": [p for p in [*passages, cut] if isinstance(p, dict) and p]}


def _partial_passage(fragment: str) -> dict[str, str]:
    cite = re.search(r'"cite"\s*:\s*"((?:[^"\\]|\\.)*)"', fragment)
    body = re.search(r'"text"\s*:\s*"((?:[^"\\]|\\.)*)', fragment)
    if not cite or not body:
        return {}
    return {"cite": _unescape(cite[1]), "text": _unescape(body[1])}


def _unescape(fragment: str) -> str:
    try:
        return str(json.loads(f'"{fragment.removesuffix(chr(92))}"'))
    except ValueError:
        return fragment


def _json_object(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        loaded = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def content_text(content: Any) -> str:
    """Message content as text, whether a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def tool_names(tools: Sequence[dict[str, Any]]) -> set[str]:
    """The names of the offered tools, whether given in the chat-completions wrapper or bare."""
    return {str((tool.get("function") or tool).get("name", "")) for tool in tools}


def offered_sections(tools: Sequence[dict[str, Any]], name: str) -> list[str]:
    """The sections the tool ``name`` lets a search be limited to: those the asker may read."""
    for tool in tools:
        function = tool.get("function") or tool
        if function.get("name") == name:
            section = ((function.get("parameters") or {}).get("properties") or {}).get("section") or {}
            return [str(choice) for choice in section.get("enum") or ()]
    return []
