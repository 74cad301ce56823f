"""Slack events to the core's Inbound: which events start a run, and with what text and thread key."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

from bot.types import Inbound, UserRef

# A thread reply also sent to the channel and a message with a file are still someone asking.
RUNNABLE_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
_LINK = re.compile(r"<([^<>|]+)\|([^<>]*)>|<([^<>]+)>")


@dataclass(frozen=True)
class BotIdentity:
    """Who this bot is, from auth.test (and bots.info for the app id) at start."""

    user_id: str
    bot_id: str
    team_id: str
    team: str = ""
    url: str = ""
    name: str = ""
    app_id: str | None = None
    enterprise_id: str | None = None


def skip_reason(event: dict[str, Any], bot: BotIdentity) -> str | None:
    """Why this message or mention starts no run (bots, edits, deletions, ...), or None if it should."""
    if event.get("bot_id") or event.get("bot_profile") or event.get("subtype") == "bot_message":
        return "sent by a bot"
    if event.get("subtype") not in RUNNABLE_SUBTYPES:
        return f"subtype {event.get('subtype')}"
    if not event.get("user") or event.get("user") == bot.user_id:
        return "not from a person"
    if event.get("edited"):
        return "an edit"
    if event.get("type") == "message" and event.get("channel_type") != "im":
        return "a channel message without a mention"
    if event.get("type") == "app_mention" and str(event.get("channel", "")).startswith("D"):
        return "a mention in a DM (the DM message itself starts the run)"
    return None


def thread_of(event: dict[str, Any]) -> str:
    """The thread a reply belongs in: the thread's root, or the message itself when it starts one."""
    return str(event.get("thread_ts") or event["ts"])


def question_text(text: str, bot_user_id: str) -> str:
    """The user's words for the model: the bot's mention removed, Slack's markup made plain."""
    text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", " ", text)
    text = _LINK.sub(_plain_link, text)
    return re.sub(r"[ \t]+", " ", html.unescape(text)).strip()


def _plain_link(match: re.Match[str]) -> str:
    target, label, bare = match.group(1), match.group(2), match.group(3)
    if bare is not None:
        return _plain_ref(bare)
    if target.startswith(("#", "@", "!")):
        return _plain_ref(target, label)
    return f"{label} ({target})" if label and label != target else target


def _plain_ref(ref: str, label: str = "") -> str:
    """<#C123|general> -> #general, <@U123> -> @U123, <!here> -> @here, <!subteam^S1|@hr> -> @hr (a user
    group's label carries its own "@"), <https://x> -> https://x."""
    if ref.startswith("#"):
        return "#" + (label.removeprefix("#") or ref[1:])
    if ref.startswith("@"):
        return "@" + (label.removeprefix("@") or ref[1:])
    if ref.startswith("!"):
        return "@" + (label.removeprefix("@") or ref[1:].split("^")[0])
    return ref


def to_inbound(
    event: dict[str, Any], body: dict[str, Any], user: UserRef, bot: BotIdentity, link: str | None
) -> Inbound:
    """The core's message: tenant is the team, thread is the thread root, event id from the envelope."""
    return Inbound(
        platform="slack",
        tenant=str(body.get("team_id") or event.get("team") or bot.team_id),
        channel=str(event["channel"]),
        thread=thread_of(event),
        user=user,
        text=question_text(str(event.get("text") or ""), bot.user_id),
        event_id=str(body.get("event_id") or f"{event['channel']}:{event['ts']}"),
        link=link,
        starts_thread=not event.get("thread_ts"),  # a top-level message opens its thread: no history to read
        shared=not is_direct_message(event),
        private_channel=True,  # the person's DM with the app
        files=file_names(event),
    )


def file_names(event: dict[str, Any]) -> tuple[str, ...]:
    """The names of the files shared with the message (never downloaded or read)."""
    files = event.get("files") or []
    return tuple(str(f.get("name") or f.get("title") or "a file") for f in files if isinstance(f, dict))


def is_direct_message(event: dict[str, Any]) -> bool:
    """A DM with the app (assistant threads included): read by the asker alone.

    ``app_mention`` events carry no ``channel_type``; a DM's channel id starts with D.
    """
    channel_type = event.get("channel_type")
    if channel_type:
        return bool(channel_type == "im")
    return str(event.get("channel") or "").startswith("D")


def conversation_key(team_id: str, channel: str, thread_ts: str) -> str:
    """The same key Inbound.conversation_key gives, for clicks that arrive without an event."""
    return f"slack:{team_id}:{channel}:{thread_ts}"
