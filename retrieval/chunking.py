"""Split a normalised Markdown document into self-describing chunks for embedding and keyword search.

A chunk never crosses a heading, and its text starts with the heading path ("Policy > Eligibility")
so that both the dense and the keyword index see where a passage sits. Inside a section, chunks
break between blocks: paragraphs, whole list items, whole table rows (a split table repeats its
header row). Only a block that alone exceeds the budget is cut, at sentences, then words.

Token counts are summed block by block, so ``count_tokens`` must be additive over pieces split at
whitespace (a word-piece tokenizer's count is; special tokens added per call only over-count).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from retrieval.types import Chunk, Document

TokenCounter = Callable[[str], int]

# Bumped when the same document and settings chunk differently: stored chunks are then rebuilt.
CHUNKER_VERSION = 3

_HEADING = re.compile(r"^(#{1,6}) (.+)$")
_FENCE = re.compile(r"^(`{3,}|~{3,})")
_LIST_LINE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[*_]?[A-Z0-9])")
_WORD_PIECES = re.compile(r"\w+|[^\w\s]")


def approx_token_count(text: str) -> int:
    """A fast stand-in for a word-piece tokenizer: words and punctuation, plus 15% for split words."""
    return math.ceil(len(_WORD_PIECES.findall(text)) * 1.15)


def chunk_document(
    doc: Document,
    *,
    max_tokens: int = 256,
    overlap_tokens: int = 32,
    count_tokens: Callable[[str], int] | None = None,
) -> list[Chunk]:
    """Chunks of at most ``max_tokens`` (heading line included), numbered from 0 in reading order."""
    count = count_tokens or approx_token_count
    texts: list[tuple[tuple[str, ...], str]] = []
    for path, blocks in _sections(doc):
        heading = _heading_line(path, max_tokens, count)
        packer = _Packer(max_tokens - count(heading), overlap_tokens, count)
        texts += [(path, f"{heading}\n\n{body}") for body in packer.bodies(blocks)]
    return [Chunk(doc.doc_id, position, path, text) for position, (path, text) in enumerate(texts)]


def _sections(doc: Document) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """(heading path, body blocks) per heading; the path starts with the document title."""
    stack: list[tuple[int, str]] = []
    blocks: list[str] = []
    for index, block in enumerate(_blocks(doc.text)):
        match = _HEADING.match(block)
        if match is None:
            blocks.append(block)
            continue
        level, text = len(match.group(1)), match.group(2).strip()
        if blocks:
            yield _path(doc.title, stack), blocks
        elif stack and stack[-1][0] >= level:
            yield _demoted(doc.title, stack)
        blocks = []
        stack = [(lvl, txt) for lvl, txt in stack if lvl < level]
        if not _is_title_heading(level, text, index, doc.title):
            stack.append((level, text))
    if blocks:
        yield _path(doc.title, stack), blocks
    elif stack:
        yield _demoted(doc.title, stack)


def _demoted(title: str, stack: list[tuple[int, str]]) -> tuple[tuple[str, ...], list[str]]:
    """A heading with no body and no subheadings, kept as text under its parent heading.

    Such a heading often is the content ("#### 3. HR does a final review", an FAQ answer set as a
    heading); as a path with no body it would make no chunk and its words would be lost.
    """
    return _path(title, stack[:-1]), [stack[-1][1]]


def _is_title_heading(level: int, text: str, index: int, title: str) -> bool:
    """The H1 a document opens with, or one that repeats its title: the path's root already says it."""
    return level == 1 and (index == 0 or text.casefold() == title.casefold())


def _path(title: str, stack: list[tuple[int, str]]) -> tuple[str, ...]:
    return (title, *(text for _, text in stack))


def _blocks(text: str) -> Iterator[str]:
    """Blocks separated by blank lines; a fenced code block stays whole even with blank lines inside."""
    current: list[str] = []
    fence = ""  # the open fence, if any
    for line in text.split("\n"):
        fence = _fence_after(line, fence)
        if not line.strip() and not fence:
            if current:
                yield "\n".join(current)
            current = []
        else:
            current.append(line)
    if current:
        yield "\n".join(current)


def _fence_after(line: str, fence: str) -> str:
    """The fence open after ``line``; only a run of the same mark at least as long closes it (CommonMark).

    A shorter backtick line inside a longer fence is code: toggling on it let a later "# comment"
    after a blank line read as a heading.
    """
    if not fence:
        opening = _FENCE.match(line)
        return opening.group(1) if opening else ""
    closing = line.rstrip()
    return "" if closing.startswith(fence) and not closing.strip(fence[0]) else fence


def _heading_line(path: tuple[str, ...], max_tokens: int, count: TokenCounter) -> str:
    """The path joined with " > "; cut down to its last heading, then words, if it would crowd the body."""
    line = " > ".join(path)
    if count(line) <= max_tokens // 2:
        return line
    words = path[-1].split()
    while len(words) > 1 and count(" ".join(words)) > max_tokens // 2:
        words.pop()
    return " ".join(words)


