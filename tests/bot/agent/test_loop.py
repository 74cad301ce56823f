"""The bounded loop through the real openai client against a scripted OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from bot.agent.turn import SEARCH_EXHAUSTED
from bot.errors import ConfigError
from bot.types import GIVE_UP_MESSAGE, Answer, GaveUp, TerminationReason
from bot.wiring import open_service
from tests.bot.helpers import ask, eventually, last_tool_results, service, settings_for
from tests.fakes.openai_server import FakeOpenAI, Turn, delay, error, raw, text, tool_calls

pytestmark = pytest.mark.asyncio

GIVE_UP_OPENING = GIVE_UP_MESSAGE.split(". ")[0] + "."  # the rest is the helpdesk case sentence

SEARCH = "search_policies"


def search(query: str) -> tuple[str, dict[str, str]]:
    return (SEARCH, {"query": query})


async def test_answer_cites_the_passages_the_search_returned(tmp_path, fake_openai, sample_index):
    def answer(body):
        results = json.loads(body["messages"][-1]["content"])["results"]
        return text(f"Yes, up to the limit in the policy [{results[0]['cite']}].")

    from tests.fakes.openai_server import respond

    fake_openai.script(tool_calls(search("working from another country")), respond(answer))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "can I work from portugal for 3 weeks?")
    assert reply.reason == TerminationReason.ANSWERED
    assert isinstance(reply.outcome, Answer)
    assert reply.outcome.citations, "the cited passage should come back as a citation"
    assert reply.outcome.citations[0].source
    first = fake_openai.requests[0]
    assert first.headers["authorization"] == "Bearer sk-test-abcdef123456"
    assert {t["function"]["name"] for t in first.tools} == {SEARCH, "create_it_ticket"}
    fake_openai.assert_script_consumed()


async def test_parallel_calls_run_concurrently_and_results_return_in_call_order(tmp_path, fake_openai, sample_index):
    in_flight, peak = 0, 0

    class SlowSearch:
        async def asearch(self, query, k=5, filter=None):
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.2 if "leave" in query else 0.05)  # the first call finishes last
            in_flight -= 1
            return await sample_index.asearch(query, k, filter)

    fake_openai.script(tool_calls(search("annual leave days"), search("laptop refresh")), text("Done."))
    async with service(tmp_path, fake_openai, SlowSearch()) as svc:
        reply = await ask(svc, "how much leave do I get, and when is my laptop replaced?")
    assert reply.reason == TerminationReason.ANSWERED
    assert peak == 2
    second = fake_openai.requests[1]
    call_ids = [c["id"] for c in second.messages[-3]["tool_calls"]]
    assert [m["tool_call_id"] for m in second.messages[-2:]] == call_ids
    first_result, second_result = last_tool_results(second)
    assert "Leave" in first_result["results"][0]["cite"]
    assert "Equipment" in second_result["results"][0]["cite"] or "laptop" in json.dumps(second_result).lower()


async def test_step_budget_gives_up_honestly_without_another_model_call(tmp_path, fake_openai, sample_index):
    fake_openai.script(tool_calls(search("expenses")), tool_calls(search("travel booking")))
    async with service(tmp_path, fake_openai, sample_index, max_steps=2) as svc:
        reply = await ask(svc, "tell me about expenses")
    assert reply.reason == TerminationReason.STEP_BUDGET
    assert isinstance(reply.outcome, GaveUp) and reply.outcome.text.startswith(GIVE_UP_OPENING)
    assert reply.outcome.case_id and reply.outcome.case_id in reply.outcome.text
    assert reply.outcome.transcript["transcript"]["runs"]
    assert len(fake_openai.requests) == 2
    fake_openai.assert_script_consumed()


async def test_token_budget_counts_every_call_and_refuses_the_one_that_would_overshoot(
    tmp_path, fake_openai, sample_index
):
    fake_openai.script(tool_calls(search("expenses"), usage=(5_000, 200)))
    async with service(tmp_path, fake_openai, sample_index, max_tokens=6_000) as svc:
        reply = await ask(svc, "tell me about expenses")
    assert reply.reason == TerminationReason.TOKEN_BUDGET
    assert reply.tokens == 5_200 and reply.tokens <= 6_000
    assert len(fake_openai.requests) == 1


async def test_each_call_is_capped_to_the_tokens_left(tmp_path, fake_openai, sample_index):
    fake_openai.script(tool_calls(search("expenses"), usage=(2_000, 100)), text("ok"))
    async with service(tmp_path, fake_openai, sample_index, max_tokens=6_000, max_output_tokens=2_500) as svc:
        await ask(svc, "tell me about expenses")
    first, second = fake_openai.requests
    assert first.json["max_tokens"] == 2_500
    # what is left after 2,100 spent and this request's own input: less than the usual cap
    assert 0 < second.json["max_tokens"] < 2_500


async def test_deadline_bounds_a_slow_model_call(tmp_path, fake_openai, sample_index):
    fake_openai.script(delay(20, text("too late")))  # far past the 1 s deadline
    async with service(tmp_path, fake_openai, sample_index, deadline_s=1.0) as svc:
        reply = await asyncio.wait_for(ask(svc, "what is the travel policy?"), 60)  # only stops a hung test
        fake_openai.mark("run ended")
    assert reply.reason == TerminationReason.DEADLINE
    # The run ended while the slow reply was still unsent: a run waiting for it would end after "reply 1".
    assert "request 1" in fake_openai.events_until("run ended")
    assert "reply 1" not in fake_openai.events_until("run ended")


async def test_cost_budget_refuses_a_call_whose_projection_exceeds_the_cap(tmp_path, fake_openai, sample_index):
    prices = '{"gpt-4o-mini": [10, 10]}'  # $0.00001 a token: a $0.05 cap is 5,000 tokens
    fake_openai.script(tool_calls(search("expenses"), usage=(4_000, 100)))
    async with service(tmp_path, fake_openai, sample_index, model_prices=prices, max_tokens=10**6) as svc:
        reply = await ask(svc, "tell me about expenses")
    assert reply.reason == TerminationReason.COST_BUDGET
    assert reply.cost_usd == pytest.approx(0.041)
    assert len(fake_openai.requests) == 1  # the second call was never sent


async def test_a_dollar_cap_on_a_model_without_a_price_is_refused_at_start(tmp_path, fake_openai, sample_index):
    settings = settings_for(tmp_path, fake_openai, model="my-private-llm")
    with pytest.raises(ConfigError, match="No price is known for model 'my-private-llm'"):
        await open_service(settings, searcher=sample_index)
    settings = settings_for(tmp_path, fake_openai, model="my-private-llm", model_prices='{"my-private-llm": [0, 0]}')
    svc = await open_service(settings, searcher=sample_index)
    await svc.close()


async def test_a_model_without_a_price_and_no_cap_warns_that_its_cost_is_recorded_as_zero(
    tmp_path, fake_openai, sample_index, caplog
):
    settings = settings_for(tmp_path, fake_openai, model="my-private-llm", max_cost_usd=None)
    svc = await open_service(settings, searcher=sample_index)
    await svc.close()
    (warning,) = [r.getMessage() for r in caplog.records if "No price is known" in r.getMessage()]
    assert "'my-private-llm'" in warning and "POLICYPAL_MODEL_PRICES" in warning


async def test_model_errors_after_retries_end_the_run_with_model_error(tmp_path, fake_openai, sample_index):
    retry_now = {"retry-after-ms": "1"}
    fake_openai.script(*[error(500, "upstream exploded", headers=retry_now)] * 3)
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "what is the travel policy?")
    assert reply.reason == TerminationReason.MODEL_ERROR
    assert isinstance(reply.outcome, GaveUp) and reply.outcome.text.startswith(GIVE_UP_OPENING)
    assert len(fake_openai.requests) == 3  # the SDK retried twice
    trace = await svc_trace(tmp_path, fake_openai, sample_index, reply.run_id)
    assert "sk-test-abcdef123456" not in json.dumps(trace)


async def svc_trace(tmp_path, fake, index, run_id):
    async with service(tmp_path, fake, index) as svc:
        row = await svc.store.runs.get(run_id)
    return row.trace


async def test_rate_limit_is_retried_by_the_client(tmp_path, fake_openai, sample_index):
    fake_openai.script(error(429, "slow down", headers={"retry-after-ms": "1"}), text("Here you go."))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "hello")
    assert reply.reason == TerminationReason.ANSWERED


async def test_repeated_call_is_answered_with_an_error_pointing_at_the_earlier_result(
    tmp_path, fake_openai, sample_index
):
    fake_openai.script(
        tool_calls(search("vpn error NG-412")),
        tool_calls(search("vpn error NG-412"), search("certificate renewal")),
        text("Renew the certificate."),
    )
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "what does NG-412 mean?")
    assert reply.reason == TerminationReason.ANSWERED
    repeated, fresh = last_tool_results(fake_openai.requests[2])
    assert "already called search_policies with exactly these arguments" in repeated["error"]
    assert "results" in fresh


async def test_two_turns_of_only_repeats_end_the_run_with_no_progress(tmp_path, fake_openai, sample_index):
    same = search("vpn error NG-412")
    fake_openai.script(tool_calls(same), tool_calls(same), tool_calls(same))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "what does NG-412 mean?")
    assert reply.reason == TerminationReason.NO_PROGRESS
    assert isinstance(reply.outcome, GaveUp)
    fake_openai.assert_script_consumed()


async def test_search_guard_stops_searching_after_three_searches(tmp_path, fake_openai, sample_index):
    fake_openai.script(
        tool_calls(search("parking"), search("car park"), search("parking spaces")),
        tool_calls(search("garage for employees")),
        text("It is not in the policy."),
    )
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "where can I park at the Lisbon office?")
    assert reply.reason == TerminationReason.NOT_COVERED  # the model read what came back and said so
    (guarded,) = last_tool_results(fake_openai.requests[2])
    assert guarded == {"results": [], "note": SEARCH_EXHAUSTED}


async def test_unknown_tools_and_bad_arguments_become_observations(tmp_path, fake_openai, sample_index):
    fake_openai.script(
        tool_calls(
            ("delete_all_policies", {}),
            (SEARCH, '{"query": "leave'),  # not JSON
            (SEARCH, {"query": "leave", "limit": 3}),  # breaks the schema
            ("create_it_ticket", {"category": "printers", "summary": "x", "urgency": "soon"}),
        ),
        text("Sorry, let me answer directly."),
    )
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "hello")
    assert reply.reason == TerminationReason.ANSWERED
    unknown, not_json, schema, ticket = last_tool_results(fake_openai.requests[1])
    assert "Unknown tool 'delete_all_policies'" in unknown["error"]
    assert "search_policies, create_it_ticket" in unknown["error"]
    assert "not valid JSON" in not_json["error"]
    assert "Additional properties are not allowed ('limit' was unexpected)" in schema["error"]
    assert "category: 'printers' is not one of" in ticket["error"]
    assert "urgency: 'soon' is not one of" in ticket["error"]
    assert "summary: 'x' is too short" in ticket["error"]


async def test_a_tool_that_raises_becomes_an_error_observation(tmp_path, fake_openai, caplog):
    class BrokenIndex:
        async def asearch(self, query, k=5, filter=None):
            raise RuntimeError("index file is corrupt")

    fake_openai.script(tool_calls(search("leave")), text("The search failed; please ask the helpdesk."))
    async with service(tmp_path, fake_openai, BrokenIndex()) as svc:
        reply = await ask(svc, "how much leave?")
    assert reply.reason == TerminationReason.ANSWERED
    (observation,) = last_tool_results(fake_openai.requests[1])
    assert observation["error"] == "search_policies failed: RuntimeError: index file is corrupt"
    assert "Traceback" in caplog.text or any(r.exc_info for r in caplog.records)


async def test_tool_results_are_capped_with_a_visible_marker(tmp_path, fake_openai, sample_index):
    fake_openai.script(tool_calls(search("annual leave allowance by tenure")), text("ok"))
    async with service(tmp_path, fake_openai, sample_index, tool_result_chars=300) as svc:
        await ask(svc, "leave?")
    content = fake_openai.requests[1].messages[-1]["content"]
    assert len(content) <= 300
    observation = json.loads(content)  # still valid JSON: the best passage alone, cut to fit
    assert "…[truncated: " in observation["truncated"]
    (passage,) = observation["results"]  # not an empty result, which would read as "not in the policy"
    assert passage["cite"].startswith("Leave and Holidays Policy › Annual leave") and passage["cut"]


async def test_compaction_keeps_system_prompt_question_and_last_turns(tmp_path, fake_openai, sample_index):
    queries = ["annual leave", "sick leave", "travel class", "expenses receipts"]
    fake_openai.script(
        *[tool_calls(search(q)) for q in queries],
        text("- searched leave and sick leave; found [Leave Policy] passages"),  # the summary call
        text("Here is everything."),
    )
    async with service(
        tmp_path, fake_openai, sample_index, compact_at_tokens=1_500, max_searches=10, max_steps=8, max_tokens=60_000
    ) as svc:
        reply = await ask(svc, "the original question about leave and travel")
    assert reply.reason == TerminationReason.ANSWERED, reply
    summary_request = next(r for r in fake_openai.requests if not r.tools)
    assert summary_request.messages[0]["content"].startswith("You compress agent conversation history")
    after = fake_openai.requests[fake_openai.requests.index(summary_request) + 1]
    assert after.messages[0]["role"] == "system" and after.messages[0]["content"].startswith("You are PolicyPal")
    assert after.messages[1] == {"role": "user", "content": "the original question about leave and travel"}
    assert after.messages[2]["content"].startswith("Summary of my earlier steps")
    fake_openai.assert_script_consumed()  # the strict fake refused any request with a split call/result pair


async def test_a_run_can_be_cancelled(tmp_path, fake_openai, sample_index):
    from bot.types import Inbound
    from tests.bot.helpers import ALICE

    fake_openai.script(delay(20, text("never")))
    cancel = asyncio.Event()
    async with service(tmp_path, fake_openai, sample_index) as svc:
        inbound = Inbound("console", "terminal", "t9", ALICE, "slow question", event_id="cancel-1")
        task = asyncio.create_task(svc.handle_message(inbound, cancel))
        await eventually(lambda: "request 1" in fake_openai.events, timeout_s=30)  # cancelled mid-call
        cancel.set()
        reply = await asyncio.wait_for(task, 60)  # only stops a hung test
        fake_openai.mark("run ended")
    assert reply.reason == TerminationReason.CANCELLED
    assert isinstance(reply.outcome, GaveUp)
    assert "reply 1" not in fake_openai.events_until("run ended")  # it did not wait for the model's reply


async def test_a_retried_event_never_starts_a_second_run(tmp_path, fake_openai, sample_index):
    from bot.types import Inbound
    from tests.bot.helpers import ALICE, answer_messages, deliver

    fake_openai.script(text("Hello!"))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        answered = answer_messages(svc)
        inbound = Inbound("slack", "C1", "171.1", ALICE, "hi", event_id="Ev123")
        first = await deliver(svc, inbound)
        await svc.inbox.drain(5)
        again = await deliver(svc, inbound)  # the platform never saw the ack and sends it again
        await svc.inbox.drain(5)
        runs = await svc.store.runs.of_conversation(inbound.conversation_key)
    assert (first, again) == (True, False)
    ((_, reply),) = answered
    assert reply is not None and [run.id for run in runs] == [reply.run_id]
    assert len(fake_openai.requests) == 1


async def test_every_run_has_a_stored_trace_with_tokens_cost_and_latency(tmp_path, fake_openai, sample_index):
    fake_openai.script(tool_calls(search("travel"), usage=(1_000, 50)), text("Fly economy.", usage=(1_500, 20)))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "what class can I fly?")
        row = await svc.store.runs.get(reply.run_id)
    assert row.reason == "answered" and row.status == "finished"
    assert (row.steps, row.input_tokens, row.output_tokens) == (2, 2_500, 70)
    assert row.cost_usd == pytest.approx((2_500 * 0.15 + 70 * 0.60) / 1e6)
    kinds = [step["kind"] for step in row.trace]
    assert kinds == ["model", "tool", "model"]
    assert all("latency_ms" in step for step in row.trace)
    assert row.trace[1]["arguments"] == '{"query": "travel"}'


async def test_a_tool_still_running_at_the_deadline_is_cut_off_and_recorded(tmp_path, fake_openai, sample_index):
    class StuckIndex:  # puts its searches on the fake's timeline, beside the run's end
        async def asearch(self, query, k=5, filter=None):
            fake_openai.mark(f"search {query} started")
            await asyncio.sleep(20)  # far past the 1.5 s deadline
            fake_openai.mark(f"search {query} finished")
            return []

    fake_openai.script(tool_calls(search("leave"), search("travel")))
    async with service(tmp_path, fake_openai, StuckIndex(), deadline_s=1.5) as svc:
        reply = await asyncio.wait_for(ask(svc, "leave and travel?"), 60)  # only stops a hung test
        fake_openai.mark("run ended")
        row = await svc.store.runs.get(reply.run_id)
    assert reply.reason == TerminationReason.DEADLINE
    before_the_end = fake_openai.events_until("run ended")
    assert {"search leave started", "search travel started"} <= set(before_the_end)  # running at the deadline
    assert not [e for e in before_the_end if e.endswith("finished")]  # and not waited for
    assert [step.get("error") for step in row.trace if step["kind"] == "tool"] == ["timeout", "timeout"]


def _completion(message) -> Turn:
    """A reply body written out by hand, for shapes the turn builders cannot make."""
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini", "choices": [choice]}
    return raw(200, json.dumps(body), headers={"content-type": "application/json"})


def _named(name) -> Turn:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": '{"query": "receipts"}'}}
    return Turn(message={"role": "assistant", "content": None, "tool_calls": [call]}, finish_reason="tool_calls")


BADLY_SHAPED_TURNS = {
    "tool name is a number": _named(123),
    "tool name is a list": _named([SEARCH]),
    "message is null": _completion(None),
    "content is a number": Turn(message={"role": "assistant", "content": 5}, usage=(10, 5)),
}


@pytest.mark.parametrize("turn", BADLY_SHAPED_TURNS.values(), ids=BADLY_SHAPED_TURNS.keys())
async def test_a_badly_shaped_reply_ends_the_run_with_model_error_and_a_stored_trace(
    tmp_path, fake_openai, sample_index, turn
):
    fake_openai.script(turn)
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "how do receipts work?")
        row = await svc.store.runs.get(reply.run_id)
    assert reply.reason == TerminationReason.MODEL_ERROR
    assert isinstance(reply.outcome, GaveUp) and reply.outcome.case_id
    assert (row.status, row.reason) == ("finished", "model_error")
    assert "malformed reply" in row.trace[-1]["error"]


async def test_text_parts_and_usage_as_strings_still_make_an_answer(tmp_path, fake_openai, sample_index):
    parts = [{"type": "text", "text": "Keep every receipt."}]
    usage = {"prompt_tokens": "900", "completion_tokens": "12"}
    fake_openai.script(Turn(message={"role": "assistant", "content": parts}, usage=usage))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "how do receipts work?")
    assert reply.reason == TerminationReason.ANSWERED
    assert reply.outcome.text == "Keep every receipt."
    assert reply.tokens > 0  # estimated: a garbled count is never a free call


async def test_arguments_nested_past_the_parsers_limit_become_an_error_observation(tmp_path, fake_openai, sample_index):
    deep = '{"query": ' + "[" * 3_000 + "]" * 3_000 + "}"
    fake_openai.script(tool_calls((SEARCH, deep)), text("It is not in the policy."))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "receipts?")
    assert reply.reason == TerminationReason.ANSWERED
    (observation,) = last_tool_results(fake_openai.requests[1])
    assert "nested too deeply" in observation["error"]


async def test_a_lone_surrogate_in_a_users_message_is_replaced_and_the_run_answers(tmp_path, fake_openai, sample_index):
    fake_openai.script(text("Hello!"))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "\ud800 hello")
        row = await svc.store.runs.get(reply.run_id)
        history = await svc.store.threads.load_history(reply.conversation_key)
    assert reply.reason == TerminationReason.ANSWERED
    assert fake_openai.requests[0].messages[-1] == {"role": "user", "content": "\ufffd hello"}
    assert row.question == "\ufffd hello" and row.reason == "answered"
    assert history[0] == {"role": "user", "content": "\ufffd hello"}


async def test_a_bug_inside_the_loop_still_ends_the_run_with_a_reason_a_trace_and_a_case(
    tmp_path, fake_openai, sample_index, monkeypatch, caplog
):
    async def broken_turn(*args, **kwargs):  # stands in for any bug of ours between two model calls
        raise RuntimeError("boom")

    monkeypatch.setattr("bot.agent.loop.run_turn", broken_turn)
    fake_openai.script(tool_calls((SEARCH, '{"query": "receipts"}')))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "how do receipts work?")
        row = await svc.store.runs.get(reply.run_id)
    assert reply.reason == TerminationReason.INTERNAL_ERROR
    assert isinstance(reply.outcome, GaveUp) and reply.outcome.case_id
    assert (row.status, row.reason) == ("finished", "internal_error")
    assert row.trace[-1]["kind"] == "error" and row.trace[-1]["error"] == "boom"
    assert "unexpected error in the agent loop" in caplog.text and "RuntimeError: boom" in caplog.text


class EchoSearch:
    """A searcher whose one passage names the query, so a test can tell which call a result answers."""

    async def asearch(self, query, k=5, filter=None):
        from retrieval import Passage

        return [Passage(score=0.9, doc_id="d", title="T", heading=f"T > {query}", source="s", text=f"about {query}")]


async def test_parallel_calls_sharing_one_id_each_get_their_own_result(tmp_path, fake_openai):
    fake_openai.script(tool_calls(search("receipts"), search("taxis"), ids=("call_0", "call_0")), text("Done."))
    async with service(tmp_path, fake_openai, EchoSearch()) as svc:
        reply = await ask(svc, "receipts and taxis?")
    assert reply.reason == TerminationReason.ANSWERED
    second = fake_openai.requests[1]
    call_ids = [c["id"] for c in second.messages[-3]["tool_calls"]]
    assert len(set(call_ids)) == 2
    assert [m["tool_call_id"] for m in second.messages[-2:]] == call_ids
    receipts, taxis = last_tool_results(second)
    assert receipts["results"][0]["text"] == "about receipts"
    assert taxis["results"][0]["text"] == "about taxis"


async def test_an_answer_stopped_by_the_content_filter_is_not_given_as_an_answer(tmp_path, fake_openai, sample_index):
    fake_openai.script(text("You can claim the full amount if you", finish_reason="content_filter"))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "can I claim my taxi?")
        row = await svc.store.runs.get(reply.run_id)
    assert reply.reason == TerminationReason.MODEL_ERROR
    assert isinstance(reply.outcome, GaveUp) and reply.outcome.case_id
    assert row.trace[-1]["stop_reason"] == "content_filter"


async def test_arguments_a_server_encoded_twice_are_decoded_and_the_tool_runs(tmp_path, fake_openai):
    twice = json.dumps(json.dumps({"query": "receipts"}))  # '"{\"query\": \"receipts\"}"'
    fake_openai.script(tool_calls((SEARCH, twice)), text("Keep receipts [T › receipts]."))
    async with service(tmp_path, fake_openai, EchoSearch()) as svc:
        reply = await ask(svc, "receipts?")
    assert reply.reason == TerminationReason.ANSWERED
    (observation,) = last_tool_results(fake_openai.requests[1])
    assert observation["results"][0]["text"] == "about receipts"


async def test_a_huge_tool_error_is_capped_like_any_result(tmp_path, fake_openai):
    class FailingIndex:
        async def asearch(self, query, k=5, filter=None):
            raise RuntimeError('qdrant answered 500: {"status": {"error": "' + "shard unavailable; " * 2_000 + '"}}')

    fake_openai.script(tool_calls(search("leave")), text("The search failed; please ask the helpdesk."))
    async with service(tmp_path, fake_openai, FailingIndex(), tool_result_chars=1_000) as svc:
        reply = await ask(svc, "how much leave?")
    assert reply.reason == TerminationReason.ANSWERED
    content = fake_openai.requests[1].messages[-1]["content"]
    assert len(content) <= 1_000
    assert "…[truncated: " in json.loads(content)["truncated"]


async def test_an_empty_summary_does_not_fold_the_history_away(tmp_path, fake_openai, sample_index):
    queries = ["annual leave", "sick leave", "travel class", "expenses receipts"]
    fake_openai.script(
        *[tool_calls(search(q)) for q in queries],
        text("", finish_reason="length"),  # the summary call: a reasoning model spent its cap thinking
        text("Here is everything."),
    )
    async with service(
        tmp_path, fake_openai, sample_index, compact_at_tokens=1_500, max_searches=10, max_steps=8, max_tokens=60_000
    ) as svc:
        reply = await ask(svc, "the original question about leave and travel")
        row = await svc.store.runs.get(reply.run_id)
    assert reply.reason == TerminationReason.ANSWERED, reply
    summary_request = next(r for r in fake_openai.requests if not r.tools)
    after = fake_openai.requests[fake_openai.requests.index(summary_request) + 1]
    assert len([m for m in after.messages if m["role"] == "tool"]) == len(queries)  # every result still there
    assert not any(str(m.get("content") or "").startswith("Summary of my earlier steps") for m in after.messages)
    assert any(step["kind"] == "compaction" and step.get("error") == "empty summary" for step in row.trace)
    fake_openai.assert_script_consumed()


async def test_a_head_over_the_threshold_is_not_summarised_and_the_token_budget_ends_the_run(
    tmp_path, fake_openai, sample_index
):
    """The system prompt and a long question alone pass ``compact_at_tokens``: no summary can get under it, so
    none is asked for (each turn used to summarise the last summary again) and the token budget ends the run."""
    from tests.fakes.openai_server import respond

    topics = itertools.cycle(["annual leave", "travel class", "expenses receipts", "laptop refresh", "VPN access"])
    searches = itertools.count(1)

    def turn(body):
        if not body.get("tools"):  # a summary request
            return text("- searched leave, travel and expenses; found [Leave Policy] passages")
        return tool_calls(search(f"{next(topics)} {next(searches)}"))  # never a repeat

    fake_openai.script(*[respond(turn) for _ in range(20)])
    question = "Tell me everything about leave, travel and expenses, with every detail please. " * 80
    async with service(
        tmp_path,
        fake_openai,
        sample_index,
        compact_at_tokens=1_500,
        max_searches=20,
        max_steps=20,
        max_tokens=60_000,
        max_cost_usd=10.0,
        deadline_s=600,
    ) as svc:
        reply = await ask(svc, question)
        row = await svc.store.runs.get(reply.run_id)
    assert reply.reason == TerminationReason.TOKEN_BUDGET, reply
    assert row is not None and row.reason == TerminationReason.TOKEN_BUDGET
    assert len(fake_openai.requests) > 4  # past the three kept turns: there was a middle to fold
    assert [n for n, r in enumerate(fake_openai.requests) if not r.tools] == []  # no summary request
    compactions = [step for step in row.trace if step["kind"] == "compaction"]
    assert [step.get("error") for step in compactions] == [  # why, said once
        "not compacted: the system prompt, the thread and the question alone reach the threshold"
    ]


def record_retry_waits(monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI) -> None:
    """Put every wait the openai SDK starts before a retry on the fake's timeline, as "retry wait"."""
    from openai._base_client import AsyncAPIClient

    sleep_for_retry = AsyncAPIClient._sleep_for_retry

    async def recorded(self, **kwargs):
        fake.mark("retry wait")
        return await sleep_for_retry(self, **kwargs)

    monkeypatch.setattr(AsyncAPIClient, "_sleep_for_retry", recorded)


