"""Eval tasks: one JSON object a line, loaded and checked before anything runs.

A task is a question (``ask``) or a short conversation (``conversation``: user turns in one thread),
who asks (``user``), where (``place``: ``dm`` or a shared ``thread``) and what must hold (``expect``).
Every problem in the file is reported at once, each naming its line and key, so a task file is fixed
in one pass rather than one run per typo.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bot.identity import EVERYONE
from bot.policy_tools import TICKET_CATEGORIES, TICKET_URGENCIES
from bot.types import UserRef

Place = Literal["dm", "thread"]
PLACES: tuple[Place, ...] = ("dm", "thread")
DEFAULT_USER = UserRef("eval-user", "eval-user", groups=(EVERYONE,))
TASK_KEYS = frozenset({"id", "ask", "conversation", "user", "place", "expect"})
USER_KEYS = frozenset({"id", "groups"})
TICKET_KEYS = frozenset({"category", "urgency"})
REGEX_CHECKS = frozenset({"facts", "no_facts"})
EXPECT_KEYS = frozenset(
    {"facts", "no_facts", "cites", "tools", "no_tools", "ticket", "no_ticket", "not_covered", "max_steps", "max_tokens"}
)


class TaskFileError(ValueError):
    """A task file that cannot be run: every problem, each as ``FILE line N: key: what is wrong``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class TicketExpectation:
    category: str
    urgency: str | None = None  # None: any urgency


@dataclass(frozen=True)
class Expect:
    """What must hold of a task's last reply and the run behind it; unset checks are not made."""

    facts: tuple[str, ...] = ()  # case-insensitive regexes the answer must match, each
    no_facts: tuple[str, ...] = ()  # ... it must not match
    cites: tuple[str, ...] = ()  # substrings of some citation's title, heading, source or file, each
    tools: tuple[str, ...] = ()  # tools the run must call
    no_tools: tuple[str, ...] = ()  # tools it must not call, not even in a refused call
    ticket: TicketExpectation | None = None  # a ticket must be proposed
    no_ticket: bool = False  # no ticket may be proposed
    not_covered: bool | None = None  # True: must end not_covered; False: must not
    max_steps: int | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class Task:
    id: str
    turns: tuple[str, ...]  # the user's messages in one thread; checks apply to the reply to the last
    user: UserRef = DEFAULT_USER
    place: Place = "dm"
    expect: Expect = field(default_factory=Expect)
    line: int = 0


def load_tasks(path: Path) -> list[Task]:
    """Every task in ``path``; raises ``TaskFileError`` naming each bad line and key (nothing runs then)."""
    try:  # utf-8-sig: a BOM (PowerShell, Notepad) is not part of line 1
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError([f"{path}: cannot read the task file: {exc}"]) from None
    # Only newlines end lines (read_text made \r\n and \r into \n): str.splitlines would also split at
    # U+2028 and U+0085, which JSON allows raw inside a string, breaking a task and shifting line numbers.
    tasks, problems = parse_tasks(text.split("\n"), str(path))
    if problems:
        raise TaskFileError(problems)
    if not tasks:
        raise TaskFileError([f"{path}: no tasks (one JSON object a line)"])
    return tasks


def parse_tasks(lines: Iterable[str], name: str = "tasks") -> tuple[list[Task], list[str]]:
    """The tasks of JSONL ``lines`` and the problems found; blank lines are skipped."""
    tasks: list[Task] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        found: list[str] = []
        task = _task(line, number, found.append)
        problems += [f"{name} line {number}: {problem}" for problem in found]
        if task is None:
            continue
        if task.id in seen:
            problems.append(f"{name} line {number}: id: {task.id!r} is already the id of line {seen[task.id]}")
        seen.setdefault(task.id, number)
        tasks.append(task)
    return tasks, problems


Report = Callable[[str], None]


def _task(line: str, number: int, report: Report) -> Task | None:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        report(f"not valid JSON ({exc.msg} at column {exc.colno})")
        return None
    if not isinstance(data, dict):
        report("must be a JSON object")
        return None
    _unknown(data, TASK_KEYS, "", report)
    task_id = data.get("id")
    if not isinstance(task_id, str) or not task_id.strip():
        report("id: required, a non-empty string")
        task_id = f"line-{number}"
    turns = _turns(data, report)
    place = data.get("place", "dm")
    if place not in PLACES:
        report(f"place: must be one of {', '.join(PLACES)}, not {place!r}")
        place = "dm"
    expect = _expect(data.get("expect"), report)
    user = _user(data.get("user"), report)
    return Task(task_id, turns, user, place, expect, number)


