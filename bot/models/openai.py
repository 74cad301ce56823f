"""Any OpenAI-compatible chat endpoint (OpenAI, Azure OpenAI, vLLM, Ollama...) through the openai SDK.

The SDK takes about 0.4 s to import, so it loads on the model's first call (``bot.models.sdk``), not
when the model is built: a server is ready that much sooner and pays it once, off its event loop.

Errors raised from here::

    ModelError                 the endpoint failed after the SDK's own retries (status, API message)
     └── ModelTimeout          the call did not finish within its ``timeout`` (retries included)

Both end the run with ``model_error``; the message never carries the API key.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

from bot.errors import ModelError, ModelTimeout
from bot.models.offline import estimate_usage
from bot.types import Message, ModelReply, ToolCall, Usage
from bot.unicode_text import clean_text

if TYPE_CHECKING:
    from bot.models.sdk import DeadlineAwareClient

MaxTokensParam = Literal["auto", "max_completion_tokens", "max_tokens"]

_OPENAI_HOSTS = ("api.openai.com",)
# Passed explicitly: given None, the SDK would read OPENAI_BASE_URL itself, an empty one included.
OPENAI_BASE_URL = "https://api.openai.com/v1"
# OpenAI's own 401 text quotes a masked key ("sk-abc***xyz"); redact anything key-shaped as well.
_KEY_SHAPED = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-*]{6,}")


class OpenAIChatModel:
    """ChatModel over any OpenAI-compatible chat-completions endpoint (OpenAI, Azure, vLLM, Ollama).

    ``max_tokens_param`` picks the request field that caps output. OpenAI deprecated ``max_tokens``
    and rejects it for reasoning models, while Ollama and LM Studio only understand ``max_tokens``
    (an unknown ``max_completion_tokens`` is silently ignored there, leaving output uncapped).
    ``"auto"`` sends ``max_completion_tokens`` to api.openai.com and ``max_tokens`` to any other
    base URL, which vLLM, Ollama, LM Studio and Azure's non-reasoning deployments all accept.
    """

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        base_url: str | None = None,
        max_retries: int = 2,
        max_tokens_param: MaxTokensParam = "auto",
    ) -> None:
        self.name = model
        self._api_key = api_key
        self._host = urlsplit(base_url).hostname if base_url else "api.openai.com"
        self._max_tokens_field = _resolve_max_tokens_field(max_tokens_param, self._host)
        self._base_url = base_url or OPENAI_BASE_URL
        self._max_retries = max_retries

    @cached_property
    def _client(self) -> DeadlineAwareClient:
        """The SDK's client, made (and the SDK imported) on first use."""
        from bot.models.sdk import DeadlineAwareClient

        return DeadlineAwareClient(api_key=self._api_key, base_url=self._base_url, max_retries=self._max_retries)

    async def warm(self) -> None:
        """Make the client now, in a thread (a server at start): the first question need not import the SDK."""
        if "_client" not in vars(self):
            await asyncio.to_thread(lambda: self._client)

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int,
        timeout: float,
    ) -> ModelReply:
        """One completion; ``timeout`` bounds the whole call, the SDK's retries included."""
        request = self._request(messages, tools, max_tokens)
        await self.warm()  # the first call imports the SDK in a thread: the event loop goes on acking
        from bot.models import sdk

        ends = sdk.CALL_ENDS.set(time.monotonic() + timeout)
        try:
            async with asyncio.timeout(timeout):
                completion = await self._client.chat.completions.create(**request, timeout=timeout)
        except (TimeoutError, sdk.APITimeoutError):
            raise ModelTimeout(f"{self._where()}: no reply within {timeout:g} s") from None
        except sdk.OpenAIError as exc:
            raise ModelError(self._redact(f"{self._where()}: {sdk.describe(exc)}")) from None
        finally:
            sdk.CALL_ENDS.reset(ends)
        return _to_reply(completion, messages, tools, self._where())

    async def aclose(self) -> None:
        """Close the HTTP connection pool; call once when the process shuts down."""
        if "_client" in vars(self):  # never called: no client, and no SDK to import just to close it
            await self._client.close()

    def _request(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.name,
            "messages": list(messages),
            self._max_tokens_field: max_tokens,
        }
        if tools:  # OpenAI rejects tool_choice / parallel_tool_calls without tools
            request.update(tools=list(tools), tool_choice="auto", parallel_tool_calls=True)
        return request

    def _where(self) -> str:
        return f"model {self.name!r} at {self._host}"

    def _redact(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "[redacted]")
        return _KEY_SHAPED.sub("[redacted]", text)


def _resolve_max_tokens_field(param: MaxTokensParam, host: str | None) -> str:
    if param != "auto":
        return param
    return "max_completion_tokens" if host in _OPENAI_HOSTS else "max_tokens"


class _Malformed(ValueError):
    """A reply whose shape we do not understand; ``_to_reply`` reports it as a ModelError."""


def _to_reply(
    completion: object, messages: Sequence[Message], tools: Sequence[dict[str, Any]], where: str
) -> ModelReply:
    """Read a completion, checking the type of every field we use.

    The SDK does not validate response bodies, so a compatible server can send anything: an int tool
    name, a null message, content as a list. Anything unexpected is a ``ModelError`` (the run ends with
    ``model_error``), never an exception deeper in the loop; lone surrogates in text become U+FFFD.
    """
    try:
        return _read_reply(completion, messages, tools)
    except _Malformed as exc:
        raise ModelError(f"{where}: malformed reply: {exc}") from None


