"""Local servers for the ticket systems and helpdesk destinations, used through the real client code.

Each implements the documented shape of the endpoint PolicyPal calls, checks the auth header the
way the real service does, and records every request (method, path, query, headers, body)::

    async with FakeJira() as jira:
        jira.script(status(503, {"errorMessage": "busy"}))   # the next create gets this, then normal
        jira.script(slow(2.0))                                # the next create acts, then answers late
        jira.script(stall(2.0))                               # the next create hangs and acts not at all
        ... JiraServiceDesk(jira.url, jira.email, jira.token, "10", "25") ...
        assert jira.created[0]["requestFieldValues"]["summary"] == ...

- ``FakeJira``: Jira Service Management ``POST /rest/servicedeskapi/request`` (basic auth, email +
  API token; 401 is Jira's plain-text answer, 400 its ``errorMessage`` body) and the JQL text search
  ``GET /rest/api/3/search/jql``.
- ``FakeServiceNow``: the Table API ``POST``/``GET /api/now/table/incident`` (basic or bearer;
  errors as ``{"error": {"message", "detail"}, "status": "failure"}``), ``correlation_id`` queries.
- ``FakeWebhook``: any path; checks PolicyPal's HMAC signature and dedupes on ``Idempotency-Key``;
  a GET gets a 200 HTML page, like the sign-in page a proxy redirects to.
- ``FakeSMTP``: aiosmtpd on loopback; records messages, can answer 451 or stall, refuse recipients
  and answer QUIT with an error.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import Message
from typing import Any

from aiohttp import web

from bot.delivery import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify


@dataclass(frozen=True)
class Recorded:
    """One request as the client sent it; header names are lower-case."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True)
class Behaviour:
    """What the next create request gets instead of the normal answer."""

    status: int | None = None  # answer this without acting
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    act_then_wait_s: float = 0.0  # act normally, then answer this late (a client timeout after the fact)
    wait_s: float = 0.0  # before answering ``status``: a server that hangs without acting


def stall(seconds: float) -> Behaviour:
    """Hang without acting, then 504: the client times out and nothing was created."""
    return Behaviour(status=504, body="", wait_s=seconds)


def status(code: int, body: Any = None, **headers: str) -> Behaviour:
    return Behaviour(status=code, body=body, headers=dict(headers))


def slow(seconds: float) -> Behaviour:
    return Behaviour(act_then_wait_s=seconds)


