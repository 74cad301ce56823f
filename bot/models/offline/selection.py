"""Which of the scored units an answer quotes: the best, with what belongs to it, or up to two more that
score nearly as well.

On the handbooks' labelled questions the missing fact was most often in the searched passages, in a
sentence not quoted: one more unit at 0.85 of the best gave 43/94 and 34/89 accurate answers
(benchmarks/handbook_answers.py), up to two more at 0.7 gave 52/94 and 42/89 (test splits 13/31 to
15/31 and 12/29 to 15/29); 0.6 was no better.

A row is never quoted alone when its table's other rows answer as well (no guessing which band
applies), and an item brings the item next to it that completes it ("up to 3 days ... / from the 4th
day ...")."""

from __future__ import annotations

from collections.abc import Sequence

from bot.models.offline.scoring import Candidate, Scored

SECOND_UNIT = 0.7  # another unit is quoted when it scores this close to the best (two more at most)
TABLE_TIE = 0.9  # rows of a quoted row's table scoring this close are quoted with it
TABLE_CHARS = 900  # ... when they fit in this many characters
LIST_NEIGHBOUR = 0.6  # the item next to a quoted item is quoted with it when it scores this much of it
NEXT_SENTENCE = 0.6  # the sentence after a lone quoted sentence, when it scores this much of it


def chosen(ranked: Sequence[Scored]) -> list[Candidate]:
    """The units to quote, best first in ``ranked``, returned in reading order."""
    best = ranked[0]
    picked = _with_its_group(best, ranked)
    if len(picked) == 1:
        second = next((other for other in ranked[1:] if _may_join(other, best, picked)), None)
        if second is not None:
            picked += _with_its_group(second, ranked)
            third = next((s for s in ranked[1:] if s is not second and _may_join(s, best, picked)), None)
            if third is not None and len(picked) == 2:  # a rule and its figure are often two sentences apart
                picked += [third.candidate]
        else:
            picked += _next_sentence(best, ranked)
    return sorted(dict.fromkeys(picked), key=lambda candidate: candidate.order)


def _next_sentence(best: Scored, ranked: Sequence[Scored]) -> list[Candidate]:
    """The sentence that follows a lone best sentence in its passage, when it is on the point too: a
    rule's figure or condition is often in the sentence after the one that names it."""
    unit = best.candidate.unit
    if unit.table is not None or unit.items is not None:
        return []
    following = (
        s
        for s in ranked
        if s.candidate.passage == best.candidate.passage
        and s.candidate.unit.position == unit.position + 1
        and s.candidate.unit.table is None
        and s.candidate.unit.items is None
    )
    after = next(following, None)
    if after is None or after.score < NEXT_SENTENCE * best.score or overlapping(after.candidate.unit.text, unit.text):
        return []
    return [after.candidate]


def _may_join(other: Scored, best: Scored, picked: Sequence[Candidate]) -> bool:
    if other.score < SECOND_UNIT * best.score:
        return False
    text = other.candidate.unit.text
    return not any(_same_table(other.candidate, c) or overlapping(text, c.unit.text) for c in picked)


def _with_its_group(top: Scored, ranked: Sequence[Scored]) -> list[Candidate]:
    """A row with its table's rows that score as well; an item with its neighbour that completes it."""
    unit = top.candidate.unit
    if unit.table is not None:
        tied = [s for s in ranked if _same_table(s.candidate, top.candidate) and s.score >= TABLE_TIE * top.score]
        rows = [s.candidate for s in tied]
        if sum(len(row.unit.text) for row in rows) <= TABLE_CHARS:
            return sorted(rows, key=lambda row: row.order)
    if unit.items is not None:
        near = [
            s.candidate
            for s in ranked
            if _same_list(s.candidate, top.candidate)
            and abs(s.candidate.unit.position - unit.position) == 1
            and s.score >= LIST_NEIGHBOUR * top.score
        ]
        return [top.candidate, *near[:1]]
    return [top.candidate]


def _same_table(one: Candidate, other: Candidate) -> bool:
    return one.unit.table is not None and one.passage == other.passage and one.unit.table == other.unit.table


def _same_list(one: Candidate, other: Candidate) -> bool:
    return one.unit.items is not None and one.passage == other.passage and one.unit.items == other.unit.items


def overlapping(text: str, other: str) -> bool:
    """One already contains the other (a list item and the sentence that quotes its list)."""
    return text.rstrip(".;: ")[:80] in other or other.rstrip(".;: ")[:80] in text
