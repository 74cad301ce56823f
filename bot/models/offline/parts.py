"""What a message asks and what it reports: question parts to search (each with the context it needs)
and the problem clauses to ticket, so "back from leave, how many WFH days do I get, and my VPN keeps
dropping" is both answered and ticketed."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.models.offline.planning import (
    MAX_PARTS,
    MAX_QUERY,
    asks_for_ticket,
    asks_for_ticket_about_earlier,
    clean_question,
    is_problem_clause,
    is_problem_report,
    names_error_code,
    opens_like_question,
    split_question,
)
from bot.models.offline.text import GENERIC_STEMS, content_words, normalise_chat, shorten, stem

_CLAUSE = re.compile(
    r"(?<=[.!?])\s+|\s+-+\s+|;\s+|,\s+(?:and\s+|but\s+|also\s+|so\s+)?|\s+(?:and also|also|but)\s+", re.I
)
_AND_CLAUSE = re.compile(r"\s+and\s+(?=(?:my|our|the|i|i'm|it|it's|now)\b)", re.I)
_THERE = r"(?<!is )(?<!are )\bthere\b"  # "is there" asks whether something exists; "while I'm there" points back
_POINTING_THERE = re.compile(_THERE, re.I)
_BACK_REFERENCE = re.compile(rf"\b(?:it|its|it's|they|them|their|this|that|these|those|one)\b|{_THERE}", re.I)
_FOLLOW_UP_OPENER = re.compile(
    r"^(?:(?:ok(?:ay)?|so|right|cool|thanks|and)[,\s]+)*(?:and|what about|how about|what if|also|plus|or|for|after"
    r"|before|in|with|without)\b",
    re.I,
)
SELF_CONTAINED_WORDS = 3  # a question with this many content words and no "it"/"that" stands on its own


@dataclass(frozen=True)
class Part:
    """One question to answer: its own words (``focus``) and what it refers to: ``context`` before it
    (a statement, the problem it asks about, the question a follow-up continues) and ``aside``, what
    was said after it ("... in Madrid? I'm based in Lisbon")."""

    focus: str
    context: str = ""
    also_alone: bool = False  # searched with its context and on its own (the context may mislead)
    aside: str = ""
    follows: bool = False  # continues the previous question
    self_help: bool = False  # a problem report, searched for what the policy says to do about it

    @property
    def query(self) -> str:
        text = self.focus
        if self.context:
            joiner = " " if self.context.endswith((".", "?", "!", ":")) else ", "
            text = f"{self.context}{joiner}{text}"
        if self.aside:
            text = f"{text}{' ' if text.endswith(('?', '.', '!')) else ', '}{self.aside}"
        return shorten(text, MAX_QUERY)

    @property
    def around(self) -> str:
        """Everything said with the question but not the question itself."""
        return f"{self.context} {self.aside}".strip()

    @property
    def queries(self) -> list[str]:
        return [self.query, self.focus] if self.also_alone and self.focus != self.query else [self.query]

    @property
    def meaning_query(self) -> str:
        """What an answer must mean: the question alone when its context may mislead, else with it."""
        return self.focus if self.also_alone else self.query


@dataclass(frozen=True)
class Plan:
    """Question parts to search, and the problem clauses a ticket is about ("" when none)."""

    parts: tuple[Part, ...]
    problem: str = ""
    reported_before: bool = False  # the problem is the previous message's: "please raise a ticket for that"

    @property
    def self_help(self) -> bool:
        """Only the problem itself was searched: a report with no question of its own."""
        return any(part.self_help for part in self.parts)


@dataclass
class _Draft:
    """A question being read: its words and the statements written before and after it."""

    focus: str
    before: list[str]
    after: list[str]


def plan_message(message: str, previous: str = "") -> Plan:
    """Separate the problem a message reports from what it asks; ``previous`` is the user's last question."""
    cleaned = clean_question(normalise_chat(message))
    earlier = _separate(clean_question(normalise_chat(previous)))[0] if previous else ""
    if earlier and asks_for_ticket_about_earlier(cleaned):
        return Plan((), earlier, reported_before=True)
    problem, asked = _separate(cleaned)
    if problem and not asked:
        # "error NG-809 since this morning", "locked out of my laptop": what the policy says to do is looked up
        # and given beside the ticket, so a person who cancels it still has the self-service steps. Who asks
        # for a ticket in so many words gets it at once (unless an error code begs looking up).
        if asks_for_ticket(problem) and not names_error_code(problem):
            return Plan((), problem)
        return Plan((Part(problem, self_help=True),), problem)
    if problem and not content_words(asked):  # "..., what do I do?": the question is about the problem
        return Plan((Part(asked, problem),), problem)
    return Plan(tuple(_parts(asked, previous, problem)), problem)


