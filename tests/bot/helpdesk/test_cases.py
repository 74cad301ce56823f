"""Helpdesk handoff through the real service: cases on give-up and on request, their transcript, the CLI."""

from __future__ import annotations

import io
import itertools
import json

import pytest

from adapters.cli.handoffs import show_handoffs
from bot.helpdesk import HandoffCase, case_number
from bot.redaction import REDACTED
from bot.types import Answer, GaveUp, Inbound, TerminationReason, UserRef
from tests.bot.helpers import ALICE, RecordingSender, service, settings_for
from tests.fakes.openai_server import error, text, tool_calls

pytestmark = pytest.mark.asyncio

LINK = "https://acme.slack.com/archives/C0GENERAL/p1711000000000100"
_events = itertools.count()


def slack_message(text: str, user: UserRef = ALICE, thread: str = "1711000000.000100") -> Inbound:
    return Inbound("slack", "C0GENERAL", thread, user, text, f"Ev{next(_events)}", tenant="T0TEAM", link=LINK)


def search(query: str):
    return ("search_policies", {"query": query})


async def stored_case(svc, case_id: str) -> HandoffCase:
    record = await svc.store.cases.get(case_number(case_id))
    assert record is not None
    return HandoffCase.from_record(record)


async def test_a_give_up_opens_a_case_before_the_reply_and_the_reply_carries_its_id(
    tmp_path, fake_openai, sample_index
):
    fake_openai.script(tool_calls(search("expenses")), tool_calls(search("travel booking")))
    async with service(tmp_path, fake_openai, sample_index, max_steps=2) as svc:
        sender = RecordingSender("slack")
        svc.outbox.register(sender)
        reply = await svc.handle_message(slack_message("tell me about expenses"))
        case = await stored_case(svc, reply.outcome.case_id)
        await svc.outbox.drain(5)
    outcome = reply.outcome
    assert isinstance(outcome, GaveUp) and outcome.case_id == "HD-1001"
    (posted,) = sender.posts  # what the thread gets: the give-up, naming the case already stored
    assert posted.kind == "reply" and posted.reply_outcome() == GaveUp(TerminationReason.STEP_BUDGET, outcome.text,
                                                                         case_id="HD-1001")  # fmt: skip
    assert outcome.text == (
        "I couldn't finish this reliably. I've passed this to the helpdesk as case HD-1001; "
        "someone will reply in this thread within one working day."
    )
    assert (case.reason, case.user, case.question) == (
        "step_budget",
        UserRef("U_ALICE", "Alice", "alice@example.com"),
        "tell me about expenses",
    )
    assert (case.platform, case.tenant, case.channel, case.thread, case.link) == (
        "slack",
        "T0TEAM",
        "C0GENERAL",
        "1711000000.000100",
        LINK,
    )
    assert case.run_id == reply.run_id
    transcript = case.transcript
    assert transcript["budgets"]["used"]["steps"] == 2 and transcript["budgets"]["limits"]["steps"] == 2
    (run,) = transcript["runs"]
    assert run["reason"] == "step_budget" and run["steps"] == 2
    kinds = [(s["kind"], s["name"]) for s in run["trace"]]
    assert kinds == [("model", "gpt-4o-mini"), ("tool", "search_policies")] * 2
    model_step, tool_step = run["trace"][:2]
    assert model_step["input_tokens"] > 0 and "latency_ms" in model_step and "cost_usd" in model_step
    assert tool_step["arguments"] == '{"query": "expenses"}' and tool_step["text"].startswith('{"results"')


async def test_the_transcript_holds_every_run_of_the_conversation(tmp_path, fake_openai, sample_index):
    retry_now = {"retry-after-ms": "1"}
    fake_openai.script(text("Receipts are needed over 25 EUR."), *[error(500, "upstream down", headers=retry_now)] * 3)
    async with service(tmp_path, fake_openai, sample_index) as svc:
        first = await svc.handle_message(slack_message("do I need receipts?"))
        second = await svc.handle_message(slack_message("and for taxis?"))
        case = await stored_case(svc, second.outcome.case_id)
    assert first.reason == TerminationReason.ANSWERED and second.reason == TerminationReason.MODEL_ERROR
    assert [r["question"] for r in case.transcript["runs"]] == ["do I need receipts?", "and for taxis?"]
    assert case.transcript["runs"][1]["trace"][0]["error"]
    assert case.transcript["totals"]["runs"] == 2


