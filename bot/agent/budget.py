"""Run budgets: fixed limits apart from the usage a run accumulates, checked before every model call."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.agent.pricing import Price
from bot.types import Message, TerminationReason, Usage

MIN_CALL_SECONDS = 0.2  # less time than this left is not worth a model call


@dataclass(frozen=True)
class Budgets:
    max_steps: int = 6
    max_tokens: int = 20_000
    deadline_s: float = 20.0
    max_cost_usd: float | None = 0.05  # None: no dollar cap


@dataclass
class Spent:
    """What a run has used so far; saved with a pending action so a confirmed run continues the count."""

    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class CallAllowance:
    """What the next model call may use: its output cap and its timeout."""

    max_output_tokens: int
    timeout_s: float


CHARS_PER_TOKEN = 3.5  # bytes of UTF-8 a token: deliberately generous, projections should err towards stopping early


def estimate_tokens(messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> int:
    """Token estimate of a request, for pre-call projections."""
    chars = sum(_chars(m) for m in messages) + len(json.dumps(list(tools)))
    return int(chars / CHARS_PER_TOKEN) + 8 * len(messages)


def _chars(message: Message) -> int:
    """UTF-8 bytes a message costs on the wire, without serialising it (this runs every turn).

    Bytes, not characters: a tokenizer spends about one token on a Japanese or Chinese character (three
    bytes), where counting characters would estimate a third of that and let a run overshoot its budget.
    """
    chars = 40 + _bytes(str(message.get("content") or ""))
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        chars += 72 + len(call.get("id", "")) + len(function.get("name", "")) + _bytes(function.get("arguments", ""))
    return chars + len(message.get("tool_call_id", "")) + (20 if "tool_call_id" in message else 0)


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class HistoryMeter:
    """Incremental ``estimate_tokens`` for a history that only grows, so each turn costs O(new messages).

    A history that shrank or was replaced (compaction) is measured again from the start.
    """

    def __init__(self, tools: Sequence[dict[str, Any]] = ()) -> None:
        self._tool_chars = len(json.dumps(list(tools)))
        self._history: list[Message] | None = None
        self._counted = 0
        self._chars = 0

    def tokens(self, messages: list[Message]) -> int:
        if messages is not self._history or len(messages) < self._counted:
            self._history, self._counted, self._chars = messages, 0, 0
        for message in messages[self._counted :]:
            self._chars += _chars(message)
        self._counted = len(messages)
        return int((self._chars + self._tool_chars) / CHARS_PER_TOKEN) + 8 * len(messages)


class Budget:
    """Limits plus usage plus a clock; `check` returns the reason a call may not start, or an allowance."""

    def __init__(
        self,
        limits: Budgets,
        price: Price,
        spent: Spent | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.price = price
        self.spent = spent or Spent()
        self._clock = clock
        self._deadline = clock() + limits.deadline_s

    def time_left(self) -> float:
        return self._deadline - self._clock()

    def check(self, projected_input: int, wanted_output: int) -> TerminationReason | CallAllowance:
        if self.spent.steps >= self.limits.max_steps:
            return TerminationReason.STEP_BUDGET
        if self.time_left() < MIN_CALL_SECONDS:
            return TerminationReason.DEADLINE
        room = self.limits.max_tokens - self.spent.tokens - projected_input
        if room < min(64, wanted_output):
            return TerminationReason.TOKEN_BUDGET
        output_cap = min(wanted_output, room)
        if self._over_cost(projected_input, output_cap):
            return TerminationReason.COST_BUDGET
        return CallAllowance(max_output_tokens=output_cap, timeout_s=self.time_left())

    def _over_cost(self, projected_input: int, output_cap: int) -> bool:
        if self.limits.max_cost_usd is None:
            return False
        projected = self.spent.cost_usd + self.price.cost(projected_input, output_cap)
        return projected > self.limits.max_cost_usd

    def record(self, usage: Usage, *, counts_as_step: bool = True) -> float:
        """Add one call's usage; returns its cost."""
        cost = self.price.cost(usage.input_tokens, usage.output_tokens)
        self.spent.input_tokens += usage.input_tokens
        self.spent.output_tokens += usage.output_tokens
        self.spent.cost_usd += cost
        self.spent.steps += int(counts_as_step)
        return cost
