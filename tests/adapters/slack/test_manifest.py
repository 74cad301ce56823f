"""The Slack manifest asks for exactly the scopes and events the adapter's code uses.

The Web API methods are found in the code itself (every ``client.<method>(...)`` on slack_sdk's
client in adapters/slack/), so a new call without its scope in the manifest fails here, and a
scope nothing uses any more fails too. The end-to-end tests also check that every method the app
really called at runtime is one of these.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from functools import cache
from pathlib import Path

import yaml
from jsonschema import Draft7Validator
from slack_sdk.web.async_client import AsyncWebClient

REPO = Path(__file__).resolve().parents[3]
MANIFEST = REPO / "adapters" / "slack" / "manifest.yaml"
SLACK_SCHEMA = REPO / "tests" / "data" / "slack-manifest.schema.2.0.0.json"  # slackapi/manifest-schema
ADAPTER_FILES = sorted((REPO / "adapters" / "slack").glob("*.py"))

# Each Web API method the adapter may call and the bot scopes it needs (docs.slack.dev/reference/methods).
METHOD_SCOPES: dict[str, set[str]] = {
    "auth.test": set(),
    "bots.info": {"users:read"},
    "users.info": {"users:read", "users:read.email"},  # email only comes with users:read.email
    "chat.postMessage": {"chat:write"},
    "chat.update": {"chat:write"},
    "chat.postEphemeral": {"chat:write"},
    "chat.getPermalink": set(),
    # An answer written out as Slack's native stream (adapters/slack/streaming.py)
    "chat.startStream": {"chat:write"},
    "chat.appendStream": {"chat:write"},
    "chat.stopStream": {"chat:write"},
    # Before posting again after a crash: is the reply already in the thread? (any kind of conversation)
    "conversations.replies": {"channels:history", "groups:history", "im:history", "mpim:history"},
    # The same, for a post outside any thread: a person's DM (found with conversations.open), the helpdesk channel
    "conversations.history": {"channels:history", "groups:history", "im:history", "mpim:history"},
    "conversations.open": {"im:write"},
    # POLICYPAL_SHARED_AUDIENCE=members: who can read a channel or group DM (DMs are the asker's alone)
    "conversations.members": {"channels:read", "groups:read", "mpim:read"},
    # The helpdesk channel set by name (#it-helpdesk): its id, which conversations.history needs (channels only)
    "conversations.list": {"channels:read", "groups:read"},
    "assistant.threads.setStatus": {"assistant:write"},
    "assistant.threads.setSuggestedPrompts": {"assistant:write"},
    "apps.connections.open": set(),  # Socket Mode, with the app-level token (connections:write), not the bot's
}
# Events the bolt app listens to -> the subscription and the scope it needs.
EVENT_SUBSCRIPTIONS = {
    "app_mention": ("app_mention", "app_mentions:read"),
    "message": ("message.im", "im:history"),  # direct messages only: channels need a mention
    "assistant_thread_started": ("assistant_thread_started", "assistant:write"),
    "assistant_thread_context_changed": ("assistant_thread_context_changed", "assistant:write"),
    "agent_session_stopped": ("agent_session_stopped", "assistant:write"),  # the stop button: cancel the run
    # Someone joined a channel: its cached member list is dropped (groups:read brings private channels' too)
    "member_joined_channel": ("member_joined_channel", "channels:read"),
}


def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


@cache
def web_api_methods() -> frozenset[str]:
    """Every Slack Web API method called from the adapter's code, by way of slack_sdk's client methods."""
    names = {
        node.func.attr
        for path in ADAPTER_FILES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    return frozenset(_api_name(name) for name in names if _is_client_method(name))


def _is_client_method(name: str) -> bool:
    method = getattr(AsyncWebClient, name, None)
    if name.startswith("_") or name == "api_call" or not callable(method):
        return False
    return "api_call(" in inspect.getsource(method)


def _api_name(method: str) -> str:
    match = re.search(r'api_call\(\s*"([\w.]+)"', inspect.getsource(getattr(AsyncWebClient, method)))
    assert match, method
    return match.group(1)


def listened_events() -> set[str]:
    """Event types registered with ``bolt.event("...")`` in adapters/slack/app.py."""
    tree = ast.parse((REPO / "adapters" / "slack" / "app.py").read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "event"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


def test_the_scan_finds_the_calls_the_adapter_makes():
    assert {"chat.postMessage", "chat.update", "chat.postEphemeral", "users.info", "auth.test"} <= web_api_methods()


def test_every_web_api_method_the_adapter_calls_has_its_scope_in_the_manifest():
    scopes = set(manifest()["oauth_config"]["scopes"]["bot"])
    unknown = web_api_methods() - METHOD_SCOPES.keys()
    assert not unknown, f"add these methods and their scopes to METHOD_SCOPES and the manifest: {unknown}"
    missing = {m: METHOD_SCOPES[m] - scopes for m in web_api_methods() if METHOD_SCOPES[m] - scopes}
    assert not missing, missing


def test_the_manifest_subscribes_to_the_events_the_app_listens_to_with_their_scopes():
    data = manifest()
    assert listened_events() == EVENT_SUBSCRIPTIONS.keys()
    assert set(data["settings"]["event_subscriptions"]["bot_events"]) == {s for s, _ in EVENT_SUBSCRIPTIONS.values()}
    assert {scope for _, scope in EVENT_SUBSCRIPTIONS.values()} <= set(data["oauth_config"]["scopes"]["bot"])


def test_the_manifest_asks_for_no_scope_the_code_does_not_use():
    used = {s for m in web_api_methods() for s in METHOD_SCOPES[m]} | {s for _, s in EVENT_SUBSCRIPTIONS.values()}
    assert set(manifest()["oauth_config"]["scopes"]["bot"]) == used


def test_events_and_interactivity_go_to_the_slack_events_route_and_the_assistant_view_is_on():
    settings = manifest()["settings"]
    assert settings["event_subscriptions"]["request_url"].endswith("/slack/events")
    assert settings["interactivity"] == {
        "is_enabled": True,
        "request_url": settings["event_subscriptions"]["request_url"],
    }
    assert settings["socket_mode_enabled"] is False  # HTTP by default; docs/slack.md says how to switch
    assert manifest()["features"]["assistant_view"]["assistant_description"]


def test_the_manifest_declares_the_agent_view_beside_the_assistant_view_within_slacks_schema():
    features = manifest()["features"]
    assert features["agent_view"]["agent_description"] and features["assistant_view"]
    schema = json.loads(SLACK_SCHEMA.read_text())
    errors = [e.message for e in Draft7Validator(schema).iter_errors(manifest())]
    assert not errors, errors
