"""The openai SDK's side of ``OpenAIChatModel``: its client and its errors in words.

Imported on the model's first call, not when the model is built: the SDK takes about 0.4 s to import.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

import openai
from openai import APITimeoutError, AsyncOpenAI, OpenAIError

__all__ = ["CALL_ENDS", "APITimeoutError", "DeadlineAwareClient", "OpenAIError", "describe"]

CALL_ENDS: ContextVar[float | None] = ContextVar("policypal_model_call_ends", default=None)


class DeadlineAwareClient(AsyncOpenAI):
    """The SDK client, except that it does not wait out a ``Retry-After`` that ends past the call's timeout.

    The SDK honours a server's Retry-After of up to minutes; inside a 20 s run that sleep only ends at
    our deadline, so the user waited for nothing and the run read as ``deadline`` with the 429 or 503
    hidden. Declining the retry raises the status error at once, with the API's message.
    (``_should_retry`` is the SDK's own hook for this decision; the call's end is a context variable
    because one client serves every run.)
    """

    def _should_retry(self, response: Any) -> bool:  # the SDK's HTTP response (its httpx flavour varies)
        ends, wait = CALL_ENDS.get(), self._parse_retry_after_header(response.headers)
        if ends is not None and wait is not None and time.monotonic() + wait >= ends:
            return False
        return super()._should_retry(response)


def describe(exc: openai.OpenAIError) -> str:
    """Status and the API's own message: what an operator needs to fix a key, a quota or a model name."""
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {_api_message(exc)}"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return f"connection failed ({type(cause).__name__ if cause else 'no detail'})"
    return f"{type(exc).__name__}: {exc}"


def _api_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(message := body.get("message"), str):
        return message
    if isinstance(body, str) and body.strip():
        return body.strip()[:300]
    return exc.message
