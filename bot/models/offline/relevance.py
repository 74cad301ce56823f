"""Whether the best candidate found answers the question at all, or is only the least unrelated one.

"Is there parking at the Lisbon office?" finds the Lisbon office's evacuation point: close in words
and in meaning, yet nothing in the results says "parking" or anything meaning it. So a best candidate
that is not plainly on the point counts only if every word the question is about (leaving it out
changes what the question means) occurs in the results, or a word close to it in meaning does
("vacation": "holiday"). Otherwise the honest answer is that the policy does not cover it.

"Can I expense my home internet?" asks whether the company pays for home internet: "expense" is how
chat asks about money ("claim", "reimburse", "cover" too), not what the question is about, so it
counts as said wherever the results state what is paid (an amount, an allowance, a reimbursement).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from bot.models.offline.meaning import Meaning
from bot.models.offline.parts import AMOUNT_WORDS, Part, needs_context, points_back
from bot.models.offline.scoring import ASKING, Candidate, Scored
from bot.models.offline.text import GENERIC, content_tokens, stem

MIN_SCORE = 0.3  # a best candidate scoring below this answers nothing
MIN_MEANING = 0.35  # below this in meaning, and holding less than MIN_WORDS of the words, nothing answers
MIN_WORDS = 0.5
SURE_MEANING = 0.6  # this close in meaning is on the point whatever the words
SYNONYM = 0.55  # two words this close in meaning say the same thing ("vacation", "holiday")
SUBJECT = 0.12  # a word carrying this much of a question's meaning is part of what it asks about
STRONG_SCORE = 0.6  # a best candidate this good in words and meaning: words it says otherwise are not missing
# A problem report asks nothing: only a passage this close to it says what to do ("lost my YubiKey" finds the
# table of MFA methods at 0.47, which tells the person nothing); the ticket is proposed either way.
SELF_HELP_MEANING = 0.5
# Verbs chat asks "does the company pay for it?" with, as content_words stems them
_PAYING_STEMS = frozenset(stem(word) for word in ("expense", "claim", "reimburse", "refund", "cover", "covered"))
# What a passage says when it states what is paid: a currency amount, or the words for it
_STATES_PAYMENT = re.compile(
    r"[$€£]\s?\d|\d\s?(?:usd|eur|gbp|cad|aud)\b|\b(?:usd|eur|gbp|cad|aud)\s?\d"
    r"|\b(?:allowances?|stipends?|reimburs\w*|expens\w*|paid|pays?|budgets?|covers?|covered|refund\w*)\b",
    re.I,
)


def relevant(part: Part, ranked: Sequence[Scored], meaning: Meaning | None) -> bool:
    """Whether the best of ``ranked`` answers the part; without an embedding model, any shared word does."""
    best = ranked[0]
    if part.self_help and meaning is not None and max(s.meaning for s in ranked) < SELF_HELP_MEANING:
        return False  # (the best to quote may be a step less alike in words than the problem restated)
    if meaning is None:
        return best.words > 0
    if best.score < MIN_SCORE or (best.meaning < MIN_MEANING and best.words < MIN_WORDS):
        return False
    if best.meaning >= SURE_MEANING:
        return True
    return not _missing_subject(part, [s.candidate for s in ranked], meaning, strong=best.score >= STRONG_SCORE)


def _missing_subject(part: Part, candidates: Sequence[Candidate], meaning: Meaning, *, strong: bool) -> bool:
    """A word the question is about (leaving it out changes what it means) that no candidate says, in
    its own words or in a word close in meaning; "cap" and "maximum" ask for a figure, they name no
    subject, nor does a figure. Next to a ``strong`` best candidate, a word said in other words ("VA":
    "veterans") is not counted among those missing all at once: one word's closest neighbour is weak
    evidence ("sports": "teams"), unless the best candidate is on the point."""
    held = set().union(*(_tokens(candidate) for candidate in candidates))
    stems = {stem(word) for word in held}
    asked = f"{part.focus} {part.context}" if _asks_about_context(part) else part.focus
    asked_words = content_tokens(ASKING.sub(" ", asked)) - GENERIC - AMOUNT_WORDS
    absent = {word for word in asked_words if stem(word) not in stems and not _number(word)}
    if any(_STATES_PAYMENT.search(f"{c.unit.text} {c.unit.columns}") for c in candidates):
        absent = {word for word in absent if stem(word) not in _PAYING_STEMS}
    vocabulary = sorted(held - GENERIC)

    @functools.cache
    def said(words: tuple[str, ...]) -> bool:  # each word is looked up once, for its run alone and for `unsaid`
        return _said(" ".join(words), vocabulary, meaning)

    unsaid = {word for word in absent if not said((word,))} if strong else absent
    runs = _absent_runs(asked, absent, unsaid)
    return any(_weight_in(asked, words, meaning) >= SUBJECT and not said(words) for words in runs)


def _number(word: str) -> bool:
    """ "2" in "for 2 weeks" says how much of something, not what: no policy names every figure it allows."""
    return bool(re.fullmatch(r"\d+(?:[.,]\d+)?", word))


def _asks_about_context(part: Part) -> bool:
    """Whether the words the part is about include its context's: "is that paid?" asks about what "that"
    names, in the question or the situation before it ("got summoned for jury duty, is that paid?").
    "What do I do?" after a situation ("left my laptop on the train, what do I do?") asks what the policy
    says to do about it: where and when it happened is no subject the policy must name."""
    if not needs_context(part.focus):
        return False
    return points_back(part.focus) or part.context.rstrip().endswith("?")


def _absent_runs(question: str, absent: set[str], unsaid: set[str]) -> list[tuple[str, ...]]:
    """Each absent word alone, absent words written together, small words between them aside
    ("summoned for jury duty", "merit increase"), and all the ones no candidate says in other words at
    once ("a gym membership or a fitness allowance"): taking out one word of a name, or one of two
    names for the same thing, leaves most of the meaning, so alone none may weigh enough. Words
    scattered through the question that the candidates do say in other words ("VA": "veterans")
    name nothing together."""
    runs: list[tuple[str, ...]] = [(word,) for word in sorted(absent)]
    if len(unsaid) > 1:
        runs.append(tuple(sorted(unsaid)))
    current: list[str] = []
    for token in [*re.findall(r"[\w'’-]+", question.lower()), "."]:
        if token in absent:
            current.append(token)
        elif content_tokens(token) or token == ".":  # a word the results hold ends the run
            if len(current) > 1:
                runs.append(tuple(current))
            current = []
    return runs


def _said(words: str, vocabulary: list[str], meaning: Meaning) -> bool:
    """Whether a word close in meaning occurs among the candidates' words."""
    return max(meaning.similarities(words, vocabulary), default=0.0) >= SYNONYM


def _weight_in(question: str, words: tuple[str, ...], meaning: Meaning) -> float:
    """How much of the question's meaning words carry: 1 - cosine(question, question without them)."""
    without = question
    for word in words:
        without = re.sub(rf"\b{re.escape(word)}\b", " ", without, flags=re.I)
    return 1.0 - meaning.similarities(question, [without])[0]


def _tokens(candidate: Candidate) -> set[str]:
    return content_tokens(f"{candidate.unit.text} {candidate.unit.columns} {candidate.cite}")
