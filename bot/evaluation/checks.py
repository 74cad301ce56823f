"""Scoring one run against a task's expectations: each check passes or fails with the reason it failed.

The run is judged by what the user got (the reply's text, citations and proposed ticket) and by what
it did on the way (every tool call the model made, refused ones included, the guards that fired, the
steps and tokens it spent), so tool misuse fails a task even when the final text reads well.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.evaluation.tasks import Expect
from bot.policy_tools import TICKET_TOOL
from bot.types import TerminationReason

QUOTE_CHARS = 160


@dataclass(frozen=True)
class ToolUse:
    """One tool call as the trace records it; ``guard`` names the guard that refused it, if one did."""

    name: str
    arguments: str = ""
    guard: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Cited:
    """A citation of the reply with the indexed file it came from (a source is often a URL, a task names a file)."""

    title: str
    heading: str
    source: str
    document: str = ""

    def label(self) -> str:
        return f"{self.title} › {self.heading} ({self.document or self.source})"


@dataclass(frozen=True)
class Observed:
    """What one run did: the reply the user got and the trace behind it."""

    run_id: str
    reason: str
    text: str
    citations: tuple[Cited, ...] = ()
    ticket: dict[str, Any] | None = None  # the arguments of the proposed ticket, left pending
    calls: tuple[ToolUse, ...] = ()
    steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(call.name for call in self.calls))

    @property
    def guards(self) -> tuple[str, ...]:
        return tuple(call.guard for call in self.calls if call.guard)

    @property
    def tool_errors(self) -> int:
        """Calls that ran and failed (raised, timed out): not a guard's refusal."""
        return sum(1 for call in self.calls if call.error and not call.guard)


@dataclass(frozen=True)
class CheckResult:
    name: str  # the expect key: "facts", "cites", ...
    passed: bool
    detail: str = ""  # why it failed


def score(expect: Expect, run: Observed) -> list[CheckResult]:
    """One result per check the task sets, in the order of the task format."""
    checks: list[tuple[str, bool, Callable[[Expect, Observed], str]]] = [
        ("facts", bool(expect.facts), _facts),
        ("no_facts", bool(expect.no_facts), _no_facts),
        ("cites", bool(expect.cites), _cites),
        ("tools", bool(expect.tools), _tools),
        ("no_tools", bool(expect.no_tools), _no_tools),
        ("ticket", expect.ticket is not None, _ticket),
        ("no_ticket", expect.no_ticket, _no_ticket),
        ("not_covered", expect.not_covered is not None, _not_covered),
        ("max_steps", expect.max_steps is not None, _max_steps),
        ("max_tokens", expect.max_tokens is not None, _max_tokens),
    ]
    results = []
    for name, wanted, check in checks:
        if wanted:
            problem = check(expect, run)
            results.append(CheckResult(name, not problem, problem))
    return results


def _facts(expect: Expect, run: Observed) -> str:
    missing = [p for p in expect.facts if not re.search(p, run.text, re.IGNORECASE)]
    return "; ".join(f"no match for /{p}/ in {quote(run.text)}" for p in missing)


def _no_facts(expect: Expect, run: Observed) -> str:
    found = [(p, m) for p in expect.no_facts if (m := re.search(p, run.text, re.IGNORECASE))]
    return "; ".join(f"/{p}/ matched {quote(m.group(0))} in {quote(run.text)}" for p, m in found)


def _cites(expect: Expect, run: Observed) -> str:
    def cited(wanted: str) -> bool:
        return any(wanted.lower() in f"{c.title}\n{c.heading}\n{c.source}\n{c.document}".lower() for c in run.citations)

    missing = [wanted for wanted in expect.cites if not cited(wanted)]
    if not missing:
        return ""
    sources = "; ".join(c.label() for c in run.citations) or "nothing"
    return f"no citation contains {', '.join(quote(m) for m in missing)} (cited: {sources})"


def _tools(expect: Expect, run: Observed) -> str:
    missing = [tool for tool in expect.tools if tool not in run.tools]
    return f"not called: {', '.join(missing)} (called: {_called(run)})" if missing else ""


def _no_tools(expect: Expect, run: Observed) -> str:
    called = [tool for tool in expect.no_tools if tool in run.tools]
    return f"called: {', '.join(called)}" if called else ""


def _ticket(expect: Expect, run: Observed) -> str:
    wanted = expect.ticket
    if wanted is None:
        return ""
    if run.ticket is None:
        return f"no ticket proposed (ended {run.reason}; called: {_called(run)})"
    problems = []
    if run.ticket.get("category") != wanted.category:
        problems.append(f"category {run.ticket.get('category')!r}, expected {wanted.category!r}")
    if wanted.urgency is not None and run.ticket.get("urgency") != wanted.urgency:
        problems.append(f"urgency {run.ticket.get('urgency')!r}, expected {wanted.urgency!r}")
    return "; ".join(problems)


def _no_ticket(expect: Expect, run: Observed) -> str:
    if run.ticket is not None:
        return f"a ticket was proposed: {_ticket_line(run.ticket)}"
    attempts = [call for call in run.calls if call.name == TICKET_TOOL]
    if attempts:  # refused by a guard, yet the model tried: tool misuse all the same
        return f"{TICKET_TOOL} was called ({attempts[0].guard or attempts[0].error or 'not proposed'})"
    return ""


def _not_covered(expect: Expect, run: Observed) -> str:
    ended_uncovered = run.reason == TerminationReason.NOT_COVERED.value
    if expect.not_covered and not ended_uncovered:
        return f"ended {run.reason}, expected not_covered: {quote(run.text)}"
    if expect.not_covered is False and ended_uncovered:
        return f"ended not_covered, expected an answer: {quote(run.text)}"
    return ""


def _max_steps(expect: Expect, run: Observed) -> str:
    limit = expect.max_steps
    return f"{run.steps} steps > {limit}" if limit is not None and run.steps > limit else ""


def _max_tokens(expect: Expect, run: Observed) -> str:
    limit = expect.max_tokens
    return f"{run.tokens:,} tokens > {limit:,}" if limit is not None and run.tokens > limit else ""


def _called(run: Observed) -> str:
    return ", ".join(run.tools) or "no tool"


def _ticket_line(arguments: dict[str, Any]) -> str:
    fields = ", ".join(f"{key}={arguments[key]!r}" for key in ("category", "urgency", "summary") if key in arguments)
    return fields or str(arguments)


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """Text in quotes on one line, cut with an ellipsis: enough to see why a check failed."""
    flat = " ".join(text.split())
    return f'"{flat[: limit - 1]}…"' if len(flat) > limit else f'"{flat}"'
