"""Where the control socket is, its routes, and the JSON forms of what crosses it.

Both ends read this module: the server decodes requests and encodes answers, the CLI the other way
round. Shapes are pydantic models (requests, strictly: JSON ``true`` is no number, ``" "`` no id)
and pydantic's reading of the core's own dataclasses (answers); a value that does not decode raises
``Malformed`` naming the field (the server answers 400 with it). A decision travels as its status and
sentence: the stored record and the card stay in the server.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from bot.delivery import DeliveryResult, outcome_from_json, outcome_to_json
from bot.helpdesk import HandoffCase
from bot.pending import Decision, DecisionStatus
from bot.replies import DecisionReply, RefusalReason, Reply
from bot.types import Inbound, TerminationReason, UserRef
from retrieval import MAX_K, Passage, RetrievalConfig

Json = dict[str, Any]

INDEX = "/index"  # index or remove paths with the index the server holds
HELLO = "/hello"  # is a server there, and which (its pid)
SEARCH = "/search"
MESSAGE = "/message"  # one terminal message through the service
DECIDE = "/decide"  # confirm or cancel a pending action
PENDING = "/pending"  # a pending action's stored hash (`policypal decide ID`)
DELIVER = "/deliver"  # deliver one helpdesk case now, as the terminal waits for it
TERMINAL_PLATFORM = "console"  # only terminal messages come through the socket: nothing posts to Slack or Teams
MAX_DELIVERY_WAIT_S = 60.0  # the terminal waits 10 s for a case's delivery; the rest stays queued


def socket_path(cfg: RetrievalConfig) -> Path:
    """Beside the embedded index's lock file, so the CLI finds the server that holds that index."""
    return cfg.qdrant_path / f".{cfg.collection}.sock"


class Malformed(ValueError):
    """A request or an answer that does not have the expected shape; the text names the field."""


# --- requests (the CLI's, read by the server) --------------------------------------------------------

Text = Annotated[str, StringConstraints(pattern=r"\S")]  # an id or a query: not empty, not only spaces


def _absolute(path: str) -> str:
    if not Path(path).is_absolute():
        raise ValueError("must be an absolute path (the server does not know the command's working directory)")
    return path


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True)


class UserForm(_Request):
    id: Text
    name: str = ""
    email: str | None = None
    groups: list[str] = []
    is_guest: bool = False

    def user(self) -> UserRef:
        return UserRef(self.id, self.name, self.email, tuple(self.groups), self.is_guest)


class InboundForm(_Request):
    """A terminal message: what ``adapters.cli.console.inbound`` sets, and nothing a platform adds."""

    platform: Literal["console"]
    channel: Text
    thread: Text
    text: str
    event_id: Text
    user: UserForm

    def inbound(self) -> Inbound:
        return Inbound(TERMINAL_PLATFORM, self.channel, self.thread, self.user.user(), self.text, self.event_id)


class SearchRequest(_Request):
    query: Text
    k: Annotated[int, Field(ge=1, le=MAX_K)]
    section: str | None = None


class MessageRequest(_Request):
    inbound: InboundForm


class DecideRequest(_Request):
    pending_id: Text
    user: UserForm
    decision: Literal["confirm", "cancel"]
    args_hash: Text


class PendingRequest(_Request):
    pending_id: Text


class DeliverRequest(_Request):
    case_number: Annotated[int, Field(ge=1)]
    timeout_s: Annotated[float, Field(gt=0, le=MAX_DELIVERY_WAIT_S)]


class IndexRequest(_Request):
    paths: Annotated[list[Annotated[str, AfterValidator(_absolute)]], Field(min_length=1)]
    remove: bool = False


Request = TypeVar("Request", bound=_Request)


def read(form: type[Request], body: object) -> Request:
    """The request ``body`` in ``form``, or ``Malformed`` naming the first field that is wrong."""
    try:
        return form.model_validate(body)
    except ValidationError as exc:
        raise _malformed(exc) from None


def _malformed(exc: ValidationError, whole: str = "the request") -> Malformed:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    said = {
        "model_type": "must be a JSON object",
        "model_attributes_type": "must be a JSON object",
        "dict_type": "must be a JSON object",
        "string_pattern_mismatch": "must be a non-empty string",
        "missing": "is missing",
        "too_short": "must not be empty",
    }.get(error["type"]) or str(error["msg"]).removeprefix("Value error, ").replace("Input should", "should")
    return Malformed(f"`{where}` {said}" if where else f"{whole} {said}")


# --- who and what was said (the CLI's side of a request) ----------------------------------------------


def user_to_json(user: UserRef) -> Json:
    return {**asdict(user), "groups": list(user.groups)}


def inbound_to_json(inbound: Inbound) -> Json:
    return {"platform": inbound.platform, "channel": inbound.channel, "thread": inbound.thread,
            "text": inbound.text, "event_id": inbound.event_id, "user": user_to_json(inbound.user)}


# --- what the service answered (the server's side, read by the CLI) ------------------------------------

@functools.cache
def _adapter(shape: type) -> TypeAdapter[Any]:
    """Built on first use: a command that only asks never pays for the shapes of a decision or a case."""
    return TypeAdapter(shape)


def _answer(shape: type, value: object, what: str) -> Any:
    try:
        return _adapter(shape).validate_python(value)
    except ValidationError as exc:
        raise Malformed(f"{what} that does not decode: {_malformed(exc, 'it')}") from None


class _ReplyForm(BaseModel):
    run_id: Text
    reason: TerminationReason
    outcome: Json
    conversation_key: str
    steps: int
    tokens: int
    cost_usd: float
    refused: RefusalReason | None = None


class _DecisionForm(BaseModel):
    status: DecisionStatus
    message: str


class _DecidedForm(BaseModel):
    decision: _DecisionForm
    result: Json | None = None
    reply: Json | None = None
    case: Json | None = None
    notice: str | None = None


def reply_to_json(reply: Reply) -> Json:
    return {"run_id": reply.run_id, "reason": reply.reason.value, "outcome": outcome_to_json(reply.outcome),
            "conversation_key": reply.conversation_key, "steps": reply.steps, "tokens": reply.tokens,
            "cost_usd": reply.cost_usd, "refused": reply.refused}


def reply_from_json(value: object) -> Reply:
    form: _ReplyForm = _answer(_ReplyForm, value, "a reply")
    try:
        outcome = outcome_from_json(form.outcome)
    except (KeyError, TypeError, ValueError) as exc:
        raise Malformed(f"a reply whose outcome does not decode ({type(exc).__name__}: {exc})") from None
    return Reply(form.run_id, form.reason, outcome, form.conversation_key, form.steps, form.tokens, form.cost_usd,
                 form.refused)


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
    form: _DecidedForm = _answer(_DecidedForm, value, "a decision")
    reply = None if form.reply is None else reply_from_json(form.reply)
    case = None if form.case is None else _answer(HandoffCase, form.case, "a case")
    verdict = Decision(form.decision.status, None, form.decision.message)  # the record stays in the server
    return DecisionReply(verdict, form.result, reply, case, notice=form.notice)


def passage_to_json(passage: Passage) -> Json:
    """Every field, the score unrounded: the CLI prints it as it would have printed its own search."""
    return {**asdict(passage), "audience": list(passage.audience)}


def passage_from_json(value: object) -> Passage:
    passage: Passage = _answer(Passage, value, "a passage")
    return passage


def delivery_to_json(result: DeliveryResult) -> Json:
    return asdict(result)


def delivery_from_json(value: object) -> DeliveryResult:
    result: DeliveryResult = _answer(DeliveryResult, value, "a delivery")
    return result
