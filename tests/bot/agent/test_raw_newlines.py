"""Tool arguments whose strings hold a literal newline or tab, as some compatible endpoints send them
(Gemini's among them): strict JSON forbids them, but what the model meant is plain, and refusing only
makes it send the same call again until the steps run out."""

from __future__ import annotations

import pytest

from bot.types import Pending, TerminationReason
from tests.bot.helpers import ALICE, OnePassage, ask, last_tool_results, service
from tests.fakes.openai_server import text, tool_calls

pytestmark = pytest.mark.asyncio

MULTILINE_TICKET = (
    '{"category": "network_vpn", "summary": "VPN drops every few minutes", "urgency": "normal",'
    ' "details": "Since Monday.\n\tError NG-412 each time."}'  # a literal newline and tab inside the string
)


async def test_a_ticket_whose_details_hold_a_literal_newline_is_proposed_with_them(tmp_path, fake_openai):
    fake_openai.script(tool_calls(("create_it_ticket", MULTILINE_TICKET), content="Please confirm this ticket."))
    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        reply = await ask(svc, "My VPN drops every few minutes since Monday, error NG-412. Open a ticket.")
    assert reply.reason == TerminationReason.PENDING_CONFIRMATION
    assert isinstance(reply.outcome, Pending)
    assert reply.outcome.action.requester == ALICE.id
    assert reply.outcome.action.arguments["details"] == "Since Monday.\n\tError NG-412 each time."
    fake_openai.assert_script_consumed()


async def test_a_search_whose_query_holds_a_literal_newline_runs(tmp_path, fake_openai):
    searcher = OnePassage()
    fake_openai.script(tool_calls(("search_policies", '{"query": "vpn\nerror NG-412"}')), text("Renew it."))
    async with service(tmp_path, fake_openai, searcher) as svc:
        reply = await ask(svc, "what does NG-412 mean?")
    assert reply.reason == TerminationReason.ANSWERED
    assert searcher.queries == ["vpn\nerror NG-412"]
    (observation,) = last_tool_results(fake_openai.requests[1])
    assert "results" in observation
