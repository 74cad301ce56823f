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
would you your yours company policy policies tell know need
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"[a-z0-9€$£]+(?:['’][a-z]+)?")


def content_words(text: str) -> set[str]:
    """The stemmed words that carry meaning: what a question and a passage must share to match."""
    return {_stem(word) for word in _WORD.findall(text.lower()) if word not in _STOPWORDS and len(word) > 1}


def _stem(word: str) -> str:
    """Crude suffix folding so "expenses"/"expense" and "carried"/"carry" meet; enough for overlap."""
    word = re.sub(r"['’]s$", "", word)
    if not word.endswith("ss"):
        for suffix, replacement in (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("s", "")):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)] + replacement
                break
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
