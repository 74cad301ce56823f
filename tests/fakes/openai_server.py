"""A local OpenAI-compatible chat-completions server that tests script turn by turn.

The real ``AsyncOpenAI`` client talks to it over loopback HTTP, so tests exercise the SDK's request
building, retries, timeouts and response parsing exactly as production does::

    async with FakeOpenAI() as fake:
        fake.script(tool_calls(("search_policies", {"query": "remote work"})), text("You may [cite]."))
        model = OpenAIChatModel(api_key="sk-test", base_url=fake.base_url, model="gpt-4o-mini")
        ...
        fake.assert_script_consumed()

Each request takes the next scripted turn. Unless ``strict=False`` the server also checks what the
real API checks about tool-call sequencing (every ``tool_call_id`` answered exactly once, no tool
message without a preceding call, no ``parallel_tool_calls`` without ``tools``) and answers a
violation with OpenAI's 400, recording it in ``problems``. A request after the script ran out gets
a 500 ("FakeOpenAI: script exhausted", not retried by the SDK) and is recorded there too.

``events`` is the order things happened in, for tests that assert "X happened before the reply"
instead of timing anything: ``"request N"`` when request N arrives, ``"reply N"`` just before its
answer is sent (any status), ``"abandoned N"`` when the client hung up before it was answered and
``"unsent N"`` when ``close()`` released a delayed turn. A test adds its own points to the same
timeline with ``mark("answered")`` and reads what came first with ``events_until("answered")``.
``held(released, turn)`` answers only once the test sets ``released`` (an ``asyncio.Event`` on
the loop this server runs on), so a test can let the reply go after it has seen what must come
first; code that wrongly waits for the reply gets it ``at_most_s`` later, after the mark, and the
events show the wrong order.

For code running in another thread or process (a server under test in a subprocess), run it in a
background thread with its own loop: ``fake = FakeOpenAI.start_in_thread()`` ... ``fake.stop()``,
or ``with FakeOpenAI() as fake:``. Only aiohttp and the standard library are used.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackServer

UsageSpec = Mapping[str, int] | tuple[int, int] | str | None  # "auto", (prompt, completion), a dict, or None: omit
Responder = Callable[[dict[str, Any]], "Turn | Awaitable[Turn]"]

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
_UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
_ORPHAN_TOOL = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
)


@dataclass(frozen=True)
class Turn:
    """One scripted reply; build it with ``text``, ``tool_calls``, ``error``, ``raw``, ``delay``, ``respond``."""

    message: dict[str, Any] | None = None
    finish_reason: str = "stop"
    usage: UsageSpec = "auto"
    model: str | None = None
    status: int = 200
    error_body: dict[str, Any] | None = None
    raw_body: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    then: Turn | None = None
    responder: Responder | None = None
    released: asyncio.Event | None = None  # ends the delay early when set (see ``held``)


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the client sent it: headers (lower-case names) and the parsed JSON body."""

    path: str
    headers: dict[str, str]
    json: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.json.get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.json.get("tools") or [])


# --- turn builders --------------------------------------------------------------------------------


def text(content: str, *, usage: UsageSpec = "auto", finish_reason: str = "stop", model: str | None = None) -> Turn:
    """A plain assistant answer."""
    return Turn(
        message={"role": "assistant", "content": content, "refusal": None, "annotations": []},
        finish_reason=finish_reason,
        usage=usage,
        model=model,
    )


