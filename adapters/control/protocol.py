"""Where the control socket is, its routes, and the JSON forms of what crosses it.

Both ends read this module: the server decodes requests and encodes answers, the CLI the other way
round. A value that does not decode raises ``Malformed`` naming the field (the server answers 400 with
it). A decision travels as its status and sentence: the stored record and the card stay in the server.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, cast, get_args, get_type_hints

from bot.delivery import DeliveryResult, outcome_from_json, outcome_to_json
from bot.helpdesk import HandoffCase
from bot.pending import Decision, DecisionStatus
from bot.replies import DecisionReply, RefusalReason, Reply
from bot.types import Inbound, TerminationReason, UserRef
from retrieval import Passage, RetrievalConfig

Json = dict[str, Any]

INDEX = "/index"  # index or remove paths with the index the server holds
HELLO = "/hello"  # is a server there, and which (its pid)
SEARCH = "/search"
MESSAGE = "/message"  # one terminal message through the service
DECIDE = "/decide"  # confirm or cancel a pending action
PENDING = "/pending"  # a pending action's stored hash (`policypal decide ID`)
DELIVER = "/deliver"  # deliver one helpdesk case now, as the terminal waits for it
TERMINAL_PLATFORM = "console"  # only terminal messages come through the socket: nothing posts to Slack or Teams
_DELIVERY_STATUSES = get_args(get_type_hints(DeliveryResult)["status"])


def socket_path(cfg: RetrievalConfig) -> Path:
    """Beside the embedded index's lock file, so the CLI finds the server that holds that index."""
    return cfg.qdrant_path / f".{cfg.collection}.sock"


class Malformed(ValueError):
    """A request or an answer that does not have the expected shape; the text names the field."""


# --- fields ---------------------------------------------------------------------------------------


def json_object(value: object, what: str) -> Json:
    if not isinstance(value, dict):
        raise Malformed(f"`{what}` must be a JSON object")
    return value


def text_field(data: Json, key: str, *, blank: bool = False) -> str:
    """A string field; ``blank``: an empty one is allowed."""
    value = data.get(key)
    if not isinstance(value, str) or (not blank and not value.strip()):
        raise Malformed(f"`{key}` must be a {'' if blank else 'non-empty '}string")
    return value


def optional_text(data: Json, key: str) -> str | None:
    return None if data.get(key) is None else text_field(data, key, blank=True)


def count_field(data: Json, key: str, *, most: int | None = None) -> int:
    """A whole number of at least 1 (and at most ``most``); JSON true is not a number here."""
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or (most is not None and value > most):
        raise Malformed(f"`{key}` must be a whole number from 1" + (f" to {most}" if most is not None else ""))
    return value


def seconds_field(data: Json, key: str, *, most: float) -> float:
    value = data.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= most:
        raise Malformed(f"`{key}` must be a number of seconds above 0, at most {most:g}")
    return float(value)


