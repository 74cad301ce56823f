"""Slack events and clicks written to the inbox before their ack, over HTTP and over Socket Mode.

An event callback is keyed by its ``event_id`` (Slack has been seen to redeliver with retry
attempt 0, so its retry headers are never trusted); a click by its ``trigger_id``, which is one per
interaction. When the write fails the request is not acknowledged (HTTP 503; no Socket Mode ack),
so Slack delivers it again. The inbox then runs the stored request through bolt, as if it had just
arrived over Socket Mode: bolt routes it to the listeners, which do the work under the item's lease.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

log = logging.getLogger(__name__)

KIND = "slack.request"
Intake = Callable[[dict[str, Any], dict[str, Any]], Awaitable[bool]]


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

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
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
