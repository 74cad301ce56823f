"""A helpdesk case: who asked, where, the question, the transcript, and the sentence the user is told.

Cases are numbered by the store and shown as ``HD-1001``; destinations (a Slack or Teams channel, a
webhook, email, the CLI) render the same case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from bot.helpdesk.markdown import case_markdown
from bot.helpdesk.reasons import REPLY_NOT_DELIVERED, opening, reason_label
from bot.store import HandoffRecord
from bot.types import UserRef

CASE_PREFIX = "HD"
CASE_OFFSET = 1000  # HD-1001 is the first case, like IT-1001 for local tickets
MAX_CASE_NUMBER = 2**31 - 1  # the store's INTEGER column: a larger number is no case, not a database error
DEFAULT_REPLY_WITHIN = "one working day"
TRANSCRIPT_VERSION = 1
PLATFORM_NAMES = {"slack": "Slack", "teams": "Teams"}
TEAMS_CHANNEL_MARKERS = ("@thread.tacv2", "@thread.skype")  # a team's channel; a group chat is @thread.v2
_CASE_ID = re.compile(rf"^{CASE_PREFIX}-(\d+)$", re.I)


def case_id_for(number: int) -> str:
    return f"{CASE_PREFIX}-{number + CASE_OFFSET}"


def staff_can_post(platform: str, channel: str, thread: str) -> bool:
    """Whether helpdesk staff can answer in the conversation itself: a channel's thread, not a DM or a
    personal chat (only the person and the app are in it) nor a group chat (staff are not members)."""
    if platform == "slack":
        return channel.startswith("C")  # D: a DM with the app; G: a group DM (or a private channel of old)
    if platform == "teams":
        return thread != channel and any(marker in channel for marker in TEAMS_CHANNEL_MARKERS)
    return False


def case_number(case_id: str) -> int | None:
    """The stored number behind ``HD-1001``; None for anything that is not a case id."""
    match = _CASE_ID.match(case_id.strip())
    number = int(match.group(1)) - CASE_OFFSET if match else 0
    return number if 1 <= number <= MAX_CASE_NUMBER else None


@dataclass(frozen=True)
class HandoffCase:
    """One helpdesk case as stored; destinations render it, the user is told ``message``."""

    case_id: str
    created_at: datetime
    reason: str  # a TerminationReason value, "user_request", "ticket_failed" or "action_unknown"
    user: UserRef
    platform: str
    channel: str
    thread: str
    link: str | None
    question: str
    transcript: dict[str, Any] = field(default_factory=dict)
    conversation_key: str = ""
    tenant: str = ""
    run_id: str | None = None
    reply_within: str = DEFAULT_REPLY_WITHIN

    @classmethod
    def from_record(cls, record: HandoffRecord) -> HandoffCase:
        return cls(
            case_id=case_id_for(record.number),
            created_at=record.created_at,
            reason=record.reason,
            user=UserRef(record.user_id, record.user_name, record.user_email),
            platform=record.platform,
            channel=record.channel,
            thread=record.thread,
            link=record.link,
            question=record.question,
            transcript=record.transcript,
            conversation_key=record.conversation_key,
            tenant=record.tenant,
            run_id=record.run_id,
            reply_within=record.reply_within or DEFAULT_REPLY_WITHIN,
        )

    @property
    def message(self) -> str:
        """The sentence the user reads: the case id and what happens next, as the helpdesk can do it here."""
        in_thread = staff_can_post(self.platform, self.channel, self.thread)
        if in_thread and self.reason != REPLY_NOT_DELIVERED:  # the thread is reachable, and staff can post in it
            how = "reply in this thread"
        elif self.user.email:
            how = f"reply by email to {self.user.email}"
        elif self.platform in PLATFORM_NAMES:  # a DM or personal chat: staff write to the person instead
            how = f"contact you directly in {PLATFORM_NAMES[self.platform]}"
        else:
            how = "get back to you"
        case = f"I've passed this to the helpdesk as case {self.case_id}"
        return f"{case}; someone will {how} within {self.reply_within}."

    def user_reply(self) -> str:
        """The honest reply for the user: what went wrong, in one sentence, then ``message``."""
        return f"{opening(self.reason)} {self.message}"

    def who(self) -> str:
        contact = ", ".join(part for part in (self.user.id, self.user.email) if part)
        return f"{self.user.name or self.user.id} ({contact})"

    def question_line(self, limit: int = 140) -> str:
        line = " ".join(self.question.split())
        return line if len(line) <= limit else line[: limit - 1] + "…"

    def summary_line(self) -> str:
        """User, question in one line, reason and the link back: what a channel or subject line shows."""
        where = self.link or f"{self.platform} {self.channel}".strip()
        return f"{self.case_id} · {self.who()} · {reason_label(self.reason)} · “{self.question_line()}” · {where}"

    def to_json(self) -> dict[str, Any]:
        """The case for machines (webhook body, ``policypal handoffs ID --json``)."""
        return {
            "case_id": self.case_id,
            "created_at": self.created_at.isoformat(),
            "reason": self.reason,
            "reason_label": reason_label(self.reason),
            "user": {"id": self.user.id, "name": self.user.name, "email": self.user.email},
            "platform": self.platform,
            "tenant": self.tenant,
            "channel": self.channel,
            "thread": self.thread,
            "link": self.link,
            "conversation_key": self.conversation_key,
            "run_id": self.run_id,
            "question": self.question,
            "summary": self.summary_line(),
            "transcript": self.transcript,
        }

    def to_markdown(self) -> str:
        """The case for people: header facts, budgets, then every run step by step."""
        return case_markdown(self)


class Destination(Protocol):
    """Somewhere a case is delivered; ``deliver`` returns an external reference or raises."""

    name: str

    async def deliver(self, case: HandoffCase) -> str | None: ...
