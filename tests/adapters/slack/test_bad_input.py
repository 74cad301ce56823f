"""Correctly signed bodies that are not Slack requests: a 400 and a log line over HTTP, a logged ack in Socket Mode.

Never a 500 with a traceback, and never an inbox item whose work fails on every retry.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from adapters.slack.app import EVENTS_PATH, SlackCredentials, start_slack
from adapters.slack.blocks import CONFIRM
from bot.identity import GroupMap
from bot.wiring import open_service
from tests.adapters.slack.test_app import ALICE, PASSAGE, SECRET, SlackRig, running_slack
from tests.bot.helpers import OnePassage, settings_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlackAPI, block_actions, dm_event, event_envelope, mention_event

pytestmark = pytest.mark.asyncio

FORM = "application/x-www-form-urlencoded"


@pytest_asyncio.fixture
async def slack(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SlackRig]:
    async for rig in running_slack(tmp_path, fake_openai, monkeypatch):
        yield rig


def signed(body: bytes, content_type: str = "application/json") -> dict[str, str]:
    """Slack's v0 signature over raw bytes (the body need not be text)."""
    stamp = str(int(time.time()))
    signature = hmac.new(SECRET.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"Content-Type": content_type, "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={signature}"}


async def post(rig: SlackRig, body: bytes, content_type: str = "application/json") -> tuple[int, str]:
    async with rig.session.post(rig.url + EVENTS_PATH, data=body, headers=signed(body, content_type)) as response:
        return response.status, await response.text()


def click(**changes: Any) -> dict[str, Any]:
    return {**block_actions(ALICE, CONFIRM, "p:h:c"), **changes}


def form(payload: str) -> bytes:
    return urllib.parse.urlencode({"payload": payload}).encode()


def as_json(value: Any) -> bytes:
    return json.dumps(value).encode()


BAD_BODIES = {
    "not JSON": (b"this is not json", "application/json"),
    "a JSON list": (b"[1, 2]", "application/json"),
    "JSON null": (b"null", "application/json"),
    "a click whose user is a number": (form(json.dumps(click(user=5))), FORM),
    "a click whose user id is a list": (form(json.dumps(click(user={"id": []}))), FORM),
    "a JSON click whose user is a number": (as_json(click(user=5)), "application/json"),
    "a click whose actions are not a list": (form(json.dumps(click(actions="x"))), FORM),
    "a click whose container is a string": (form(json.dumps(click(container="x"))), FORM),
    "a form payload that is not JSON": (form("{not json"), FORM),
    "a form payload that is a list": (form("[1]"), FORM),
    "a form payload that is null": (form("null"), FORM),
    "an event whose user is a number": (as_json(event_envelope({**dm_event(ALICE, "hi"), "user": 5})),
                                        "application/json"),
    "an event that is a list": (as_json({**event_envelope(dm_event(ALICE, "hi")), "event": [1]}), "application/json"),
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
async def test_a_signed_body_that_is_not_a_slack_request_gets_400_and_a_log_line(
    slack: SlackRig, caplog: pytest.LogCaptureFixture, name: str
):
    body, content_type = BAD_BODIES[name]
    caplog.set_level(logging.WARNING)
    status, text = await post(slack, body, content_type)
    await asyncio.sleep(0.1)
    await slack.service.inbox.drain(5.0)

    assert status == 400, (name, status, text)
    (warning,) = [r for r in caplog.records if r.name == "adapters.slack.app" and r.levelno == logging.WARNING]
    assert "400" in warning.getMessage()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []  # no traceback anywhere
    assert slack.model.requests == [] and slack.slack.calls_to("chat.postMessage") == []


async def test_a_body_that_is_not_utf8_is_refused_not_a_server_error(slack: SlackRig):
    """slack_sdk verifies signatures over text: a body that is not UTF-8 cannot be Slack's, so it counts as unsigned."""
    status, _ = await post(slack, b'{"type": "event_callback", "x": "\xff\xfe"}')
    assert status == 401
    assert slack.model.requests == []


@pytest.mark.parametrize("missing", ["channel", "ts"])
async def test_a_message_without_channel_or_ts_is_acknowledged_logged_as_malformed_and_runs_nothing(
    slack: SlackRig, caplog: pytest.LogCaptureFixture, missing: str
):
    caplog.set_level(logging.WARNING)
    event = mention_event(ALICE, "<@UBOT> hello")
    del event[missing]
    envelope = event_envelope(event)
    status, _ = await post(slack, as_json(envelope))
    await asyncio.sleep(0.2)
    await slack.service.inbox.drain(5.0)

    assert status == 200  # Slack would only deliver it again
    assert any("malformed" in r.getMessage() and missing in r.getMessage() for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert await slack.service.store.inbox.get(f"slack:{envelope['event_id']}") is None  # not written: no run
    assert slack.model.requests == []


# --- Socket Mode --------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def socket_slack(tmp_path: Path, fake_openai: FakeOpenAI) -> AsyncIterator[tuple[FakeSlackAPI, Any, Any]]:
    async with FakeSlackAPI() as fake_slack:
        fake_slack.add_user(ALICE, "alice", "alice@example.com")
        service = await open_service(settings_for(tmp_path, fake_openai), searcher=OnePassage(PASSAGE))
        credentials = SlackCredentials(fake_slack.token, None, fake_slack.app_token, fake_slack.base_url)
        runtime = await start_slack(service, credentials, GroupMap())
        try:
            yield fake_slack, runtime, service
        finally:
            await runtime.close(1.0)
            await service.close()


NO_CHANNEL = {k: v for k, v in mention_event(ALICE, "hi").items() if k != "channel"}
SOCKET_PAYLOADS = {
    "a null payload": (None, "events_api"),
    "a list payload": ([1, 2], "events_api"),
    "a string payload": ("hello", "interactive"),
    "a click whose user is a number": (click(user=5), "interactive"),
    "a click whose user id is a list": (click(user={"id": []}), "interactive"),
    "an event whose user is a number": (event_envelope({**dm_event(ALICE, "hi"), "user": 5}), "events_api"),
    "a mention without a channel": (event_envelope(NO_CHANNEL), "events_api"),
}


@pytest.mark.parametrize("name", list(SOCKET_PAYLOADS))
async def test_socket_mode_logs_and_acknowledges_a_bad_payload_once_without_a_traceback(
    socket_slack: tuple[FakeSlackAPI, Any, Any], caplog: pytest.LogCaptureFixture, name: str
):
    fake_slack, _runtime, service = socket_slack
    payload, kind = SOCKET_PAYLOADS[name]
    caplog.set_level(logging.WARNING)
    envelope_id = await fake_slack.push(payload, kind)
    for _ in range(250):
        if envelope_id in fake_slack.acks:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)
    await service.inbox.drain(5.0)

    assert envelope_id in fake_slack.acks, name  # acknowledged: Slack does not send it again
    assert any("malformed" in r.getMessage() and str(envelope_id) in r.getMessage() for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []  # no traceback
    assert fake_slack.calls_to("chat.postMessage") == []
