"""Compaction for the offline model: an extractive summary of a conversation, copied out of its own text."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from bot.models.offline.messages import content_text
from bot.models.offline.planning import clean_question
from bot.models.offline.text import bounded, shorten, unique

SUMMARY_CHARS = 800

_TOOL_NAME = re.compile(r'"name"\s*:\s*"([A-Za-z0-9_-]+)"')
_TOOL_CALL_TEXT = re.compile(r"\b([a-z]+_[a-z_]+)\(")
_QUERY_FIELD = re.compile(r'"query"\s*:\s*"((?:[^"\\]|\\.){1,120}?)"')
_CITE_FIELD = re.compile(r'"cite"\s*:\s*"((?:[^"\\]|\\.){1,160}?)"')
_CITE_BRACKETS = re.compile(r'\[([^\[\]\n{}"]{2,120}›[^\[\]\n{}"]{1,120})\]')


def summarize_history(history: str) -> str:
    """An extractive summary of a conversation: questions, tools used, sources and tickets, bounded.

    The history may be JSON (a message list, or ``{"messages": [...]}``) or a role-prefixed transcript;
    whatever the shape, only strings that occur in it are copied out.
    """
    messages, haystack = _parse_history(history)
    questions = unique(shorten(clean_question(m["content"]), 140) for m in messages if m["role"] == "user")
    answers = [m["content"] for m in messages if m["role"] == "assistant" and m["content"].strip()]
    bullets = [
        _bullet("Asked", questions),
        _bullet("Tools called", _counted(_TOOL_NAME.findall(haystack) + _TOOL_CALL_TEXT.findall(haystack))),
        _bullet("Searched for", unique(_QUERY_FIELD.findall(haystack))),
        _bullet("Sources", unique(_CITE_FIELD.findall(haystack) + _CITE_BRACKETS.findall(haystack))),
        _bullet("Tickets", unique(re.findall(r"\bIT-\d+\b", haystack))),
        _bullet("Last answer", [shorten(answers[-1], 200)] if answers else []),
    ]
    return bounded("\n".join(bullet for bullet in bullets if bullet), SUMMARY_CHARS) or "- (empty history)"


def _parse_history(history: str) -> tuple[list[dict[str, str]], str]:
    """Messages with text content, and the history as one searchable string with JSON fully unescaped."""
    try:
        loaded = json.loads(history)
    except ValueError:
        return _parse_transcript(history), history
    if isinstance(loaded, dict):
        loaded = loaded.get("messages", [])
    if not isinstance(loaded, list):
        return _parse_transcript(history), history
    messages = [
        {"role": str(item.get("role", "")), "content": content_text(item.get("content"))}
        for item in loaded
        if isinstance(item, dict)
    ]
    return messages, json.dumps(_deep_decode(loaded), ensure_ascii=False)


def _deep_decode(value: Any) -> Any:
    """Decode JSON nested in strings (tool arguments, tool results) so fields can be read directly."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return _deep_decode(json.loads(value))
        except ValueError:
            return value
    if isinstance(value, dict):
        return {key: _deep_decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_deep_decode(item) for item in value]
    return value


def _parse_transcript(history: str) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    for line in history.splitlines():
        match = re.match(
            r"^\s*[-*]?\s*(?:\[[^\]]*\]\s*)?(user|assistant|tool|system)\b[^:\n]{0,40}:\s*(.*)$", line, re.I
        )
        if match:
            messages.append({"role": match[1].lower(), "content": match[2]})
        elif messages:
            messages[-1]["content"] += "\n" + line
    if not messages:  # no roles at all: treat lines ending in "?" as the questions
        return [{"role": "user", "content": line} for line in history.splitlines() if line.strip().endswith("?")]
    return messages


def _counted(names: Sequence[str]) -> list[str]:
    """ "search_policies ×2": how often each tool ran, in first-use order."""
    return [f"{name} ×{names.count(name)}" if names.count(name) > 1 else name for name in unique(names)]


def _bullet(label: str, items: Sequence[str]) -> str:
    return f"- {label}: " + "; ".join(items) if items else ""
