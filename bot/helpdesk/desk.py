"""Opening a case: the conversation read from the store, redacted and bounded, stored with its outbox rows.

A case is opened on every give-up, on a confirmed ticket the backend refused, and when a user asks
for a human. It is written to the store, with one outbox row per configured destination, before the
user is told its id; ``bot.helpdesk.outbox`` delivers it from there (Slack channel, Teams channel, webhook,
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
from dataclasses import dataclass
from typing import Any

from bot.agent import Budgets
from bot.helpdesk.case import DEFAULT_REPLY_WITHIN, TRANSCRIPT_VERSION, HandoffCase
from bot.redaction import Redactor, bounded, bounded_trace, bounded_value
from bot.store import PendingRecord, Place, RunRow, Store
from bot.types import UserRef

log = logging.getLogger(__name__)


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
        current_run: RunRow | None = None,
    ) -> HandoffCase:
        """Write a case (once per ``origin``) before anyone is told its id, and return it.

        ``current_run``: the run that is giving up, not stored yet (it is stored with its reply).
        """
        place = await self._store.threads.get_place(conversation_key) or Place.from_key(conversation_key)
        runs = await self._store.runs.of_conversation(conversation_key, self._limits.max_runs)
        if current_run is not None and all(r.id != current_run.id for r in runs):
            runs = [*runs, current_run][-self._limits.max_runs :]
        actions = await self._store.pending.of_conversation(conversation_key)
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
        record, created = await self._store.cases.create(origin, fields, self.destinations)
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
            "trace": [self._step(step) for step in bounded_trace(run.trace)],  # the giving-up run is not stored yet
        }

    def _step(self, step: dict[str, Any]) -> dict[str, Any]:
        limits = self._limits
        caps = {"text": limits.result_chars if step.get("kind") == "tool" else limits.text_chars}
        caps |= {"arguments": limits.argument_chars, "error": limits.argument_chars}
        return {k: bounded(v, caps[k]) if k in caps and isinstance(v, str) else v for k, v in step.items()}

    def _action(self, action: PendingRecord) -> dict[str, Any]:
        """A pending action's frozen call and result, stored unredacted: redacted here before the cut, as a
        secret cut first would be too short for its pattern and keep its first characters."""
        result = None if action.result is None else json.dumps(self.redactor.value(action.result), ensure_ascii=False)
        return {
            "id": action.id,
            "tool": action.tool,
            "arguments": bounded_value(self.redactor.value(action.arguments), self._limits.argument_chars),
            "state": action.state,
            "requester": action.requester,
            "decider": action.decider,
            "created_at": action.created_at.isoformat(),
            "result": bounded(result, self._limits.result_chars) if result else None,
        }


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
# Asking whether a process involves a person ("do I need to talk to someone in finance about travel?", "should
# I speak to a person in HR first?") is a policy question, not a request to leave the bot: such a phrase is
# taken out before a request is looked for, so "can I talk to a human?" or "I need to talk to someone" still is.
_PROCESS_QUESTION = re.compile(
    r"\b(?:(?:do|does|did|will|would)\s+(?:\w+\s+){1,2}?(?:need|have)\s+to|(?:should|must|shall)\s+(?:i|we|you|they))"
    r"(?:\s+(?:first|also|ever))?\s+(?:talk|speak|chat)\b",
    re.I,
)


# "Someone" beside a question of its own that asks who, what or where is that question's context ("who's the people
# partner for engineering? need to talk to someone about my team"): the person wants a name from the policy, not
# the IT helpdesk. "Hello? I need to talk to someone" or "can I talk to someone? is that possible?" still hands
# off, and asking for a human, an agent or the helpdesk by name always does.
_VAGUE_PERSON = re.compile(r"\b(?:talk|speak|chat)\s+(?:to|with)\s+someone\b", re.I)
_CONTENT_QUESTION = re.compile(
    r"(?:^|[.?!]\s+)(?:(?:hi|hey|hello|ok|okay|so|and|also|quick q)\b[,:]?\s*)*"
    r"(?:who|what|where|which|when|how)(?:'s|’s|\b)[^.?!]*\?",
    re.I,
)


# The answers' own offer is "I'll pass your question on": "yes please pass it on", "send it to the helpdesk",
# "escalate this" take it up. "How do I send it to the helpdesk?" asks how, so it is not one.
_OUR_QUESTION = r"(?:it|this|that|my question|the question)"
_A_PERSON = r"(?:the\s+)?(?:helpdesk|help desk|service desk|a human|a person|someone|support)"
_PASS_ON = re.compile(
    rf"\b(?:pass|send|forward|hand|give|escalate)\s+{_OUR_QUESTION}(?:\s+(?:on|over|up))?(?:\s+to\s+{_A_PERSON})?"
    r"(?=\s*(?:please|pls|thanks|thank you)?\s*[.!?]*\s*$)"  # "pass it on", at the end of its sentence
    rf"|\b(?:pass|send|forward|hand|escalate)\s+(?:{_OUR_QUESTION}\s+)?(?:(?:on|over)\s+)?to\s+{_A_PERSON}\b"
    r"|^\W*(?:please\s+)?escalate\b",
    re.I,
)
_ASKS_HOW = re.compile(
    r"^\W*(?:how|where|when|why|what|which|who|(?:do|does|should|must|can|could|shall|would)\s+(?:i|we))\b", re.I
)


def _takes_up_the_offer(text: str) -> bool:
    """A sentence that asks for the question to be passed on, not one that asks how to pass something on."""
    sentences = re.split(r"(?<=[.?!])\s+", text)
    return any(_PASS_ON.search(sentence) and not _ASKS_HOW.match(sentence) for sentence in sentences)


def asks_for_human(text: str) -> bool:
    """A message that asks for a person ("I want a human", "talk to someone"), not a policy question, even one
    that asks whether to talk to someone ("do I need to talk to someone in finance?") or who to talk to."""
    asked = _PROCESS_QUESTION.sub(" ", text)
    if _takes_up_the_offer(asked):
        return True
    if not _HUMAN.search(asked):
        return False
    if _HUMAN.search(_VAGUE_PERSON.sub(" ", asked)):
        return True  # a human, an agent or the helpdesk, by name
    return not any(not _VAGUE_PERSON.search(match.group()) for match in _CONTENT_QUESTION.finditer(asked))
