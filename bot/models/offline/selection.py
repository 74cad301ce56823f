"""Which of the scored units an answer quotes: the best with its neighbours in its passage, and up to
three more units that score nearly as well.

On the handbooks' labelled questions the missing fact was most often in the searched passages, next
to the sentence quoted: a rule's figure or condition is in the sentence after it, an FAQ's answer
after its question. Quoting the best unit with its neighbours in reading order (the better-scoring
side first) up to 600 characters, plus up to two more units at 0.7 of it, took the train rows from
39/63 and 27/60 accurate (isolated units: the best plus up to two more at 0.7) to 45/63 and 33/60
(benchmarks/handbook_answers.py; answer steps replayed); one more unit instead of two gave 43 and 31,
400 characters about 2 fewer, 800 at most 1 more with answers a third longer, a 300-character window
around the extra unit nothing, and requiring each neighbour to score 0.3 of the best lost 3 on
Sourcegraph. Anchoring on the search's first passage when its best unit scores at least 0.8 of the
best overall added one (the search ranks passages on more than one sentence); 0.6 and 0.9 were no
better in total. The window stops at a table (a row's neighbours are other bands) and at link labels
run together. Once an item no longer ended the answer (below), up to three more units instead of two
took the train rows from 47/63 to 48/63 and left 36/60 as it was, answers 5% longer on average
(median unchanged).

A row is never quoted alone when its table's other rows answer as well (no guessing which band
applies), unless the question names a code the row holds ("NG-412": the other codes' rows are not
its answer however alike they read), and an item brings the item next to it that completes it
("up to 3 days ... / from the 4th day ..."). Rows that all answer are the whole answer; an item and
its neighbour are not, so a unit from another section scoring as well still joins them ("how many
WFH days do I get?": the work models as well as the working-from-abroad limit), which took the
Sourcegraph train rows from 35/60 to 36/60 and changed nothing else (benchmarks/handbook_answers.py)."""

from __future__ import annotations

from collections.abc import Sequence

from bot.models.offline.scoring import Candidate, Scored, is_label
from bot.models.offline.text import error_codes

SECOND_UNIT = 0.7  # another unit, from anywhere, is quoted when it scores this close to the anchor
MORE_UNITS = 3  # ... three at most
FIRST_PASSAGE = 0.8  # the first passage's best unit anchors the answer when it scores this much of the best
WINDOW_CHARS = 600  # the anchor is quoted with its neighbours in reading order up to this many characters
TABLE_TIE = 0.9  # rows of a quoted row's table scoring this close are quoted with it
TABLE_CHARS = 900  # ... when they fit in this many characters
LIST_NEIGHBOUR = 0.6  # the item next to a quoted item is quoted with it when it scores this much of it


def chosen(ranked: Sequence[Scored], codes: frozenset[str] = frozenset(), more: int = MORE_UNITS) -> list[Candidate]:
    """The units to quote, best first in ``ranked``, returned in reading order; ``codes``: the ones the
    question names; ``more``: how many units that score nearly as well may join the anchor."""
    anchor = _anchor(ranked)
    group = _with_its_group(anchor, ranked, codes)
    picked = _window(anchor, ranked, group)
    if len(group) > 1 and anchor.candidate.unit.table is not None:  # rows that all answer are the answer
        return sorted(dict.fromkeys(picked), key=lambda candidate: candidate.order)
    for _ in range(more):
        second = next((other for other in ranked if _may_join(other, anchor, picked)), None)
        if second is None:
            break
        picked += _with_its_group(second, ranked, codes)
    return sorted(dict.fromkeys(_with_leads(picked, ranked)), key=lambda candidate: candidate.order)


def _with_leads(picked: Sequence[Candidate], ranked: Sequence[Scored]) -> list[Candidate]:
    """Each item quoted as part of the sentence that leads its list, where that sentence carries it ("The
    button: sends a copy ...; removes the email ..."): items alone read as a run-on with no subject."""
    return [next((s.candidate for s in ranked if _leads(s.candidate, item)), item) for item in picked]


def in_led_list(unit: Candidate, candidates: Sequence[Candidate]) -> bool:
    """Whether a unit is a list's lead quoting its items ("Inform your manager: ...; ...") or one of them."""
    return unit.unit.lead is not None or any(_leads(unit, other) for other in candidates)


def _leads(lead: Candidate, item: Candidate) -> bool:
    return item.unit.lead == lead.unit.position and lead.passage == item.passage


def _anchor(ranked: Sequence[Scored]) -> Scored:
    """The best unit of the first passage read (the search's best) when it is nearly the best unit."""
    first = min(s.candidate.passage for s in ranked)
    top = next(s for s in ranked if s.candidate.passage == first)
    return top if top.score >= FIRST_PASSAGE * ranked[0].score else ranked[0]


def _window(anchor: Scored, ranked: Sequence[Scored], picked: list[Candidate]) -> list[Candidate]:
    """``picked`` grown by the sentences and items next to it in the anchor's passage, the better-scoring
    side first, while the whole fits in WINDOW_CHARS; a table or a run of link labels ends it."""
    if anchor.candidate.unit.table is not None:
        return picked  # a row brings the rows that answer as well, not the ones beside it (another band)
    around = {
        s.candidate.unit.position: s
        for s in ranked
        if s.candidate.passage == anchor.candidate.passage
        and s.candidate.unit.table is None
        and not is_label(s.candidate)
    }
    positions = [c.unit.position for c in picked if c.passage == anchor.candidate.passage]
    low, high = min(positions), max(positions)
    used = sum(len(c.unit.text) for c in picked)
    while True:
        sides = [around[p] for p in (high + 1, low - 1) if p in around]
        fitting = [s for s in sides if used + len(s.candidate.unit.text) <= WINDOW_CHARS or _repeats(s, picked)]
        if not fitting:
            return picked
        take = max(fitting, key=lambda s: s.score)
        if not _repeats(take, picked):  # an item the quoted sentence already lists is passed over
            picked = [*picked, take.candidate]
            used += len(take.candidate.unit.text)
        low, high = min(low, take.candidate.unit.position), max(high, take.candidate.unit.position)


def _repeats(unit: Scored, picked: Sequence[Candidate]) -> bool:
    return any(overlapping(unit.candidate.unit.text, c.unit.text) for c in picked)


def _may_join(other: Scored, best: Scored, picked: Sequence[Candidate]) -> bool:
    if other.score < SECOND_UNIT * best.score:
        return False
    text = other.candidate.unit.text
    return not any(_same_table(other.candidate, c) or overlapping(text, c.unit.text) for c in picked)


def _with_its_group(top: Scored, ranked: Sequence[Scored], codes: frozenset[str]) -> list[Candidate]:
    """A row with its table's rows that score as well (the rows naming the question's code, when it
    names one); an item with its neighbour that completes it."""
    unit = top.candidate.unit
    if unit.table is not None:
        tied = [s for s in ranked if _same_table(s.candidate, top.candidate) and s.score >= TABLE_TIE * top.score]
        if codes & error_codes(unit.text):
            tied = [s for s in tied if codes & error_codes(s.candidate.unit.text)]
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
