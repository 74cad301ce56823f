"""Composing the offline model's answer from tool results: quoted, cited sentences and nothing it did not read."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from bot.models.offline.messages import ToolResult
from bot.models.offline.planning import opens_like_question
from bot.models.offline.text import content_words, shorten
from bot.policy_tools import ticket_result_text

NOT_IN_POLICY = "That is not in the policy documents I can search, so I can't give you a policy answer on it."

# "This policy explains ..." restates the question's words without answering it.
_ABOUT_THE_DOCUMENT = re.compile(
    r"^this (?:policy|standard|document|guide|procedure|page|section)\b.{0,40}\b(?:explains|describes|covers|sets out)",
    re.I,
)
_LIST_ITEM = re.compile(r"^(?:[-*+•]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"“(*])")


class _Candidate(NamedTuple):
    """A sentence that could answer a part; ordered as it appears in the results."""

    rank: int
    position: int
    text: str
    cite: str


def answer_from_results(results: Sequence[ToolResult]) -> str:
    """Compose the reply from this turn's tool results; never adds facts that are not in them."""
    tickets = [result for result in results if result.name == "create_it_ticket"]
    if tickets:
        return ticket_result_text(tickets[-1].payload)
    searches = [result for result in results if result.name == "search_policies" or "results" in result.payload]
    if searches:
        return _search_answer(searches)
    errors = [str(result.payload["error"]) for result in results if "error" in result.payload]
    if errors:
        return f"I couldn't complete that ({shorten(errors[0], 160)}), so I can't answer it from the policies."
    return NOT_IN_POLICY


def _search_answer(searches: Sequence[ToolResult]) -> str:
    found: list[str] = []
    missing: list[str] = []
    failures: list[str] = []
    for search in searches:
        query = str(search.arguments.get("query", "")).strip() or "that"
        passages = [p for p in search.payload.get("results") or () if isinstance(p, dict)]
        if "error" in search.payload:
            failures.append(str(search.payload["error"]))
        elif passages:
            found.append(_part_answer(query, passages, label=len(searches) > 1))
        else:
            missing.append(
                f'I couldn\'t find "{query.rstrip("?")}" in the policy documents, so it is not covered by the policy.'
            )
    if not found:
        return _nothing_found(failures, bool(missing))
    if len(found) == 1 and not missing:
        return found[0]
    return "\n".join(f"- {line}" for line in [*found, *missing])


def _nothing_found(failures: Sequence[str], searched: bool) -> str:
    if failures and not searched:
        return (
            f"I couldn't search the policy documents just now ({shorten(failures[0], 160)}), "
            "so I can't answer this from them."
        )
    return NOT_IN_POLICY


def _part_answer(query: str, passages: Sequence[dict[str, Any]], *, label: bool) -> str:
    """The 1-2 sentences of the top passages that share the most (rare) words with the query, cited."""
    candidates = [
        _Candidate(rank, position, unit, _cite(passage))
        for rank, passage in enumerate(passages[:2])
        for position, unit in enumerate(_units(passage))
    ]
    if not candidates:
        return f"The closest passage I found is [{_cite(passages[0])}], but I could not read it."
    scores = _overlap_scores(query, candidates)
    ranked = sorted(range(len(candidates)), key=lambda i: (-scores[i], candidates[i].rank, candidates[i].position))
    best = candidates[ranked[0]].text
    chosen = [ranked[0]]
    for index in ranked[1:]:
        if scores[index] >= scores[ranked[0]] / 2 > 0 and not _overlapping(candidates[index].text, best):
            chosen.append(index)
            break
    body = _with_cites(sorted(candidates[i] for i in chosen))
    words = content_words(query)
    quoted = content_words(" ".join(candidates[i].text for i in chosen))
    if len(words & quoted) * 2 < len(words):  # most of the question is not in the passage
        body = f"The closest passage I found: {body}"
    return f"**{_label(query)}** {body}" if label else body


def _overlapping(text: str, other: str) -> bool:
    """One already contains the other (a list item and the sentence that quotes its list)."""
    return text.rstrip(".;: ")[:80] in other or other.rstrip(".;: ")[:80] in text


