"""Composing the offline model's answer from tool results: quoted, cited sentences and nothing it did not read."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.models.offline.meaning import Meaning
from bot.models.offline.messages import ToolResult
from bot.models.offline.parts import Part
from bot.models.offline.planning import opens_like_question
from bot.models.offline.relevance import SELF_HELP_MEANING, relevant
from bot.models.offline.scoring import Candidate, Scored, score
from bot.models.offline.selection import MORE_UNITS, chosen, in_led_list, overlapping
from bot.models.offline.text import error_codes, shorten
from bot.models.offline.units import cite_of, passage_units
from bot.policy_tools import ticket_result_text

REFERENCED_UNITS = 8  # of a section another quoted sentence points to: its steps, not the whole of a long page
_SECTION_NAMED = re.compile(r"[\"“]([^\"“”\n]{4,80})[\"”]")
HELPDESK_OFFER = 'If you need a person, say "talk to the helpdesk" and I\'ll pass your question on.'
REPEAT_CHARS = 40  # a shorter unit ("Click Submit.") may well occur inside another without repeating it
NOT_IN_POLICY = (
    "That is not in the policy documents I can search, so I can't give you a policy answer on it. " + HELPDESK_OFFER
)


def answer_from_results(
    results: Sequence[ToolResult],
    parts: Sequence[Part] = (),
    meaning: Meaning | None = None,
    cited: frozenset[str] = frozenset(),
    room: int | None = None,
) -> str:
    """Compose the reply from this turn's tool results; never adds facts that are not in them.

    ``parts`` are the question parts the searches were made for (a part may have been searched twice);
    a search whose query is not one of theirs is answered as its own part. ``cited``: the sections
    the previous answer cited, which a follow-up most likely continues. ``room``: the characters the
    reply may take (the call's output allowance).
    """
    tickets = [result for result in results if result.name == "create_it_ticket"]
    searches = [result for result in results if result.name == "search_policies" or "results" in result.payload]
    ticket = ticket_result_text(tickets[-1].payload) if tickets else ""
    if searches:
        space = None if room is None else room - len(ticket) - 2 * bool(ticket)
        answer = _fitting_answer(searches, parts, meaning, cited, space)
        return f"{ticket}\n\n{answer}" if ticket else answer
    if ticket:
        return ticket
    errors = [str(result.payload["error"]) for result in results if "error" in result.payload]
    if errors:
        return f"I couldn't complete that ({shorten(errors[0], 160)}), so I can't answer it from the policies."
    return NOT_IN_POLICY


@dataclass
class _Reading:
    """What composing one answer knows beyond the results: meaning, earlier cites, what it quoted."""

    meaning: Meaning | None
    cited: frozenset[str]
    quoted: set[tuple[str, str]] = field(default_factory=set)  # each part answers with something new


def _grouped(searches: Sequence[ToolResult], parts: Sequence[Part]) -> list[tuple[Part, list[ToolResult]]]:
    """Searches by the part they were made for, in the order first searched."""
    by_query = {query: part for part in parts for query in part.queries}
    groups: dict[Part, list[ToolResult]] = {}
    for search in searches:
        query = str(search.arguments.get("query", "")).strip() or "that"
        groups.setdefault(by_query.get(query) or Part(query), []).append(search)
    return list(groups.items())


def _fitting_answer(
    searches: Sequence[ToolResult],
    parts: Sequence[Part],
    meaning: Meaning | None,
    cited: frozenset[str],
    room: int | None,
) -> str:
    """The answer with as many of the units that score nearly as well as fit in ``room`` characters.

    A reply cut at the output cap is a guess the agent gives up on (a helpdesk case for a question the
    policy answers), so a long multi-part answer drops its extra units first; the best units with
    their neighbours fit any allowance a deployment would set (three parts quote under 2,500 chars).
    """
    for more in range(MORE_UNITS, -1, -1):
        answer = _search_answer(searches, parts, _Reading(meaning, cited), more)
        if room is None or len(answer) <= room:
            break
    return answer


def _search_answer(searches: Sequence[ToolResult], parts: Sequence[Part], reading: _Reading, more: int) -> str:
    groups = _grouped(searches, parts)
    found: list[str] = []
    missing: list[str] = []
    failures: list[str] = []
    for part, group in groups:
        passages = [(rank, p) for s in group for rank, p in enumerate(_passages(s))]
        errors = [str(s.payload["error"]) for s in group if "error" in s.payload]
        answer = _part_answer(part, passages, reading, more, label=len(groups) > 1) if passages else None
        if answer:
            found.append(answer)
        elif errors and not passages:
            failures.append(errors[0])
        else:
            focus = part.focus.rstrip("?")
            missing.append(f'I couldn\'t find "{focus}" in the policy documents, so it is not covered by the policy.')
    if not found:
        return _nothing_found(failures, bool(missing))
    if len(found) == 1 and not missing:
        return found[0]
    lines = "\n".join(f"- {line}" for line in [*found, *missing])
    return f"{lines}\n\n{HELPDESK_OFFER}" if missing else lines


def _passages(search: ToolResult) -> list[dict[str, Any]]:
    return [passage for passage in search.payload.get("results") or () if isinstance(passage, dict)]


def _nothing_found(failures: Sequence[str], searched: bool) -> str:
    if failures and not searched:
        return (
            f"I couldn't search the policy documents just now ({shorten(failures[0], 160)}), "
            "so I can't answer this from them."
        )
    return NOT_IN_POLICY


def _part_answer(
    part: Part, passages: Sequence[tuple[int, dict[str, Any]]], reading: _Reading, more: int, *, label: bool
) -> str | None:
    """The best sentences, items or rows of the passages for one part, cited; None when none answers it."""
    candidates = _candidates(passages)
    if not candidates:
        return f"The closest passage I found is [{cite_of(passages[0][1])}], but I could not read it."
    scored = score(part, candidates, reading.meaning, reading.cited)
    ranked = sorted(scored, key=lambda s: (-s.score, s.candidate.order))
    if not relevant(part, ranked, reading.meaning):
        return None
    fresh = [s for s in ranked if not _quoted_before(s.candidate, reading.quoted)]  # another part quoted the rest
    if part.self_help and reading.meaning is not None:  # beside a ticket card, only what is about the problem
        fresh = [s for s in fresh if s.meaning >= SELF_HELP_MEANING] or fresh[:1]
        # and from the closest policy only: another's sentence is about another situation ("If your laptop was
        # due for refresh while you were away", from returning after parental leave, for "my laptop is broken")
        fresh = [s for s in fresh if s.candidate.document == fresh[0].candidate.document]
    # all of it quoted for another part already: its best sentence alone says which part of that answers this
    picked = chosen(fresh, error_codes(part.query), more) if fresh else [_best_sentence(ranked, candidates)]
    picked += _referenced(picked, candidates)
    reading.quoted.update(_key(candidate) for candidate in picked)
    body = _with_cites(picked)
    return f"**{_label(part.focus)}** {body}" if label else body


def _best_sentence(ranked: Sequence[Scored], candidates: Sequence[Candidate]) -> Candidate:
    """The best unit outside a list quoted under its lead: the list, or an item of it, repeats another part."""
    return next((s.candidate for s in ranked if not in_led_list(s.candidate, candidates)), ranked[0].candidate)


def _referenced(picked: Sequence[Candidate], candidates: Sequence[Candidate]) -> list[Candidate]:
    """The units of a section a picked unit sends the reader to, when the search found it ("Follow the steps in
    "Renewing an expired certificate" below"): without them the answer stops at the pointer."""
    named = {name.casefold() for candidate in picked for name in _SECTION_NAMED.findall(candidate.unit.text)}
    cited = {candidate.cite for candidate in picked}
    found: list[Candidate] = []
    for candidate in candidates:
        if candidate.heading.casefold() not in named or candidate.cite in cited:
            continue
        text = _letters(candidate.unit.text)
        if not any(overlapping(text, _letters(taken.unit.text)) for taken in found):  # a list and its items
            found.append(candidate)
    return found[:REFERENCED_UNITS]


def _key(candidate: Candidate) -> tuple[str, str]:
    return candidate.cite, candidate.unit.text


def _quoted_before(candidate: Candidate, quoted: set[tuple[str, str]]) -> bool:
    """Another part quoted it, alone or inside a sentence that carries it ("Inform your Manager: As a
    rule of thumb ..." is the item "As a rule of thumb ..." under its lead), whatever the punctuation."""
    if _key(candidate) in quoted:
        return True
    text = _letters(candidate.unit.text)
    if len(text) < REPEAT_CHARS and candidate.unit.lead is None:  # a short item is quoted with its lead
        return False
    return any(cite == candidate.cite and overlapping(text, _letters(other)) for cite, other in quoted)


def _letters(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _candidates(passages: Sequence[tuple[int, dict[str, Any]]]) -> list[Candidate]:
    """Units of every passage once (a part searched twice may find a passage twice), in reading order."""
    seen: set[tuple[str, str]] = set()
    candidates: list[Candidate] = []
    for rank, passage in passages:
        key = (cite_of(passage), str(passage.get("text", "")))
        if key in seen:
            continue
        seen.add(key)
        weight, units, start = _passage_score(passage), passage_units(passage), len(candidates)
        candidates += [Candidate(unit, key[0], rank, start + n, weight, len(seen)) for n, unit in enumerate(units)]
    return candidates


def _passage_score(passage: dict[str, Any]) -> float:
    """The search's score for a passage, 0-1; a result without one counts fully."""
    value = passage.get("score")
    return min(max(float(value), 0.0), 1.0) if isinstance(value, int | float) else 1.0


def _label(query: str) -> str:
    if query.endswith(("?", ".", ":")):
        return query
    return f"{query}?" if opens_like_question(query) else f"{query}:"


def _with_cites(chosen: Sequence[Candidate]) -> str:
    out: list[str] = []
    for index, candidate in enumerate(chosen):
        out.append(candidate.unit.text)
        if index + 1 == len(chosen) or chosen[index + 1].cite != candidate.cite:
            out.append(f"[{candidate.cite}]")
    return " ".join(out)
