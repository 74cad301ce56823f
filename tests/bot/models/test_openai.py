"""OpenAIChatModel through the real AsyncOpenAI client against a scripted OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import SecretStr

from bot.config import Settings, load_settings
from bot.errors import ModelError, ModelTimeout
from bot.models import OpenAIChatModel
from bot.models.offline import OfflineModel
from bot.types import ModelReply
from bot.wiring import build_model
from tests.fakes.openai_server import FakeOpenAI, delay, error, raw, respond, text, tool_calls

API_KEY = "sk-test-0123456789abcdefSECRET"
FAST_RETRY = {"retry-after-ms": "1"}  # the SDK honours it, so retried tests stay fast
SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search_policies",
        "description": "Search the policy documents.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}
QUESTION = [
    {"role": "system", "content": "You are PolicyPal."},
    {"role": "user", "content": "Can I work from abroad?"},
]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=API_KEY) as server:
        yield server


def model_for(fake: FakeOpenAI, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel(api_key=API_KEY, base_url=fake.base_url, model="gpt-4o-mini", **kwargs)


async def complete(model: OpenAIChatModel, tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> ModelReply:
    options = {"max_tokens": 300, "timeout": 5.0, **kwargs}
    return await model.complete(QUESTION, [SEARCH_TOOL] if tools is None else tools, **options)


async def test_text_reply_is_mapped_with_usage_and_model(fake: FakeOpenAI) -> None:
    fake.script(text("You may work abroad for 30 days. [Remote › Abroad]", usage=(120, 14)))

    reply = await complete(model_for(fake))

    assert reply.text == "You may work abroad for 30 days. [Remote › Abroad]"
    assert reply.tool_calls == ()
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (120, 14)
    assert reply.finish_reason == "stop"
    assert reply.model == "gpt-4o-mini"
    fake.assert_script_consumed()


async def test_parallel_tool_calls_keep_raw_arguments_and_ids(fake: FakeOpenAI) -> None:
    fake.script(
        tool_calls(
            ("search_policies", {"query": "work abroad"}),
            ("search_policies", '{"query": "expenses", }'),  # invalid JSON, passed on untouched
            ids=("call_a", "call_b"),
        )
    )

    reply = await complete(model_for(fake))

    assert reply.finish_reason == "tool_calls"
    assert [(c.id, c.name) for c in reply.tool_calls] == [("call_a", "search_policies"), ("call_b", "search_policies")]
    assert json.loads(reply.tool_calls[0].arguments) == {"query": "work abroad"}
    assert reply.tool_calls[1].arguments == '{"query": "expenses", }'
    assert reply.as_message()["tool_calls"][1]["function"]["arguments"] == '{"query": "expenses", }'


async def test_request_carries_key_tools_parallel_calls_and_token_cap(fake: FakeOpenAI) -> None:
    fake.script(text("ok"))

    await complete(model_for(fake, max_tokens_param="max_completion_tokens"), max_tokens=321)

    sent = fake.requests[0]
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert sent.json["model"] == "gpt-4o-mini"
    assert sent.messages == QUESTION
    assert sent.tools == [SEARCH_TOOL]
    assert sent.json["parallel_tool_calls"] is True
    assert sent.json["tool_choice"] == "auto"
    assert sent.json["max_completion_tokens"] == 321
    assert "max_tokens" not in sent.json


async def test_compatible_server_gets_max_tokens_by_default(fake: FakeOpenAI) -> None:
    fake.script(text("ok"))

    await complete(model_for(fake), max_tokens=200)

    assert fake.requests[0].json["max_tokens"] == 200
    assert "max_completion_tokens" not in fake.requests[0].json


async def test_no_tools_means_no_tool_options(fake: FakeOpenAI) -> None:
    fake.script(text("summary"))

    await complete(model_for(fake), tools=[])

    assert not {"tools", "tool_choice", "parallel_tool_calls"} & fake.requests[0].json.keys()
    fake.assert_script_consumed()


async def test_rate_limit_is_retried_by_the_sdk(fake: FakeOpenAI) -> None:
    fake.script(error(429, "Rate limit reached for requests", headers=FAST_RETRY), text("after the retry"))

    reply = await complete(model_for(fake))

    assert reply.text == "after the retry"
    assert len(fake.requests) == 2
    fake.assert_script_consumed()


async def test_server_error_after_retries_raises_model_error_with_status(fake: FakeOpenAI) -> None:
    fake.script(*[error(500, "The server had an error while processing your request.", headers=FAST_RETRY)] * 3)

    with pytest.raises(ModelError) as caught:
        await complete(model_for(fake, max_retries=2))

    assert not isinstance(caught.value, ModelTimeout)
    assert "HTTP 500" in str(caught.value)
    assert "The server had an error" in str(caught.value)
    assert len(fake.requests) == 3
    fake.assert_script_consumed()


async def test_slow_reply_raises_model_timeout_within_the_timeout(fake: FakeOpenAI) -> None:
    fake.script(delay(30, text("too late")))  # the 0.3 s timeout must end the call long before this

    with pytest.raises(ModelTimeout, match=r"no reply within 0\.3 s"):
        await complete(model_for(fake), timeout=0.3)
    fake.mark("timed out")

    # Raised while the reply was still unsent, not after waiting for it (that order would be "reply 1" first).
    assert fake.events_until("timed out") == ["request 1"]


async def test_api_key_never_appears_in_errors(fake: FakeOpenAI) -> None:
    fake.script(error(401, f"Incorrect API key provided: {API_KEY}. Find your key at platform.openai.com."))

    with pytest.raises(ModelError) as caught:
        await complete(model_for(fake))

    message = str(caught.value)
    assert "HTTP 401" in message and "Incorrect API key provided" in message
    assert API_KEY not in message and "SECRET" not in message
    assert caught.value.__suppress_context__  # tracebacks do not show the SDK error that quoted the key


async def test_wrong_key_is_rejected_without_echoing_it(fake: FakeOpenAI) -> None:
    wrong = OpenAIChatModel(api_key="sk-wrong-key-9876543210", base_url=fake.base_url, model="gpt-4o-mini")

    with pytest.raises(ModelError) as caught:
        await complete(wrong)

    assert "HTTP 401" in str(caught.value)
    assert "9876543210" not in str(caught.value)


async def test_missing_usage_is_estimated_not_zero(fake: FakeOpenAI) -> None:
    fake.script(text("An answer from a server that reports no usage.", usage=None))

    reply = await complete(model_for(fake))

    assert reply.usage.input_tokens > 10
    assert reply.usage.output_tokens >= len("An answer from a server that reports no usage.") // 4


async def test_a_prompt_reported_as_zero_tokens_is_estimated_and_the_output_count_kept(fake: FakeOpenAI) -> None:
    fake.script(text("Keep every receipt.", usage=(0, 6)))  # Ollama, when it had the prompt cached (ollama#5370)

    reply = await complete(model_for(fake))

    assert reply.usage.input_tokens > 10  # the system prompt, the question and the tool schema
    assert reply.usage.output_tokens == 6


async def test_garbage_body_becomes_model_error(fake: FakeOpenAI) -> None:
    fake.script(raw(502, "<html>Bad gateway</html>", headers={"x-should-retry": "false"}))

    with pytest.raises(ModelError, match="HTTP 502: <html>Bad gateway</html>"):
        await complete(model_for(fake))


async def test_connection_refused_becomes_model_error() -> None:
    async with FakeOpenAI() as gone:
        base_url = gone.base_url
    model = OpenAIChatModel(api_key=API_KEY, base_url=base_url, model="gpt-4o-mini", max_retries=0)

    with pytest.raises(ModelError, match="connection failed"):
        await complete(model)


async def test_responder_sees_the_request_and_tool_results_are_checked(fake: FakeOpenAI) -> None:
    fake.script(
        tool_calls(("search_policies", {"query": "abroad"}), ids=("call_1",)),
        respond(lambda body: text(f"saw {len(body['messages'])} messages")),
    )
    model = model_for(fake)
    first = await complete(model)
    history = [*QUESTION, first.as_message(), {"role": "tool", "tool_call_id": "call_1", "content": "{}"}]

    second = await model.complete(history, [SEARCH_TOOL], max_tokens=100, timeout=5)

    assert second.text == "saw 4 messages"
    fake.assert_script_consumed()


async def test_unanswered_tool_call_is_rejected_like_the_real_api(fake: FakeOpenAI) -> None:
    dangling = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_x", "type": "function", "function": {"name": "search_policies", "arguments": "{}"}}
            ],
        },
    ]

    with pytest.raises(ModelError, match=r"HTTP 400: .*call_x"):
        await model_for(fake).complete(dangling, [SEARCH_TOOL], max_tokens=100, timeout=5)

    assert fake.problems and "call_x" in fake.problems[0]


async def test_exhausted_script_is_an_error_and_recorded(fake: FakeOpenAI) -> None:
    with pytest.raises(ModelError, match="script exhausted"):
        await complete(model_for(fake))

    assert len(fake.requests) == 1  # not retried
    with pytest.raises(AssertionError, match="script exhausted"):
        fake.assert_script_consumed()


def test_fake_runs_in_a_background_thread() -> None:
    import asyncio

    with FakeOpenAI() as fake:
        fake.script(text("from the thread"))
        model = OpenAIChatModel(api_key=API_KEY, base_url=fake.base_url, model="gpt-4o-mini")
        reply = asyncio.run(model.complete(QUESTION, [], max_tokens=50, timeout=5))
    assert reply.text == "from the thread"
    fake.assert_script_consumed()


def test_build_model_picks_offline_without_a_key() -> None:
    assert isinstance(build_model(Settings(openai_api_key=None)), OfflineModel)
    assert isinstance(build_model(Settings(openai_api_key=SecretStr(""))), OfflineModel)


def test_build_model_picks_the_client_with_a_key() -> None:
    settings = Settings(openai_api_key=SecretStr(API_KEY), openai_base_url="http://127.0.0.1:9/v1", model="m-1")
    model = build_model(settings)
    assert isinstance(model, OpenAIChatModel)
    assert model.name == "m-1"


def test_an_empty_base_url_as_compose_passes_it_means_openai_not_an_empty_url(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "")  # docker-compose's ${OPENAI_BASE_URL:-} for api.openai.com users
    model = build_model(load_settings(_env_file=None))
    assert isinstance(model, OpenAIChatModel)
    # The SDK reads OPENAI_BASE_URL itself when given None, so this is where the request would go.
    assert str(model._client.base_url) == "https://api.openai.com/v1/"


def completion_body(message: Any = None, **fields: Any) -> dict[str, Any]:
    """A chat.completion body with one choice; ``fields`` override or add top-level fields."""
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [choice],
    } | fields


def call_message(call: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def json_reply(body: Any):
    return raw(200, json.dumps(body), headers={"content-type": "application/json"})


SEARCH_CALL = {"id": "c1", "type": "function", "function": {"name": "search_policies", "arguments": "{}"}}
BADLY_SHAPED = {
    "tool name is a number": call_message({**SEARCH_CALL, "function": {"name": 123, "arguments": "{}"}}),
    "tool name is a list": call_message({**SEARCH_CALL, "function": {"name": ["search_policies"], "arguments": "{}"}}),
    "call id is a number": call_message({**SEARCH_CALL, "id": 7}),
    "function is null": call_message({**SEARCH_CALL, "function": None}),
    "tool call is a string": call_message("search_policies"),
    "tool_calls is an object": {"role": "assistant", "content": None, "tool_calls": {"a": 1}},
    "content is a number": {"role": "assistant", "content": 5},
    "content parts are not text": {"role": "assistant", "content": [{"type": "image_url", "image_url": {}}]},
    "message is null": None,
}


@pytest.mark.parametrize("message", BADLY_SHAPED.values(), ids=BADLY_SHAPED.keys())
async def test_a_badly_shaped_reply_is_a_model_error_not_a_crash_later(fake: FakeOpenAI, message: Any) -> None:
    fake.script(json_reply(completion_body(message)))

    with pytest.raises(ModelError, match="malformed reply"):
        await complete(model_for(fake))


@pytest.mark.parametrize(
    "body",
    [[1, 2], "a string", completion_body(choices=None), {**completion_body(), "choices": [{"index": 0}]}],
    ids=["body is a list", "body is a string", "choices is null", "message is missing"],
)
async def test_a_body_that_is_not_a_completion_is_a_model_error(fake: FakeOpenAI, body: Any) -> None:
    fake.script(json_reply(body))

    with pytest.raises(ModelError, match="malformed reply"):
        await complete(model_for(fake))


async def test_content_sent_as_text_parts_is_joined_into_the_text(fake: FakeOpenAI) -> None:
    parts = [{"type": "text", "text": "Keep receipts "}, {"type": "text", "text": "[Expenses › Receipts]."}]
    fake.script(json_reply(completion_body({"role": "assistant", "content": parts})))

    reply = await complete(model_for(fake))

    assert reply.text == "Keep receipts [Expenses › Receipts]."


async def test_usage_counts_that_are_not_numbers_fall_back_to_the_estimate(fake: FakeOpenAI) -> None:
    usage = {"prompt_tokens": "1000", "completion_tokens": "5"}  # no total: the SDK keeps the strings as sent
    fake.script(json_reply(completion_body({"role": "assistant", "content": "An answer."}, usage=usage)))

    reply = await complete(model_for(fake))

    assert isinstance(reply.usage.input_tokens, int) and reply.usage.input_tokens > 10
    assert isinstance(reply.usage.output_tokens, int) and reply.usage.output_tokens > 0


async def test_lone_surrogates_in_a_reply_become_replacement_characters(fake: FakeOpenAI) -> None:
    fake.script(tool_calls(("search_policies", '{"query": "vpn \ud800"}'), content="Looking \udfff up"))

    reply = await complete(model_for(fake))

    assert reply.text == "Looking \ufffd up"
    assert reply.tool_calls[0].arguments == '{"query": "vpn \ufffd"}'


async def test_calls_sharing_an_id_get_ids_of_their_own(fake: FakeOpenAI) -> None:
    fake.script(
        tool_calls(
            ("search_policies", {"query": "receipts"}),
            ("search_policies", {"query": "taxis"}),
            ("search_policies", {"query": "hotels"}),
            ids=("call_0", "call_0", "call_0_1"),
        )
    )

    reply = await complete(model_for(fake))

    ids = [call.id for call in reply.tool_calls]
    assert ids[0] == "call_0" and ids[2] == "call_0_1"
    assert len(set(ids)) == 3
    assert [c["id"] for c in reply.as_message()["tool_calls"]] == ids


def record_retry_waits(monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI) -> None:
    """Put every wait the openai SDK starts before a retry on the fake's timeline, as "retry wait"."""
    from openai._base_client import AsyncAPIClient

    sleep_for_retry = AsyncAPIClient._sleep_for_retry

    async def recorded(self: AsyncAPIClient, **kwargs: Any) -> None:
        fake.mark("retry wait")
        await sleep_for_retry(self, **kwargs)

    monkeypatch.setattr(AsyncAPIClient, "_sleep_for_retry", recorded)