@dataclass(frozen=True)
class _Unit:
    """The smallest piece a chunk boundary may fall between."""

    text: str
    tokens: int
    group: int  # units of one block share it: joined by a newline, not a blank line
    header: str = ""  # a table's header and separator rows, repeated where a chunk starts mid-table
    header_tokens: int = 0


class _Packer:
    """Greedy packing of one section's units into chunk bodies, with a small overlap between them."""

    def __init__(self, budget: int, overlap: int, count: TokenCounter) -> None:
        self.budget = max(budget, 8)
        self.overlap = overlap
        self.count = count

    def bodies(self, blocks: list[str]) -> list[str]:
        units = [unit for group, block in enumerate(blocks) for unit in self._units(block, group)]
        return [_render(chunk) for chunk in self._pack(units)]

    def _pack(self, units: list[_Unit]) -> list[list[_Unit]]:
        chunks: list[list[_Unit]] = []
        current: list[_Unit] = []
        for unit in units:
            if current and _cost([*current, unit]) > self.budget:
                chunks.append(current)
                current = self._tail(current)
                if _cost([*current, unit]) > self.budget:
                    current = []
            current.append(unit)
        if current:
            chunks.append(current)
        return chunks

    def _tail(self, units: list[_Unit]) -> list[_Unit]:
        """The last whole units of a chunk that fit in the overlap, carried into the next chunk."""
        tail: list[_Unit] = []
        for unit in reversed(units):
            if _cost([unit, *tail]) > self.overlap:
                break
            tail.insert(0, unit)
        return tail if len(tail) < len(units) else []

    def _units(self, block: str, group: int) -> list[_Unit]:
        lines = block.split("\n")
        header = "\n".join(lines[:2])
        if lines[0].startswith("|") and len(lines) > 2 and self.count(header) <= self.budget // 2:
            return self._fit(lines[2:], group, header)
        if _LIST_LINE.match(lines[0]) or lines[0].startswith("|"):  # a table with a huge header: rows alone
            return self._fit(_list_items(lines), group)
        return self._fit([block], group)

    def _fit(self, texts: list[str], group: int, header: str = "") -> list[_Unit]:
        header_tokens = self.count(header) if header else 0
        room = self.budget - header_tokens
        units: list[_Unit] = []
        for text in texts:
            pieces = [text] if self.count(text) <= room else _split(text, room, self.count)
            units += [_Unit(piece, self.count(piece), group, header, header_tokens) for piece in pieces]
        return units


def _list_items(lines: list[str]) -> list[str]:
    """One unit per list item or table row; a stray continuation line stays with the line above it."""
    items: list[str] = []
    for line in lines:
        if items and not _LIST_LINE.match(line) and not line.startswith("|"):
            items[-1] += "\n" + line
        else:
            items.append(line)
    return items


def _cost(units: list[_Unit]) -> int:
    total = sum(unit.tokens for unit in units)
    previous = None
    for unit in units:
        if unit.header and unit.group != previous:
            total += unit.header_tokens
        previous = unit.group
    return total


def _render(units: list[_Unit]) -> str:
    parts: list[str] = []
    previous = None
    for unit in units:
        if unit.group == previous:
            parts.append("\n" + unit.text)
        else:
            separator = "\n\n" if parts else ""
            parts.append(separator + (f"{unit.header}\n" if unit.header else "") + unit.text)
        previous = unit.group
    return "".join(parts)


def _split(text: str, room: int, count: TokenCounter) -> list[str]:
    """Cut an oversized block at lines, then sentences, then words, then characters."""
    for pattern, joiner in ((r"\n", "\n"), (_SENTENCE_END.pattern, " "), (r" +", " ")):
        parts = [part for part in re.split(pattern, text) if part.strip()]
        if len(parts) > 1:
            return [piece for group in _group(parts, joiner, room, count) for piece in _resplit(group, room, count)]
    return _split_chars(text, room, count)


def _resplit(text: str, room: int, count: TokenCounter) -> list[str]:
    return [text] if count(text) <= room else _split(text, room, count)


def _group(parts: list[str], joiner: str, room: int, count: TokenCounter) -> list[str]:
    """Join consecutive parts greedily while they stay within ``room``."""
    groups: list[str] = []
    current = ""
    for part in parts:
        candidate = f"{current}{joiner}{part}" if current else part
        if current and count(candidate) > room:
            groups.append(current)
            candidate = part
        current = candidate
    if current:
        groups.append(current)
    return groups


def _split_chars(text: str, room: int, count: TokenCounter) -> list[str]:
    pieces: list[str] = []
    while text:
        size = len(text)
        while size > 1 and count(text[:size]) > room:
            size //= 2
        pieces.append(text[:size])
        text = text[size:]
    return pieces
