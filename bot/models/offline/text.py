"""Text helpers the offline model's planning, answers and summaries share: word overlap and bounded text."""

from __future__ import annotations

import re
from collections.abc import Iterable

_STOPWORD_TEXT = """
a about above after again all also am an and any are as at be been before being below between
both but by can could did do does doing don down during each few for from further get got had
has have having he her here hers him his how i if in into is it its itself just me more most my
myself no nor not now of off on once only or other our ours out over own please same she should
so some such than that the their theirs them then there these they this those through to too
under until up very want was we were what when where which while who whom whose why will with
would you your yours company policy policies tell know need must may might shall
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# Words too general to be what a question is about: weak evidence when shared, no proof when missing.
_GENERIC_TEXT = """
couple bit lot lots thing things stuff whatever lol big small little take taking give put follow
build built wrong right good bad best ok okay way kind sort type one ones actually even really
just still like any some ask let make new old use using go going come back day days week weeks
month months year years time times people person someone anyone work working job
gonna wanna gotta kinda sorta ugh supposed anything everything everyone everybody somebody around
since yesterday morning afternoon evening recently lately earlier
"""
GENERIC = frozenset(_GENERIC_TEXT.split())
_WORD = re.compile(r"[a-z]{1,6}(?:-[a-z]{1,6})*-\d+[a-z]?\b|[a-z0-9€$£]+(?:['’][a-z]+)?")  # "ng-809" is one word
_CONTRACTION = re.compile(r"'(?:s|m|re|ve|ll|d)$|n't$")
# Chat shorthand the policies spell out: searched as written, "WFH" finds nothing about working from home.
_CHAT_WORDS = {
    "wfh": "work from home",
    "ppl": "people",
    "yrs": "years",
    "yr": "year",
    "hrs": "hours",
    "mins": "minutes",
    "mat leave": "maternity leave",
    "pat leave": "paternity leave",
    "pls": "please",
    "plz": "please",
    "im": "i'm",
    "ive": "i've",
    "dont": "don't",
    "cant": "can't",
    "wont": "won't",
    "doesnt": "doesn't",
    "isnt": "isn't",
    "didnt": "didn't",
    "whats": "what's",
    "thx": "thanks",
    "acct": "account",
    "cal": "calendar",
    "conf": "conference",
    "perf": "performance",
    "mgr": "manager",
    "b4": "before",
    "bc": "because",
    "every1": "everyone",
    "u": "you",
    "r": "are",
    "ur": "your",
    "w/": "with",
    "w/o": "without",
    "mtg": "meeting",
    "abt": "about",
    "govt": "government",
    "wk": "week",
    "wks": "weeks",
    "tmrw": "tomorrow",
    "eng": "engineer",
    "engs": "engineers",
    "dept": "department",
    "mgmt": "management",
    "env": "environment",
    "db": "database",
    "repo": "repository",
    "msg": "message",
    "convo": "conversation",
    "appt": "appointment",
    "insta": "Instagram",
    "bf": "boyfriend",
    "gf": "girlfriend",
    "heads up": "notice",
    "heads-up": "notice",
    "chatgpt": "ChatGPT (a public AI chatbot)",
    # What chat calls paid time off and rides; policies say annual leave and taxi (as the search tool tells a model)
    "vacation days": "vacation days (annual leave)",  # "on vacation" is no question about entitlement
    "vacation time": "vacation time (annual leave)",
    "pto": "PTO (paid time off, annual leave)",
    "uber": "Uber (taxi or ride-hail)",
    "lyft": "Lyft (taxi or ride-hail)",
    "cab": "cab (taxi)",  # what most people call any AI chat tool; policies say "AI tools"
}
# A shorthand stands alone: "u" in "U.S.", "r" in "R&D" and "w/" in "a/w/b" are parts of names.
_CHAT_WORD = re.compile(
    r"(?<![\w/&.-])(?:"
    + "|".join(sorted(map(re.escape, _CHAT_WORDS), key=len, reverse=True))
    + r")(?![\w/&-]|\.\w)",
    re.I,
)


_ERROR_CODE = re.compile(r"\b[A-Z]{2,5}-\d{2,4}\b", re.I)


def error_codes(text: str) -> frozenset[str]:
    """The error or policy codes a text names ("NG-809"), upper-cased."""
    return frozenset(code.upper() for code in _ERROR_CODE.findall(text))


# An emoji, as a character or as Slack's :shortcode:, with its modifiers. Before a new sentence it ends the one
# before ("5 min ago 😬 what do i do?"); elsewhere it may be what is asked about ("reacting 👍 vs ✅"), so it stays.
_EMOJI = re.compile(
    r"\s*(?:[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF][\uFE0F\u200D\U0001F3FB-\U0001F3FF]*"
    r"|(?<![\w:]):[a-z][a-z0-9_+-]*:(?![\w:]))+",
    re.I,
)


def normalise_chat(text: str) -> str:
    """Chat shorthand written out ("wfh" -> "work from home", "wont" -> "won't"), an emoji read as the end of
    its sentence, the rest untouched."""
    text = text.replace("’", "'")
    if _EMOJI.search(text):
        text = _EMOJI.sub(_emoji_as_punctuation, text).strip()
    return _CHAT_WORD.sub(lambda match: _CHAT_WORDS[match[0].lower()], text)


_SENTENCE_START = re.compile(
    r"(?:what|when|where|which|who|how|why|can|could|do|does|did|is|are|should|will|would|may|i|i'm|im|my|we"
    r"|please|pls|any|anyone|also|help|need)\b",
    re.I,
)


def _emoji_as_punctuation(match: re.Match[str]) -> str:
    before, after = match.string[: match.start()].rstrip(), match.string[match.end() :].strip()
    if not before or not after:
        return ""  # opening or closing the message: nothing to read
    if not _SENTENCE_START.match(after):
        return match.group()
    return "" if before[-1] in ".!?,;:" else "."


def content_words(text: str) -> set[str]:
    """The stemmed words that carry meaning: what a question and a passage must share to match."""
    return {_stem(word) for word in content_tokens(text)}


def content_tokens(text: str) -> set[str]:
    """The words that carry meaning as written (lower case), "what's" and "I'm" not among them."""
    words = (_bare(word) for word in _WORD.findall(text.lower().replace("’", "'")))
    return {word for word in words if word not in _STOPWORDS and (len(word) > 1 or word.isdigit())}


def _bare(word: str) -> str:
    """ "what's" -> "what", "doesn't" -> "does", "can't" -> "can": the word a stopword list names."""
    return {"can't": "can", "won't": "will", "shan't": "shall"}.get(word) or _CONTRACTION.sub("", word)


def stem(word: str) -> str:
    """The form content_words keeps of a word."""
    return _stem(word)


def _stem(word: str) -> str:
    """Crude suffix folding so "expenses"/"expense" and "carried"/"carry" meet; enough for overlap."""
    word = re.sub(r"['’]s$", "", word)
    if not word.endswith("ss"):
        for suffix, replacement in (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("s", "")):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)] + replacement
                if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                    word = word[:-1]  # "submitting", "planned": "submit", "plan"
                break
    if word.endswith("ly") and len(word) >= 6:
        word = word[:-2]  # "nightly", "weekly", "annually": "night", "week", "annual"
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def unique(items: Iterable[str]) -> list[str]:
    """Non-empty items in first-seen order, ignoring case and a trailing "?", so a repeat is listed once."""
    seen: set[str] = set()
    kept = []
    for item in items:
        key = item.lower().rstrip("?")
        if item and key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


def shorten(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters, so quoted text fits a schema limit or a summary line."""
    text = " ".join(text.split())
    return bounded(text, limit)


def bounded(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a word and marked with "…" when anything was dropped."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return cut[: cut.rfind(" ")] + "…" if " " in cut else cut + "…"


GENERIC_STEMS = frozenset(_stem(word) for word in GENERIC)
