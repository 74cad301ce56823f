"""Teams inbox keys: an activity id is unique only within its conversation.

Teams channel message ids are the post's epoch milliseconds, so two channels (or two people's personal
chats) can send the same id. The inbox id is therefore ``teams:`` + the activity id qualified by a
digest of the conversation id (``inbox_id``): a conversation id can be long (a personal chat's is
often over 100 characters) and the store keeps at most 255 characters per id. The previous release
claimed that same key for each event it handled; its claims were carried into the inbox as finished
items, so a redelivery of one is recognised by ``inbox.accept`` itself.

Releases before that one claimed the bare activity id (``teams:<id>``). A redelivery of an activity
such a release handled finds only that key, so an activity Teams sent before this process started
has its bare id checked and recorded too (``handled_by_older_release``, ``inbox.seen_before``). Only
those: across conversations the bare id is ambiguous, which is the bug the qualified id fixes.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.service import PolicyPal

log = logging.getLogger(__name__)


def inbox_id(activity: dict[str, Any]) -> str:
    """The activity's inbox item id: ``teams:<activity id>@<conversation digest>``."""
    return f"teams:{event_id(activity)}"


def event_id(activity: dict[str, Any]) -> str:
    """``<activity id>@<conversation digest>``: the same for a redelivery, distinct across conversations."""
    conversation = str((activity.get("conversation") or {}).get("id") or "")
    return f"{activity_id(activity)}@{hashlib.sha256(conversation.encode()).hexdigest()[:24]}"


def activity_id(activity: dict[str, Any]) -> str:
    """The activity's id; one without an id (Teams always sends one) gets a fresh id and no dedupe."""
    if found := activity.get("id"):
        return str(found)
    log.warning("teams: a %s activity without an id cannot be deduplicated", activity.get("type"))
    return "noid-" + uuid.uuid4().hex


def sent_before(activity: dict[str, Any], moment: datetime) -> bool:
    """True when Teams stamped the activity before ``moment``; False without a readable timestamp."""
    stamp = activity.get("timestamp")
    if not isinstance(stamp, str):
        return False
    try:
        sent = datetime.fromisoformat(stamp)
    except ValueError:
        log.warning("teams: unreadable activity timestamp %r", stamp)
        return False
    return sent.tzinfo is not None and sent < moment


async def handled_by_older_release(service: PolicyPal, activity: dict[str, Any], started: datetime) -> bool:
    """True when an activity sent before this process ``started`` was claimed under its bare id.

    Records the bare id when it was not: call it once per item, on its first attempt (a later attempt
    would find the id its own first attempt recorded).
    """
    if not sent_before(activity, started):
        return False
    return await service.inbox.seen_before(f"teams:{activity_id(activity)}")