async def test_secrets_never_reach_a_transcript(tmp_path, fake_openai, sample_index):
    leaked = "Use key sk-test-abcdef123456 and xoxb-1234-5678-abcdefghijkl, Authorization: Bearer abcdefghijklmnop123"
    fake_openai.script(
        tool_calls(("search_policies", {"query": "password: hunter2hunter2"}), content=leaked),
        tool_calls(search("api_key=AKIAABCDEFGHIJKLMNOP")),
    )
    async with service(tmp_path, fake_openai, sample_index, max_steps=2) as svc:
        reply = await svc.handle_message(slack_message("my password is Sup3rS3cret! why can't I log in?"))
        case = await stored_case(svc, reply.outcome.case_id)
    rendered = json.dumps(case.to_json()) + case.to_markdown() + json.dumps(reply.outcome.transcript)
    for secret in ("sk-test-abcdef123456", "xoxb-1234", "abcdefghijklmnop123", "hunter2", "AKIAABCD", "Sup3rS3cret"):
        assert secret not in rendered
    assert REDACTED in case.question and REDACTED in rendered


async def test_tool_results_in_a_transcript_are_bounded(tmp_path, fake_openai, sample_index):
    fake_openai.script(tool_calls(search("annual leave")), tool_calls(search("sick leave")))
    async with service(tmp_path, fake_openai, sample_index, max_steps=2, helpdesk_transcript_result_chars=200) as svc:
        reply = await svc.handle_message(slack_message("leave?"))
        case = await stored_case(svc, reply.outcome.case_id)
    tool_texts = [s["text"] for s in case.transcript["runs"][0]["trace"] if s["kind"] == "tool"]
    assert all(len(t) <= 200 + len("…[truncated: 9999 more characters]") for t in tool_texts)
    assert all("…[truncated: " in t for t in tool_texts)


async def test_still_need_help_opens_one_case_per_answer_with_the_last_question(tmp_path, fake_openai, sample_index):
    fake_openai.script(text("Economy class for flights under 6 hours."))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await svc.handle_message(slack_message("what class can I fly?"))
        case = await svc.request_handoff(reply.conversation_key, ALICE, link=LINK + "?thread=1")
        again = await svc.request_handoff(reply.conversation_key, ALICE)
    assert isinstance(reply.outcome, Answer)
    assert (case.case_id, case.reason, case.question) == ("HD-1001", "user_request", "what class can I fly?")
    assert again.case_id == case.case_id
    assert case.link == LINK + "?thread=1"
    assert case.transcript["runs"][0]["trace"][0]["text"] == "Economy class for flights under 6 hours."
    assert "HD-1001" in case.message and "reply in this thread" in case.message


async def test_still_need_help_under_an_earlier_answer_hands_off_that_answer(tmp_path, fake_openai, sample_index):
    # the button names its answer: in a thread of two answers, the first one's click is about the first
    fake_openai.script(text("Economy class for flights under 6 hours."), text("Hotels up to 150 EUR a night."))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        first = await svc.handle_message(slack_message("what class can I fly?"))
        second = await svc.handle_message(slack_message("and the hotel limit?"))
        elsewhere = await svc.request_handoff("slack:T1:C9:other", ALICE, run_id=first.run_id)
        case = await svc.request_handoff(first.conversation_key, ALICE, run_id=first.run_id)
        forged = await svc.request_handoff(second.conversation_key, ALICE, run_id="run_not_of_this_thread")
    assert first.conversation_key == second.conversation_key
    assert (case.question, case.run_id) == ("what class can I fly?", first.run_id)
    assert (forged.question, forged.run_id) == ("and the hotel limit?", second.run_id)  # an unknown id: the newest
    assert elsewhere.run_id is None  # another thread's run is never handed off from here


async def test_asking_for_a_human_opens_a_case_without_calling_the_model(tmp_path, fake_openai, sample_index):
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await svc.handle_message(slack_message("I want to talk to a human please"))
        case = await stored_case(svc, reply.run_id)
        history = await svc.store.threads.load_history(reply.conversation_key)
    assert isinstance(reply.outcome, Answer)
    assert reply.outcome.text.startswith("Sure. I've passed this to the helpdesk as case HD-1001")
    assert case.reason == "user_request" and case.question == "I want to talk to a human please"
    assert fake_openai.requests == []
    assert history[-1]["content"] == reply.outcome.text