async def test_a_retry_after_past_the_timeout_fails_at_once_with_the_status(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_retry_waits(monkeypatch, fake)
    fake.script(error(429, "Rate limit reached for requests", headers={"retry-after": "30"}), text("too late"))

    with pytest.raises(ModelError) as caught:
        await complete(model_for(fake), timeout=2.0)
    fake.mark("failed")

    # At once: from the 429 to the error with no wait begun for a retry that could only come after the 2 s
    # timeout (waiting it out would read "retry wait" here, and end in a ModelTimeout).
    assert fake.events_until("failed") == ["request 1", "reply 1"]
    assert not isinstance(caught.value, ModelTimeout)
    assert "HTTP 429" in str(caught.value) and "Rate limit reached" in str(caught.value)
    assert fake.remaining == 1


async def test_a_retry_after_within_the_timeout_is_still_waited_for(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_retry_waits(monkeypatch, fake)
    fake.script(error(503, "Overloaded", headers={"retry-after-ms": "200"}), text("after the retry"))

    reply = await complete(model_for(fake), timeout=2.0)

    assert reply.text == "after the retry"
    assert fake.events == ["request 1", "reply 1", "retry wait", "request 2", "reply 2"]
    fake.assert_script_consumed()


async def test_a_reply_with_an_error_instead_of_choices_says_what_the_error_was(fake: FakeOpenAI) -> None:
    body = {"id": "gen-1", "object": "chat.completion", "error": {"message": "Provider returned error", "code": 502}}
    fake.script(raw(200, json.dumps(body), headers={"content-type": "application/json"}))

    with pytest.raises(ModelError, match=r"no choices \(error: Provider returned error\)"):
        await complete(model_for(fake))
