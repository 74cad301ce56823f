"""The model boundary: an OpenAI-compatible chat client, and the choice between it and the offline model.

Errors raised from here::

    ModelError                 the endpoint failed after the SDK's own retries (status, API message)
     └── ModelTimeout          the call did not finish within its ``timeout`` (retries included)

Both end the run with ``model_error``; the message never carries the API key.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import openai
from openai import AsyncOpenAI

from bot.offline_model import OfflineModel, estimate_usage
from bot.types import ChatModel, Message, ModelError, ModelReply, ToolCall, Usage

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

    from bot.config import Settings

MaxTokensParam = Literal["auto", "max_completion_tokens", "max_tokens"]

_OPENAI_HOSTS = ("api.openai.com",)
# OpenAI's own 401 text quotes a masked key ("sk-abc***xyz"); redact anything key-shaped as well.
_KEY_SHAPED = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-*]{6,}")


class ModelTimeout(ModelError):
    """The model call ran past its timeout; the run ends with ``model_error`` like any other failure."""


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
        self._client = AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=max_retries)

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
        try:
            async with asyncio.timeout(timeout):
                completion = await self._client.chat.completions.create(**request, timeout=timeout)
        except (TimeoutError, openai.APITimeoutError):
            raise ModelTimeout(f"{self._where()}: no reply within {timeout:g} s") from None
        except openai.OpenAIError as exc:
            raise ModelError(self._redact(f"{self._where()}: {_describe(exc)}")) from None
        return _to_reply(completion, messages, tools, self._where())

    async def aclose(self) -> None:
        """Close the HTTP connection pool; call once when the process shuts down."""
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


def build_model(settings: Settings) -> ChatModel:
    """The real client when an API key is configured, else the offline model: the bot always answers."""
    if settings.openai_api_key is None or not settings.openai_api_key.get_secret_value():
        return OfflineModel()
    return OpenAIChatModel(
        api_key=settings.openai_api_key.get_secret_value(),
        base_url=settings.openai_base_url,
        model=settings.model,
        max_tokens_param=settings.max_tokens_param,
    )


def _resolve_max_tokens_field(param: MaxTokensParam, host: str | None) -> str:
    if param != "auto":
        return param
    return "max_completion_tokens" if host in _OPENAI_HOSTS else "max_tokens"


def _describe(exc: openai.OpenAIError) -> str:
    """Status and the API's own message: what an operator needs to fix a key, a quota or a model name."""
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {_api_message(exc)}"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return f"connection failed ({type(cause).__name__ if cause else 'no detail'})"
    return f"{type(exc).__name__}: {exc}"


def _api_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    if isinstance(body, str) and body.strip():
        return body.strip()[:300]
    return exc.message


def _to_reply(
    completion: ChatCompletion, messages: Sequence[Message], tools: Sequence[dict[str, Any]], where: str
) -> ModelReply:
    if not completion.choices:
        raise ModelError(f"{where}: the reply had no choices")
    choice = completion.choices[0]
    text = choice.message.content or choice.message.refusal
    calls = tuple(_to_tool_call(raw, n) for n, raw in enumerate(choice.message.tool_calls or ()))
    finish = choice.finish_reason or ("tool_calls" if calls else "stop")
    return ModelReply(
        text=text,
        tool_calls=calls,
        usage=_usage(completion, messages, tools, text, calls),
        finish_reason=finish,
        model=completion.model or "",
    )


def _to_tool_call(raw: Any, index: int) -> ToolCall:
    """Keep the arguments as the raw text the model sent: validation is the tool registry's job."""
    function = getattr(raw, "function", None) or getattr(raw, "custom", None)
    name = getattr(function, "name", "") or ""
    arguments = getattr(function, "arguments", None)
    if arguments is None:
        arguments = getattr(function, "input", "")
    if not isinstance(arguments, str):  # some compatible servers send an object
        arguments = json.dumps(arguments)
    return ToolCall(id=raw.id or f"call_{index}", name=name, arguments=arguments)


def _usage(
    completion: ChatCompletion,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    text: str | None,
    calls: tuple[ToolCall, ...],
) -> Usage:
    """Reported usage, or an estimate: budgets must not read a missing count as a free call."""
    usage = completion.usage
    if usage is not None and (usage.prompt_tokens or usage.completion_tokens):
        return Usage(input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0)
    return estimate_usage(messages, tools, text, calls)
