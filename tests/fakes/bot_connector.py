"""A local Bot Framework channel for tests: the connector the bot replies to, and the sender of activities.

The bot's real ``ConnectorClient`` talks to it over loopback HTTP (an activity's ``serviceUrl`` points
here), so tests see exactly what Teams would receive::

    async with FakeBotConnector() as channel:
        status, body = await channel.post(bot_url, channel.personal_message("How many vacation days?"))
        reply = await channel.wait_for(lambda a: a.type == "message")

It records ``POST /v3/conversations/{id}/activities`` (a new post), ``POST .../activities/{replyToId}``
(a reply), ``PUT .../activities/{activityId}`` (an update) and typing activities; ``POST /v3/conversations``
(a personal chat opened, in ``created``) answers ``a:personal-<user id>``, the id ``personal_message``
uses, or 403 as Teams does for a user in ``not_installed`` (the app not added for them). The connector
client URL-encodes conversation ids (``;messageid=`` arrives as ``%3Bmessageid=``); recorded ids are
decoded, so a test compares them with the ids it sent. Every Adaptive Card the bot sends (and every card
an invoke answer puts in place) is checked against the Adaptive Cards 1.5 schema (tests/fakes/conformance.py):
a card Teams would refuse gets a 400 and is recorded in ``violations``; the test that sent it fails at teardown.

Streaming (personal chats only) is checked as Teams checks it: typing activities with a ``streaminfo``
entity (``informative`` or ``streaming``, ``streamSequence`` 1, 2, ..., the ``streamId`` the first was
answered with; streaming text that keeps what came before), ended by a ``final`` message; each stream is
in ``streams``. An activity over 28 KB gets a 413, counted on the raw request body as the client sent it
(in ``Recorded.raw``; the connector client escapes non-ASCII, so it is not the size of the parsed JSON
re-encoded). What Teams would refuse is a violation, as a bad card is. ``stop_stream_after(kind)`` is
the person pressing Stop once the next update of ``kind`` has shown (or, with ``message=STREAM_TIMED_OUT``,
the stream timing out): Teams then refuses every later update or final on that stream with 403
``ContentStreamNotAllowed`` and that message, as it does a final for a stream already ended.

A busy or failing channel: ``refuse_next(status, times=...)`` refuses the next few message calls;
``fail_for(seconds, status, retry_after=...)`` refuses every post, reply and update (typing included)
until that much time has passed, as an outage, and ``fail_for(0)`` ends it at once. Each refused call
is in ``refused`` (kind, status) and, with its conversation and activity type, in ``refusals``.
``lose_answer_next(times=...)`` takes the next few message calls as usual (posted, recorded) but drops
the connection before answering, so the bot cannot tell whether they were posted. ``hold_roster()``
leaves every member lookup unanswered until the event it returns is set, as a roster that hangs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import aiohttp
from aiohttp import web

from tests.fakes import conformance
from tests.fakes.loopback import LoopbackServer

BOT_ID = "28:policypal-bot"
BOT_NAME = "PolicyPal"
TENANT = "tenant-contoso"
CHANNEL = "19:general@thread.tacv2"
ALICE = {"id": "29:alice", "name": "Alice Example", "aadObjectId": "aad-alice"}
BOB = {"id": "29:bob", "name": "Bob Example", "aadObjectId": "aad-bob"}
GUEST = {"id": "29:gwen", "name": "Gwen Guest", "aadObjectId": "aad-gwen"}
ROSTER = {  # as GetConversationMember answers: each member with their role and tenant
    ALICE["id"]: {
        **ALICE,
        "email": "alice@contoso.example",
        "userPrincipalName": "alice@contoso.example",
        "userRole": "user",
        "tenantId": TENANT,
    },
    BOB["id"]: {
        **BOB,
        "email": "bob@contoso.example",
        "userPrincipalName": "bob@contoso.example",
        "userRole": "user",
        "tenantId": TENANT,
    },
    GUEST["id"]: {**GUEST, "email": "gwen@partner.example", "userRole": "guest", "tenantId": TENANT},
}
# Another company's employee in a shared channel: a "user" of their own tenant (not on ROSTER by default).
PARTNER = {"id": "29:pat", "name": "Pat Partner", "aadObjectId": "aad-pat"}
PARTNER_MEMBER = {**PARTNER, "email": "pat@fabrikam.example", "userRole": "user", "tenantId": "tenant-fabrikam"}


@dataclass(frozen=True)
class Recorded:
    """One call the bot made: ``kind`` is "send", "reply" or "update"."""

    kind: str
    conversation_id: str
    activity_id: str | None  # the replied-to id for "reply", the updated id for "update"
    json: dict[str, Any]
    headers: dict[str, str]
    id: str  # what the connector answered
    raw: bytes = b""  # the request body as it came over the wire (what Teams' size limit counts)
    at: float = field(default_factory=time.monotonic)  # when it arrived (time.monotonic), for benchmarks

    @property
    def type(self) -> str:
        return str(self.json.get("type", ""))

    @property
    def text(self) -> str:
        return str(self.json.get("text") or "")

    @property
    def cards(self) -> list[dict[str, Any]]:
        attachments = self.json.get("attachments") or []
        return [a["content"] for a in attachments if a.get("contentType") == "application/vnd.microsoft.card.adaptive"]


MESSAGE_BYTES = 28_000  # Teams refuses a bigger activity (413)
STREAM_TYPES = ("informative", "streaming", "final")
INFORMATIVE_CHARS = 1_000
CANCELLED_BY_USER = "Content stream was cancelled by user."  # Teams' answer once the person pressed Stop
STREAM_TIMED_OUT = "Content stream finished due to exceeded streaming time."


@dataclass
class FakeStream:
    """One streamed reply in a personal chat: its updates as (streamType, text), then the final message."""

    conversation: str
    updates: list[tuple[str, str]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    sequence: int = 0
    final_unanswered: bool = False  # the final was taken but its answer lost (lose_answer_next)
    stopped: str | None = None  # why Teams takes nothing more on it (Stop pressed, timed out): stop_stream_after

    def take(self, kind: str, info: dict[str, Any], body: dict[str, Any]) -> str | None:
        """Record one update or the final message; what Teams would refuse about it, if anything."""
        text = str(body.get("text") or "")
        if kind == "final":
            self.final = body
            return None
        if info.get("streamSequence") != self.sequence + 1:
            return f"stream sequence {info.get('streamSequence')} after {self.sequence}"
        if kind == "informative" and len(text) > INFORMATIVE_CHARS:
            return f"an informative update of {len(text)} characters"
        earlier = [t for k, t in self.updates if k == "streaming"]
        if kind == "streaming" and earlier and not text.startswith(earlier[-1]):
            return "a streaming update that does not hold the text streamed before it"
        self.sequence += 1
        self.updates.append((kind, text))
        return None


@dataclass(frozen=True)
class Refusal:
    """One call the channel refused: its kind ("send", "reply", "update", "member", "create"), where, what, and how."""

    kind: str
    conversation_id: str
    type: str  # the activity's type ("message", "typing"); "" for a member lookup
    status: int
    streamed: bool = False  # a Teams stream's activity (it carries a streaminfo entity)
    at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Outage:
    """``fail_for``'s window: every call it covers is answered ``status`` until ``until`` (time.monotonic)."""

    until: float
    status: int
    retry_after: str | None
    roster: bool  # member lookups fail too