def _read_reply(completion: object, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> ModelReply:
    body = _object(completion, "the body")
    choices = _get(body, "choices")
    if not choices:
        raise _Malformed(f"the reply had no choices{_error_in(body)}")
    if not isinstance(choices, list):
        raise _Malformed(f"choices is {_kind(choices)}, not a list")
    choice = _object(choices[0], "the choice")
    message = _object(_get(choice, "message"), "the message")
    text = _text(_get(message, "content")) or _optional_str(_get(message, "refusal"), "refusal")
    calls = _tool_calls(_get(message, "tool_calls"))
    finish = _optional_str(_get(choice, "finish_reason"), "finish_reason") or ("tool_calls" if calls else "stop")
    return ModelReply(
        text=text,
        tool_calls=calls,
        usage=_usage(_get(body, "usage"), messages, tools, text, calls),
        finish_reason=finish,
        model=_optional_str(_get(body, "model"), "model") or "",
    )


def _error_in(body: object) -> str:
    """The error a proxy (OpenRouter, LiteLLM) put in a 200 body instead of choices, for the trace."""
    error = _get(body, "error")
    message = _get(error, "message") if isinstance(error, dict | BaseModel) else error
    return f" (error: {_KEY_SHAPED.sub('[redacted]', message[:300])})" if isinstance(message, str) and message else ""


def _text(content: object) -> str | None:
    """The message text; a list of text parts (some compatible servers send one) is joined."""
    if content is None or isinstance(content, str):
        return clean_text(content) if content else content
    if isinstance(content, list) and all(_is_text_part(part) for part in content):
        return clean_text("".join(part["text"] for part in content))
    raise _Malformed(f"content is {_kind(content)}, not text")


def _is_text_part(part: object) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


def _tool_calls(raw: object) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _Malformed(f"tool_calls is {_kind(raw)}, not a list")
    return _unique_ids([_to_tool_call(item, n) for n, item in enumerate(raw)])


def _unique_ids(calls: list[ToolCall]) -> tuple[ToolCall, ...]:
    """Give a call whose id an earlier call in the reply already has an id of its own.

    Some compatible servers number calls per reply or reuse one id; results are matched to calls by
    id, so a shared id would hand every such call the last one's result. The reply is stored (and sent
    back) with the new ids, so the model sees each call answered by its own result.
    """
    taken = {call.id for call in calls}  # a new id must not take one a later call already has
    seen: set[str] = set()
    unique = []
    for n, call in enumerate(calls):
        if call.id in seen:
            call_id = f"{call.id}_{n}"
            while call_id in taken:
                call_id += "_"
            taken.add(call_id)
            call = replace(call, id=call_id)
        seen.add(call.id)
        unique.append(call)
    return tuple(unique)


def _to_tool_call(raw: object, index: int) -> ToolCall:
    """Keep the arguments as the raw text the model sent: validation is the tool registry's job."""
    call = _object(raw, f"tool call {index}")
    function = _object(_get(call, "function") or _get(call, "custom"), f"the function of tool call {index}")
    name = _get(function, "name")
    if not isinstance(name, str):
        raise _Malformed(f"the name of tool call {index} is {_kind(name)}, not a string")
    call_id = _optional_str(_get(call, "id"), f"the id of tool call {index}") or f"call_{index}"
    arguments = _get(function, "arguments")
    if arguments is None:
        arguments = _get(function, "input") or ""
    if not isinstance(arguments, str):  # some compatible servers send an object
        arguments = json.dumps(arguments)
    return ToolCall(id=clean_text(call_id), name=clean_text(name), arguments=clean_text(arguments))


def _usage(
    usage: object,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    text: str | None,
    calls: tuple[ToolCall, ...],
) -> Usage:
    """Reported usage, or an estimate: budgets must not read a missing or garbled count as a free call.

    A request always has input, so a prompt count of 0 is a count the server skipped (Ollama reports 0
    for a prompt it had cached, which is every turn of a run after the first): that input is estimated.
    """
    prompt, completion = _count(_get(usage, "prompt_tokens")), _count(_get(usage, "completion_tokens"))
    if prompt and completion is not None:
        return Usage(input_tokens=prompt, output_tokens=completion)
    estimate = estimate_usage(messages, tools, text, calls)
    if prompt == 0 and completion:
        return Usage(input_tokens=estimate.input_tokens, output_tokens=completion)
    return estimate


def _count(value: object) -> int | None:
    """A token count: absent is 0, anything but a non-negative int (a string, a float) is None."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _object(value: object, what: str) -> object:
    if isinstance(value, dict | BaseModel):
        return value
    raise _Malformed(f"{what} is {_kind(value)}, not an object")


def _get(obj: object, name: str) -> Any:
    """A field of an SDK object, or of a dict (the SDK leaves shapes it does not expect as dicts)."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None) if isinstance(obj, BaseModel) else None


def _optional_str(value: object, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _Malformed(f"{what} is {_kind(value)}, not a string")


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
