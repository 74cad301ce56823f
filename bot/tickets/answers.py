"""What a ticket system's success answer may put on a card: a short one-line id and a plain web link.

The id and the link are shown in Slack mrkdwn and Teams cards as they came back; a line break, markup
or a page-long value there would break the card (or ping a channel), so they are checked here, once.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from bot.errors import RemoteError

ID_CHARS = 64  # Jira keys, ServiceNow numbers and webhook ids are far shorter
URL_CHARS = 2000
_NOT_IN_A_LINK = frozenset("<>|\"'`\\ ")


def ticket_id(value: Any, service: str) -> str:
    """The ticket id as a card shows it; a 2xx with no usable id is a protocol error (the ticket may exist)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise RemoteError(f"{service} answered without a ticket id", kind="protocol")
    text = value.strip()
    if len(text) > ID_CHARS or not text.isprintable() or any(c in _NOT_IN_A_LINK or c in "*_~&" for c in text):
        raise RemoteError(f"{service} answered with an unreadable ticket id", kind="protocol")
    return text


def ticket_url(value: Any) -> str | None:
    """The link, only when it is an absolute http(s) address a card can carry as is; else no link."""
    if not isinstance(value, str) or len(value) > URL_CHARS or not value.isprintable():
        return None
    if any(c in _NOT_IN_A_LINK for c in value):
        return None
    parts = urlsplit(value)
    return value if parts.scheme in ("http", "https") and parts.netloc else None
