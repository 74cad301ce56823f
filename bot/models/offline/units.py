"""A search passage as the units an answer may quote: sentences, list items (a lead sentence carries its
short list) and table rows, each whole, each labelled with its column headers so it reads on its own."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bot.models.offline.instructions import addresses_assistants
from bot.models.offline.text import content_words, shorten

UNIT_CHARS = 300  # a sentence or item longer than this is quoted shortened
ROW_CHARS = 600  # a table row is quoted whole up to this: half a row reads as complete and wrong
LEAD_CHARS = 700  # a sentence ending in ":" quotes its list when both fit in this
STEPS_CHARS = 900  # ... its numbered steps when they fit in this: half a procedure reads as all of it

_LIST_ITEM = re.compile(r"^(?:[-*+•]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"“(*])")


@dataclass(frozen=True)
class Unit:
    """One quotable piece of a passage; ``table`` numbers the table a row belongs to, whose column
    headers are ``columns`` (what a bare row such as "Less than 2 years: 23 days" counts), ``items``
    the list an item belongs to (None: not a row, not an item), and ``lead`` the position of the sentence
    introducing that list when it quotes the item too ("The button: sends a copy ...; removes ...")."""

    text: str
    position: int
    table: int | None = None
    columns: str = ""
    items: int | None = None
    lead: int | None = None


def passage_units(passage: dict[str, Any]) -> list[Unit]:
    """Sentences, list items and table rows of a passage; text addressed to assistants is left out."""
    texts: list[str] = []
    rows: dict[int, tuple[int, str]] = {}  # unit position -> (table, its column headers)
    items: dict[int, int] = {}  # unit position -> its list
    leads: dict[int, int] = {}  # item position -> the sentence quoting it with its list
    lead: int | None = None  # the sentence that introduces the list being read
    lists = 0
    for block in _blocks(str(passage.get("text", "")), cite_of(passage).lower()):
        if block.kind == "row":
            rows[len(texts)] = (block.table, block.columns)
            texts.append(block.text)
            lead = _extend_lead(texts, lead, block.text, row=True)
        elif block.kind == "item":
            lists += int(len(texts) - 1 not in items)  # a list starts after anything but an item
            first = len(texts)
            for sentence in _item_pieces(block.text):
                items[len(texts)] = lists
                texts.append(sentence)
            lead = _extend_lead(texts, lead, block.text, limit=STEPS_CHARS if block.numbered else LEAD_CHARS)
            if lead is not None:
                leads.update(dict.fromkeys(range(first, len(texts)), lead))
        else:
            sentences = _sentences(block.text)
            texts.extend(sentences)
            lead = len(texts) - 1 if sentences and sentences[-1].endswith(":") else None
    return [
        Unit(text, n, *rows[n]) if n in rows else Unit(text, n, items=items.get(n), lead=leads.get(n))
        for n, text in enumerate(texts)
    ]


def _item_pieces(item: str) -> list[str]:
    """An item as quoted: whole, or a long one (several sentences) as its sentences, so the one that
    answers is quoted whole rather than the item's first 300 characters ("... If this group is used
    for external communications, select Anyone on the web")."""
    return [item] if len(item) <= UNIT_CHARS else _sentences(item) or [shorten(item, UNIT_CHARS)]


def _sentences(text: str) -> list[str]:
    """A paragraph's sentences that say something, each quotable (shortened past UNIT_CHARS)."""
    return [shorten(sentence, UNIT_CHARS) for sentence in _SENTENCE_END.split(text) if content_words(sentence)]


def _extend_lead(
    texts: list[str], lead: int | None, item: str, *, row: bool = False, limit: int = LEAD_CHARS
) -> int | None:
    """Append an item or row to the sentence introducing its list or table, while the whole still fits."""
    if lead is None or len(texts[lead]) + len(item) >= limit:
        return None  # the list is too long to quote whole: stop before it reads as complete
    head = texts[lead]
    if row:
        texts[lead] = f"{head} {item}"
        return lead
    joiner = " " if head.endswith(":") else "; "
    texts[lead] = head.removesuffix(".") + joiner + item.rstrip(";,. ") + "."
    return lead


def cite_of(passage: dict[str, Any]) -> str:
    """The passage's cite as the search tool gives it, else its title and heading."""
    if passage.get("cite"):
        return str(passage["cite"])
    named = " › ".join(str(passage[key]) for key in ("title", "heading") if passage.get(key))
    return named or str(passage.get("source") or "policy document")


@dataclass(frozen=True)
class _Block:
    kind: str  # "text" (a paragraph), "item" or "row"
    text: str
    table: int = 0
    columns: str = ""
    numbered: bool = False  # an item of a numbered list: a step of a procedure


def _blocks(text: str, cite: str) -> Iterator[_Block]:
    """Paragraphs, list items and table rows; no headings, rules, or text that addresses assistants and
    tools rather than employees."""
    lines = [line.strip() for line in text.splitlines()]
    paragraph: list[str] = []
    headers: list[str] = []
    table = 0
    for index, line in enumerate(lines):
        item = _LIST_ITEM.match(line)
        if line and not item and not line.startswith("|") and not _is_rule(line) and not _is_heading(line, cite):
            paragraph.append(plain(line))
            continue
        if paragraph:
            yield from _paragraph(" ".join(paragraph))
            paragraph = []
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if not line.startswith("|"):
            headers = []
        if item and not addresses_assistants(line):
            yield _Block("item", plain(line[item.end() :]), numbered=line[:1].isdigit())
        elif line.startswith("|") and _is_rule(following):  # a header row precedes |---|
            headers, table = _cells(line), table + 1
        elif line.startswith("|") and not _is_rule(line) and not addresses_assistants(line):
            yield _Block("row", table_row(_cells(line), headers), table, " / ".join(headers))
    if paragraph:
        yield from _paragraph(" ".join(paragraph))


def _paragraph(text: str) -> Iterator[_Block]:
    if not addresses_assistants(text):  # the whole paragraph: its next sentence carries the same order
        yield _Block("text", text)


def table_row(cells: list[str], headers: list[str]) -> str:
    """ "Dinner: €40." for two columns; with more, each value after its column's name, so a row
    quoted alone still says which figure is which ("NG-809: Message: Tunnel ...; What to do: ...")."""
    if len(cells) < 2:
        return "".join(cells)
    if len(cells) == 2 or len(headers) != len(cells):
        return shorten(f"{cells[0]}: {', '.join(cells[1:])}.", ROW_CHARS)
    values = [f"{header}: {cell}" if header else cell for header, cell in zip(headers[1:], cells[1:], strict=True)]
    return shorten(f"{cells[0]}: {'; '.join(values)}.", ROW_CHARS)


def _cells(line: str) -> list[str]:
    return [plain(cell).strip(" .") for cell in line.strip().strip("|").split("|") if cell.strip(" .")]


def _is_rule(line: str) -> bool:
    return bool(line) and set(line) <= set("|-: ")


def _is_heading(line: str, cite: str) -> bool:
    """Markdown headings, and a heading-path line ("Policy > Section") that repeats the cite."""
    if line.startswith("#"):
        return True
    lowered = plain(line).lower().replace(" > ", " › ").strip()
    if lowered == cite:
        return True
    if lowered.endswith((".", "!", "?", ":", ";")) or len(lowered) <= 3:
        return False
    return all(segment.strip() in cite for segment in lowered.split("›"))


def plain(text: str) -> str:
    """Markdown emphasis and code marks removed: the words a reader sees."""
    return re.sub(r"\*\*|__|`", "", text).strip()