async def test_a_rate_limit_asking_to_wait_past_the_deadline_ends_the_run_at_once(
    tmp_path, fake_openai, sample_index, monkeypatch
):
    record_retry_waits(monkeypatch, fake_openai)
    fake_openai.script(error(429, "Rate limit reached", headers={"retry-after": "30"}), text("too late"))
    async with service(tmp_path, fake_openai, sample_index, deadline_s=3.0) as svc:
        reply = await asyncio.wait_for(ask(svc, "what is the travel policy?"), 60)  # only stops a hung test
        fake_openai.mark("run ended")
        row = await svc.store.runs.get(reply.run_id)
    assert reply.reason == TerminationReason.MODEL_ERROR
    # At once: from the 429 straight to the end, with no wait begun for a retry that could only come too late.
    assert fake_openai.events_until("run ended") == ["request 1", "reply 1"]
    assert "HTTP 429: Rate limit reached" in row.trace[-1]["error"]
    assert fake_openai.remaining == 1


async def test_a_cited_section_does_not_also_cite_its_parent(tmp_path, fake_openai, sample_index):
    """The parent section's cite is the start of the child's: only the section the answer names counts."""
    cites: list[str] = []

    def answer(body):
        results = json.loads(body["messages"][-1]["content"])["results"]
        cites.extend(result["cite"] for result in results)
        child = next(c for c in cites if any(c.startswith(other + " › ") for other in cites))
        return text(f"NG-412 means your device certificate has expired [{child}].")

    from tests.fakes.openai_server import respond

    fake_openai.script(tool_calls(search("VPN error NG-412 troubleshooting")), respond(answer))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "What does VPN error NG-412 mean?")
    assert isinstance(reply.outcome, Answer)
    parents = [c for c in cites if any(other.startswith(c + " › ") for other in cites)]
    assert parents, "the search should return a section and its parent for this test to mean anything"
    assert [f"{c.title} › {c.heading}" for c in reply.outcome.citations] == [
        next(c for c in cites if any(c.startswith(p + " › ") for p in parents))
    ]
