"""The contract between the agent core, the model boundary and the adapters.

Messages are chat-completions dicts (``{"role": ..., "content": ...}``) so that history can be stored
as JSON and sent to any OpenAI-compatible endpoint unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

Message = dict[str, Any]

GIVE_UP_MESSAGE = "I couldn't finish this reliably. I've passed your question to the helpdesk."


class TerminationReason(StrEnum):
    """Why a run ended; every run has exactly one."""

    ANSWERED = "answered"
    NOT_COVERED = "not_covered"  # an uncited answer after searching: nothing found, or "not in the policy"
    PENDING_CONFIRMATION = "pending_confirmation"
    STEP_BUDGET = "step_budget"
    TOKEN_BUDGET = "token_budget"
    DEADLINE = "deadline"
    COST_BUDGET = "cost_budget"
    NO_PROGRESS = "no_progress"
    POLICY_DENIED = "policy_denied"
    MODEL_ERROR = "model_error"
    CANCELLED = "cancelled"
    INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True)
class UserRef:
    """Who is asking, as the platform told us; groups drive audience filters and tool permissions."""

    id: str
    name: str = ""
    email: str | None = None
    groups: tuple[str, ...] = ()
    is_guest: bool = False


@dataclass(frozen=True)
class Inbound:
    """One user message, mapped from any platform."""

    platform: str  # "slack" | "teams" | "console"
    channel: str
    thread: str
    user: UserRef
    text: str
    event_id: str
    tenant: str = ""
    link: str | None = None  # a link back to the message (Slack permalink, Teams deep link)
    address: dict[str, Any] | None = None  # how to post in this thread later, unprompted (Teams' reference)
    starts_thread: bool = False  # the message opens its thread: there is no history to read
    shared: bool = False  # read by others too (a channel, a thread, a group chat), not just the asker
    private_channel: bool = False  # the platform can reach the asker privately from here (a Slack DM)
    members: tuple[UserRef, ...] | None = None  # who can read the place, with groups, where known
    files: tuple[str, ...] = ()  # names of the files attached: never read, and the reply says so

    @property
    def conversation_key(self) -> str:
        return f"{self.platform}:{self.tenant}:{self.channel}:{self.thread}"


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model sent it; ``arguments`` is the raw JSON text, validated later."""

    id: str
    name: str
    arguments: str

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class ModelReply:
    """One model completion: text, tool calls, and the tokens it cost."""

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str = "stop"
    model: str = ""

    def as_message(self) -> Message:
        message: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.as_dict() for call in self.tool_calls]
        return message


class ChatModel(Protocol):
    """The model boundary: the OpenAI-compatible client and the offline model both implement it."""

    name: str

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int,
        timeout: float,
    ) -> ModelReply: ...


@dataclass(frozen=True)
class Citation:
    title: str
    heading: str
    source: str
    audience: tuple[str, ...] = ()  # the document's groups; empty: public
    abstract: str = ""  # the start of the cited passage, for a platform's citation preview
    classification: str = ""  # the document's sensitivity ("confidential"), from its front matter

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Citation:
        return cls(str(data["title"]), str(data["heading"]), str(data["source"]), tuple(data.get("audience") or ()),
                   str(data.get("abstract") or ""), str(data.get("classification") or ""))


@dataclass(frozen=True)
class PendingAction:
    """A frozen write call waiting for its requester's Confirm or Cancel."""

    id: str
    tool: str
    arguments: dict[str, Any]
    args_hash: str
    requester: str
    text: str  # what the model said alongside the proposal
    expires_at: datetime
    state: str = "open"


@dataclass(frozen=True)
class Answer:
    text: str
    citations: tuple[Citation, ...] = ()


@dataclass(frozen=True)
class Pending:
    text: str
    action: PendingAction


@dataclass(frozen=True)
class GaveUp:
    reason: TerminationReason
    text: str = GIVE_UP_MESSAGE
    transcript: dict[str, Any] = field(default_factory=dict)
    case_id: str | None = None


Outcome = Answer | Pending | GaveUp