def tool_calls(
    *calls: tuple[str, dict[str, Any] | str],
    content: str | None = None,
    ids: tuple[str, ...] | None = None,
    usage: UsageSpec = "auto",
) -> Turn:
    """Parallel tool calls; a ``str`` instead of a dict is sent verbatim (e.g. invalid JSON)."""
    rendered = [
        {
            "id": ids[n] if ids else "",  # filled per response when not given
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for n, (name, args) in enumerate(calls)
    ]
    message = {"role": "assistant", "content": content, "refusal": None, "tool_calls": rendered}
    return Turn(message=message, finish_reason="tool_calls", usage=usage)


def error(
    status: int,
    message: str,
    *,
    error_type: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Turn:
    """An OpenAI-style error body. Add ``{"retry-after-ms": "1"}`` to make SDK retries instant."""
    default_type, default_code = _ERROR_TYPES.get(status, ("server_error" if status >= 500 else "api_error", None))
    body = {
        "error": {"message": message, "type": error_type or default_type, "param": None, "code": code or default_code}
    }
    return Turn(status=status, error_body=body, headers=dict(headers or {}))


def raw(status: int, body: str, *, headers: Mapping[str, str] | None = None) -> Turn:
    """Any body at all, for servers that answer with HTML or truncated JSON."""
    return Turn(status=status, raw_body=body, headers=dict(headers or {"content-type": "text/plain"}))


def delay(seconds: float, then: Turn) -> Turn:
    """``then``, after a pause: for client timeouts."""
    return Turn(delay_s=seconds, then=then)


def held(released: asyncio.Event, then: Turn, *, at_most_s: float = 10.0) -> Turn:
    """``then``, once ``released`` is set (at the latest after ``at_most_s``): the test decides when."""
    return Turn(delay_s=at_most_s, then=then, released=released)


def respond(fn: Responder) -> Turn:
    """A turn computed from the request body (sync or async ``fn(request_json) -> Turn``)."""
    return Turn(responder=fn)


# --- the server -----------------------------------------------------------------------------------


class FakeOpenAI(LoopbackServer):
    """An OpenAI-compatible ``POST /v1/chat/completions`` on 127.0.0.1, scripted turn by turn."""

    def __init__(self, *, api_key: str | None = None, strict: bool = True, port: int = 0) -> None:
        self.api_key = api_key  # when set, other bearer tokens get OpenAI's 401
        self.strict = strict
        self.requests: list[RecordedRequest] = []
        self.problems: list[str] = []
        self._events: list[str] = []
        self._turns: deque[Turn] = deque()
        self._scripted = 0
        self._responses = 0
        self._lock = threading.Lock()
        self._port = port
        self._closing: asyncio.Event | None = None

    # lifecycle (async)

    async def start(self) -> FakeOpenAI:
        """Listen on a free loopback port."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._closing = asyncio.Event()
        return await self._listen(app, handler_cancellation=True)

    async def close(self) -> None:
        if self._closing is not None:
            self._closing.set()  # release delayed turns so shutdown does not wait for them
        await super().close()

    # the script

    @property
    def base_url(self) -> str:
        """What to pass as ``base_url`` / ``OPENAI_BASE_URL``."""
        return f"http://127.0.0.1:{self._port}/v1"

    def script(self, *turns: Turn) -> FakeOpenAI:
        """Append turns; each request consumes the next one."""
        with self._lock:
            self._turns.extend(turns)
            self._scripted += len(turns)
        return self

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._turns)

    # the order of events

    def mark(self, label: str) -> None:
        """Put a test's own point (``"answered"``) on the timeline of requests and replies."""
        with self._lock:
            self._events.append(label)

    @property
    def events(self) -> list[str]:
        """Requests, replies, hang-ups and marks, in the order they happened (a copy)."""
        with self._lock:
            return list(self._events)

    def events_until(self, label: str) -> list[str]:
        """What happened before ``label`` (a mark, or an event such as ``"reply 2"``), which must have happened."""
        events = self.events
        assert label in events, f"FakeOpenAI: {label!r} never happened; events: {events}"
        return events[: events.index(label)]

    def assert_script_consumed(self) -> None:
        """Every scripted turn was used, and nothing unscripted or malformed happened."""
        self.assert_no_problems()
        assert self.remaining == 0, f"FakeOpenAI: {self.remaining} of {self._scripted} scripted turns unused"

    def assert_no_problems(self) -> None:
        assert not self.problems, "FakeOpenAI saw problems:\n  " + "\n  ".join(self.problems)

    # serving

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await self._read_json(request)
        recorded = RecordedRequest(request.path, {k.lower(): v for k, v in request.headers.items()}, body)
        with self._lock:
            self.requests.append(recorded)
            number = len(self.requests)
            self._events.append(f"request {number}")
        try:
            response = await self._answer(request, body, number)
        except asyncio.CancelledError:  # aiohttp cancels the handler when the client disconnects
            self.mark(f"abandoned {number}")
            raise
        if response is not None:
            self.mark(f"reply {number}")
            return response
        self.mark(f"unsent {number}")
        return web.json_response({"error": {"message": "FakeOpenAI shutting down"}}, status=503)

    async def _answer(self, request: web.Request, body: dict[str, Any], number: int) -> web.StreamResponse | None:
        """The response to send, or None when ``close()`` released a delayed turn before its reply."""
        if (denied := self._check_key(request)) is not None:
            return denied
        if self.strict and (violation := _protocol_violation(body)):
            self.problems.append(f"request #{number}: {violation}")
            return _error_response(error(400, violation))
        turn = self._next_turn()
        if turn is None:
            self.problems.append(f"request #{number}: script exhausted ({self._scripted} turns were scripted)")
            return _error_response(error(500, "FakeOpenAI: script exhausted", headers={"x-should-retry": "false"}))
        return await self._render(turn, body)

    async def _read_json(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            return {}
        return body if isinstance(body, dict) else {}

    def _check_key(self, request: web.Request) -> web.Response | None:
        if self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}":
            return None
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ")
        masked = f"{sent[:3]}***{sent[-2:]}" if len(sent) > 6 else "***"
        return _error_response(error(401, f"Incorrect API key provided: {masked}."))

    def _next_turn(self) -> Turn | None:
        with self._lock:
            return self._turns.popleft() if self._turns else None

    async def _render(self, turn: Turn, body: dict[str, Any]) -> web.StreamResponse | None:
        if turn.delay_s and not await self._sleep(turn.delay_s, turn.released):
            return None
        if turn.then is not None:
            return await self._render(turn.then, body)
        if turn.responder is not None:
            produced = turn.responder(body)
            return await self._render(await produced if inspect.isawaitable(produced) else produced, body)
        if turn.raw_body is not None:
            return web.Response(status=turn.status, text=turn.raw_body, headers=turn.headers)
        if turn.error_body is not None:
            return _error_response(turn)
        return web.json_response(self._completion(turn, body), headers=turn.headers)

    async def _sleep(self, seconds: float, released: asyncio.Event | None = None) -> bool:
        """Sleep (until ``released`` is set, if given) unless the server is closing; False when it is."""
        assert self._closing is not None
        waits = [asyncio.ensure_future(self._closing.wait())]
        if released is not None:
            waits.append(asyncio.ensure_future(released.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        return not self._closing.is_set()

    def _completion(self, turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._responses += 1
            sequence = self._responses
        message = _with_call_ids(turn.message or {"role": "assistant", "content": ""}, sequence)
        completion: dict[str, Any] = {
            "id": f"chatcmpl-fake{sequence:08d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": turn.model or str(body.get("model", "gpt-4o-mini")),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": turn.finish_reason}],
            "service_tier": "default",
            "system_fingerprint": "fp_fakeopenai",
        }
        usage = _usage(turn.usage, body, message)
        if usage is not None:
            completion["usage"] = usage
        return completion


def _with_call_ids(message: dict[str, Any], sequence: int) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if not calls:
        return message
    named = [{**call, "id": call["id"] or f"call_{sequence:04d}{n:02d}fake"} for n, call in enumerate(calls)]
    return {**message, "tool_calls": named}


def _usage(spec: UsageSpec, body: dict[str, Any], message: dict[str, Any]) -> dict[str, int] | None:
    """OpenAI's usage block; "auto" estimates about four characters a token like a tokenizer would."""
    if spec is None:
        return None
    if isinstance(spec, tuple):
        prompt, completion = spec
    elif isinstance(spec, Mapping):
        return dict(spec)
    else:
        sent = json.dumps([body.get("messages", []), body.get("tools", [])])
        content = message.get("content") or ""
        said = content if isinstance(content, str) else json.dumps(content)
        said += json.dumps(message.get("tool_calls") or "")
        prompt, completion = math.ceil(len(sent) / 4), math.ceil(len(said) / 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _error_response(turn: Turn) -> web.Response:
    return web.json_response(turn.error_body, status=turn.status, headers=turn.headers)


def _protocol_violation(body: dict[str, Any]) -> str | None:
    """What the real API rejects with a 400 about the shape of the conversation, or None."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "Invalid 'messages': empty array. Expected an array with minimum length 1."
    for option in ("tool_choice", "parallel_tool_calls"):
        if option in body and not body.get("tools"):
            return f"Invalid value for '{option}': '{option}' is only allowed when 'tools' are specified."
    return _tool_sequence_violation(messages)


def _tool_sequence_violation(messages: list[Any]) -> str | None:
    awaiting: list[str] = []
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            if message.get("tool_call_id") not in awaiting:
                return _ORPHAN_TOOL
            awaiting.remove(message["tool_call_id"])
            continue
        if awaiting:
            return _UNANSWERED.format(ids=", ".join(awaiting))
        if role == "assistant":
            awaiting = [str(call.get("id")) for call in message.get("tool_calls") or ()]
    if awaiting:
        return _UNANSWERED.format(ids=", ".join(awaiting))
    return None


# --- for conftest ---------------------------------------------------------------------------------


async def fake_openai_server() -> AsyncIterator[FakeOpenAI]:
    """A started FakeOpenAI that fails the test on unscripted or malformed requests.

    Plain async generator so tests/conftest.py decides the fixture's name and scope::

        fake_openai = pytest_asyncio.fixture(fake_openai_server)
    """
    async with FakeOpenAI() as fake:
        yield fake
        fake.assert_no_problems()
