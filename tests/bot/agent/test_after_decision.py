"""The run that continues after a confirmed write: a ticket that exists is never reported as a give-up.

Its first model call may bring no answer at all (cut off at the few tokens left, withheld by the content
filter, empty): the reply is then written from the call's result, as when no model call is left.
"""

from __future__ import annotations

import pytest

from bot.types import Answer, TerminationReason
from tests.bot.helpers import ALICE, ask, service
from tests.fakes.openai_server import Turn, text, tool_calls

pytestmark = pytest.mark.asyncio

TICKET = {"category": "network_vpn", "summary": "NorthGate VPN fails with NG-809", "urgency": "high"}
NO_ANSWER = {
    "cut off at the tokens left": (text("I raised ticket IT-1001 for your VPN and the", finish_reason="length"),
                                   "token_budget"),
    "withheld by the content filter": (text("", finish_reason="content_filter"), "model_error"),
    "empty": (text(""), "model_error"),
}


@pytest.mark.parametrize(("turn", "why"), NO_ANSWER.values(), ids=NO_ANSWER.keys())
async def test_a_reply_that_brings_no_answer_after_the_confirm_still_tells_the_user_the_ticket_exists(
    tmp_path, fake_openai, sample_index, turn: Turn, why: str
):
    propose = tool_calls(("create_it_ticket", TICKET), content="I can raise a ticket for this. Please confirm.")
    fake_openai.script(tool_calls(("search_policies", {"query": "vpn error NG-809"})), propose, turn)
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "VPN broken with NG-809")
        decided = await svc.decide(reply.outcome.action.id, ALICE, "confirm", reply.outcome.action.args_hash)
        cases = await svc.store.cases.recent()
        continued = (await svc.store.runs.get(decided.reply.run_id)).trace
    assert decided.result["ticket_id"] == "IT-1001"
    assert decided.reply.reason == TerminationReason.ANSWERED
    assert isinstance(decided.reply.outcome, Answer) and "IT-1001" in decided.reply.outcome.text
    assert "VPN and the" not in decided.reply.outcome.text  # never the cut-off guess
    assert cases == []  # no give-up, so no helpdesk case for a ticket that exists
    assert continued[-1]["kind"] == "answer" and continued[-1]["stop_reason"] == why
    fake_openai.assert_script_consumed()
