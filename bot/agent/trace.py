"""The trace of one run: every model call and tool call with tokens, cost and latency, plus totals."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from bot.types import TerminationReason


@dataclass
class Step:
    kind: str  # "model" | "tool" | "compaction" | "decision" | "answer" (written without a model call) | "error"
    name: str
    latency_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    stop_reason: str | None = None
    call_id: str | None = None
    arguments: str | None = None
    result_chars: int | None = None
    error: str | None = None
    guard: str | None = None  # a tool call a guard refused: which one (``bot.agent.turn.GUARDS``)
    text: str | None = None  # model text or a bounded tool-result preview, for transcripts
    decider: str | None = None  # a decision step: who clicked
    decision: str | None = None  # a decision step: "confirm" | "cancel"


@dataclass
class RunTrace:
    run_id: str
    steps: list[Step] = field(default_factory=list)
    reason: TerminationReason | None = None
    started: float = field(default_factory=time.perf_counter)
    latency_ms: float = 0.0

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def finish(self, reason: TerminationReason) -> None:
        self.reason = reason
        self.latency_ms = (time.perf_counter() - self.started) * 1000

    def step_dicts(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in asdict(step).items() if v is not None} for step in self.steps]

    @property
    def model_steps(self) -> int:
        return sum(1 for step in self.steps if step.kind == "model")


class Stopwatch:
    """Milliseconds since creation; keeps timing code out of the loop's logic."""

    def __init__(self) -> None:
        self._start = time.perf_counter()

    def ms(self) -> float:
        return (time.perf_counter() - self._start) * 1000