@dataclass
class FakeBotConnector(LoopbackServer):
    """The channel side of the Bot Framework protocol on 127.0.0.1."""

    fail_status: int | None = None  # answer every bot call with this status (for delivery failures)
    refusal_queue: list[tuple[int, str | None]] = field(default_factory=list)  # see refuse_next
    lost_answers: list[int] = field(default_factory=lambda: [0])  # see lose_answer_next (a count, in a box)
    refused: list[tuple[str, int]] = field(default_factory=list)  # (kind, status) of each refused call
    refusals: list[Refusal] = field(default_factory=list)  # the same calls, with conversation and type
    outage: Outage | None = None  # see fail_for
    roster: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(ROSTER))
    recorded: list[Recorded] = field(default_factory=list)
    member_lookups: list[tuple[str, str]] = field(default_factory=list)
    answers_without_ids: bool = False  # some channels answer a post with no activity id
    created: list[dict[str, Any]] = field(default_factory=list)  # bodies of POST /v3/conversations
    not_installed: set[str] = field(default_factory=set)  # Teams user ids whose personal chat cannot be opened
    violations: list[str] = field(default_factory=list)  # cards Teams would refuse (tests/fakes/conformance.py)
    streams: dict[str, FakeStream] = field(default_factory=dict)  # stream id -> its updates and final message
    roster_held: asyncio.Event | None = None  # see hold_roster
    stop_after: tuple[str, str] | None = None  # see stop_stream_after: (streamType, Teams' message)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _changed: asyncio.Condition | None = None

    async def start(self) -> FakeBotConnector:
        app = web.Application()
        app.router.add_post("/v3/conversations", self._create)
        app.router.add_post("/v3/conversations/{conversation}/activities", self._send)
        app.router.add_post("/v3/conversations/{conversation}/activities/{activity}", self._reply)
        app.router.add_put("/v3/conversations/{conversation}/activities/{activity}", self._update)
        app.router.add_get("/v3/conversations/{conversation}/members/{member}", self._member)
        app.router.add_get("/v3/conversations/{conversation}/members", self._members)
        self._changed = asyncio.Condition()
        return await self._listen(app)

    @property
    def service_url(self) -> str:
        """What activities carry as ``serviceUrl`` (with the trailing slash Teams sends)."""
        return f"http://127.0.0.1:{self._port}/"

    def refuse_next(self, status: int, *, times: int = 1, retry_after: str | None = None) -> None:
        """Answer the next ``times`` message posts or updates (typing passes) with ``status``, as a busy channel."""
        self.refusal_queue.extend([(status, retry_after)] * times)

    def stop_stream_after(self, kind: str, *, message: str = CANCELLED_BY_USER) -> None:
        """Once the next ``kind`` update ("informative" or "streaming") is shown, its stream stops: the person
        pressed Stop (or, with ``STREAM_TIMED_OUT``, it timed out); every later call on it gets 403 and ``message``."""
        assert kind in ("informative", "streaming"), kind
        self.stop_after = (kind, message)

    def hold_roster(self) -> asyncio.Event:
        """Leave every member lookup unanswered until the returned event is set: a roster that hangs."""
        self.roster_held = asyncio.Event()
        return self.roster_held

    def lose_answer_next(self, *, times: int = 1) -> None:
        """Post the next ``times`` message posts or updates (typing passes) but answer none of them: the
        connection drops after Teams took the activity, as a timeout does."""
        self.lost_answers[0] += times

    def fail_for(
        self, seconds: float, status: int = 503, *, retry_after: str | None = None, roster: bool = False
    ) -> None:
        """Refuse every post, reply and update, typing included (member lookups too if ``roster``), with
        ``status`` (and ``Retry-After``, if given) for the next ``seconds``: an outage, then recovery.

        Calling it again replaces the window; ``fail_for(0)`` ends it now. ``refuse_next`` still
        applies outside the window.
        """
        self.outage = Outage(time.monotonic() + seconds, status, retry_after, roster) if seconds > 0 else None

    @property
    def failing(self) -> bool:
        """Whether ``fail_for``'s window is open now."""
        return self.outage is not None and time.monotonic() < self.outage.until

    # --- what the bot sent -----------------------------------------------------------------------

    def messages(self, conversation_id: str | None = None) -> list[Recorded]:
        """Message activities posted or replied (not updates, not typing)."""
        return [
            r
            for r in self.recorded
            if r.kind != "update" and r.type == "message" and conversation_id in (None, r.conversation_id)
        ]

    @property
    def typing(self) -> list[Recorded]:
        return [r for r in self.recorded if r.type == "typing"]

    @property
    def updates(self) -> list[Recorded]:
        return [r for r in self.recorded if r.kind == "update"]

    async def wait_for(
        self, predicate: Callable[[Recorded], bool], *, count: int = 1, timeout: float = 5.0
    ) -> Recorded:
        """The ``count``-th recorded call matching ``predicate``, waiting for it to arrive."""
        assert self._changed is not None

        def matches() -> list[Recorded]:
            return [r for r in self.recorded if predicate(r)]

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(matches()) >= count), timeout)
            return matches()[count - 1]

    # --- the channel sending to the bot --------------------------------------------------------

    async def post(
        self, bot_url: str, activity: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """POST an activity to the bot as the Bot Framework Service would; returns status and JSON body."""
        async with aiohttp.ClientSession() as session, session.post(bot_url, json=activity, headers=headers) as resp:
            if resp.content_type == "application/json":
                body = await resp.json()
                self._check_invoke_card(body)
                return resp.status, body
            return resp.status, await resp.text()

    def _check_invoke_card(self, body: Any) -> None:
        """An ``adaptiveCard/action`` answer that replaces the card: Teams renders it like any other card."""
        if not isinstance(body, dict) or body.get("type") != conformance.CARD_CONTENT_TYPE:
            return
        if problems := conformance.adaptive_card_problems(body.get("value")):
            self.violations.extend(problems)
            conformance.report("Teams invoke response", problems)

    def activity(self, conversation: dict[str, Any], sender: dict[str, Any], **fields: Any) -> dict[str, Any]:
        """A Teams activity from ``sender`` in ``conversation``, pointing back at this connector."""
        return {
            "type": "message",
            "id": f"in-{next(self._ids)}",
            "channelId": "msteams",
            "serviceUrl": self.service_url,
            "from": sender,
            "recipient": {"id": BOT_ID, "name": BOT_NAME},
            "conversation": {"tenantId": TENANT, **conversation},
            "channelData": {"tenant": {"id": conversation.get("tenantId", TENANT)}},
            "locale": "en-US",
            **fields,
        }

    def personal_message(self, text: str, sender: dict[str, Any] = ALICE, **fields: Any) -> dict[str, Any]:
        conversation = {"id": f"a:personal-{sender['id']}", "conversationType": "personal"}
        return self.activity(conversation, sender, text=text, **fields)

    def channel_message(
        self, text: str, *, root: str | None = None, sender: dict[str, Any] = ALICE, mention: bool = True
    ) -> dict[str, Any]:
        """A channel post (``root`` None: a new thread, rooted at itself) or a reply in ``root``'s thread."""
        activity_id = f"17000{next(self._ids)}"
        conversation = {"id": f"{CHANNEL};messageid={root or activity_id}", "conversationType": "channel"}
        entities = [_mention()] if mention else []
        body = f"<at>{BOT_NAME}</at> {text}" if mention else text
        activity = self.activity(conversation, sender, text=body, entities=entities)
        activity["id"] = activity_id
        if root:
            activity["replyToId"] = root
        activity["channelData"].update({"teamsChannelId": CHANNEL, "team": {"id": "19:team@thread.tacv2"}})
        return activity

    def feedback(
        self, reaction: str, *, on: Recorded, comment: str = "", sender: dict[str, Any] = ALICE
    ) -> dict[str, Any]:
        """The ``message/submitAction`` invoke Teams sends when ``sender`` votes with the feedback loop on ``on``
        (``reaction`` "like" or "dislike"; the comment box's text JSON-encoded, as Teams sends it)."""
        conversation = {"id": on.conversation_id, "conversationType": _type_of(on.conversation_id)}
        value = {"actionName": "feedback",
                 "actionValue": {"reaction": reaction, "feedback": json.dumps({"feedbackText": comment})}}
        return self.activity(conversation, sender, type="invoke", name="message/submitAction", value=value,
                             replyToId=on.id)

    def card_action(
        self, verb: str, data: dict[str, Any], *, on: Recorded, sender: dict[str, Any] = ALICE
    ) -> dict[str, Any]:
        """The ``adaptiveCard/action`` invoke Teams sends when ``sender`` clicks an Action.Execute on ``on``."""
        conversation = {"id": on.conversation_id, "conversationType": _type_of(on.conversation_id)}
        value = {"action": {"type": "Action.Execute", "verb": verb, "data": data}, "trigger": "manual"}
        return self.activity(
            conversation, sender, type="invoke", name="adaptiveCard/action", value=value, replyToId=on.id
        )

    # --- serving ------------------------------------------------------------------------------

    def personal_chats(self) -> list[str]:
        """The personal chats the bot opened (or found), by conversation id, in order."""
        return [f"a:personal-{body['members'][0]['id']}" for body in self.created]

    async def _create(self, request: web.Request) -> web.Response:
        """CreateConversation for a 1:1 chat: Teams finds the existing personal chat, or refuses when the
        app is not installed for the user."""
        body = await request.json()
        members = body.get("members") or []
        if self.failing and self.outage is not None:
            return await self._refuse("create", "", "", self.outage.status, self.outage.retry_after)
        if body.get("isGroup") or len(members) != 1:
            return web.json_response({"error": {"code": "BadArgument", "message": "one member"}}, status=400)
        user = str(members[0].get("id") or "")
        if user in self.not_installed:
            error = {"code": "Forbidden", "message": "The bot is not installed in the user's personal scope"}
            return web.json_response({"error": error}, status=403)
        assert self._changed is not None
        async with self._changed:
            self.created.append(body)
            self._changed.notify_all()
        return web.json_response({"id": f"a:personal-{user}"})

    async def _send(self, request: web.Request) -> web.Response:
        return await self._record(request, "send", None)

    async def _reply(self, request: web.Request) -> web.Response:
        return await self._record(request, "reply", unquote(request.match_info["activity"]))

    async def _update(self, request: web.Request) -> web.Response:
        return await self._record(request, "update", unquote(request.match_info["activity"]))

    async def _member(self, request: web.Request) -> web.Response:
        conversation, member = unquote(request.match_info["conversation"]), unquote(request.match_info["member"])
        self.member_lookups.append((conversation, member))
        if self.roster_held is not None:
            await self.roster_held.wait()
        if self.failing and self.outage is not None and self.outage.roster:
            return await self._refuse("member", conversation, "", self.outage.status, self.outage.retry_after)
        # Teams finds a member by Teams id, AAD object id or user principal name.
        found = self.roster.get(member) or next(
            (e for e in self.roster.values() if member in (e.get("aadObjectId"), e.get("userPrincipalName"))), None
        )
        if found is None:
            return web.json_response({"error": {"code": "MemberNotFoundInConversation", "message": member}}, status=404)
        return web.json_response(found)

    async def _members(self, request: web.Request) -> web.Response:
        """The whole roster (every conversation has the same one here), as GetConversationMembers answers."""
        conversation = unquote(request.match_info["conversation"])
        self.member_lookups.append((conversation, "*"))
        if self.roster_held is not None:
            await self.roster_held.wait()
        if self.failing and self.outage is not None and self.outage.roster:
            return await self._refuse("member", conversation, "", self.outage.status, self.outage.retry_after)
        return web.json_response(list(self.roster.values()))

    async def _record(self, request: web.Request, kind: str, activity_id: str | None) -> web.Response:
        if self.fail_status is not None:
            return web.json_response({"error": {"code": "Failed", "message": "fake failure"}}, status=self.fail_status)
        raw = await request.read()
        body = json.loads(raw)
        conversation = unquote(request.match_info["conversation"])
        if self.failing and self.outage is not None:
            return await self._refuse(
                kind, conversation, str(body.get("type", "")), self.outage.status, self.outage.retry_after, body
            )
        if self.refusal_queue and body.get("type") != "typing":
            status, retry_after = self.refusal_queue.pop(0)
            return await self._refuse(kind, conversation, str(body.get("type", "")), status, retry_after, body)
        if problems := conformance.activity_card_problems(body):  # Teams refuses a card it cannot render
            return self._bad_card(kind, problems)
        if len(raw) > MESSAGE_BYTES:  # the body as sent, not re-encoded: its escapes count
            problem = f"an activity of {len(raw):,} bytes on the wire (limit {MESSAGE_BYTES:,})"
            return self._refused_by_teams(413, "MessageSizeTooBig", problem)
        if (ended := self._ended_stream(body)) is not None and ended.final_unanswered:  # a retry of that final
            return await self._refuse(kind, conversation, str(body.get("type", "")), 403, None, body,
                                      code="ContentStreamNotAllowed")
        if (named := self._named_stream(body)) is not None and named.stopped:  # Stop pressed, or timed out
            why = {"code": "ContentStreamNotAllowed", "message": named.stopped}
            return await self._refuse(kind, conversation, str(body.get("type", "")), 403, None, body, **why)
        stream_id, refusal = self._stream_step(conversation, body)
        if refusal is not None:
            return refusal
        self._stop_if_due(stream_id, body)
        new_id = activity_id if kind == "update" else stream_id or f"out-{next(self._ids)}"
        headers = {k.lower(): v for k, v in request.headers.items()}
        assert self._changed is not None
        async with self._changed:
            self.recorded.append(Recorded(kind, conversation, activity_id, body, headers, str(new_id), raw))
            self._changed.notify_all()
        if self.lost_answers[0] and body.get("type") != "typing":
            self.lost_answers[0] -= 1
            if stream_id is not None and (_stream_info(body) or {}).get("streamType") == "final":
                self.streams[stream_id].final_unanswered = True
            assert request.transport is not None
            request.transport.abort()  # taken and posted, but the bot never hears so
            return web.Response(status=200)
        return web.json_response({} if self.answers_without_ids else {"id": new_id})

    def _stream_step(self, conversation: str, body: dict[str, Any]) -> tuple[str | None, web.Response | None]:
        """Teams' streaming protocol (personal chats only): a first update without a stream id gets the id
        of the stream's message; each later one names it, with the next sequence number and (streaming)
        text that starts with the text before; a ``final`` message ends it, answered with the same id."""
        info = _stream_info(body)
        if info is None:
            return None, None
        kind, stream_id = info.get("streamType"), info.get("streamId")
        if not conversation.startswith("a:"):
            problem = f"a stream outside a personal chat ({conversation})"
            return None, self._refused_by_teams(400, "BadArgument", problem)
        if (body.get("type") == "typing") != (kind in ("informative", "streaming")) or kind not in STREAM_TYPES:
            problem = f"a {body.get('type')} activity with streamType {kind}"
            return None, self._refused_by_teams(400, "BadArgument", problem)
        if stream_id is None:
            if kind == "final" or info.get("streamSequence") != 1:
                return None, self._refused_by_teams(400, "BadArgument", f"a new stream must start at 1: {info}")
            stream_id = f"out-{next(self._ids)}"
            self.streams[stream_id] = FakeStream(conversation)
        stream = self.streams.get(stream_id)
        if stream is None or stream.final is not None:
            return None, self._refused_by_teams(403, "ContentStreamNotAllowed", f"stream {stream_id} is not open")
        problem = stream.take(kind, info, body)
        if problem:
            return None, self._refused_by_teams(400, "BadArgument", problem)
        return stream_id, None

    def _named_stream(self, body: dict[str, Any]) -> FakeStream | None:
        """The stream an update or final continues (it names it), if the channel knows it."""
        return self.streams.get(str((_stream_info(body) or {}).get("streamId")))

    def _stop_if_due(self, stream_id: str | None, body: dict[str, Any]) -> None:
        """``stop_stream_after``: the update just shown was the one after which the stream stops."""
        kind = (_stream_info(body) or {}).get("streamType")
        if stream_id is not None and self.stop_after is not None and kind == self.stop_after[0]:
            self.streams[stream_id].stopped = self.stop_after[1]
            self.stop_after = None

    def _ended_stream(self, body: dict[str, Any]) -> FakeStream | None:
        """The stream a ``final`` message names, when that stream has already ended."""
        info = _stream_info(body) or {}
        stream = self.streams.get(str(info.get("streamId"))) if info.get("streamType") == "final" else None
        return stream if stream is not None and stream.final is not None else None

    def _refused_by_teams(self, status: int, code: str, problem: str) -> web.Response:
        self.violations.append(problem)
        conformance.report("Teams", [problem])
        return web.json_response({"error": {"code": code, "message": problem}}, status=status)

    def _bad_card(self, kind: str, problems: list[str]) -> web.Response:
        self.violations.extend(problems)
        conformance.report(f"Teams {kind}", problems)
        error = {"code": "BadArgument", "message": "; ".join(problems)[:1000]}
        return web.json_response({"error": error}, status=400)

    async def _refuse(
        self,
        kind: str,
        conversation: str,
        activity_type: str,
        status: int,
        retry_after: str | None,
        body: dict[str, Any] | None = None,
        *,
        code: str | None = None,
        message: str = "fake refusal",
    ) -> web.Response:
        assert self._changed is not None
        streamed = _stream_info(body or {}) is not None
        async with self._changed:
            self.refused.append((kind, status))
            self.refusals.append(Refusal(kind, conversation, activity_type, status, streamed))
            self._changed.notify_all()
        headers = {"Retry-After": retry_after} if retry_after is not None else None
        code = code or ("Throttled" if status == 429 else "ServiceUnavailable")
        error = {"error": {"code": code, "message": message}}
        return web.json_response(error, status=status, headers=headers)


def _mention() -> dict[str, Any]:
    return {"type": "mention", "mentioned": {"id": BOT_ID, "name": BOT_NAME}, "text": f"<at>{BOT_NAME}</at>"}


def _type_of(conversation_id: str) -> str:
    if conversation_id.startswith("19:") and "@thread" in conversation_id:
        return "channel"
    return "personal"


def _stream_info(body: dict[str, Any]) -> dict[str, Any] | None:
    """The ``streaminfo`` entity that makes an activity part of a Teams stream, if it carries one."""
    return next((e for e in body.get("entities") or [] if e.get("type") == "streaminfo"), None)