def _texts(data: Json, key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise Malformed(f"`{key}` must be a list of strings")
    return tuple(value)


# --- who and what was said --------------------------------------------------------------------------


def user_to_json(user: UserRef) -> Json:
    return {**asdict(user), "groups": list(user.groups)}


def user_from_json(value: object) -> UserRef:
    data = json_object(value, "user")
    email = optional_text(data, "email")
    if not isinstance(data.get("is_guest", False), bool):
        raise Malformed("`is_guest` must be true or false")
    return UserRef(text_field(data, "id"), text_field(data, "name", blank=True), email, _texts(data, "groups"),
                   bool(data.get("is_guest", False)))


def inbound_to_json(inbound: Inbound) -> Json:
    """A terminal message: what ``adapters.cli.console.inbound`` sets, and nothing a platform adds."""
    return {"platform": inbound.platform, "channel": inbound.channel, "thread": inbound.thread,
            "text": inbound.text, "event_id": inbound.event_id, "user": user_to_json(inbound.user)}


def inbound_from_json(value: object) -> Inbound:
    data = json_object(value, "inbound")
    if data.get("platform") != TERMINAL_PLATFORM:
        raise Malformed(f"only terminal messages (`platform`: {TERMINAL_PLATFORM!r}) come through this socket")
    return Inbound(TERMINAL_PLATFORM, text_field(data, "channel"), text_field(data, "thread"),
                   user_from_json(data.get("user")), text_field(data, "text", blank=True),
                   text_field(data, "event_id"))


# --- what the service answered --------------------------------------------------------------------


def reply_to_json(reply: Reply) -> Json:
    return {"run_id": reply.run_id, "reason": reply.reason.value, "outcome": outcome_to_json(reply.outcome),
            "conversation_key": reply.conversation_key, "steps": reply.steps, "tokens": reply.tokens,
            "cost_usd": reply.cost_usd, "refused": reply.refused}


def reply_from_json(value: object) -> Reply:
    data = json_object(value, "reply")
    refused = data.get("refused")
    if refused is not None and refused not in get_args(RefusalReason):
        raise Malformed(f"unknown `refused`: {refused!r}")
    try:
        reason, outcome = TerminationReason(data["reason"]), outcome_from_json(json_object(data["outcome"], "outcome"))
        steps, tokens, cost = int(data["steps"]), int(data["tokens"]), float(data["cost_usd"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Malformed(f"a reply that does not decode ({type(exc).__name__}: {exc})") from None
    return Reply(text_field(data, "run_id"), reason, outcome, text_field(data, "conversation_key", blank=True),
                 steps, tokens, cost, cast(RefusalReason | None, refused))


def decided_to_json(decided: DecisionReply) -> Json:
    case = decided.case
    return {
        "decision": {"status": decided.decision.status, "message": decided.decision.message},
        "result": decided.result,
        "reply": reply_to_json(decided.reply) if decided.reply is not None else None,
        "case": (case.to_json() | {"reply_within": case.reply_within}) if case is not None else None,
        "notice": decided.notice,
    }


def decided_from_json(value: object) -> DecisionReply:
    data = json_object(value, "decided")
    decision = json_object(data.get("decision"), "decision")
    status = decision.get("status")
    if status not in get_args(DecisionStatus):
        raise Malformed(f"unknown decision status {status!r}")
    result = None if data.get("result") is None else json_object(data["result"], "result")
    reply = None if data.get("reply") is None else reply_from_json(data["reply"])
    case = None if data.get("case") is None else _case_from_json(data["case"])
    message = text_field(decision, "message", blank=True)
    verdict = Decision(cast(DecisionStatus, status), None, message)  # the record stays in the server
    return DecisionReply(verdict, result, reply, case, notice=optional_text(data, "notice"))


def _case_from_json(value: object) -> HandoffCase:
    data = json_object(value, "case")
    user = json_object(data.get("user"), "user")
    try:
        return HandoffCase(
            case_id=text_field(data, "case_id"),
            created_at=datetime.fromisoformat(text_field(data, "created_at")),
            reason=text_field(data, "reason"),
            user=UserRef(text_field(user, "id"), text_field(user, "name", blank=True), optional_text(user, "email")),
            platform=text_field(data, "platform", blank=True),
            channel=text_field(data, "channel", blank=True),
            thread=text_field(data, "thread", blank=True),
            link=optional_text(data, "link"),
            question=text_field(data, "question", blank=True),
            transcript=json_object(data.get("transcript", {}), "transcript"),
            conversation_key=text_field(data, "conversation_key", blank=True),
            tenant=text_field(data, "tenant", blank=True),
            run_id=optional_text(data, "run_id"),
            reply_within=text_field(data, "reply_within"),
        )
    except ValueError as exc:  # a created_at that is no date
        raise Malformed(f"a case that does not decode ({exc})") from None


def passage_to_json(passage: Passage) -> Json:
    """Every field, the score unrounded: the CLI prints it as it would have printed its own search."""
    return {**asdict(passage), "audience": list(passage.audience)}


def passage_from_json(value: object) -> Passage:
    data = json_object(value, "passage")
    score = data.get("score")
    if not isinstance(score, int | float) or isinstance(score, bool):
        raise Malformed("`score` must be a number")
    return Passage(float(score), text_field(data, "doc_id"), text_field(data, "title", blank=True),
                   text_field(data, "heading", blank=True), text_field(data, "source", blank=True),
                   text_field(data, "text", blank=True), optional_text(data, "section"), _texts(data, "audience"),
                   optional_text(data, "classification"))


def delivery_to_json(result: DeliveryResult) -> Json:
    return asdict(result)


def delivery_from_json(value: object) -> DeliveryResult:
    data = json_object(value, "delivery")
    status = data.get("status")
    if status not in _DELIVERY_STATUSES:
        raise Malformed(f"unknown delivery status {status!r}")
    return DeliveryResult(text_field(data, "label"), text_field(data, "destination", blank=True), cast(Any, status),
                          text_field(data, "detail", blank=True))
