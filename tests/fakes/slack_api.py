"""A local Slack Web API server that records every call, and Slack's side of the Events API.

The app under test uses the real ``slack_sdk`` client, pointed here by ``SLACK_API_URL``::

    async with FakeSlackAPI() as slack:
        settings = ...(slack_api_url=slack.base_url, slack_bot_token=slack.token, ...)
        ...
        slack.fail("chat.postMessage", "channel_not_found")       # the next call gets this error
        slack.rate_limit("chat.postMessage", retry_after=0)        # a 429 with Retry-After
        slack.lose_answer("chat.startStream", late_s=60)           # done by Slack, the answer never in time
        posted = await slack.wait_for("chat.postMessage", 2)       # calls arrive after the ack

Answers auth.test, bots.info, users.info, chat.postMessage (with a fresh ts), chat.update, chat.startStream /
appendStream / stopStream (``FakeSlackAPI(streaming=True)``; the text streamed and the blocks put under it are
in ``streams``; without it startStream is refused as in a workspace without AI apps), chat.postEphemeral,
chat.getPermalink, conversations.members, conversations.replies, conversations.history, conversations.list
(the channels ``add_channel`` made), conversations.open (a person's DM), assistant.threads.setStatus /
setSuggestedPrompts and apps.connections.open (with the app-level token), the way Slack does (``{"ok": false,
"error": ...}`` with HTTP 200 for API errors, 429 for rate limits). A wrong token gets ``invalid_auth``; an
unknown method gets ``unknown_method`` and is recorded in ``problems``.

The bot's messages are in their threads (``threads``) as conversations.replies shows them (a thread's first
message, or one outside any thread, also as conversations.history does): ``user`` the bot, ``bot_id``, the
text, and the metadata they were posted with. A stream is such a message from startStream on,
with the text so far and no metadata until stopStream puts it on; chat.update changes a message in place.
``ts`` counts up from 1700000001.000100 so tests can name them; ``FakeSlackAPI(clock=time.time)`` takes them from
a clock, as Slack does (its ts is the time it took the message), for code that compares them with its own time.
``lose_answer`` makes a call take effect and its answer go missing (late, dropped, or a 5xx), as happens
when Slack did the work and the network or Slack failed after; ``where`` picks which call (a post to a DM).
A post to a user id lands in their DM with the app, ``D`` and the rest of their id (conversations.open says
so); conversations.history answers ``channel_not_found`` for a user id or a channel name, as Slack does.
A post to a channel's name (``#it-helpdesk``, or without the ``#``) of one ``add_channel`` made lands in that
channel and is answered with its id, as Slack does; an unknown ``#name`` gets ``channel_not_found``.
A message or view Slack would refuse (Block Kit that slack_sdk's models reject, or over Slack's limits:
tests/fakes/conformance.py) gets ``invalid_blocks``, ``msg_too_long`` or ``msg_blocks_too_long`` and is
recorded in ``violations``; the test that sent it fails at teardown.

Socket Mode too: apps.connections.open hands out a single-use ``ws://`` URL here; the connection gets
``hello``, then whatever ``push`` sends (an envelope with an ``envelope_id``, as Slack sends it to one
of the app's open connections), and records the ``{"envelope_id": ...}`` acks in ``acks``.

``sign`` and ``signed_headers`` sign a request body exactly as Slack does (v0, HMAC-SHA256 over
``v0:{timestamp}:{body}``); ``event_envelope`` and ``block_actions`` build what Slack sends.
For a server under test in another process, ``FakeSlackAPI.start_in_thread()`` ... ``stop()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import time
import urllib.parse
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes import conformance
from tests.fakes.loopback import LoopbackServer

JSON_FIELDS = ("blocks", "attachments", "prompts", "metadata", "view")  # form-encoded as JSON text by the SDK


@dataclass(frozen=True)
class SlackCall:
    """One Web API call as the client sent it: method, merged query/form/JSON params, headers."""

    method: str
    params: dict[str, Any]
    headers: dict[str, str]
    answer: dict[str, Any] = field(default_factory=dict)  # what the fake answered (ok calls only)
    at: float = field(default_factory=time.monotonic)  # when it arrived (time.monotonic), for time-to-reply figures

    def __getitem__(self, name: str) -> Any:
        return self.params[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.params.get(name, default)

    @property
    def blocks(self) -> list[dict[str, Any]]:
        return list(self.params.get("blocks") or [])

    @property
    def block_text(self) -> str:
        """Every text in the blocks, joined: what a reader of the message would see."""
        return "\n".join(_texts(self.blocks))


STREAMING_OFF = "feature_not_enabled"  # what the fake answers chat.startStream with ``streaming=False``


@dataclass
class FakeStream:
    """A streamed message: the text appended so far, and the blocks ``stopStream`` put under it."""

    channel: str
    thread_ts: str
    text: str = ""
    blocks: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False


@dataclass(frozen=True)
class ScriptedError:
    error: str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LostAnswer:
    """How the answer of a call Slack carried out goes missing (``lose_answer``)."""

    late_s: float | None = None  # it comes this late (past the client's timeout), or when the fake closes
    drop: bool = False  # the connection is dropped instead
    status: int = 500  # else this HTTP status, with ``error``
    error: str = "internal_error"
    where: Callable[[dict[str, Any]], bool] | None = None  # only a call whose params match; None: the next call


@dataclass
class FakeUser:
    id: str
    name: str
    email: str | None = None
    is_restricted: bool = False
    is_ultra_restricted: bool = False
    team_id: str | None = None  # another organisation's (Slack Connect); None: the workspace's own
    enterprise_id: str | None = None  # their Enterprise Grid organisation, as ``enterprise_user`` says

    def as_slack(self, team_id: str) -> dict[str, Any]:
        profile = {"display_name": self.name, "real_name": self.name.title()}
        if self.email:
            profile["email"] = self.email
        grid = {"enterprise_user": {"enterprise_id": self.enterprise_id}} if self.enterprise_id else {}
        return {
            **grid,
            "id": self.id,
            "team_id": self.team_id or team_id,
            "name": self.name.lower(),
            "real_name": self.name.title(),
            "is_bot": False,
            "deleted": False,
            "is_restricted": self.is_restricted,
            "is_ultra_restricted": self.is_ultra_restricted,
            "profile": profile,
        }


@dataclass
class FakeChannel:
    id: str
    name: str
    is_private: bool = False
    is_archived: bool = False

    def as_slack(self) -> dict[str, Any]:
        """A conversation object as conversations.list shows it (the fields a reader of it uses, and their kin)."""
        return {
            "id": self.id,
            "name": self.name,
            "name_normalized": self.name,
            "is_channel": not self.is_private,
            "is_group": self.is_private,
            "is_im": False,
            "is_mpim": False,
            "is_private": self.is_private,
            "is_archived": self.is_archived,
            "is_general": False,
            "is_member": True,
            "created": 1_600_000_000,
        }


class FakeSlackAPI(LoopbackServer):
    """Slack's Web API on 127.0.0.1 under ``/api/{method}``, recording every call."""

    def __init__(
        self,
        *,
        token: str = "xoxb-test-0000-fake",
        team_id: str = "T0TEAM",
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        app_id: str = "A0APP",
        app_token: str = "xapp-1-A0APP-1-fake",
        port: int = 0,
        streaming: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.token = token
        self.app_token = app_token
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.app_id = app_id
        self.calls: list[SlackCall] = []
        self.problems: list[str] = []
        self.violations: list[str] = []  # payloads Slack would refuse (tests/fakes/conformance.py)
        self.users: dict[str, FakeUser] = {}
        self.members: dict[str, list[str]] = {}  # channel -> member ids, for conversations.members
        self.channels: dict[str, FakeChannel] = {}  # id -> channel, for conversations.list and posts by name
        self._errors: dict[str, deque[ScriptedError]] = defaultdict(deque)
        self._outages: dict[str, tuple[float, int, str]] = {}  # method -> (until, status, error)
        self._delays: dict[str, float] = {}
        self._delays_when: list[tuple[str, float, Callable[[dict[str, Any]], bool]]] = []  # see ``slow_when``
        self._ts = itertools.count(1)
        self._clock = clock  # ts from this clock (strictly increasing), else counted
        self._last_ts = 0.0
        self._lost: dict[str, deque[LostAnswer]] = defaultdict(deque)
        self._closing = asyncio.Event()  # ends the wait of late answers
        self._port = port
        self.streaming = streaming  # chat.startStream available (an AI app); else refused with STREAMING_OFF
        self.streams: dict[str, FakeStream] = {}  # ts -> a streamed message, as a reader sees it
        self.acks: dict[str, dict[str, Any]] = {}  # envelope id -> the ack the app sent
        self.sockets: list[web.WebSocketResponse] = []  # open Socket Mode connections, oldest first
        self._tickets: set[str] = set()
        self.threads: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)  # (channel, thread) -> posts
        self._messages: dict[tuple[str, str], dict[str, Any]] = {}  # (channel, ts) -> the bot's message, in its thread

    # --- script ----------------------------------------------------------------------------------

    def add_user(
        self,
        user_id: str,
        name: str,
        email: str | None = None,
        *,
        guest: bool = False,
        team_id: str | None = None,
        enterprise_id: str | None = None,
    ) -> FakeUser:
        """A workspace member, a guest, or (``team_id``) someone of another organisation, as Slack Connect has."""
        user = FakeUser(user_id, name, email, is_restricted=guest, team_id=team_id, enterprise_id=enterprise_id)
        self.users[user_id] = user
        return user

    def add_channel(self, channel_id: str, name: str, *, private: bool = False, archived: bool = False) -> FakeChannel:
        """A channel of the workspace the bot is in, listed by conversations.list and postable to by name."""
        channel = FakeChannel(channel_id, name, is_private=private, is_archived=archived)
        self.channels[channel_id] = channel
        return channel

    def fail(self, method: str, error: str, *, times: int = 1, status: int = 200, **headers: str) -> None:
        """The next ``times`` calls of ``method`` get ``{"ok": false, "error": error}``."""
        self._errors[method].extend(ScriptedError(error, status, dict(headers)) for _ in range(times))

    def fail_for(self, method: str, seconds: float, *, error: str = "internal_error", status: int = 200) -> None:
        """Every call of ``method`` fails for the next ``seconds`` (Slack having a bad few seconds)."""
        self._outages[method] = (time.monotonic() + seconds, status, error)

    def slow(self, method: str, seconds: float) -> None:
        """Every call of ``method`` takes ``seconds`` longer (a slow users.info)."""
        self._delays[method] = seconds

    def slow_when(self, method: str, seconds: float, where: Callable[[dict[str, Any]], bool]) -> None:
        """Calls of ``method`` whose params match ``where`` take ``seconds`` longer (one user's users.info);
        ``seconds`` 0 ends it. Wins over ``slow``."""
        self._delays_when = [d for d in self._delays_when if (d[0], d[2]) != (method, where)]
        if seconds:
            self._delays_when.append((method, seconds, where))

    def delivered(self, method: str = "chat.postMessage") -> list[SlackCall]:
        """The calls Slack accepted (ok), not the refused ones: what people actually saw."""
        return [c for c in self.calls_to(method) if c.answer.get("ok")]

    def rate_limit(self, method: str, *, retry_after: int = 0, times: int = 1) -> None:
        """Slack's rate-limit answer: HTTP 429, ``error: ratelimited`` and a Retry-After header."""
        self.fail(method, "ratelimited", times=times, status=429, **{"Retry-After": str(retry_after)})

    def lose_answer(
        self,
        method: str,
        *,
        late_s: float | None = None,
        drop: bool = False,
        status: int = 500,
        error: str = "internal_error",
        times: int = 1,
        where: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """The next ``times`` calls of ``method`` (whose params match ``where``, if given) are carried out (the
        message posted, the stream begun) and their answer goes missing: it comes ``late_s`` seconds late (or
        when the fake closes), past the client's timeout; or the connection is dropped (``drop``); or it is
        HTTP ``status`` with ``error`` (a 5xx after the work was done). The call is recorded with the answer
        Slack meant to give."""
        self._lost[method].extend(LostAnswer(late_s, drop, status, error, where) for _ in range(times))

    # --- inspection ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """What to pass as ``SLACK_API_URL``."""
        return f"http://127.0.0.1:{self._port}/api/"

    def calls_to(self, method: str, where: Callable[[SlackCall], bool] | None = None) -> list[SlackCall]:
        return [c for c in list(self.calls) if c.method == method and (where is None or where(c))]

    @property
    def methods(self) -> set[str]:
        return {c.method for c in list(self.calls)}

    async def wait_for(
        self,
        method: str,
        count: int = 1,
        *,
        where: Callable[[SlackCall], bool] | None = None,
        timeout: float = 5.0,
    ) -> list[SlackCall]:
        """Wait until ``count`` matching calls arrived (the app calls Slack after its ack)."""
        deadline = time.monotonic() + timeout
        while len(found := self.calls_to(method, where)) < count:
            if time.monotonic() > deadline:
                seen = sorted(self.methods)
                raise AssertionError(f"{len(found)} of {count} {method} calls within {timeout} s; saw {seen}")
            await asyncio.sleep(0.01)
        return found

    # --- Socket Mode -----------------------------------------------------------------------------

    async def push(self, payload: dict[str, Any], kind: str = "events_api") -> str | None:
        """Send ``payload`` in an envelope on an open connection; its envelope id, None with none open."""
        open_sockets = [ws for ws in self.sockets if not ws.closed]
        if not open_sockets:
            return None
        envelope_id = str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": kind,
            "accepts_response_payload": kind != "events_api",
        }
        if kind == "events_api":
            envelope |= {"retry_attempt": 0, "retry_reason": ""}
        await open_sockets[-1].send_json(envelope)
        return envelope_id

    def push_from_thread(self, payload: dict[str, Any], kind: str = "events_api") -> str | None:
        """``push`` from sync code, for a fake started with ``start_in_thread``."""
        assert self._loop is not None, "start_in_thread first"
        return asyncio.run_coroutine_threadsafe(self.push(payload, kind), self._loop).result(timeout=5)

    @property
    def open_sockets(self) -> int:
        return sum(1 for ws in list(self.sockets) if not ws.closed)

    async def _link(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:  # each URL from apps.connections.open works once
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        hello = {"type": "hello", "num_connections": self.open_sockets + 1, "connection_info": {"app_id": self.app_id}}
        await ws.send_json(hello)
        self.sockets.append(ws)
        try:
            async for message in ws:
                if message.type == web.WSMsgType.TEXT:
                    self._take_ack(message.data)
        finally:
            self.sockets.remove(ws)
        return ws

    def _take_ack(self, text: str) -> None:
        try:
            ack = json.loads(text)
        except ValueError:
            ack = None
        if isinstance(ack, dict) and isinstance(ack.get("envelope_id"), str):
            self.acks[ack["envelope_id"]] = ack
        else:
            self.problems.append(f"not a Socket Mode ack: {text[:200]}")

    async def _close_sockets(self, app: web.Application) -> None:
        for ws in list(self.sockets):
            await ws.close(code=1001, message=b"server stopping")

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> FakeSlackAPI:
        self._closing = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle)
        app.router.add_get("/link/", self._link)
        app.on_shutdown.append(self._close_sockets)
        return await self._listen(app)

    async def close(self) -> None:
        self._closing.set()  # late answers give up waiting
        await super().close()

    # --- serving ---------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _params(request)
        call = SlackCall(method, params, {k.lower(): v for k, v in request.headers.items()})
        self.calls.append(call)
        if not self._authorized(request, params, app_level=method.startswith("apps.connections.")):
            return web.json_response({"ok": False, "error": "invalid_auth"})
        pause = next(
            (s for m, s, where in list(self._delays_when) if m == method and where(params)), self._delays.get(method)
        )
        if pause is not None:
            await asyncio.sleep(pause)
        outage = self._outages.get(method)
        if outage is not None and time.monotonic() < outage[0]:
            status, error = outage[1], outage[2]
            return web.json_response({"ok": False, "error": error}, status=status)
        if self._errors[method]:
            scripted = self._errors[method].popleft()
            body = {"ok": False, "error": scripted.error}
            return web.json_response(body, status=scripted.status, headers=scripted.headers)
        refusal = conformance.slack_refusal(method, params)
        if refusal is not None:  # what Slack answers a message it will not show; the test fails at teardown
            error, problems = refusal
            self.violations.extend(problems)
            conformance.report(f"Slack {method}", problems)
            return web.json_response({"ok": False, "error": error, "errors": problems})
        answer = getattr(self, "_" + method.replace(".", "_"), None)
        if answer is None:
            self.problems.append(f"unknown method {method}")
            return web.json_response({"ok": False, "error": "unknown_method"})
        call.answer.update({"ok": True, **answer(params)})  # an answer may say ok: false (a refusal it decides)
        lost = next((lost for lost in self._lost[method] if lost.where is None or lost.where(params)), None)
        if lost is not None:  # done, as above; what the client gets is not that answer
            self._lost[method].remove(lost)
            return await self._lose(request, call.answer, lost)
        return web.json_response(call.answer, headers={"x-oauth-scopes": "chat:write"})

    async def _lose(self, request: web.Request, answer: dict[str, Any], lost: LostAnswer) -> web.Response:
        if lost.drop:
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=500)  # never read: the connection is gone
        if lost.late_s is None:
            return web.json_response({"ok": False, "error": lost.error}, status=lost.status)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), lost.late_s)
        return web.json_response(answer, headers={"x-oauth-scopes": "chat:write"})

    def _authorized(self, request: web.Request, params: dict[str, Any], *, app_level: bool) -> bool:
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ") or params.get("token", "")
        return sent == (self.app_token if app_level else self.token)

    def _next_ts(self) -> str:
        if self._clock is None:
            return f"{1_700_000_000 + next(self._ts)}.000100"
        self._last_ts = max(self._clock(), self._last_ts + 0.000001)
        return f"{self._last_ts:.6f}"

    def _add_message(self, channel: str, thread_ts: str, ts: str, text: str, metadata: Any) -> dict[str, Any]:
        """The bot's message in its thread, as conversations.replies shows it (metadata only when it has some)."""
        message: dict[str, Any] = {
            "type": "message",
            "ts": ts,
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "text": text,
        }
        if thread_ts != ts:
            message["thread_ts"] = thread_ts
        if metadata:
            message["metadata"] = metadata
        self.threads[(channel, thread_ts)].append(message)
        self._messages[(channel, ts)] = message
        return message

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://acme.slack.com/",
            "team": "Acme",
            "user": "policypal",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _bots_info(self, params: dict[str, Any]) -> dict[str, Any]:
        bot = {"id": self.bot_id, "app_id": self.app_id, "user_id": self.bot_user_id, "name": "policypal"}
        return {"bot": {**bot, "deleted": False}}

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(params.get("user")))
        if user is None:
            user = FakeUser(str(params.get("user")), f"user-{params.get('user')}")
        return {"user": user.as_slack(self.team_id)}

    def _chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel"))
        channel = "D" + channel[1:] if channel.startswith(("U", "W")) else channel  # a user id: their DM
        names = {c.name: c.id for c in self.channels.values() if not c.is_archived}
        named = names.get(channel.removeprefix("#"))
        if named is None and channel.startswith("#"):
            return {"ok": False, "error": "channel_not_found"}
        channel = named or channel  # a name: Slack posts in that channel and answers with its id
        ts = self._next_ts()
        text = str(params.get("text", ""))
        self._add_message(channel, str(params.get("thread_ts") or ts), ts, text, params.get("metadata"))
        return {"channel": channel, "ts": ts, "message": {"ts": ts, "text": text}}

    def _conversations_members(self, params: dict[str, Any]) -> dict[str, Any]:
        """A channel's member ids, ``limit`` per page with Slack's cursor (the offset, here)."""
        ids = self.members.get(str(params.get("channel")))
        if ids is None:
            return {"ok": False, "error": "channel_not_found"}
        members, cursor = _cursor_page(ids, params, default_limit=100)
        return {"members": members, "response_metadata": {"next_cursor": cursor}}

    def _conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        """A thread's messages as they are now, oldest first (see ``_messages_page``)."""
        thread = self.threads.get((str(params.get("channel")), str(params.get("ts"))), [])
        return _messages_page(thread, params, newest_first=False, default_limit=1000)

    def _conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        """A conversation's messages outside threads (a thread's first message stands for it), newest first (see
        ``_messages_page``). A user id or a name is not a conversation id: ``channel_not_found``."""
        channel = str(params.get("channel"))
        if not channel.startswith(("C", "G", "D")):
            return {"ok": False, "error": "channel_not_found"}
        roots = [m for (where, ts), thread in self.threads.items() if where == channel for m in thread if m["ts"] == ts]
        return _messages_page(roots, params, newest_first=True, default_limit=100)

    def _conversations_list(self, params: dict[str, Any]) -> dict[str, Any]:
        """The channels of ``types`` (``public_channel`` unless given), without archived ones when
        ``exclude_archived``, ``limit`` of them from ``cursor`` on (the next page's cursor in ``response_metadata``,
        as Slack pages)."""
        types = set(str(params.get("types") or "public_channel").split(","))
        channels = [
            c
            for c in self.channels.values()
            if ("private_channel" if c.is_private else "public_channel") in types
            and not (c.is_archived and str(params.get("exclude_archived")).lower() in ("true", "1"))
        ]
        page, cursor = _cursor_page(channels, params, default_limit=100)
        return {"channels": [c.as_slack() for c in page], "response_metadata": {"next_cursor": cursor}}

    def _conversations_open(self, params: dict[str, Any]) -> dict[str, Any]:
        """The bot's DM with one person (``users``): where a post to their user id lands."""
        users = [u for u in str(params.get("users") or "").split(",") if u]
        if not users:
            return {"ok": False, "error": "users_list_not_supplied"}
        if len(users) > 1 or not users[0].startswith(("U", "W")):  # a group DM is not needed here
            return {"ok": False, "error": "user_not_found"}
        return {"no_op": True, "already_open": True, "channel": {"id": "D" + users[0][1:]}}

    def _chat_startStream(self, params: dict[str, Any]) -> dict[str, Any]:
        """A streamed reply begins (in a thread; outside a DM Slack needs the recipient user and team)."""
        channel = str(params.get("channel"))
        if not self.streaming:
            return {"ok": False, "error": STREAMING_OFF}
        if not params.get("thread_ts"):
            return {"ok": False, "error": "invalid_arguments"}
        if not channel.startswith("D") and not (params.get("recipient_user_id") and params.get("recipient_team_id")):
            return {"ok": False, "error": "missing_recipient"}
        ts = self._next_ts()
        stream = FakeStream(channel, str(params["thread_ts"]), str(params.get("markdown_text") or ""))
        self.streams[ts] = stream
        self._add_message(channel, stream.thread_ts, ts, stream.text, None)  # in the thread at once, being written
        return {"channel": channel, "ts": ts}

    def _chat_appendStream(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self.streams.get(str(params.get("ts")))
        if stream is None or stream.stopped:
            return {"ok": False, "error": "message_not_in_streaming_state"}
        stream.text += str(params.get("markdown_text") or "")
        self._messages[(stream.channel, str(params.get("ts")))]["text"] = stream.text
        return {"channel": stream.channel, "ts": params.get("ts")}

    def _chat_stopStream(self, params: dict[str, Any]) -> dict[str, Any]:
        """The stream ends: its blocks (feedback, sources) below the text, its metadata on the message."""
        ts = str(params.get("ts"))
        stream = self.streams.get(ts)
        if stream is None or stream.stopped:
            return {"ok": False, "error": "message_not_in_streaming_state"}
        stream.text += str(params.get("markdown_text") or "")
        stream.blocks, stream.stopped = list(params.get("blocks") or []), True
        message = self._messages[(stream.channel, ts)]
        message["text"] = stream.text
        if params.get("metadata"):
            message["metadata"] = params["metadata"]
        return {"channel": stream.channel, "ts": ts, "message": dict(message)}

    def _chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self._messages.get((str(params.get("channel")), str(params.get("ts"))))
        if message is not None and "text" in params:  # omitting text (or blocks) keeps the old
            message["text"] = params["text"]
        return {"channel": params.get("channel"), "ts": params.get("ts"), "text": params.get("text", "")}

    def _chat_postEphemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"message_ts": self._next_ts()}

    def _chat_getPermalink(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = params.get("channel"), str(params.get("message_ts", ""))
        return {"channel": channel, "permalink": f"https://acme.slack.com/archives/{channel}/p{ts.replace('.', '')}"}

    def _apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        ticket = str(uuid.uuid4())
        self._tickets.add(ticket)
        return {"url": f"ws://127.0.0.1:{self._port}/link/?ticket={ticket}&app_id={self.app_id}"}

    def _assistant_threads_setStatus(self, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _assistant_threads_setSuggestedPrompts(self, params: dict[str, Any]) -> dict[str, Any]:
        return {}


async def _params(request: web.Request) -> dict[str, Any]:
    params: dict[str, Any] = dict(request.query)
    if request.method != "POST":
        return params
    if request.content_type == "application/json":
        body = await request.json()
        params.update(body if isinstance(body, dict) else {})
    else:
        params.update({k: str(v) for k, v in (await request.post()).items()})
    for name in JSON_FIELDS:
        if isinstance(params.get(name), str):
            params[name] = json.loads(params[name])
    return params


def _texts(value: Any) -> list[str]:
    if isinstance(value, dict):
        own = [value["text"]] if isinstance(value.get("text"), str) else []
        return own + [t for key, v in value.items() if key != "text" or not isinstance(v, str) for t in _texts(v)]
    if isinstance(value, list):
        return [t for item in value for t in _texts(item)]
    return []


# --- Slack's side of the Events API -------------------------------------------------------------------


def sign(secret: str, timestamp: str, body: str) -> str:
    """Slack's v0 request signature."""
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed_headers(
    secret: str,
    body: str,
    *,
    content_type: str = "application/json",
    timestamp: int | None = None,
    retry_num: int | None = None,
    retry_reason: str = "http_timeout",
) -> dict[str, str]:
    """The headers Slack sends with a request: timestamp, signature and, on a redelivery, the retry ones."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": sign(secret, stamp, body),
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = retry_reason
    return headers


_event_ids = itertools.count(1)
_message_ts = itertools.count(1)


def new_ts() -> str:
    return f"{1_690_000_000 + next(_message_ts)}.000200"


def event_envelope(
    event: dict[str, Any], *, team_id: str = "T0TEAM", app_id: str = "A0APP", event_id: str | None = None
) -> dict[str, Any]:
    """An Events API ``event_callback`` as Slack posts it."""
    return {
        "token": "legacy-verification-token",
        "team_id": team_id,
        "api_app_id": app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{next(_event_ids):08d}",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": team_id, "user_id": "UBOT", "is_bot": True}],
        "is_ext_shared_channel": False,
        "event_context": "4-fake",
    }


def dm_event(user: str, text: str, *, channel: str = "D0ALICE", ts: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "channel_type": "im",
        "channel": channel,
        "user": user,
        "text": text,
        "ts": ts or new_ts(),
        **extra,
    }


def mention_event(user: str, text: str, *, channel: str = "C0GENERAL", ts: str | None = None, **extra: Any) -> dict:
    return {"type": "app_mention", "channel": channel, "user": user, "text": text, "ts": ts or new_ts(), **extra}


_TRIGGERS = itertools.count(1)


def block_actions(
    user: str,
    action_id: str,
    value: str,
    *,
    channel: str = "C0GENERAL",
    message_ts: str = "1700000001.000100",
    thread_ts: str | None = None,
    team_id: str = "T0TEAM",
    app_id: str = "A0APP",
) -> dict[str, Any]:
    """A ``block_actions`` interactivity payload for one button click."""
    container = {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": False}
    message = {"type": "message", "ts": message_ts, "user": "UBOT", "bot_id": "BBOT"}
    if thread_ts:
        container["thread_ts"] = thread_ts
        message["thread_ts"] = thread_ts
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": team_id},
        "api_app_id": app_id,
        "token": "legacy-verification-token",
        "container": container,
        "trigger_id": f"1.{next(_TRIGGERS)}.fake",  # one per interaction, as Slack sends
        "team": {"id": team_id, "domain": "acme"},
        "channel": {"id": channel, "name": "general"},
        "message": message,
        "response_url": "https://hooks.slack.invalid/actions/fake",
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "pp_card_actions",
                "value": value,
                "action_ts": str(time.time()),
            }
        ],
    }


def form_body(payload: dict[str, Any]) -> str:
    """How Slack posts interactivity: ``payload=<json>``, form-encoded."""
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


def _cursor_page(items: list[Any], params: dict[str, Any], *, default_limit: int) -> tuple[list[Any], str]:
    """``limit`` items from ``cursor`` on (Slack's cursor is opaque; here it is the offset), and the next page's
    cursor ("" on the last page), as Slack's list methods page."""
    start, limit = int(params.get("cursor") or 0), int(params.get("limit") or default_limit)
    return items[start : start + limit], str(start + limit) if start + limit < len(items) else ""


def _messages_page(
    messages: list[dict[str, Any]], params: dict[str, Any], *, newest_first: bool, default_limit: int
) -> dict[str, Any]:
    """conversations.replies' and .history's answer: only the messages after ``oldest`` and before ``latest``
    (``inclusive``: or at them), in ts order (``newest_first`` for history), one page of them by cursor, with
    their metadata only when ``include_all_metadata`` is set."""
    inclusive = str(params.get("inclusive")).lower() in ("true", "1")
    if params.get("oldest"):
        oldest = float(params["oldest"])
        messages = [m for m in messages if float(m["ts"]) > oldest or (inclusive and float(m["ts"]) == oldest)]
    if params.get("latest"):
        latest = float(params["latest"])
        messages = [m for m in messages if float(m["ts"]) < latest or (inclusive and float(m["ts"]) == latest)]
    ordered = sorted(messages, key=lambda m: float(m["ts"]), reverse=newest_first)
    page, cursor = _cursor_page(ordered, params, default_limit=default_limit)
    if str(params.get("include_all_metadata")).lower() not in ("true", "1"):
        page = [{k: v for k, v in m.items() if k != "metadata"} for m in page]
    return {"messages": [dict(m) for m in page], "has_more": bool(cursor), "response_metadata": {"next_cursor": cursor}}
