"""Check `policypal eval` task files, and the key facts of the labelled handbook questions, against their documents.

    python benchmarks/check_eval_tasks.py examples/eval.jsonl bot/sample_policies
    python benchmarks/check_eval_tasks.py --labels benchmarks/labels/18f.jsonl --docs DIR/18f-handbook/docs

Tasks mode verifies each line of a tasks file: only the known keys, with the right types; unique ids;
exactly one of ``ask`` or ``conversation``; every ``cites`` entry is part of a policy file name or of a
heading (a ``#`` line) in the policies folder; every ``facts`` regex compiles and matches the text of at
least one cited file (any file when nothing is cited); ``not_covered`` tasks expect no facts or cites;
and a ``no_facts`` regex that matches a document the asker may not read (a restricted fact) matches
no document the asker may read, so an outsider could not have got it honestly. The asker's groups are
``user.groups`` plus ``all`` in a DM, only ``all`` in a shared thread.

Labels mode verifies that every answerable line has 1-3 ``facts`` and that each compiles and matches
the text of one of its labelled ``answers[].doc`` files (unanswerable lines must have none), and that
no other key was added.

Facts are matched case-insensitively against a file's raw text and against the same text with
Markdown emphasis and code marks removed and whitespace collapsed. Prints a summary; exits 1 on any
problem.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVERYONE = "all"
TASK_KEYS = frozenset({"id", "ask", "conversation", "user", "place", "expect"})
USER_KEYS = frozenset({"id", "groups"})
EXPECT_KEYS = frozenset(
    {"facts", "no_facts", "cites", "tools", "no_tools", "ticket", "no_ticket", "not_covered", "max_steps", "max_tokens"}
)
TICKET_KEYS = frozenset({"category", "urgency"})
PLACES = frozenset({"dm", "thread"})
TOOLS = frozenset({"search_policies", "create_it_ticket"})
TICKET_TOOL = "create_it_ticket"
CATEGORIES = frozenset(
    {"access", "hardware", "software", "network_vpn", "accounts_passwords", "security_incident", "other"}
)
URGENCIES = frozenset({"low", "normal", "high", "critical"})
LABEL_KEYS = frozenset({"id", "question", "answerable", "answers", "facts", "split"})
MAX_LABEL_FACTS = 3
FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.DOTALL)
AUDIENCE = re.compile(r"^audience:\s*\[?([^\]\n]*)\]?\s*$", re.MULTILINE)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
MARKS = re.compile(r"\*\*|__|`|(?<![\w*])[*_](?=\S)|(?<=\S)[*_](?![\w*])")


@dataclass(frozen=True)
class Document:
    name: str  # path relative to the folder, with "/" separators
    text: str
    plain: str  # Markdown marks removed, whitespace collapsed
    headings: tuple[str, ...]
    audience: tuple[str, ...]  # empty or ("all",): public

    @property
    def public(self) -> bool:
        return not self.audience or EVERYONE in self.audience

    def readable_by(self, groups: Iterable[str]) -> bool:
        return self.public or bool(set(self.audience) & set(groups))

    def matches(self, pattern: re.Pattern[str]) -> bool:
        return bool(pattern.search(self.text) or pattern.search(self.plain))


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)

    def add(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")


def load_document(path: Path, root: Path) -> Document:
    text = path.read_text(encoding="utf-8")
    audience: tuple[str, ...] = ()
    front = FRONT_MATTER.match(text)
    if front:
        found = AUDIENCE.search(front.group(1))
        if found:
            audience = tuple(g.strip().strip("'\"") for g in found.group(1).split(",") if g.strip())
    body = text[front.end() :] if front else text
    headings = tuple(MARKS.sub("", h).strip() for h in HEADING.findall(body))
    plain = " ".join(MARKS.sub("", text).split())
    return Document(path.relative_to(root).as_posix(), text, plain, headings, audience)


def load_documents(root: Path, suffixes: Sequence[str] = (".md", ".mdx", ".txt")) -> list[Document]:
    paths = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
    return [load_document(p, root) for p in paths]


def read_jsonl(path: Path, report: Report) -> list[tuple[int, dict[str, Any]]]:
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            report.add(f"line {number}", "blank line")
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            report.add(f"line {number}", f"not JSON: {exc}")
            continue
        if not isinstance(row, dict):
            report.add(f"line {number}", "not a JSON object")
            continue
        rows.append((number, row))
    return rows


def compile_regex(value: object, where: str, report: Report) -> re.Pattern[str] | None:
    if not isinstance(value, str) or not value.strip():
        report.add(where, f"regex must be a non-empty string, got {value!r}")
        return None
    try:
        return re.compile(value, re.IGNORECASE)
    except re.error as exc:
        report.add(where, f"regex {value!r} does not compile: {exc}")
        return None


def is_str_list(value: object, *, allow_empty: bool = False) -> bool:
    return (
        isinstance(value, list)
        and (allow_empty or bool(value))
        and all(isinstance(v, str) and v.strip() for v in value)
    )


def cited_documents(cite: str, documents: Sequence[Document]) -> list[Document]:
    """The documents a ``cites`` entry points at: by file name, else by one of their headings."""
    needle = cite.casefold()
    by_name = [d for d in documents if needle in d.name.casefold()]
    if by_name:
        return by_name
    return [d for d in documents if any(needle in h.casefold() for h in d.headings)]


# --- tasks mode ------------------------------------------------------------------------------


def check_task(row: dict[str, Any], where: str, documents: Sequence[Document], report: Report) -> None:
    for key in sorted(set(row) - TASK_KEYS):
        report.add(where, f"unknown key {key!r}")
    if not isinstance(row.get("id"), str) or not row["id"].strip():
        report.add(where, "id must be a non-empty string")
    has_ask, has_conversation = "ask" in row, "conversation" in row
    if has_ask == has_conversation:
        report.add(where, "needs exactly one of ask or conversation")
    if has_ask and (not isinstance(row["ask"], str) or not row["ask"].strip()):
        report.add(where, "ask must be a non-empty string")
    if has_conversation and not is_str_list(row["conversation"]):
        report.add(where, "conversation must be a non-empty list of non-empty strings")

    groups = check_user(row.get("user"), where, report)
    place = row.get("place", "dm")
    if place not in PLACES:
        report.add(where, f"place must be one of {sorted(PLACES)}, got {place!r}")
    readers = (EVERYONE,) if place == "thread" else (EVERYONE, *groups)

    expect = row.get("expect")
    if not isinstance(expect, dict):
        report.add(where, "expect must be an object")
        return
    check_expect(expect, where, documents, readers, report)


def check_user(user: object, where: str, report: Report) -> tuple[str, ...]:
    if user is None:
        return (EVERYONE,)
    if not isinstance(user, dict):
        report.add(where, "user must be an object")
        return (EVERYONE,)
    for key in sorted(set(user) - USER_KEYS):
        report.add(where, f"unknown user key {key!r}")
    if "id" in user and (not isinstance(user["id"], str) or not user["id"].strip()):
        report.add(where, "user.id must be a non-empty string")
    groups = user.get("groups", [EVERYONE])
    if not is_str_list(groups):
        report.add(where, "user.groups must be a non-empty list of strings")
        return (EVERYONE,)
    return tuple(groups)


def check_expect(
    expect: dict[str, Any], where: str, documents: Sequence[Document], readers: Sequence[str], report: Report
) -> None:
    for key in sorted(set(expect) - EXPECT_KEYS):
        report.add(where, f"unknown expect key {key!r}")
    if not expect:
        report.add(where, "expect checks nothing")
    for key in ("facts", "no_facts", "cites", "tools", "no_tools"):
        if key in expect and not is_str_list(expect[key]):
            report.add(where, f"expect.{key} must be a non-empty list of non-empty strings")
    for key in ("tools", "no_tools"):
        for tool in expect.get(key, []) if is_str_list(expect.get(key)) else []:
            if tool not in TOOLS:
                report.add(where, f"expect.{key}: unknown tool {tool!r} (known: {', '.join(sorted(TOOLS))})")
    for key in ("no_ticket", "not_covered"):
        if key in expect and not isinstance(expect[key], bool):
            report.add(where, f"expect.{key} must be true or false")
    for key in ("max_steps", "max_tokens"):
        value = expect.get(key)
        if key in expect and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            report.add(where, f"expect.{key} must be a positive integer")
    check_ticket(expect, where, report)

    facts = expect.get("facts", []) if is_str_list(expect.get("facts")) else []
    cites = expect.get("cites", []) if is_str_list(expect.get("cites")) else []
    if expect.get("not_covered") is True and ("facts" in expect or "cites" in expect):
        report.add(where, "a not_covered task must not expect facts or cites")

    cited: list[Document] = []
    for cite in cites:
        found = cited_documents(cite, documents)
        if not found:
            report.add(where, f"cite {cite!r} is not part of any file name or heading")
        cited.extend(d for d in found if d not in cited)
    pool = cited if cites else list(documents)
    for fact in facts:
        pattern = compile_regex(fact, f"{where} fact", report)
        if pattern is not None and pool and not any(d.matches(pattern) for d in pool):
            scope = ", ".join(d.name for d in pool) if cites else "any policy file"
            report.add(where, f"fact {fact!r} matches no text of {scope}")
    if facts and cited and not any(d.readable_by(readers) for d in cited):
        report.add(where, "facts are expected only from documents the asker may not read")

    for no_fact in expect.get("no_facts", []) if is_str_list(expect.get("no_facts")) else []:
        pattern = compile_regex(no_fact, f"{where} no_fact", report)
        if pattern is None:
            continue
        hidden = [d for d in documents if not d.readable_by(readers) and d.matches(pattern)]
        readable = [d for d in documents if d.readable_by(readers) and d.matches(pattern)]
        if hidden and readable:
            report.add(
                where,
                f"no_fact {no_fact!r} is a restricted fact ({hidden[0].name}) that the asker may also read in "
                f"{', '.join(d.name for d in readable)}",
            )


def check_ticket(expect: dict[str, Any], where: str, report: Report) -> None:
    if "ticket" not in expect:
        return
    ticket = expect["ticket"]
    if not isinstance(ticket, dict):
        report.add(where, "expect.ticket must be an object")
        return
    for key in sorted(set(ticket) - TICKET_KEYS):
        report.add(where, f"unknown ticket key {key!r}")
    if ticket.get("category") not in CATEGORIES:
        report.add(where, f"ticket.category must be one of {', '.join(sorted(CATEGORIES))}")
    if "urgency" in ticket and ticket["urgency"] not in URGENCIES:
        report.add(where, f"ticket.urgency must be one of {', '.join(sorted(URGENCIES))}")
    if expect.get("no_ticket") is True:
        report.add(where, "expects a ticket and no_ticket at once")
    if TICKET_TOOL in (expect.get("no_tools") or []):
        report.add(where, f"expects a ticket and forbids {TICKET_TOOL}")
    if expect.get("not_covered") is True:
        report.add(where, "a ticket proposal and a not_covered ending contradict each other")


def task_kind(row: dict[str, Any]) -> str:
    expect = row.get("expect")
    if not isinstance(expect, dict):
        return "invalid"
    if expect.get("not_covered"):
        return "not covered"
    if "ticket" in expect:
        return "answer + ticket" if expect.get("facts") else "ticket only"
    if "conversation" in row:
        return "follow-up"
    return "question"


def check_tasks(tasks_path: Path, policies: Path) -> int:
    report = Report()
    documents = load_documents(policies)
    if not documents:
        report.add(str(policies), "no policy files found")
    rows = read_jsonl(tasks_path, report)
    ids = Counter(str(row.get("id")) for _, row in rows)
    for task_id, count in sorted(ids.items()):
        if count > 1:
            report.add(f"id {task_id!r}", f"used {count} times")
    for number, row in rows:
        check_task(row, f"line {number} ({row.get('id')})", documents, report)

    kinds = Counter(task_kind(row) for _, row in rows)
    restricted = sum(1 for _, row in rows if set(check_user(row.get("user"), "", Report())) - {EVERYONE})
    threads = sum(1 for _, row in rows if row.get("place") == "thread")
    facts = sum(len(row.get("expect", {}).get("facts", [])) for _, row in rows if isinstance(row.get("expect"), dict))
    print(f"{tasks_path}: {len(rows)} tasks on {len(documents)} policy files, {facts} fact regexes")
    print("  " + ", ".join(f"{kind}: {n}" for kind, n in sorted(kinds.items())))
    guarded = sum(1 for _, row in rows if isinstance(row.get("expect"), dict) and row["expect"].get("no_facts"))
    print(
        f"  askers with groups beyond {EVERYONE!r}: {restricted}, in a shared thread: {threads}, "
        f"with no_facts: {guarded}"
    )
    return finish(report)


# --- labels mode -----------------------------------------------------------------------------


def check_labels(labels_path: Path, docs: Path) -> int:
    report = Report()
    rows = read_jsonl(labels_path, report)
    cache: dict[str, Document | None] = {}

    def document(name: str) -> Document | None:
        if name not in cache:
            path = docs / name
            cache[name] = load_document(path, docs) if path.is_file() else None
        return cache[name]

    answerable = with_facts = fact_count = 0
    ids = Counter(str(row.get("id")) for _, row in rows)
    for label_id, count in sorted(ids.items()):
        if count > 1:
            report.add(f"id {label_id!r}", f"used {count} times")
    for number, row in rows:
        where = f"line {number} ({row.get('id')})"
        for key in sorted(set(row) - LABEL_KEYS):
            report.add(where, f"unknown key {key!r}")
        facts = row.get("facts")
        if row.get("answerable") is not True:
            if facts is not None:
                report.add(where, "an unanswerable question must not have facts")
            continue
        answerable += 1
        answers = row.get("answers")
        if not isinstance(answers, list) or not answers:
            report.add(where, "an answerable question needs answers")
            continue
        labelled: list[Document] = []
        for answer in answers:
            name = answer.get("doc") if isinstance(answer, dict) else None
            found = document(name) if isinstance(name, str) else None
            if found is None:
                report.add(where, f"labelled doc {name!r} not found under {docs}")
            else:
                labelled.append(found)
        if not isinstance(facts, list) or not is_str_list(facts) or len(facts) > MAX_LABEL_FACTS:
            report.add(where, f"needs facts: a list of 1-{MAX_LABEL_FACTS} regexes")
            continue
        with_facts += 1
        fact_count += len(facts)
        for fact in facts:
            pattern = compile_regex(fact, f"{where} fact", report)
            if pattern is not None and labelled and not any(d.matches(pattern) for d in labelled):
                report.add(where, f"fact {fact!r} matches none of {', '.join(d.name for d in labelled)}")

    print(
        f"{labels_path}: {len(rows)} questions, {answerable} answerable, {with_facts} with facts "
        f"({fact_count} fact regexes), docs in {docs}"
    )
    return finish(report)


def finish(report: Report) -> int:
    for problem in report.problems:
        print(f"  problem: {problem}")
    print(f"  {len(report.problems)} problem(s)" if report.problems else "  OK")
    return 1 if report.problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check eval task files and labelled questions' facts.")
    parser.add_argument("tasks", nargs="?", type=Path, help="tasks file (JSON lines)")
    parser.add_argument("policies", nargs="?", type=Path, help="folder of policy documents")
    parser.add_argument("--labels", type=Path, help="labelled questions (JSON lines) to check facts of")
    parser.add_argument("--docs", type=Path, help="the labelled handbook's docs folder")
    args = parser.parse_args(argv)
    status = 0
    if args.labels or args.docs:
        if not (args.labels and args.docs):
            parser.error("--labels and --docs go together")
        status |= check_labels(args.labels, args.docs)
    if args.tasks or args.policies:
        if not (args.tasks and args.policies):
            parser.error("a tasks file needs its policies folder")
        status |= check_tasks(args.tasks, args.policies)
    if not (args.labels or args.tasks):
        parser.error("give TASKS.jsonl POLICIES_DIR, or --labels LABELS.jsonl --docs DOCS_DIR")
    return status


if __name__ == "__main__":
    sys.exit(main())