def stands_alone(question: str) -> bool:
    """A question that needs nothing before it: enough words of its own and no "it" or "that"."""
    return len(content_words(question)) >= SELF_CONTAINED_WORDS and not needs_context(question)


def needs_context(question: str) -> bool:
    """ "How long till it unlocks?", "what now?": it points back, or says too little alone."""
    return points_back(question) or len(content_words(question)) < 2


def points_back(question: str) -> bool:
    """ "Is that paid?": it names what it asks about with "it", "that", "there"."""
    return bool(_BACK_REFERENCE.search(question))


def _separate(cleaned: str) -> tuple[str, str]:
    """(the problem clauses, the rest of the message); a message that asks nothing is all problem."""
    clauses = [clause.strip(" ,.;-") for clause in _clauses(cleaned)]
    problems = [clause for clause in clauses if clause and is_problem_clause(clause)]
    if not any(is_problem_report(clause) for clause in problems):  # "help me with my expense claim" reports nothing
        return "", cleaned
    rest = [clause for clause in clauses if clause and clause not in problems]
    if not any(_asks(clause) for clause in rest):
        return cleaned, ""  # statements around a problem ("NG-809 on the hotel wifi", "it's urgent") are the report
    return ", ".join(problems), ", ".join(rest)


def _clauses(cleaned: str) -> list[str]:
    """Clauses at punctuation, and at "and" when what follows is a problem of its own ("..., and my VPN
    keeps dropping"), not more of the same ("lost my laptop and my yubikey")."""
    clauses: list[str] = []
    for piece in _CLAUSE.split(cleaned):
        head, *tails = _AND_CLAUSE.split(piece)
        for tail in tails:
            if is_problem_clause(tail):
                clauses.append(head)
                head = tail
            else:
                head = f"{head} and {tail}"
        clauses.append(head)
    return clauses


def _asks(text: str) -> bool:
    return opens_like_question(text) or text.rstrip().endswith("?")


def _parts(asked: str, previous: str, problem: str) -> list[Part]:
    """The parts of a question, each given the context it needs: statements written beside it, the
    previous question for a lone follow-up, the part before it for a part saying "it", for a later
    part with none of these the situation told before the first question, and failing that the part
    before it, searched alone as well: a later part most often continues the one before ("how do I
    donate leave? which agency do I pick in the system?"), yet may not ("... am I eligible for the gym
    allowance?"). That took the 18F train rows from 51/63 to 52/63 (two gained, one lost) and left
    Sourcegraph as it was (benchmarks/handbook_answers.py)."""
    drafts = _drafts(asked)
    if not drafts:  # statements only ("forgot my badge at home"): searched as written
        return [Part(shorten(asked, MAX_QUERY))]
    if len(drafts) == 1 and previous and _follows_up(drafts[0].focus):
        last = clean_question(normalise_chat(previous)).rstrip(" .?!") + "?"
        draft = drafts[0]
        own = _topic_of_its_own(draft.focus)  # a new topic: the sections just cited are no likelier answers
        context = _joined([last, *draft.before])
        return [Part(draft.focus, context, also_alone=own, aside=_joined(draft.after), follows=not own)]
    parts: list[Part] = []
    situation = _joined(drafts[0].before)  # told before the first question: what the whole message is about
    for index, draft in enumerate(drafts):
        context, aside = _joined(draft.before), _joined(draft.after)
        if context or aside:  # written with the question: keep it, and try once without it (it may mislead)
            alone = stands_alone(draft.focus) and len(drafts) == 1
            parts.append(Part(draft.focus, context, also_alone=alone, aside=aside))
        elif (needs_context(draft.focus) or (index and names_no_topic(draft.focus))) and (index or problem):
            before = parts[index - 1] if index else Part(problem)
            # "how much per diem do I get there?" points back to the place told; "do I need receipts?" after
            # "how do I claim the phone stipend?" and "ok to skip them on busy weeks?" after "how often should
            # I do 1:1s?" continue the question before it.
            said = before.context if _points_back_to_place(draft.focus) else _joined([before.context, before.focus])
            parts.append(Part(draft.focus, said or before.focus))
        elif index and situation:  # "need captions for a meeting - how early do I ask, and are we billed?"
            parts.append(Part(draft.focus, situation))
        elif index:  # "... which agency do I pick in the system?" most likely continues the question before it
            before = parts[index - 1]
            parts.append(Part(draft.focus, _joined([before.context, before.focus]), also_alone=True))
        else:
            parts.append(Part(draft.focus))
    return parts[:MAX_PARTS]


