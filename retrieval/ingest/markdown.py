"""Normalise Markdown to the one shape chunking relies on.

Output blocks are separated by one blank line: ``#`` headings, paragraphs (hard-wrapped lines
joined), lists (one item a line, ``- `` bullets, two spaces a nesting level), pipe tables
(``| a | b |``), ``> `` quotes and fenced code. Links keep their text (see ingest.html); images
keep only a descriptive alt text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})([^`]*)$")
_ATX = re.compile(r"^\s{0,3}(#{1,6})(?:\s+(.*?)|\s*)$|^\s{0,3}(#{2,6})(\*\*.*)$")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(?:\s*\1){2,}\s*$")
_ITEM = re.compile(r"^(\s*)([-*+•●▪◦]|\d{1,3}[.)])\s+(.*)$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_REF_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)\s*([\"'(].*)?$")
_LABEL_LINE = re.compile(r"^\*\*[^*]+:\*\*|^\*\*[^*]+\*\*:")  # "**Owner:** People Team"

_TARGET = r"\(\s*(<[^>]*>|(?:[^()\s]|\([^()\s]*\))*)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
_IMAGE = re.compile(r"!\[([^\[\]]*)\]" + _TARGET)
_PLACEHOLDER_ALT = frozenset({"enter image description here", "image", "screenshot", "alt text"})
_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]" + _TARGET)
_REF_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\[\]]*\])+)\]\[[^\[\]]*\]")
_SHORTCUT_LINK = re.compile(r"\[([^\[\]]*[A-Za-z][^\[\]]*)\](?![(\[:])")  # "[text]" left from a reference
_AUTOLINK = re.compile(r"<((?:https?|ftp|mailto):[^>\s]+|[^<>\s@]+@[^<>\s@]+\.[a-z]{2,})>", re.IGNORECASE)
_EMPTY_EMPHASIS = re.compile(r"(?<!\S)(\*\*|__)\s*\1(?!\S)")
_CODE_SPAN = re.compile(r"`[^`\n]+`")
_BACKTICKS = re.compile(r"`{3,}")
_STASHED = re.compile(r"\x00(\d+)\x00")
_INVISIBLE = str.maketrans({"\u200b": "", "\ufeff": "", "\xa0": " ", "\u202f": " "})


def normalise_markdown(text: str) -> str:
    """Return ``text`` as normalised Markdown (see the module docstring for the shape)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").expandtabs(4).split("\n")
    builder = _Builder()
    index = 0
    while index < len(lines):
        index = builder.feed(lines, index)
    return "\n\n".join(builder.finish())


def clean_inline(text: str) -> str:
    """One line of Markdown prose: links as their text, images dropped, whitespace collapsed."""
    spans: list[str] = []
    text = _CODE_SPAN.sub(lambda match: _stash(spans, match.group(0)), text.translate(_INVISIBLE))
    text = _IMAGE.sub(_image_alt, text)
    text = _LINK.sub(_link_text, text)
    text = _REF_LINK.sub(r"\1", text)
    text = _SHORTCUT_LINK.sub(r"\1", text)
    text = _AUTOLINK.sub(lambda match: match.group(1).removeprefix("mailto:"), text)
    text = _EMPTY_EMPHASIS.sub("", text)
    text = " ".join(text.split())
    return _STASHED.sub(lambda match: spans[int(match.group(1))], text)


