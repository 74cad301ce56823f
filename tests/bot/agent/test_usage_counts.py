"""What a run counts when a compatible server's usage block is wrong: never an input that cost nothing."""

from __future__ import annotations

import pytest

from bot.types import TerminationReason
from tests.bot.helpers import OnePassage, ask, service
from tests.fakes.openai_server import text, tool_calls

pytestmark = pytest.mark.asyncio


async def test_a_server_reporting_zero_prompt_tokens_still_has_the_input_counted_against_the_budget(
    tmp_path, fake_openai
):
    # Ollama reports prompt_tokens 0 when it had the prompt cached (ollama/ollama#5370): every turn of a
    # run after the first. The input was still sent and read; a budget that counts it as free never stops.
    search = ("search_policies", {"query": "receipts"})
    fake_openai.script(tool_calls(search, usage=(0, 33)), text("Keep receipts.", usage=(0, 4)))
    async with service(tmp_path, fake_openai, OnePassage(), max_tokens=1_500) as svc:
        reply = await ask(svc, "receipts?")
    first_input = len(str(fake_openai.requests[0].json)) // 4  # about what the first request held
    assert reply.tokens > first_input  # its input counted, not only the 33 tokens of output
    assert reply.reason == TerminationReason.TOKEN_BUDGET  # the second request would pass 1,500 tokens
    assert len(fake_openai.requests) == 1