async def test_a_refused_write_opens_a_policy_denied_case(tmp_path, fake_openai, sample_index):
    guest = UserRef("U_GUEST", "Guest", is_guest=True)
    ticket = {"category": "access", "summary": "Give me admin rights", "urgency": "high"}
    fake_openai.script(tool_calls(("create_it_ticket", ticket)))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await svc.handle_message(slack_message("make me an admin", user=guest))
        case = await stored_case(svc, reply.outcome.case_id)
    assert reply.reason == TerminationReason.POLICY_DENIED
    assert reply.outcome.text.startswith("I'm not allowed to do that for you. I've passed this to the helpdesk as case")
    assert case.reason == "policy_denied" and case.user.id == "U_GUEST"


async def test_a_case_renders_as_a_summary_line_markdown_and_json(tmp_path, fake_openai, sample_index):
    fake_openai.script(tool_calls(search("expenses")), tool_calls(search("travel booking")))
    async with service(tmp_path, fake_openai, sample_index, max_steps=2) as svc:
        reply = await svc.handle_message(slack_message("tell me about expenses\nand per diems"))
        case = await stored_case(svc, reply.outcome.case_id)
    summary = case.summary_line()
    question = "“tell me about expenses and per diems”"
    assert summary == f"HD-1001 · Alice (U_ALICE, alice@example.com) · ran out of steps · {question} · {LINK}"
    markdown = case.to_markdown()
    assert markdown.startswith("# HD-1001: ran out of steps\n")
    assert f"- **Link:** {LINK}" in markdown
    assert "| steps | 2 | 2 |" in markdown
    assert "## Run 1: step_budget" in markdown and '- arguments: `{"query": "expenses"}`' in markdown
    data = json.loads(json.dumps(case.to_json()))
    assert data["case_id"] == "HD-1001" and data["user"]["email"] == "alice@example.com"
    assert data["transcript"]["runs"][0]["trace"][1]["name"] == "search_policies"


async def test_the_cli_lists_cases_and_prints_one_transcript(tmp_path, fake_openai, sample_index):
    fake_openai.script(tool_calls(search("expenses")), tool_calls(search("travel booking")))
    async with service(tmp_path, fake_openai, sample_index, max_steps=2) as svc:
        await svc.handle_message(slack_message("tell me about expenses"))
    settings = settings_for(tmp_path, fake_openai)
    listing, detail, as_json, missing = io.StringIO(), io.StringIO(), io.StringIO(), io.StringIO()
    assert await show_handoffs(settings, out=listing) == 0
    assert await show_handoffs(settings, "HD-1001", out=detail) == 0
    assert await show_handoffs(settings, "hd-1001", as_json=True, out=as_json) == 0
    assert await show_handoffs(settings, "HD-4242", out=missing) == 1
    header, row = listing.getvalue().splitlines()
    assert header.split()[:5] == ["case", "status", "reason", "user", "age"]
    assert row.split()[:4] == ["HD-1001", "stored", "step_budget", "Alice"] and "tell me about expenses" in row
    assert detail.getvalue().startswith("# HD-1001: ran out of steps")
    assert "Local store only" in detail.getvalue()
    assert json.loads(as_json.getvalue())["transcript"]["runs"]
    assert missing.getvalue() == "No case HD-4242.\n"


async def test_a_secret_cut_by_the_transcript_bound_is_redacted_whole(tmp_path, fake_openai, sample_index):
    token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    details = "x" * 925 + f" {token} " + "y" * 100  # the 1,000-character bound falls inside the token
    ticket = {"category": "access", "summary": "GitHub access broken", "urgency": "low", "details": details}
    fake_openai.script(tool_calls(("create_it_ticket", ticket)))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await svc.handle_message(slack_message("my github access is broken"))
        case = await svc.request_handoff(reply.conversation_key, ALICE)
    (action,) = case.transcript["actions"]
    assert action["state"] == "open" and action["arguments"]["details"].startswith("x" * 925)
    rendered = json.dumps(case.to_json()) + case.to_markdown()
    assert "ghp_" not in rendered and REDACTED in action["arguments"]["details"]
