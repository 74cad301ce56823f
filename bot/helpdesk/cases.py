"""Helpdesk handoff: when PolicyPal cannot finish, a human gets the case with its whole transcript.

A case is opened on every give-up, on a confirmed ticket the backend refused, and when a user asks
for a human. It is written to the store, with one outbox row per configured destination, before the
user is told its id; ``bot.outbox`` delivers it from there (Slack channel, Teams channel, webhook,
email), so nothing is lost when a destination or the process is down.

A case holds who asked, where (with a link back to the thread), the question, every step of every
run in the conversation (model text, tool calls and arguments, bounded results, tokens, cost,
latency), the budgets used and the reason. Secrets are redacted before anything is stored.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from bot.agent.budget import Budgets
from bot.helpdesk.markdown import (
    ACTION_UNKNOWN,
    CARD_NOT_SHOWN,
    TICKET_FAILED,
    USER_REQUEST,
    case_markdown,
    reason_label,
)
from bot.redaction import Redactor, bounded
from bot.store.records import HandoffRecord, PendingRecord, Place, RunRow
from bot.store.store import Store
from bot.types import TerminationReason, UserRef

log = logging.getLogger(__name__)

CASE_PREFIX = "HD"
CASE_OFFSET = 1000  # HD-1001 is the first case, like IT-1001 for local tickets
DEFAULT_REPLY_WITHIN = "one working day"
TRANSCRIPT_VERSION = 1
THREADED_PLATFORMS = ("slack", "teams")

_OPENINGS = {
    TerminationReason.POLICY_DENIED.value: "I'm not allowed to do that for you.",
    TerminationReason.CANCELLED.value: "This request was stopped before it finished.",
    TICKET_FAILED: "I couldn't create the ticket.",
    ACTION_UNKNOWN: "I couldn't tell whether your confirmed request went through.",
    CARD_NOT_SHOWN: "I couldn't show you the confirmation for that request, so nothing was done.",
    USER_REQUEST: "Sure.",
}
_DEFAULT_OPENING = "I couldn't finish this reliably."
_CASE_ID = re.compile(rf"^{CASE_PREFIX}-(\d+)$", re.I)


def case_id_for(number: int) -> str:
    return f"{CASE_PREFIX}-{number + CASE_OFFSET}"


def case_number(case_id: str) -> int | None:
    """The stored number behind ``HD-1001``; None for anything that is not a case id."""
    match = _CASE_ID.match(case_id.strip())
    return int(match.group(1)) - CASE_OFFSET if match else None


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
        """The sentence the user reads: the case id and what happens next."""
        if self.platform in THREADED_PLATFORMS:
            how = "reply in this thread"
        elif self.user.email:
            how = f"reply by email to {self.user.email}"
        else:
            how = "get back to you"
        case = f"I've passed this to the helpdesk as case {self.case_id}"
        return f"{case}; someone will {how} within {self.reply_within}."

    def user_reply(self) -> str:
        """The honest reply for the user: what went wrong, in one sentence, then ``message``."""
        return f"{_OPENINGS.get(self.reason, _DEFAULT_OPENING)} {self.message}"

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


@dataclass(frozen=True)
class TranscriptLimits:
    """Size bounds: a transcript must fit a chat message thread, an email and a database row."""

    result_chars: int = 1_000
    argument_chars: int = 1_000
    text_chars: int = 4_000
    max_runs: int = 20


class Helpdesk:
    """Opens cases: reads the conversation from the store, redacts and bounds it, stores it with its outbox."""

    def __init__(
        self,
        store: Store,
        destinations: Sequence[str] = (),
        *,
        budgets: Budgets | None = None,
        redactor: Redactor | None = None,
        limits: TranscriptLimits | None = None,
        reply_within: str = DEFAULT_REPLY_WITHIN,
        on_created: Callable[[HandoffCase], None] | None = None,
    ) -> None:
        self._store = store
        self.destinations = tuple(destinations)
        self._budgets = budgets or Budgets()
        self.redactor = redactor or Redactor()
        self._limits = limits or TranscriptLimits()
        self._reply_within = reply_within
        self.on_created = on_created  # the outbox's wake-up, so delivery starts at once

    async def open_case(
        self,
        *,
        origin: str,
        reason: str,
        user: UserRef,
        conversation_key: str,
        question: str,
        run_id: str | None = None,
        link: str | None = None,
        detail: str | None = None,
    ) -> HandoffCase:
        """Write a case (once per ``origin``) before anyone is told its id, and return it."""
        place = await self._store.get_place(conversation_key) or place_from_key(conversation_key)
        runs = await self._store.conversation_runs(conversation_key, self._limits.max_runs)
        actions = await self._store.conversation_actions(conversation_key)
        transcript = self._transcript(runs, actions, run_id, reason, detail)
        fields = {
            "reason": reason,
            "user_id": user.id,
            "user_name": user.name,
            "user_email": user.email,
            "platform": place.platform,
            "tenant": place.tenant,
            "channel": place.channel,
            "thread": place.thread,
            "link": link or place.link,
            "conversation_key": conversation_key,
            "run_id": run_id,
            "question": self.redactor.text(question),
            "reply_within": self._reply_within,
            "transcript": self.redactor.value(transcript),
        }
        record, created = await self._store.create_handoff(origin, fields, self.destinations)
        case = HandoffCase.from_record(record)
        if created:
            log.info("handoff %s opened (%s) for %s", case.case_id, reason, user.id)
            if self.on_created is not None:
                self.on_created(case)
        return case

    def _transcript(
        self, runs: list[RunRow], actions: list[PendingRecord], run_id: str | None, reason: str, detail: str | None
    ) -> dict[str, Any]:
        ended = next((r for r in runs if r.id == run_id), runs[-1] if runs else None)
        return {
            "version": TRANSCRIPT_VERSION,
            "reason": reason,
            "detail": detail,
            "budgets": {"limits": _limits(self._budgets), "used": _used(ended)},
            "totals": _totals(runs),
            "runs": [self._run(r) for r in runs],
            "actions": [self._action(a) for a in actions],
        }

    def _run(self, run: RunRow) -> dict[str, Any]:
        return {
            "run_id": run.id,
            "started_at": run.started_at.isoformat(),
            "question": bounded(run.question, self._limits.text_chars),
            "reason": run.reason or run.status,
            "model": run.model,
            "steps": run.steps,
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "cost_usd": run.cost_usd,
            "latency_ms": round(run.latency_ms, 1),
            "trace": [self._step(step) for step in run.trace],
        }

    def _step(self, step: dict[str, Any]) -> dict[str, Any]:
        limits = self._limits
        caps = {"text": limits.result_chars if step.get("kind") == "tool" else limits.text_chars}
        caps |= {"arguments": limits.argument_chars, "error": limits.argument_chars}
        return {k: bounded(v, caps[k]) if k in caps and isinstance(v, str) else v for k, v in step.items()}

    def _action(self, action: PendingRecord) -> dict[str, Any]:
        result = json.dumps(action.result, ensure_ascii=False) if action.result is not None else None
        return {
            "id": action.id,
            "tool": action.tool,
            "arguments": action.arguments,
            "state": action.state,
            "requester": action.requester,
            "decider": action.decider,
            "created_at": action.created_at.isoformat(),
            "result": bounded(result, self._limits.result_chars) if result else None,
        }


def place_from_key(key: str) -> Place:
    """Best effort for conversations older than ``thread_places``: the platform is the key's first part."""
    platform, _, rest = key.partition(":")
    tenant, _, rest = rest.partition(":")
    return Place(key=key, platform=platform, tenant=tenant, channel=rest, thread="", link=None)