# Words asking for an amount: "what's the cap on hotels?" asks for a figure, its topic is hotels.
AMOUNT_WORDS = frozenset(
    {"max", "maximum", "min", "minimum", "limit", "limits", "cap", "caps", "ceiling", "many", "much", "long", "often"}
    | {"per"}
    | {"deadline", "deadlines", "cutoff", "cutoffs"}  # a limit in time: "what's the cutoff?" names no topic
)
# Conditions on whatever is asked about: "am I eligible if I only started 2 months ago?"
_CONDITION_WORDS = frozenset(
    {"eligible", "eligibility", "qualify", "entitled", "allowed", "permitted", "required", "expected", "mandatory"}
    | {"start", "join", "ago"}  # stems: "started", "joined" too
)
_NO_TOPIC_STEMS = frozenset(stem(word) for word in AMOUNT_WORDS | _CONDITION_WORDS)


def names_no_topic(question: str) -> bool:
    """ "What's the max days per year?" after "can I work from Brazil?", "am I eligible if I only started
    2 months ago?" after "how many weeks of parental leave?": only amounts, conditions and everyday
    words, so it asks about the topic of the question before it."""
    words = content_words(question) - GENERIC_STEMS - _NO_TOPIC_STEMS
    return all(word.isdigit() for word in words)


def _drafts(asked: str) -> list[_Draft]:
    """The questions of a message with the statements around them: one before the first question is
    its context, one after a question is said about it."""
    drafts: list[_Draft] = []
    pending: list[str] = []  # statements before any question
    for piece in split_question(asked):
        lead, focus = _lead(piece)
        if _asks(focus):
            drafts.append(_Draft(focus, [*pending, lead] if lead else pending, []))
            pending = []
        elif drafts:
            drafts[-1].after.append(focus)
        else:
            pending.append(focus)
    return drafts


def _joined(context: list[str]) -> str:
    """Statements and questions as one text, each but the last closed with a full stop."""
    items = [item for item in context if item]
    closed = [item if item.endswith(("?", ".", "!")) else f"{item}." for item in items[:-1]]
    return " ".join([*closed, *items[-1:]])


def _topic_of_its_own(question: str) -> bool:
    """ "How do I book a desk there?" after "office hours in Lisbon?": it names what it asks about and points
    back only to a place, so it is searched alone as well and read by its own meaning (read with the question
    before it, the opening hours were its answer). "Is that paid?" and "and after 5 years?" are not."""
    if _FOLLOW_UP_OPENER.match(question) or not _points_back_to_place(question):
        return False
    return len(content_words(question) - GENERIC_STEMS - _NO_TOPIC_STEMS) >= 2


def _points_back_to_place(question: str) -> bool:
    """ "What per diem do I get there?": "there" is its only pointer, so it names a place told, not a topic."""
    return bool(_POINTING_THERE.search(question)) and not _BACK_REFERENCE.search(_POINTING_THERE.sub(" ", question))


def _follows_up(question: str) -> bool:
    """ "and after 5 years?", "how often does it get replaced?": it continues the previous question."""
    return bool(_FOLLOW_UP_OPENER.match(question)) or needs_context(question)


def _lead(piece: str) -> tuple[str, str]:
    """(the statements before the question, the question): "flying to Toronto, what class can I book?"."""
    clauses = [clause for clause in re.split(r",\s+|\s+-+\s+|(?<=[.!])\s+", piece) if clause.strip()]
    for index, clause in enumerate(clauses):
        if index and opens_like_question(clause):
            return ", ".join(clauses[:index]), ", ".join(clauses[index:])
    return "", piece
