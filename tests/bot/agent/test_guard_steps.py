"""Each refused tool call's trace step names the guard that refused it, so traces and evals can count them."""

from __future__ import annotations

import io

from adapters.cli.traces import show_traces
from bot.agent import GUARDS
from tests.bot.helpers import OnePassage, ask, service, settings_for
from tests.fakes.openai_server import text, tool_calls


async def test_a_refused_call_records_its_guard_and_a_call_that_ran_records_none(tmp_path, fake_openai):
    calls = tool_calls(
        ("search_policies", {"query": "receipts"}),
        ("search_policies", {"query": "receipts"}),  # the same call again: repeat
        ("search_policies", {"query": "taxis"}),  # past max_searches=1: search cap
        ("lookup_user", {"id": "U1"}),  # not a tool: unknown tool
        ("search_policies", "{not json"),  # invalid arguments
    )
    fake_openai.script(calls, text("Keep receipts."))
    async with service(tmp_path, fake_openai, OnePassage(), max_searches=1) as svc:
        reply = await ask(svc, "receipts and taxis?")
        row = await svc.store.runs.get(reply.run_id)
    assert row is not None
    guards = [step.get("guard") for step in row.trace if step["kind"] == "tool"]
    assert guards == [None, "repeat", "search_cap", "unknown_tool", "invalid_arguments"]
    assert set(guards) - {None} <= set(GUARDS)
    shown = io.StringIO()
    await show_traces(settings_for(tmp_path, fake_openai), reply.run_id, out=shown)
    assert "refused by the repeat guard" in shown.getvalue()  # `policypal traces RUN_ID` names it
