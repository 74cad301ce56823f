"""A local Bot Framework channel for tests: the connector the bot replies to, and the sender of activities.

The bot's real ``ConnectorClient`` talks to it over loopback HTTP (an activity's ``serviceUrl`` points
here), so tests see exactly what Teams would receive::

    async with FakeBotConnector() as channel:
        status, body = await channel.post(bot_url, channel.personal_message("How many vacation days?"))
        reply = await channel.wait_for(lambda a: a.type == "message")

It records ``POST /v3/conversations/{id}/activities`` (a new post), ``POST .../activities/{replyToId}``
(a reply), ``PUT .../activities/{activityId}`` (an update) and typing activities. The connector
client URL-encodes conversation ids (``;messageid=`` arrives as ``%3Bmessageid=``); recorded ids are
decoded, so a test compares them with the ids it sent. Only aiohttp and the standard library are used.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import aiohttp
from aiohttp import web

from tests.fakes.loopback import LoopbackServer

BOT_ID = "28:policypal-bot"
BOT_NAME = "PolicyPal"
TENANT = "tenant-contoso"
CHANNEL = "19:general@thread.tacv2"
ALICE = {"id": "29:alice", "name": "Alice Example", "aadObjectId": "aad-alice"}
BOB = {"id": "29:bob", "name": "Bob Example", "aadObjectId": "aad-bob"}
GUEST = {"id": "29:gwen", "name": "Gwen Guest", "aadObjectId": "aad-gwen"}
ROSTER = {
    ALICE["id"]: {
        **ALICE,
        "email": "alice@contoso.example",
        "userPrincipalName": "alice@contoso.example",
        "userRole": "user",
    },
    BOB["id"]: {**BOB, "email": "bob@contoso.example", "userPrincipalName": "bob@contoso.example", "userRole": "user"},
    GUEST["id"]: {**GUEST, "email": "gwen@partner.example", "userRole": "guest"},
}


@dataclass(frozen=True)
class Recorded:
    """One call the bot made: ``kind`` is "send", "reply" or "update"."""

    kind: str
    conversation_id: str
    activity_id: str | None  # the replied-to id for "reply", the updated id for "update"
    json: dict[str, Any]
    headers: dict[str, str]
    id: str  # what the connector answered

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


@dataclass
class FakeBotConnector(LoopbackServer):
    """The channel side of the Bot Framework protocol on 127.0.0.1."""

    fail_status: int | None = None  # answer every bot call with this status (for delivery failures)
    refusal_queue: list[tuple[int, str | None]] = field(default_factory=list)  # see refuse_next
    refused: list[tuple[str, int]] = field(default_factory=list)  # (kind, status) of each refused call
    roster: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(ROSTER))
    recorded: list[Recorded] = field(default_factory=list)
    member_lookups: list[tuple[str, str]] = field(default_factory=list)
    answers_without_ids: bool = False  # some channels answer a post with no activity id
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _changed: asyncio.Condition | None = None

    async def start(self) -> FakeBotConnector:
        app = web.Application()
        app.router.add_post("/v3/conversations/{conversation}/activities", self._send)
        app.router.add_post("/v3/conversations/{conversation}/activities/{activity}", self._reply)
        app.router.add_put("/v3/conversations/{conversation}/activities/{activity}", self._update)
        app.router.add_get("/v3/conversations/{conversation}/members/{member}", self._member)
        self._changed = asyncio.Condition()
        return await self._listen(app)

    @property
    def service_url(self) -> str:
        """What activities carry as ``serviceUrl`` (with the trailing slash Teams sends)."""
        return f"http://127.0.0.1:{self._port}/"

    def refuse_next(self, status: int, *, times: int = 1, retry_after: str | None = None) -> None:
        """Answer the next ``times`` message posts or updates (typing passes) with ``status``, as a busy channel."""
        self.refusal_queue.extend([(status, retry_after)] * times)

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
                return resp.status, await resp.json()
            return resp.status, await resp.text()

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

    async def _send(self, request: web.Request) -> web.Response:
        return await self._record(request, "send", None)

    async def _reply(self, request: web.Request) -> web.Response:
        return await self._record(request, "reply", unquote(request.match_info["activity"]))

    async def _update(self, request: web.Request) -> web.Response:
        return await self._record(request, "update", unquote(request.match_info["activity"]))

    async def _member(self, request: web.Request) -> web.Response:
        conversation, member = unquote(request.match_info["conversation"]), unquote(request.match_info["member"])
        self.member_lookups.append((conversation, member))
        if member not in self.roster:
            return web.json_response({"error": {"code": "MemberNotFoundInConversation", "message": member}}, status=404)
        return web.json_response(self.roster[member])

    async def _record(self, request: web.Request, kind: str, activity_id: str | None) -> web.Response:
        if self.fail_status is not None:
            return web.json_response({"error": {"code": "Failed", "message": "fake failure"}}, status=self.fail_status)
        body = await request.json()
        if self.refusal_queue and body.get("type") != "typing":
            status, retry_after = self.refusal_queue.pop(0)
            self.refused.append((kind, status))
            headers = {"Retry-After": retry_after} if retry_after is not None else None
            error = {"error": {"code": "Throttled", "message": "fake refusal"}}
            return web.json_response(error, status=status, headers=headers)
        new_id = activity_id if kind == "update" else f"out-{next(self._ids)}"
        conversation = unquote(request.match_info["conversation"])
        headers = {k.lower(): v for k, v in request.headers.items()}
        assert self._changed is not None
        async with self._changed:
            self.recorded.append(Recorded(kind, conversation, activity_id, body, headers, str(new_id)))
            self._changed.notify_all()
        return web.json_response({} if self.answers_without_ids else {"id": new_id})


def _mention() -> dict[str, Any]:
    return {"type": "mention", "mentioned": {"id": BOT_ID, "name": BOT_NAME}, "text": f"<at>{BOT_NAME}</at>"}


def _type_of(conversation_id: str) -> str:
    if conversation_id.startswith("19:") and "@thread" in conversation_id:
        return "channel"
    return "personal"