def _turns(data: dict[str, Any], report: Report) -> tuple[str, ...]:
    if ("ask" in data) == ("conversation" in data):
        report("ask: give exactly one of ask (a question) or conversation (a list of user turns)")
        return ()
    if "ask" in data:
        ask = data["ask"]
        if not isinstance(ask, str) or not ask.strip():
            report("ask: must be a non-empty string")
            return ()
        return (ask,)
    turns = data["conversation"]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        report("conversation: must be a non-empty list of non-empty strings (the user's turns)")
        return ()
    return tuple(turns)


def _user(value: Any, report: Report) -> UserRef:
    if value is None:
        return DEFAULT_USER
    if not isinstance(value, dict):
        report('user: must be an object like {"id": "U1", "groups": ["all"]}')
        return DEFAULT_USER
    _unknown(value, USER_KEYS, "user.", report)
    user_id = value.get("id", DEFAULT_USER.id)
    if not isinstance(user_id, str) or not user_id.strip():
        report("user.id: must be a non-empty string")
        user_id = DEFAULT_USER.id
    groups = value.get("groups", [EVERYONE])
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        report("user.groups: must be a list of group names")
        groups = [EVERYONE]
    return UserRef(user_id, user_id, groups=tuple(dict.fromkeys([EVERYONE, *groups])))


def _expect(value: Any, report: Report) -> Expect:
    if not isinstance(value, dict) or not value:
        report("expect: required, an object with at least one check (facts, cites, ticket, ...)")
        return Expect()
    found: list[str] = []
    note = _counted(report, found)
    _unknown(value, EXPECT_KEYS, "expect.", note)
    if value.get("ticket") is not None and value.get("no_ticket") is True:
        note("expect.no_ticket: contradicts expect.ticket (a ticket cannot be both wanted and unwanted)")
    expect = _checks(value, note)
    if expect == Expect() and not found:  # e.g. {"facts": []}: a task that passes whatever the run does
        report("expect: sets no check (each one given is empty, false or null), so the task could never fail")
    return expect


def _counted(report: Report, found: list[str]) -> Report:
    """``report``, also keeping each problem in ``found`` (so one typo is not also called "no check")."""

    def note(problem: str) -> None:
        found.append(problem)
        report(problem)

    return note


def _checks(value: dict[str, Any], report: Report) -> Expect:
    return Expect(
        facts=_strings(value, "facts", report),
        no_facts=_strings(value, "no_facts", report),
        cites=_strings(value, "cites", report),
        tools=_strings(value, "tools", report),
        no_tools=_strings(value, "no_tools", report),
        ticket=_ticket(value.get("ticket"), report),
        no_ticket=_flag(value, "no_ticket", report) is True,
        not_covered=_flag(value, "not_covered", report),
        max_steps=_limit(value, "max_steps", report),
        max_tokens=_limit(value, "max_tokens", report),
    )


def _strings(expect: dict[str, Any], key: str, report: Report) -> tuple[str, ...]:
    value = expect.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        report(f"expect.{key}: must be a list of non-empty strings")
        return ()
    if key in REGEX_CHECKS:
        for n, pattern in enumerate(value):
            try:
                re.compile(pattern)
            except re.error as exc:
                report(f"expect.{key}[{n}]: not a valid regex ({exc}): {pattern!r}")
    return tuple(value)


def _limit(expect: dict[str, Any], key: str, report: Report) -> int | None:
    value = expect.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        report(f"expect.{key}: must be a whole number of 1 or more, not {value!r}")
        return None
    return value


def _flag(expect: dict[str, Any], key: str, report: Report) -> bool | None:
    value = expect.get(key)
    if value is not None and not isinstance(value, bool):
        report(f"expect.{key}: must be true or false, not {value!r}")
        return None
    return value


def _ticket(value: Any, report: Report) -> TicketExpectation | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        report('expect.ticket: must be an object like {"category": "network_vpn", "urgency": "high"}')
        return None
    _unknown(value, TICKET_KEYS, "expect.ticket.", report)
    category, urgency = value.get("category"), value.get("urgency")
    if category not in TICKET_CATEGORIES:
        report(f"expect.ticket.category: must be one of {', '.join(TICKET_CATEGORIES)}, not {category!r}")
    if urgency is not None and urgency not in TICKET_URGENCIES:
        report(f"expect.ticket.urgency: must be one of {', '.join(TICKET_URGENCIES)}, not {urgency!r}")
    return TicketExpectation(str(category), urgency if isinstance(urgency, str) else None)


def _unknown(data: dict[str, Any], known: frozenset[str], prefix: str, report: Report) -> None:
    for key in data:
        if key not in known:
            report(f"{prefix}{key}: unknown key (known: {', '.join(sorted(known))})")
