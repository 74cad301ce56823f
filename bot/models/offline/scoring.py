"""How well each sentence, item and row of the search results answers a question part.

A candidate scores by the question's words it holds (rare ones weigh more, the question's own words
more than its context's, a row holds its column names, the headings above it count half) plus its
meaning: the best cosine of the bundled sentence embedding between the question and the unit read
alone, under its heading, or, for a row, under its value columns ("Annual leave days per year: Less
than 2 years: 23 days"). The search's own score and rank weigh in; a question asking "how long" or
"how many" discounts candidates that state no number, and a problem report ("my laptop was stolen")
candidates that repeat its words and give nothing to do.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bot.models.offline.meaning import Meaning
from bot.models.offline.parts import Part, needs_context
from bot.models.offline.text import GENERIC_STEMS, content_words
from bot.models.offline.units import Unit

WORDS_WEIGHT = 0.5  # shared words (0-1, share of the question's weight found) against meaning (cosine)
CONTEXT_WEIGHT = 0.5  # a context word counts this much of a question word
HEADING_WEIGHT = 0.5  # a word in the headings above a candidate counts this much of one in it
NO_AMOUNT = 0.6  # "how long must it be?": a candidate stating no number or duration rarely answers it
NO_STEP = 0.6  # "my laptop was stolen": a candidate in its words saying nothing to do only restates the problem
RESTATES = 0.3  # ... holding this share of the problem's word weight (a cause in other words still helps)
RANK_DISCOUNT = 0.05  # per place a passage stands below the search's best
FOLLOW_UP = 1.15  # a follow-up's candidate from a section the previous answer cited
GENERIC_WEIGHT = 0.5  # "new" in "new starters" matched by "new year" is weak evidence

_ABOUT_THE_DOCUMENT = re.compile(  # "This policy explains ..." restates the question without answering it
    r"^this (?:policy|standard|document|guide|procedure|page|section)\b.{0,40}\b(?:explains|describes|covers|sets out)",
    re.I,
)
_METADATA = re.compile(r"^(?:policy number|owner|last reviewed|applies to)\s*:", re.I)
_ASKS_AMOUNT = re.compile(
    r"\bhow (?:many|much|long|often|far|fast|quickly|soon|big|old)\b|\bwhen\b|\bwhat time\b|\bby when\b|\bdeadline"
    r"|\blatest\b|\bcut-?off\b|\bmax(?:imum)?\b|\bmin(?:imum)?\b|\blimit\b|\bnumber\b|\bphone\b"
    r"|\bper (?:night|day|head|person)",
    re.I,
)
_ANSWER_WORDS = tuple(
    (re.compile(pattern, re.I), words)
    for pattern, words in (
        (r"\bhow long\b", "length duration"),
        (r"\bhow (?:many|much)\b", "number amount"),
        (r"\bhow often\b", "every frequency"),
        (r"\bhow (?:fast|quickly|soon)\b|\bwhen\b|\bby when\b", "within time date"),
    )
)
# Something to do: an instruction opening the sentence or a clause ("If it was stolen, report the theft ...",
# "Speed matters: report it ..."), or what the reader must or should do.
_INSTRUCTS = re.compile(
    r"(?:^|[,:;]\s+)(?:please\s+|then\s+|also\s+|first,?\s+)?(?:do not\s+|don't\s+|never\s+|always\s+)?"
    r"(?:report|call|raise|contact|tell|email|phone|sign|choose|select|click|tap|restart|reboot|try|turn|open|go"
    r"|use|check|follow|change|reset|ask|submit|send|return|bring|lock|make sure|ensure|visit|log|install|update"
    r"|disconnect|reconnect|unplug|connect|enter|type|press|wait|request|upload|book|file|keep|take|move|remove"
    r"|delete|forward|mark|block|close|quit|clear|share|let|notify|inform|get|give|leave|stop|switch)\b"
    r"|\byou (?:must|should|need to|have to|can|may)\b",
    re.I,
)
ASKING = re.compile(r"\bhow (?:many|much|long|often|far|fast|quickly|soon|big|old)\b", re.I)
_STATES_AMOUNT = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|twenty|thirty|half|once|twice)\b",
    re.I,
)


@dataclass(frozen=True)
class Candidate:
    """A unit of one passage of one search; ``rank`` is its passage's place in that search."""

    unit: Unit
    cite: str
    rank: int
    order: int  # where it was read: passages in search order, units in passage order
    passage_score: float = 1.0  # the search's fused score of the passage, 0-1
    passage: int = 0  # which of the passages read it comes from

    @property
    def heading(self) -> str:
        return self.cite.rsplit("›", 1)[-1].strip()

    @property
    def document(self) -> str:
        """The title of the document it is from: the cite's first part ("IT Equipment Policy › ...")."""
        return self.cite.split("›", 1)[0].strip()

    def readings(self) -> list[str]:
        """The unit as a reader takes it: alone, under its heading, and a row under its value columns
        ("Annual leave days per year: Less than 2 years: 23 days")."""
        texts = [self.unit.text, f"{self.heading}: {self.unit.text}"]
        values = self.unit.columns.split(" / ")[1:]
        return [*texts, f"{' / '.join(values)}: {self.unit.text}"] if values else texts


@dataclass(frozen=True)
class Scored:
    candidate: Candidate
    score: float
    words: float  # share of the question's word weight found, 0-1
    meaning: float  # cosine, or 0 without an embedding model


def is_label(candidate: Candidate) -> bool:
    """Link texts or headings run together ("Leave Year Beginning and Ending Dates"): no sentence to quote
    (a row's cells may all be names, so a row never is one)."""
    return candidate.unit.table is None and _is_label(candidate.unit.text)


