"""The search tool tells a model to search in the policy's own terms, and several phrasings in one turn.

Chat words ("PTO", "roll over") are not the policy's ("annual leave", "carry over"): retrieval finds
what the policy says when asked in its terms. The description asks the model to rewrite, and to send
independent phrasings together, so the rewrite costs no extra step.
"""

from __future__ import annotations

from bot.policy_tools import SEARCH_DESCRIPTION
from bot.types import Answer, TerminationReason
from tests.bot.helpers import ask, last_tool_results, service
from tests.fakes.openai_server import text, tool_calls

SEARCH = "search_policies"
CARRY_OVER = "Leave and Holidays Policy › Annual leave › Carrying over unused leave"


def test_the_search_description_asks_for_the_policys_terms_and_phrasings_in_one_turn():
    description = SEARCH_DESCRIPTION.lower()
    assert "terms a policy would use" in description and "pto" in description
    assert "each phrasing in the same turn" in description
    assert "do not retry" in description  # rewriting happens up front, not as a loop of retries


async def test_a_model_that_rewrites_the_chat_words_finds_the_passage_in_the_same_turn(
    tmp_path, fake_openai, sample_index
):
    fake_openai.script(
        tool_calls(
            (SEARCH, {"query": "can i roll over my pto"}),  # as asked
            (SEARCH, {"query": "carry over unused annual leave to next year"}),  # in the policy's words
        ),
        text(f"You may carry over up to 5 days of unused annual leave [{CARRY_OVER}]."),
    )
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "can i roll over my pto?")

    (first, *_rest) = fake_openai.requests
    search_tool = next(tool for tool in first.tools if tool["function"]["name"] == SEARCH)
    assert search_tool["function"]["description"] == SEARCH_DESCRIPTION  # what the model was told
    _as_asked, rewritten = last_tool_results(fake_openai.requests[1])  # both ran before the next model call
    assert CARRY_OVER in [passage["cite"] for passage in rewritten["results"]]
    assert reply.reason == TerminationReason.ANSWERED and reply.steps == 2  # no extra step
    assert isinstance(reply.outcome, Answer) and [c.heading for c in reply.outcome.citations] == [
        "Annual leave › Carrying over unused leave"
    ]
    fake_openai.assert_script_consumed()