def fenced(code: str, info: str = "") -> str:
    """A fenced code block whose fence is longer than any backtick run in ``code``.

    Any backtick line at least as long as the opening fence closes it (CommonMark): with a fixed
    three, a "```" line from a "~~~" block ended the block early and its rest read as Markdown.
    """
    longest = max((len(run) for run in _BACKTICKS.findall(code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{code}\n{fence}"


def _stash(spans: list[str], code: str) -> str:
    """Keep an inline code span out of link clean-up; it comes back unchanged."""
    spans.append(code)
    return f"\x00{len(spans) - 1}\x00"


def _image_alt(match: re.Match[str]) -> str:
    """A descriptive alt text ("Fields that must be completed ...") stays; "image" or "logo" is noise."""
    alt = " ".join(match.group(1).split())
    return alt if len(alt.split()) >= 3 and alt.casefold() not in _PLACEHOLDER_ALT else ""


def _link_text(match: re.Match[str]) -> str:
    """The link's text; a space just inside its brackets stays outside, so "under[ COBRA](...)" keeps two words."""
    label, target = match.group(1), match.group(2).strip("<>")
    text = label.strip()
    if target.startswith("mailto:"):
        address = target.removeprefix("mailto:").split("?")[0]
        text = text if address in text else f"{text} ({address})".strip()
    lead = " " if label[:1].isspace() else ""
    trail = " " if label[-1:].isspace() else ""
    return f"{lead}{text}{trail}"


@dataclass
class _Builder:
    """Line-by-line state: the block being built and the blocks already finished."""

    blocks: list[str] = field(default_factory=list)
    paragraph: list[str] = field(default_factory=list)
    items: list[str] = field(default_factory=list)
    indents: list[int] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)
    after_blank: bool = False

    def feed(self, lines: list[str], index: int) -> int:
        """Consume the construct starting at ``lines[index]``; return the index of the next line."""
        line = lines[index]
        if _FENCE.match(line):
            return self._fence(lines, index)
        if _QUOTE.match(line):
            return self._quote(lines, index)
        if self._is_table_start(lines, index) or (self.rows and "|" in line and line.strip()):
            self._close(keep_rows=True)
            self.rows.append(_table_row(line))
            return index + 1
        self._line(line)
        return index + 1

    def finish(self) -> list[str]:
        self._close()
        return [block for block in self.blocks if block.strip()]

    def _line(self, line: str) -> None:
        stripped = line.strip()
        if not stripped:
            self._blank()
        elif _REF_DEFINITION.match(line):
            return
        elif (heading := _atx_heading(line)) is not None:
            self._close()
            self._emit(heading)
        elif self.paragraph and _SETEXT.match(line) and not self.after_blank:
            self._setext(stripped)
        elif _RULE.match(line):
            self._close()
        elif (item := self._item(line)) is not None:
            self._add_item(*item)
        elif self.items and (not self.after_blank or _indent(line) >= 2):
            self.items[-1] = f"{self.items[-1]} {stripped}"  # cleaned whole at flush: links wrap lines
        else:
            self._paragraph_line(line)
        self.after_blank = not stripped

    def _blank(self) -> None:
        self._flush_paragraph()
        self._flush_rows()

    def _item(self, line: str) -> tuple[int, str, str] | None:
        match = _ITEM.match(line)
        if match is None:
            return None
        indent, marker, text = len(match.group(1)), match.group(2), match.group(3)
        ordered = marker[0].isdigit()
        if self.paragraph and ordered and int(marker[:-1]) != 1:
            return None  # "...in\n2021. We" is a wrapped sentence, not a list (CommonMark's rule)
        return indent, f"{int(marker[:-1])}." if ordered else "-", text

    def _add_item(self, indent: int, marker: str, text: str) -> None:
        self._flush_paragraph()
        self._flush_rows()
        if self.items and self.after_blank and _kind(self.items[0]) != _kind(marker):
            self._flush_items()  # a bullet list after a numbered one is a new list
        while self.indents and self.indents[-1] > indent:
            self.indents.pop()
        if not self.indents or indent > self.indents[-1] + 1:
            self.indents.append(indent)
        level = len(self.indents) - 1
        self.items.append(f"{'  ' * level}{marker} {text}")

    def _paragraph_line(self, line: str) -> None:
        if self.items:
            self._flush_items()
        if self.rows:
            self._flush_rows()
        hard_break = line.endswith(("  ", "\\"))
        self.paragraph.append(line.strip().rstrip("\\") + ("\n" if hard_break else ""))

    def _setext(self, underline: str) -> None:
        text = clean_inline(" ".join(self.paragraph))
        self.paragraph.clear()
        self._emit(f"{'#' if underline.startswith('=') else '##'} {text}")

    def _is_table_start(self, lines: list[str], index: int) -> bool:
        line = lines[index]
        if "|" not in line:
            return False
        if line.lstrip().startswith("|"):
            return True
        following = lines[index + 1] if index + 1 < len(lines) else ""
        return "|" in following and "-" in following and bool(_TABLE_SEPARATOR.match(following))

    def _fence(self, lines: list[str], index: int) -> int:
        self._close()
        opening = _FENCE.match(lines[index])
        assert opening is not None
        indent, fence, info = len(opening.group(1)), opening.group(2), opening.group(3).strip()
        body: list[str] = []
        index += 1
        while index < len(lines) and not _closes(lines[index], fence):
            body.append(_dedent(lines[index], indent))
            index += 1
        if "".join(body).strip():
            self._emit(fenced("\n".join(body).strip("\n"), info))
        return index + 1

    def _quote(self, lines: list[str], index: int) -> int:
        self._close()
        inner: list[str] = []
        while index < len(lines) and lines[index].strip():
            match = _QUOTE.match(lines[index])
            if match is None and (_ITEM.match(lines[index]) or _atx_heading(lines[index]) is not None):
                break
            inner.append(match.group(1) if match else lines[index])
            index += 1
        quoted = normalise_markdown("\n".join(inner))
        if quoted:
            self._emit("\n".join(f"> {line}" if line else ">" for line in quoted.split("\n")))
        return index

    def _close(self, keep_rows: bool = False) -> None:
        self._flush_paragraph()
        self._flush_items()
        if not keep_rows:
            self._flush_rows()

    def _flush_paragraph(self) -> None:
        if self.paragraph:
            self._emit(_join_paragraph(self.paragraph))
            self.paragraph.clear()

    def _flush_items(self) -> None:
        if self.items:
            self._emit("\n".join(_clean_item(item) for item in self.items))
            self.items.clear()
            self.indents.clear()

    def _flush_rows(self) -> None:
        if self.rows:
            self._emit(_format_table(self.rows))
            self.rows.clear()

    def _emit(self, block: str) -> None:
        if block.strip():
            self.blocks.append(block)


def _atx_heading(line: str) -> str | None:
    match = _ATX.match(line)
    if match is None:
        return None
    hashes = match.group(1) or match.group(3)
    text = match.group(2) if match.group(1) else match.group(4)
    text = re.sub(r"\s*\{#[^}]*\}\s*$|\s+#+\s*$|^#+$", "", text or "")
    text = clean_inline(text).strip()
    text = re.sub(r"^(\*\*|__)(.*)\1$", r"\2", text).strip()
    return f"{hashes} {text}" if text else ""


def _join_paragraph(lines: list[str]) -> str:
    """Join wrapped lines with spaces; keep Markdown hard breaks and "**Label:** value" lines apart."""
    out = ""
    for line in lines:
        if out and not out.endswith("\n") and _LABEL_LINE.match(line):
            out += "\n"
        elif out and not out.endswith("\n"):
            out += " "
        out += line
    return "\n".join(filter(None, (clean_inline(part) for part in out.split("\n"))))


def _table_row(line: str) -> str:
    cells = re.split(r"(?<!\\)\|", line.strip().removeprefix("|").removesuffix("|"))
    return "| " + " | ".join(clean_inline(cell) for cell in cells) + " |"


def _format_table(rows: list[str]) -> str:
    """Pipe table with a ``---`` separator under the header row, every row as wide as the widest."""
    split = [row[2:-2].split(" | ") for row in rows]
    if len(split) > 1 and all(re.fullmatch(r":?-+:?", cell.strip()) for cell in split[1]):
        del split[1]
    width = max(len(cells) for cells in split)
    padded = [cells + [""] * (width - len(cells)) for cells in split]
    lines = ["| " + " | ".join(cells) + " |" for cells in padded]
    lines.insert(1, "| " + " | ".join(["---"] * width) + " |")
    return "\n".join(lines)


def _clean_item(item: str) -> str:
    indent = item[: len(item) - len(item.lstrip(" "))]
    marker, _, text = item.lstrip(" ").partition(" ")
    return f"{indent}{marker} {clean_inline(text)}".rstrip()


def _kind(item: str) -> str:
    return "ordered" if item.lstrip()[:1].isdigit() else "bullet"


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0])


def _dedent(line: str, indent: int) -> str:
    leading = len(line) - len(line.lstrip(" "))
    return line[min(leading, indent) :]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))
