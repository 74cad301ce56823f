"""Slack events and clicks written to the inbox before their ack, over HTTP and over Socket Mode.

An event callback is keyed by its ``event_id`` (Slack has been seen to redeliver with retry
attempt 0, so its retry headers are never trusted); a click by its ``trigger_id``, which is one per
interaction. When the write fails the request is not acknowledged (HTTP 503; no Socket Mode ack),
so Slack delivers it again. The inbox then runs the stored request through bolt, as if it had just
arrived over Socket Mode: bolt routes it to the listeners, which do the work under the item's lease.

A signed body that cannot be a Slack request (not JSON, not an object, an id of the wrong type) is
refused before the write: over HTTP with a 400, in Socket Mode with a logged ack (there is no 400).
Written, it would fail in bolt or a listener on every retry. An event that is well formed but names
no channel or ts is acknowledged and logged as malformed, and starts nothing: Slack would only
deliver it again, and no run could answer it anywhere.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

log = logging.getLogger(__name__)

KIND = "slack.request"
Intake = Callable[[dict[str, Any], dict[str, Any]], Awaitable[bool]]
RUN_EVENTS = ("message", "app_mention")  # the events whose channel, ts and user a run reads
_CLICK_PARTS = ("container", "message", "channel", "team")


class Malformed(ValueError):
    """A signed body that is not a Slack request: not UTF-8, not JSON, or JSON that is not an object."""


def parse_body(raw: bytes, content_type: str | None) -> dict[str, Any]:
    """The request a body carries, read as bolt reads it: JSON, or the JSON in a form's ``payload``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed("the body is not UTF-8 text") from None
    if not text:
        return {}
    if content_type != "application/json" and not text.startswith("{"):
        form = dict(parse_qsl(text, keep_blank_values=True))
        if "payload" not in form:
            return form  # ssl_check and other forms: bolt answers them
        text = form["payload"]
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise Malformed(f"the body is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise Malformed(f"the body is {_kind(body)}, not a JSON object")
    return body


def malformed(body: dict[str, Any]) -> str | None:
    """Why a request cannot be one Slack sent (a part or an id of the wrong type), or None."""
    if body.get("type") == "event_callback":
        reason = _bad_event(body)
    elif body.get("type") == "block_actions":
        reason = _bad_click(body)
    else:
        reason = None
    return reason or _unreadable_by_bolt(body)


def incomplete(body: dict[str, Any]) -> str | None:
    """Why a well-formed request can start nothing: a message without its channel or ts, a click without a channel."""
    if body.get("type") == "event_callback" and body["event"].get("type") in RUN_EVENTS:
        missing = [name for name in ("channel", "ts") if not body["event"].get(name)]
        return f"its {body['event']['type']} event has no {' or '.join(missing)}" if missing else None
    if body.get("type") == "block_actions":
        container, channel = body.get("container") or {}, body.get("channel") or {}
        return None if container.get("channel_id") or channel.get("id") else "its click names no channel"
    return None


def _bad_event(body: dict[str, Any]) -> str | None:
    event = body.get("event")
    if not isinstance(event, dict):
        return f"its event is {_kind(event)}, not an object"
    if not isinstance(body.get("event_id", ""), str):
        return f"its event id is {_kind(body['event_id'])}, not a string"
    if event.get("type") not in RUN_EVENTS:
        return None
    for name in ("user", "channel", "ts", "thread_ts", "text"):
        if event.get(name) is not None and not isinstance(event[name], str):
            return f"its event's {name} is {_kind(event[name])}, not a string"
    return None


def _bad_click(body: dict[str, Any]) -> str | None:
    user = body.get("user")
    if not isinstance(user, dict):
        return f"its user is {_kind(user)}, not an object"
    if not isinstance(user.get("id"), str):
        return f"its user id is {_kind(user.get('id'))}, not a string"
    actions = body.get("actions")
    if not isinstance(actions, list) or not actions or not all(isinstance(a, dict) for a in actions):
        return "its actions are not a list of objects"
    for name in _CLICK_PARTS:
        if body.get(name) is not None and not isinstance(body[name], dict):
            return f"its {name} is {_kind(body[name])}, not an object"
    if not isinstance(body.get("trigger_id", ""), str):
        return f"its trigger id is {_kind(body['trigger_id'])}, not a string"
    return None


def _unreadable_by_bolt(body: dict[str, Any]) -> str | None:
    """What the inbox's work will build from the stored body, tried now: bolt reads ids all over it."""
    try:
        AsyncBoltRequest(mode="socket_mode", body=body)
    except Exception as exc:  # any failure here is the body's: nothing but parsing runs
        return f"bolt cannot read it ({type(exc).__name__}: {exc})"
    return None


def _kind(value: object) -> str:
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
             dict: "an object"}  # fmt: skip
    return names.get(type(value), type(value).__name__)


def inbox_key(body: dict[str, Any]) -> str | None:
    """The inbox id of a request worth writing down first; None for what bolt answers inline."""
    if body.get("type") == "event_callback" and body.get("event_id"):
        return f"slack:{body['event_id']}"
    if body.get("type") == "block_actions":
        action = (body.get("actions") or [{}])[0]
        ident = body.get("trigger_id") or f"{(body.get('user') or {}).get('id')}:{action.get('action_ts')}"
        return f"slack:action:{ident}"
    return None


def retry_headers(headers: Any) -> dict[str, Any]:
    """The retry headers bolt's listeners read (kept with the item for the logs)."""
    kept = {}
    for name in ("x-slack-retry-num", "x-slack-retry-reason"):
        value = headers.get(name) if headers is not None else None
        if value:
            kept[name] = value if isinstance(value, list) else [value]
    return kept


class InboxSocketModeHandler(AsyncSocketModeHandler):
    """bolt's Socket Mode handler, with the inbox write before the ack: no write, no ack."""

    def __init__(self, app: AsyncApp, intake: Intake, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._intake = intake
        self.client.message_listeners.insert(0, _ack_unreadable)

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        requests = req.type in ("events_api", "interactive")
        reason = (malformed(req.payload) or incomplete(req.payload)) if requests else None
        if reason is not None:
            log.warning("Slack envelope %s is malformed (%s); acknowledged, nothing runs", req.envelope_id, reason)
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        if req.type not in ("events_api", "interactive") or inbox_key(req.payload) is None:
            await super().handle(client, req)  # type: ignore[arg-type]
            return
        headers = {"x-slack-retry-num": [str(req.retry_attempt)]} if req.retry_attempt else {}
        try:
            await self._intake(req.payload, headers)
        except Exception:
            log.exception("Slack envelope %s could not be written down; not acknowledged, Slack sends it again",
                          req.envelope_id)
            return
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))


async def _ack_unreadable(client: AsyncBaseSocketModeClient, message: dict[str, Any], raw: str | None) -> None:
    """An envelope whose payload is not an object (null, a list, a string): logged and acknowledged.

    slack_sdk raises on null or a list before any request listener, and turns a string into
    ``{"text": ...}``, which bolt cannot route: either way unacknowledged, so Slack would send it again
    and again. Its payload is dropped so that slack_sdk then passes it by (no request without one).
    """
    envelope_id = message.get("envelope_id")
    if not envelope_id or "payload" not in message or isinstance(message["payload"], dict):
        return
    log.warning("Slack envelope %s is malformed (its payload is %s, not an object); acknowledged, nothing runs",
                envelope_id, _kind(message["payload"]))
    await client.send_socket_mode_response(SocketModeResponse(envelope_id=str(envelope_id)))
    del message["payload"]