def _limits(budgets: Budgets) -> dict[str, Any]:
    return {
        "steps": budgets.max_steps,
        "tokens": budgets.max_tokens,
        "seconds": budgets.deadline_s,
        "cost_usd": budgets.max_cost_usd,
    }


def _used(run: RunRow | None) -> dict[str, Any]:
    if run is None:
        return {"steps": 0, "tokens": 0, "seconds": 0.0, "cost_usd": 0.0}
    return {
        "steps": run.steps,
        "tokens": run.input_tokens + run.output_tokens,
        "seconds": round(run.latency_ms / 1000, 2),
        "cost_usd": round(run.cost_usd, 6),
    }


def _totals(runs: list[RunRow]) -> dict[str, Any]:
    return {
        "runs": len(runs),
        "steps": sum(r.steps for r in runs),
        "tokens": sum(r.input_tokens + r.output_tokens for r in runs),
        "cost_usd": round(sum(r.cost_usd for r in runs), 6),
    }


_HUMAN = re.compile(
    r"\b(talk|speak|chat)\s+(to|with)\s+(a\s+|an\s+|the\s+)?(human|person|real person|someone|agent|helpdesk)\b"
    r"|\b(want|need|get)\s+(a\s+|an\s+)?(human|real person|live agent)\b"
    r"|^\s*(human|agent|helpdesk|help\s*desk)(\s+please)?\s*[.!]*\s*$",
    re.I,
)


def asks_for_human(text: str) -> bool:
    """A message that asks for a person ("I want a human", "talk to someone"), not a policy question."""
    return bool(_HUMAN.search(text))
