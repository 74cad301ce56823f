"""Tool calls go back to the endpoint in the history with arguments that are a JSON object.

Ollama's OpenAI-compatible API decodes each earlier call's arguments into an object and answers
400 "invalid tool call arguments" when it cannot, and proxies that translate the history for
another provider (LiteLLM to Anthropic's ``tool_use``) do the same. A call the registry refused for
its arguments must still become an observation the model reads, not a history no request can carry.
"""

from __future__ import annotations

import json

import pytest

from bot.types import TerminationReason
from tests.bot.helpers import OnePassage, ask, last_tool_results, service
from tests.fakes.openai_server import text, tool_calls

pytestmark = pytest.mark.asyncio

SEARCH = "search_policies"


def _sent_arguments(messages: list[dict]) -> list[str]:
    return [call["function"]["arguments"] for m in messages for call in m.get("tool_calls") or ()]


def _is_object(arguments: str) -> bool:
    """What Ollama checks: the text decodes, strictly, to a JSON object."""
    try:
        return isinstance(json.loads(arguments), dict)
    except ValueError:
        return False


async def test_arguments_that_are_no_json_object_go_back_in_the_history_as_one(tmp_path, fake_openai):
    fake_openai.script(
        tool_calls(
            (SEARCH, '{"query": "leave'),  # cut off: not JSON
            (SEARCH, ""),  # empty
            (SEARCH, '["leave"]'),  # JSON, but not an object
            (SEARCH, json.dumps(json.dumps({"query": "receipts"}))),  # encoded twice: runs
            (SEARCH, '{"query": "line\nbreak"}'),  # a raw newline inside a string: runs
        ),
        text("Keep receipts."),
    )
    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        reply = await ask(svc, "receipts?")
    assert reply.reason == TerminationReason.ANSWERED
    second = fake_openai.requests[1]
    sent = _sent_arguments(second.messages)
    assert len(sent) == 5
    assert all(_is_object(arguments) for arguments in sent), sent
    assert json.loads(sent[3]) == {"query": "receipts"} and json.loads(sent[4]) == {"query": "line\nbreak"}
    not_json, empty, not_object, twice, newline = last_tool_results(second)
    assert "not valid JSON" in not_json["error"]  # the model still hears what was wrong with each call
    assert "'query' is a required property" in empty["error"]
    assert "must be a JSON object" in not_object["error"]
    assert "results" in twice and "results" in newline
