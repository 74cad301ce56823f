"""Mutable state of one run, and its versioned JSON form (saved with a pending action)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from bot.agent.budget import Spent
from bot.agent.canonical import canonical_json
from bot.errors import StateVersionError
from bot.identity import EVERYONE
from bot.types import Citation, Message, UserRef

STATE_VERSION = 1


def cited_in(text: str, sources: Mapping[str, Citation]) -> tuple[Citation, ...]:
    """The sources a text names, in the order they were found. A cite counts where the text does not
    carry on deeper into its headings: "[Policy › Troubleshooting › Error codes]" cites the error
    codes, not the parent section as well. A document's opening passage has its title alone as its
    cite, which counts only in a cite's brackets: an answer that mentions "the Acceptable Use Policy"
    has not cited that document's first lines."""
    cited = (c for cite, c in sources.items() if re.search(_cite_pattern(cite), text))
    return tuple(dict.fromkeys(cited))


def _cite_pattern(cite: str) -> str:
    if "›" in cite:
        return re.escape(cite) + r"(?!\s*›)"
    return r"(?<=[\[;,])\s*" + re.escape(cite) + r"\s*(?=[\];,])"  # [Title] or [A › B; Title]


def call_key(tool_name: str, arguments: Mapping[str, Any]) -> str:
    """What the exact-repeat guard remembers of a call made: its tool and canonical arguments."""
    return f"{tool_name}:{canonical_json(arguments)}"


def _tool_of(key: str) -> str:
    return key.partition(":")[0]


@dataclass
class PendingTurn:
    """The turn a confirmation interrupted: results of its other calls, waiting for the decided one."""

    call_id: str
    results: dict[str, str]  # call id -> tool message content, for every other call in the turn


@dataclass
class RunState:
    run_id: str
    user: UserRef
    conversation_key: str
    messages: list[Message]
    question_index: int  # the user message this run answers: pinned through compaction
    spent: Spent = field(default_factory=Spent)
    seen_calls: set[str] = field(default_factory=set)
    searches: int = 0
    empty_searches: int = 0  # searches that ran and found no passage (all of them: a not_covered answer)
    failed_searches: int = 0  # searches whose tool raised: they say nothing about what the policies cover
    repeat_turns: int = 0
    sources: dict[str, Citation] = field(default_factory=dict)  # cite -> where it came from
    pending_turn: PendingTurn | None = None
    audience: tuple[str, ...] | None = None  # the groups whose documents the reply may use; None: the user's

    @property
    def reading_groups(self) -> tuple[str, ...]:
        """The groups searches run with: the reply's audience, which in a shared place is not the asker's."""
        return self.audience if self.audience is not None else self.user.groups

    @property
    def question(self) -> str:
        return str(self.messages[self.question_index].get("content") or "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "run_id": self.run_id,
            "user": asdict(self.user),
            "conversation_key": self.conversation_key,
            "messages": self.messages,
            "question_index": self.question_index,
            "spent": asdict(self.spent),
            "seen_calls": sorted(self.seen_calls),
            "searches": self.searches,
            "empty_searches": self.empty_searches,
            "failed_searches": self.failed_searches,
            "repeat_turns": self.repeat_turns,
            "sources": {cite: asdict(c) for cite, c in self.sources.items()},
            "pending_turn": asdict(self.pending_turn) if self.pending_turn else None,
            "audience": list(self.reading_groups),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        version = data.get("version")
        if version != STATE_VERSION:
            raise StateVersionError(
                f"Saved run state has version {version!r}; this release reads version {STATE_VERSION}. "
                "The pending action cannot be resumed: ask the question again."
            )
        user = dict(data["user"])
        user["groups"] = tuple(user.get("groups", ()))
        pending = data.get("pending_turn")
        return cls(
            run_id=data["run_id"],
            user=UserRef(**user),
            conversation_key=data["conversation_key"],
            messages=list(data["messages"]),
            question_index=data["question_index"],
            spent=Spent(**data["spent"]),
            seen_calls=set(data["seen_calls"]),
            searches=data["searches"],
            empty_searches=data.get("empty_searches", 0),  # saved before not_covered: none counted
            failed_searches=data.get("failed_searches", 0),
            repeat_turns=data["repeat_turns"],
            sources={cite: Citation.from_json(c) for cite, c in data["sources"].items()},
            pending_turn=PendingTurn(**pending) if pending else None,
            audience=tuple(data.get("audience") or (EVERYONE,)),  # saved before audiences: public only
        )

    def restart_from_decision(self, audience: tuple[str, ...], may_see: Callable[[Citation], bool]) -> None:
        """Keep only the system prompt, the question and the decided call, for new readers.

        What the run read before its card (thread history, search results, a summary of them) may be
        what the new readers may not read; the card's own call is already in their place. Searches may
        run again (the repeat guard forgets them); the decided write may not.
        """
        if self.pending_turn is None:
            raise ValueError(f"run {self.run_id} is not waiting for a decision")
        call_id = self.pending_turn.call_id
        system = [message for message in self.messages[:1] if message.get("role") == "system"]
        proposal = dict(self.messages[-1])
        proposal["tool_calls"] = [call for call in proposal.get("tool_calls") or () if call.get("id") == call_id]
        self.messages = [*system, self.messages[self.question_index], proposal]
        self.question_index = len(system)
        self.pending_turn = PendingTurn(call_id, {})
        written = {str((call.get("function") or {}).get("name")) for call in proposal["tool_calls"]}
        self.seen_calls = {key for key in self.seen_calls if _tool_of(key) in written}
        self.sources = {cite: source for cite, source in self.sources.items() if may_see(source)}
        self.audience = audience

    def resume_with(self, call_id: str, content: str) -> None:
        """Give the decided call its result and append the whole turn's results in call order."""
        if self.pending_turn is None or self.pending_turn.call_id != call_id:
            raise ValueError(f"run {self.run_id} is not waiting for call {call_id}")
        results = {**self.pending_turn.results, call_id: content}
        calls = self.messages[-1].get("tool_calls") or []
        for call in calls:
            self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": results[call["id"]]})
        self.pending_turn = None