def score(
    part: Part, candidates: Sequence[Candidate], meaning: Meaning | None, cited: frozenset[str] = frozenset()
) -> list[Scored]:
    """Every candidate's evidence for the part, in candidate order; a follow-up ("and after 5 years?")
    leans to the sections the previous answer ``cited``: it most likely continues them."""
    words = _word_scores(part, candidates)
    cosines = _meanings(part, candidates, meaning) if meaning else [0.0] * len(words)
    wants_amount = bool(_ASKS_AMOUNT.search(part.focus))
    scored = []
    for candidate, shared, cosine in zip(candidates, words, cosines, strict=True):
        value = (WORDS_WEIGHT * shared + cosine) * _discount(candidate)
        value *= FOLLOW_UP if part.follows and candidate.cite in cited else 1.0
        if wants_amount and not _STATES_AMOUNT.search(candidate.unit.text):
            value *= NO_AMOUNT
        if part.self_help and shared >= RESTATES and not _INSTRUCTS.search(candidate.unit.text):
            value *= NO_STEP
        scored.append(Scored(candidate, value, shared, cosine))
    return scored


def _meanings(part: Part, candidates: Sequence[Candidate], meaning: Meaning) -> list[float]:
    """Each candidate's closest reading to the question; a question written with context ("I'm a designer
    going fully remote in Canada. What laptop do I get?") is read with it and alone, half each: the
    context says which row applies, the question what it must say. A question that says nothing
    alone ("left my laptop in a taxi, what do I do?") is read with its context only."""
    readings = [candidate.readings() for candidate in candidates]
    texts = [text for texts in readings for text in texts]
    flat = meaning.similarities(part.meaning_query, texts)
    if part.meaning_query != part.focus and not needs_context(part.focus):
        alone = meaning.similarities(part.focus, texts)
        flat = [(with_context + by_itself) / 2 for with_context, by_itself in zip(flat, alone, strict=True)]
    found, start = [], 0
    for texts_of_one in readings:
        found.append(max(flat[start : start + len(texts_of_one)]))
        start += len(texts_of_one)
    return found


def _is_label(text: str) -> bool:
    """ "Leave Year Beginning and Ending Dates Advanced Annual Leave": link texts or headings run
    together, no sentence: most words capitalised, no verb's full stop, no figure."""
    words = re.findall(r"[A-Za-z][\w'’-]*", text)
    if len(words) < 3 or re.search(r"[.!?;]\s*$|\d", text):
        return False
    capitalised = sum(word[0].isupper() for word in words if word.lower() not in _SMALL_WORDS)
    return bool(capitalised >= LABEL_SHARE * sum(word.lower() not in _SMALL_WORDS for word in words))


_SMALL_WORDS = frozenset(["a", "an", "and", "or", "of", "the", "to", "in", "on", "for", "with", "by", "at", "from"])
LABEL_SHARE = 0.8  # of the words that are not "and", "of", ...: capitalised, as in a title


def _discount(candidate: Candidate) -> float:
    """The search's own score for the passage (0-1, 1 for its best) and its rank are evidence too; a
    sentence about the document itself, or its metadata, restates the question rather than answering it."""
    factor = candidate.passage_score * (1.0 - RANK_DISCOUNT * min(candidate.rank, 4))
    text = candidate.unit.text
    if _ABOUT_THE_DOCUMENT.match(text) or _METADATA.match(text) or text.endswith(":") or is_label(candidate):
        factor *= 0.5  # ... and "you must:" without its list promises what it does not say
    return factor


def _word_scores(part: Part, candidates: Sequence[Candidate]) -> list[float]:
    """Share of the part's word weight each candidate holds; a word rare among the candidates weighs
    more, and a word none of them holds weighs most (it is what they all miss). A row holds its
    columns' words; the headings above a candidate count half (they say what it is about)."""
    focus = question_words(part.focus)
    context = (question_words(part.around) | content_words(_answer_words(part.focus))) - focus
    weights = dict.fromkeys(context, CONTEXT_WEIGHT) | dict.fromkeys(focus, 1.0)
    weights = {word: weight * (GENERIC_WEIGHT if word in GENERIC_STEMS else 1.0) for word, weight in weights.items()}
    own = [content_words(f"{c.unit.text} {c.unit.columns}") for c in candidates]
    above = [content_words(c.cite) - words for c, words in zip(candidates, own, strict=True)]
    frequency = Counter(word for a, b in zip(own, above, strict=True) for word in a | b if word in weights)
    total = len(candidates) + 1
    rarity = {word: math.log(1 + total / (frequency[word] or 1)) for word in weights}
    common = min(rarity.values(), default=1.0)
    rarity |= {word: common for word in rarity if word in GENERIC_STEMS}  # rare here, common in English
    possible = sum(weights[word] * rarity[word] for word in weights) or 1.0
    return [
        (_held(words, weights, rarity) + HEADING_WEIGHT * _held(heading, weights, rarity)) / possible
        for words, heading in zip(own, above, strict=True)
    ]


def _held(words: set[str], weights: dict[str, float], rarity: dict[str, float]) -> float:
    return sum(weights[word] * rarity[word] for word in words if word in weights)


def _answer_words(question: str) -> str:
    """Words an answer to "how long ...?" uses ("length", "duration"), as the question's asking words."""
    return " ".join(words for pattern, words in _ANSWER_WORDS if pattern.search(question))


def question_words(text: str) -> set[str]:
    """The words of a question that name its subject: "how long" asks for an amount, it is no topic."""
    return content_words(ASKING.sub(" ", text))