class _Recorder:
    """An aiohttp app on 127.0.0.1 that records requests and plays scripted behaviours on creates."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._script: deque[Behaviour] = deque()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *behaviours: Behaviour) -> None:
        self._script.extend(behaviours)

    def to(self, method: str, path_part: str = "") -> list[Recorded]:
        return [r for r in self.requests if r.method == method and path_part in r.path]

    def start_in_thread(self) -> _Recorder:
        """Serve on a loop of its own in a daemon thread, for a client in another process; ``stop`` ends it."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            loop.run_until_complete(self.__aenter__())
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread_loop = loop
        self._thread = threading.Thread(target=serve, name=type(self).__name__, daemon=True)
        self._thread.start()
        if not ready.wait(timeout=10):
            raise RuntimeError(f"{type(self).__name__} did not start within 10 s")
        return self

    def stop(self) -> None:
        """Stop a server started with ``start_in_thread``."""
        loop, thread = getattr(self, "_thread_loop", None), getattr(self, "_thread", None)
        if loop is None or thread is None:
            return

        async def close() -> None:
            for task in asyncio.all_tasks():  # requests held by a slow behaviour: answer them now
                if task is not asyncio.current_task():
                    task.cancel()
            await self.__aexit__(None, None, None)

        asyncio.run_coroutine_threadsafe(close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread_loop = self._thread = None

    async def __aenter__(self) -> _Recorder:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def record(self, request: web.Request) -> Recorded:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        recorded = Recorded(request.method, request.path, dict(request.query), headers, body)
        self.requests.append(recorded)
        return recorded

    async def scripted(self, act: Any) -> web.StreamResponse:
        """The next behaviour, else ``act()``; ``act`` returns the normal response."""
        behaviour = self._script.popleft() if self._script else None
        if behaviour is not None and behaviour.status is not None:
            if behaviour.wait_s:
                with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
                    await asyncio.sleep(behaviour.wait_s)
            return _respond(behaviour.status, behaviour.body, behaviour.headers)
        response = await act()
        if behaviour is not None and behaviour.act_then_wait_s:
            with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
                await asyncio.sleep(behaviour.act_then_wait_s)
        return response  # type: ignore[no-any-return]


def _respond(code: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    if isinstance(body, str) or body is None:
        return web.Response(status=code, text=body or "", headers=headers)
    return web.json_response(body, status=code, headers=headers)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class FakeJira(_Recorder):
    """Jira Service Management: customer requests and JQL search."""

    def __init__(self, *, email: str = "bot@example.com", token: str = "jira-token-123456", desk: str = "10") -> None:
        super().__init__()
        self.email, self.token, self.desk = email, token, desk
        self.request_types = {"25"}
        self.created: list[dict[str, Any]] = []  # request bodies of the requests created
        self._numbers = itertools.count(1)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/rest/servicedeskapi/request", self._create)
        app.router.add_get("/rest/api/3/search/jql", self._search)

    def issue_key(self, n: int) -> str:
        return f"HELP-{n}"

    async def _create(self, request: web.Request) -> web.StreamResponse:
        recorded = await self.record(request)
        if recorded.headers.get("authorization") != basic(self.email, self.token):
            return _respond(401, "Client must be authenticated to access this resource.")
        return await self.scripted(lambda: self._created(recorded.json))

    async def _created(self, body: dict[str, Any]) -> web.Response:
        if body.get("serviceDeskId") != self.desk or body.get("requestTypeId") not in self.request_types:
            error = {"errorMessage": "The request type you are trying to use does not exist.", "i18nErrorMessage": {}}
            return _respond(400, error)
        fields = body.get("requestFieldValues") or {}
        if not fields.get("summary"):
            return _respond(400, {"errorMessage": "Summary: You must specify a summary of the issue."})
        self.created.append(body)
        key = self.issue_key(len(self.created))
        web_link = f"{self.url}/servicedesk/customer/portal/1/{key}"
        answer = {
            "issueId": str(10_000 + len(self.created)),
            "issueKey": key,
            "requestTypeId": body["requestTypeId"],
            "serviceDeskId": body["serviceDeskId"],
            "requestFieldValues": [{"fieldId": "summary", "value": fields["summary"]}],
            "_links": {"web": web_link, "self": f"{self.url}/rest/servicedeskapi/request/{key}"},
        }
        return _respond(201, answer)

    async def _search(self, request: web.Request) -> web.Response:
        recorded = await self.record(request)
        if recorded.headers.get("authorization") != basic(self.email, self.token):
            return _respond(401, "Client must be authenticated to access this resource.")
        term = recorded.query.get("jql", "").split('"')[1] if '"' in recorded.query.get("jql", "") else ""
        issues = [
            {"id": str(10_000 + n), "key": self.issue_key(n), "fields": {"summary": b["requestFieldValues"]["summary"]}}
            for n, b in enumerate(self.created, 1)
            if term and term in b["requestFieldValues"].get("description", "")
        ]
        return _respond(200, {"issues": issues[:1], "isLast": True})


class FakeServiceNow(_Recorder):
    """The ServiceNow Table API for incidents."""

    def __init__(
        self, *, user: str = "svc.policypal", password: str = "sn-pass-123456", token: str | None = None
    ) -> None:
        super().__init__()
        self.user, self.password, self.token = user, password, token
        self.incidents: list[dict[str, Any]] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/now/table/incident", self._create)
        app.router.add_get("/api/now/table/incident", self._query)

    def _authorised(self, recorded: Recorded) -> bool:
        expected = f"Bearer {self.token}" if self.token else basic(self.user, self.password)
        return recorded.headers.get("authorization") == expected

    async def _create(self, request: web.Request) -> web.StreamResponse:
        recorded = await self.record(request)
        if not self._authorised(recorded):
            return _respond(401, _sn_error("User Not Authenticated", "Required to provide Auth information"))
        return await self.scripted(lambda: self._created(recorded))

    async def _created(self, recorded: Recorded) -> web.Response:
        body = recorded.json
        number = f"INC{10_000 + len(self.incidents) + 1:07d}"
        incident = {**body, "sys_id": uuid.uuid4().hex, "number": number}
        self.incidents.append(incident)
        return _respond(201, {"result": _fields(incident, recorded.query)})

    async def _query(self, request: web.Request) -> web.Response:
        recorded = await self.record(request)
        if not self._authorised(recorded):
            return _respond(401, _sn_error("User Not Authenticated", "Required to provide Auth information"))
        field_name, _, value = recorded.query.get("sysparm_query", "").partition("=")
        found = [i for i in self.incidents if i.get(field_name) == value]
        limit = int(recorded.query.get("sysparm_limit", "100"))
        return _respond(200, {"result": [_fields(i, recorded.query) for i in found[:limit]]})


def _sn_error(message: str, detail: str) -> dict[str, Any]:
    return {"error": {"message": message, "detail": detail}, "status": "failure"}


def _fields(record: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
    wanted = [f for f in query.get("sysparm_fields", "").split(",") if f]
    return {k: v for k, v in record.items() if not wanted or k in wanted}


class FakeWebhook(_Recorder):
    """A receiver of PolicyPal's signed webhooks; dedupes on Idempotency-Key like a careful receiver."""

    def __init__(self, secret: str = "whsec-test-123456") -> None:
        super().__init__()
        self.secret = secret
        self.accepted: dict[str, dict[str, Any]] = {}  # idempotency key -> body
        self._ids: dict[str, str] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{tail:.*}", self._post)
        app.router.add_get("/{tail:.*}", self._page)

    async def _page(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.Response(text="<html><body>Sign in</body></html>", content_type="text/html")

    async def _post(self, request: web.Request) -> web.StreamResponse:
        recorded = await self.record(request)
        timestamp = recorded.headers.get(TIMESTAMP_HEADER.lower(), "")
        signature = recorded.headers.get(SIGNATURE_HEADER.lower(), "")
        if not verify(self.secret, timestamp, recorded.body, signature):
            return _respond(401, {"error": "bad signature"})
        return await self.scripted(lambda: self._accept(recorded))

    async def _accept(self, recorded: Recorded) -> web.Response:
        key = recorded.headers.get("idempotency-key", uuid.uuid4().hex)
        if key in self._ids:
            return _respond(200, {"id": self._ids[key], "url": f"{self.url}/t/{self._ids[key]}", "duplicate": True})
        self._ids[key] = f"WH-{len(self._ids) + 1}"
        self.accepted[key] = recorded.json
        return _respond(201, {"id": self._ids[key], "url": f"{self.url}/t/{self._ids[key]}"})


class FakeSMTP:
    """aiosmtpd on loopback in its own thread; ``fail_next`` answers 451, ``stall_s`` delays DATA,
    ``refuse`` maps recipients to the RCPT answer they get, ``quit_reply`` replaces QUIT's 221."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.fail_next = 0
        self.stall_s = 0.0
        self.refuse: dict[str, str] = {}
        self.quit_reply: str | None = None
        self.port = _free_port()
        self._controller: Any = None

    def __enter__(self) -> FakeSMTP:
        from aiosmtpd.controller import Controller

        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: list[str]) -> str:
        if address in self.refuse:
            return self.refuse[address]
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        return "250 OK"

    async def handle_QUIT(self, server: Any, session: Any, envelope: Any) -> str:
        return self.quit_reply or "221 Bye"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd handler hook
        if self.stall_s:
            await asyncio.sleep(self.stall_s)
        if self.fail_next:
            self.fail_next -= 1
            return "451 4.3.0 Mailbox temporarily unavailable"
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        self.messages.append(message_from_bytes(envelope.content, policy=policy.default))
        return "250 OK"

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Message]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self.messages)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
