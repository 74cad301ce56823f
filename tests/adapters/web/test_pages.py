"""The console's pages over real HTTP, on runs the service made: what an operator reads on each."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest

from bot.store import utcnow
from bot.types import TerminationReason
from tests.adapters.web import scenario
from tests.adapters.web.scenario import Finds

pytestmark = pytest.mark.asyncio


def cells(page: str, table_id: str) -> list[list[str]]:
    """The text of each body row of the table ``table_id``."""
    body = page.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body.split("<tbody", 1)[1], re.S)
    return [
        [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in rows
    ]


async def test_the_overview_counts_runs_by_ending_with_rates_spreads_and_the_guards_that_fired(
    start_console, fake_openai
):
    console = await start_console(Finds())
    svc = console.service
    await scenario.answered(svc, fake_openai)
    await scenario.not_covered(svc, fake_openai)
    await scenario.repeated(svc, fake_openai)
    await scenario.ticket(svc, fake_openai)
    status, page = await console.get("/console/")
    assert status == 200, page
    assert re.search(r'id="runs-total">4<', page)
    assert "50%</span> answered" in page and "25%</span> not covered" in page
    endings = dict((r[0], int(r[1])) for r in cells(page, "endings"))
    assert endings == {"answered": 2, "not_covered": 1, "pending_confirmation": 1}
    assert dict((r[0], int(r[1])) for r in cells(page, "guards")) == {"repeat": 1}
    assert page.count("<rect ") >= 3  # the chart's bars: inline SVG, no script


async def test_runs_filter_by_reason_and_place_and_page_older_runs(start_console, fake_openai):
    console = await start_console(Finds())
    svc = console.service
    await scenario.answered(svc, fake_openai, shared=True)
    await scenario.not_covered(svc, fake_openai)
    status, page = await console.get("/console/runs", params={"reason": "not_covered"})
    assert status == 200 and [r[10] for r in cells(page, "runs")] == ["does the company pay for my gym?"]
    _, shared = await console.get("/console/runs", params={"place": "shared"})
    assert [(r[2], r[10]) for r in cells(shared, "runs")] == [("shared", "do I need a receipt for a taxi?")]
    status, bad = await console.get("/console/runs", params={"reason": "wrong"})
    assert status == 400 and "reason must be one of" in bad
    # 60 more runs: the first page shows 50 and links to the rest, which holds the oldest.
    start = utcnow() - timedelta(days=1)
    for n in range(60):
        await svc.store.runs.record(_row(f"bulk{n:02d}", start + timedelta(seconds=n)))
    _, first = await console.get("/console/runs")
    assert len(cells(first, "runs")) == 51  # 50 runs and the "Older runs" row
    older = html.unescape(re.search(r'<tr id="more"><td colspan="11"><a href="([^"]+)"', first).group(1))
    status, rest = await console.get(older, headers={"HX-Request": "true"})
    assert status == 200 and "<table" not in rest  # htmx gets the rows alone
    questions = [
        html.unescape(re.sub(r"<[^>]+>", "", q)).strip() for q in re.findall(r'class="question">(.*?)</td>', rest)
    ]
    assert len(questions) == 12 and questions[-1] == "bulk question 0"


async def test_the_askers_rating_and_the_others_counts_show_on_the_overview_the_runs_list_and_the_run(
    start_console, fake_openai
):
    console = await start_console(Finds())
    svc = console.service
    reply = await scenario.answered(svc, fake_openai, shared=True)  # asked by Alice in a channel
    assert await svc.feedback(reply.run_id, "helpful", scenario.ALICE.id, "thanks")
    assert await svc.feedback(reply.run_id, "not_helpful", scenario.DANA.id)  # another reader of the channel
    _, overview = await console.get("/console/")
    _, runs = await console.get("/console/runs")
    _, run = await console.get(f"/console/runs/{reply.run_id}")
    assert "1 / 1</span> ratings helpful / not helpful" in overview
    assert [r[9] for r in cells(runs, "runs")] == ["helpful (others: 1 not_helpful)"]
    assert "the asker: helpful: “thanks” · others: 0 helpful, 1 not_helpful" in run


async def test_a_trace_shows_each_model_and_tool_call_with_arguments_results_and_the_card(start_console, fake_openai):
    console = await start_console(Finds())
    reply = await scenario.answered(console.service, fake_openai)
    status, page = await console.get(f"/console/runs/{reply.run_id}")
    assert status == 200, page
    steps = re.findall(r'<li class="step (\w+)">\s*<div class="head"><strong>\w+</strong> (\S+)', page)
    assert steps == [("model", "gpt-4o-mini"), ("tool", "search_policies"), ("model", "gpt-4o-mini")]
    assert "taxi receipts" in html.unescape(page) and "Keep receipts for every expense over 25 EUR." in page
    assert "Expenses Policy § Receipts <small>(expenses.md)</small>" in page  # what the answer cited
    card = await scenario.ticket(console.service, fake_openai)
    _, with_card = await console.get(f"/console/runs/{card.run_id}")
    assert "VPN keeps dropping" in with_card and 'class="state open">open<' in with_card


async def test_a_secret_in_a_stored_trace_is_redacted_on_the_page(start_console):
    console = await start_console()
    leaked = "sk-test-abcdef123456"  # the configured OpenAI key (tests/bot/helpers.py)
    await console.service.store.runs.record(
        _row(
            "leaky",
            utcnow(),
            trace=[
                {
                    "kind": "tool",
                    "name": "search_policies",
                    "arguments": f'{{"query": "{leaked}"}}',
                    "text": f"key {leaked}",
                }
            ],
        )
    )
    status, page = await console.get("/console/runs/leaky")
    assert status == 200 and leaked not in page and "search_policies" in page


async def test_a_restricted_trace_opens_only_for_the_operators_a_setting_names(start_console, fake_openai):
    console = await start_console(Finds())
    reply = await scenario.restricted(console.service, fake_openai)
    _, hidden = await console.get(f"/console/runs/{reply.run_id}")
    assert "built for restricted groups (all, hr)" in hidden
    assert "Finance and facilities merge" not in hidden and 'id="steps"' not in hidden
    allowed = await start_console(Finds(), console_restricted_operators="console")
    reply = await scenario.restricted(allowed.service, fake_openai)
    _, shown = await allowed.get(f"/console/runs/{reply.run_id}")
    assert "Finance and facilities merge in March." in shown


async def test_pending_actions_list_open_cards_oldest_first(start_console, fake_openai):
    console = await start_console(Finds())
    first = await scenario.ticket(console.service, fake_openai)
    second = await scenario.ticket(console.service, fake_openai)
    status, page = await console.get("/console/actions")
    rows = cells(page, "actions")
    assert status == 200 and [r[1] for r in rows] == ["open", "open"]
    assert [r[6] for r in rows] == [first.run_id, second.run_id]
    assert "summary VPN keeps dropping" in rows[0][3] and "urgency high" in rows[0][3]


async def test_a_restricted_run_hides_the_documents_it_cited_and_the_askers_comment(start_console, fake_openai):
    console = await start_console(Finds())
    reply = await scenario.restricted(console.service, fake_openai)
    comment = "wrong: finance merges with legal, not facilities"  # a comment may quote the restricted answer
    assert await console.service.feedback(reply.run_id, "not_helpful", scenario.DANA.id, comment)
    _, hidden = await console.get(f"/console/runs/{reply.run_id}")
    assert "built for restricted groups" in hidden and "not_helpful" in hidden  # the rating is a total
    assert "Reorg Plan" not in hidden and "Team changes" not in hidden  # a restricted section's name
    assert "merges with legal" not in hidden
    allowed = await start_console(Finds(), console_restricted_operators="*")
    reply = await scenario.restricted(allowed.service, fake_openai)
    _, shown = await allowed.get(f"/console/runs/{reply.run_id}")
    assert "Reorg Plan § Team changes" in shown


async def test_pending_actions_of_a_restricted_run_hide_their_arguments(start_console, fake_openai):
    console = await start_console(Finds())
    reorg = {"category": "access", "summary": "Finance and facilities merge in March", "urgency": "low"}
    fake_openai.script(scenario.tool_calls(("create_it_ticket", reorg)))
    restricted = await scenario.ask(console.service, "open a ticket about the reorg", scenario.DANA)
    public = await scenario.ticket(console.service, fake_openai)
    status, page = await console.get("/console/actions")
    rows = cells(page, "actions")
    assert status == 200 and [r[6] for r in rows] == [restricted.run_id, public.run_id]
    assert "Finance and facilities" not in page and "restricted" in rows[0][3]
    assert "VPN keeps dropping" in rows[1][3]


async def test_a_secret_in_a_cards_arguments_is_redacted_on_the_run_page(start_console, fake_openai):
    console = await start_console(Finds())
    leaked = "sk-test-abcdef123456"  # the configured OpenAI key (tests/bot/helpers.py)
    arguments = {"category": "network_vpn", "summary": f"my key {leaked} stopped working", "urgency": "high"}
    fake_openai.script(scenario.tool_calls(("create_it_ticket", arguments)))
    reply = await scenario.ask(console.service, "please open a ticket, my API key stopped working")
    status, page = await console.get(f"/console/runs/{reply.run_id}")
    assert status == 200 and 'class="state open">open<' in page and "stopped working" in page
    assert leaked not in page


def _row(run_id: str, started, trace=None) -> dict:
    return {
        "id": run_id,
        "conversation_key": f"slack::C1:{run_id}",
        "platform": "slack",
        "user_id": "U_BULK",
        "question": f"bulk question {int(run_id[-2:]) if run_id[-2:].isdigit() else 0}",
        "reason": TerminationReason.ANSWERED.value,
        "started_at": started,
        "steps": 2,
        "input_tokens": 100,
        "output_tokens": 20,
        "cost_usd": 0.0001,
        "latency_ms": 900.0,
        "model": "gpt-4o-mini",
        "trace": trace or [],
        "owner": "",
        "place": "private",
        "audience": ["all"],
    }