def _overlap_scores(query: str, candidates: Sequence[_Candidate]) -> list[float]:
    """Query words found in each candidate, rare words weighing more; lower-ranked passages discounted."""
    words = content_words(query)
    found = [words & content_words(candidate.text) for candidate in candidates]
    frequency = Counter(word for shared in found for word in shared)
    weight = {word: math.log(1 + len(candidates) / count) for word, count in frequency.items()}
    return [
        sum(weight[word] for word in shared)
        * (1.0 if candidate.rank == 0 else 0.8)
        * (0.5 if _ABOUT_THE_DOCUMENT.match(candidate.text) else 1.0)
        for shared, candidate in zip(found, candidates, strict=True)
    ]


def _label(query: str) -> str:
    if query.endswith(("?", ".", ":")):
        return query
    return f"{query}?" if opens_like_question(query) else f"{query}:"


def _with_cites(chosen: Sequence[_Candidate]) -> str:
    out: list[str] = []
    for index, candidate in enumerate(chosen):
        out.append(candidate.text)
        if index + 1 == len(chosen) or chosen[index + 1].cite != candidate.cite:
            out.append(f"[{candidate.cite}]")
    return " ".join(out)


def _cite(passage: dict[str, Any]) -> str:
    if passage.get("cite"):
        return str(passage["cite"])
    named = " › ".join(str(passage[key]) for key in ("title", "heading") if passage.get(key))
    return named or str(passage.get("source") or "policy document")


def _units(passage: dict[str, Any]) -> list[str]:
    """Sentences, list items and table rows of a passage; a sentence ending in ":" carries its list."""
    units: list[str] = []
    lead: int | None = None  # the sentence that introduces the list being read
    for kind, block in _blocks(str(passage.get("text", "")), _cite(passage).lower()):
        if kind == "item":
            units.append(shorten(block, 300))
            if lead is not None and len(units[lead]) + len(block) < 400:
                head = units[lead]
                joiner = " " if head.endswith(":") else "; "
                units[lead] = head.removesuffix(".") + joiner + block.rstrip(";,. ") + "."
            else:
                lead = None  # the list is too long to quote whole: stop before it reads as complete
            continue
        sentences = [shorten(s, 300) for s in _SENTENCE_END.split(block) if content_words(s)]
        units.extend(sentences)
        lead = len(units) - 1 if kind == "text" and sentences and sentences[-1].endswith(":") else None
    return units


def _blocks(text: str, cite: str) -> Iterator[tuple[str, str]]:
    """("text", paragraph) | ("item", list item) | ("row", table row), without headings or rules."""
    lines = [line.strip() for line in text.splitlines()]
    paragraph: list[str] = []
    for index, line in enumerate(lines):
        item = _LIST_ITEM.match(line)
        if line and not item and not line.startswith("|") and not _is_rule(line) and not _is_heading(line, cite):
            paragraph.append(_plain(line))
            continue
        if paragraph:
            yield "text", " ".join(paragraph)
            paragraph = []
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if item:
            yield "item", _plain(line[item.end() :])
        elif line.startswith("|") and not _is_rule(line) and not _is_rule(following):  # a header precedes |---|
            yield "row", _table_row(line)
    if paragraph:
        yield "text", " ".join(paragraph)


def _is_rule(line: str) -> bool:
    return bool(line) and set(line) <= set("|-: ")


def _is_heading(line: str, cite: str) -> bool:
    """Markdown headings, and a heading-path line ("Policy > Section") that repeats the cite."""
    if line.startswith("#"):
        return True
    lowered = _plain(line).lower().replace(" > ", " › ").strip()
    if lowered == cite:
        return True
    if lowered.endswith((".", "!", "?", ":", ";")) or len(lowered) <= 3:
        return False
    return all(segment.strip() in cite for segment in lowered.split("›"))


def _table_row(line: str) -> str:
    cells = [_plain(cell).strip(" .") for cell in line.strip("|").split("|") if cell.strip(" .")]
    if len(cells) < 2:
        return "".join(cells)
    return f"{cells[0]}: {', '.join(cells[1:])}."


def _plain(text: str) -> str:
    return re.sub(r"\*\*|__|`", "", text).strip()
