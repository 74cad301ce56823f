"""HTML to Markdown: whole pages (main content only) and the HTML islands inside Markdown files.

Links keep their text and drop the URL (a mail address stays, since it is the actionable part):
URLs cost embedding tokens without adding meaning, and every chunk already cites its document.
"""

from __future__ import annotations

import html
import re

from bs4 import BeautifulSoup, Comment, Tag
from bs4.element import NavigableString, PageElement

from retrieval.ingest.markdown import fenced

# lxml, not html.parser: html.parser nests unclosed <li>/<p> (common in exported policy pages).
# It is always installed, as a hard dependency of python-docx.
_PARSER = "lxml"

_MEDIA = {"svg", "iframe", "video", "audio", "canvas", "img", "picture", "object", "embed"}
_DROP = frozenset({"script", "style", "nav", "noscript", "template", "head", "title", "meta", "link"} | _MEDIA)
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_LISTS = frozenset({"ul", "ol"})
_SECTIONING = {"div", "section", "article", "main", "header", "footer", "aside", "details", "summary", "body", "html"}
_TEXT_BLOCKS = {"p", "blockquote", "pre", "table", "li", "hr", "dl", "dt", "dd", "figure", "figcaption", "address"}
_BLOCKS = frozenset(_SECTIONING | _TEXT_BLOCKS | {"center", "fieldset"}) | _LISTS | frozenset(_HEADINGS)
_SPACE = re.compile(r"\s+")

# HTML inside Markdown: regions converted whole, wrappers that become paragraph breaks, inline tags.
_REGION_TAGS = ("table", "ul|ol", "h[1-6]", "pre")
_DROP_WITH_CONTENT = re.compile(
    r"<(script|style|iframe|video|audio|svg|object|template|noscript)\b[^>]*>.*?</\1\s*>",
    re.DOTALL | re.IGNORECASE,
)
_VOID = re.compile(r"<(?:img|source|track|embed|input|hr|wbr|picture|/picture)\b[^>]*>", re.IGNORECASE)
_WRAPPER = re.compile(
    r"</?(?:p|div|section|article|main|header|footer|aside|details|summary|figure|figcaption|center"
    r"|blockquote|address|dl|dt|dd|li|ul|ol|table|caption|tbody|thead|tfoot|tr|td|th|h[1-6]|pre)\b[^>]*>",
    re.IGNORECASE,
)
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_WRAPS = {"strong": "**", "b": "**", "em": "_", "i": "_", "code": "`"}
_STYLED = re.compile(r"<(strong|b|em|i|code)\b[^>]*>(.*?)</\1\s*>", re.DOTALL | re.IGNORECASE)
_ANCHOR = re.compile(r"<a\b([^>]*)>(.*?)</a\s*>", re.DOTALL | re.IGNORECASE)
_MAILTO = re.compile(r"""href\s*=\s*["']mailto:([^"'?]+)""", re.IGNORECASE)
_UNWRAP = re.compile(
    r"</?(?:a|span|font|u|ins|del|s|small|big|mark|abbr|kbd|q|sup|sub|cite|time|label|button|tt|var|samp"
    r"|strong|b|em|i|code)\b[^>]*>",
    re.IGNORECASE,
)


def html_to_markdown(page: str) -> tuple[str, str | None]:
    """Convert a whole HTML page to Markdown, keeping only its main content; also return <title>."""
    soup = BeautifulSoup(page, _PARSER)
    title = _clean(soup.title.get_text()) if soup.title else None
    main = soup.find("main") or soup.find(role="main")
    articles = [article for article in soup.find_all("article") if article.find_parent("article") is None]
    roots = [main] if main else articles or [soup.body or soup]
    if soup.body is not None and roots == [soup.body]:
        # Site chrome sits in body-level header/footer; inside <main> they are content.
        for chrome in soup.body.find_all(["header", "footer"], recursive=False):
            chrome.decompose()
    return "\n\n".join(block for root in roots for block in _blocks(root)), title or None


def fragment_to_markdown(fragment: str) -> str:
    """Convert one HTML block (a table, a list, a heading) found inside a Markdown file."""
    body = BeautifulSoup(fragment, _PARSER).body
    return "\n\n".join(_blocks(body)) if body else ""


def convert_embedded_html(markdown: str) -> str:
    """Turn the HTML islands of a Markdown file into Markdown; text that only looks like a tag stays."""
    text = _DROP_WITH_CONTENT.sub("", markdown)
    text = _VOID.sub("", text)
    for names in _REGION_TAGS:
        text = _convert_regions(text, names)
    text = _WRAPPER.sub("\n\n", text)
    text = _BREAK.sub(" ", text)
    text = _STYLED.sub(_styled, text)
    text = _ANCHOR.sub(_anchor, text)
    text = _UNWRAP.sub("", text)
    return html.unescape(text)


def _convert_regions(text: str, names: str) -> str:
    """Replace each outermost ``<names>...</names>`` element with its Markdown, nesting counted."""
    tags = re.compile(rf"<(/?)({names})\b[^>]*>", re.IGNORECASE)
    out: list[str] = []
    cursor, depth, start = 0, 0, 0
    for match in tags.finditer(text):
        if match.group(1) != "/":
            start = match.start() if depth == 0 else start
            depth += 1
        elif depth > 0:  # a stray closing tag is left for the wrapper pass
            depth -= 1
            if depth == 0:
                out.append(text[cursor:start])
                out.append(f"\n\n{fragment_to_markdown(text[start : match.end()])}\n\n")
                cursor = match.end()
    out.append(text[cursor:])
    return "".join(out)


def _styled(match: re.Match[str]) -> str:
    inner = match.group(2)
    mark = _WRAPS[match.group(1).lower()]
    text = inner.strip()
    return f"{mark}{text}{mark}" if text else inner


def _anchor(match: re.Match[str]) -> str:
    text = match.group(2)
    mailto = _MAILTO.search(match.group(1))
    if mailto and mailto.group(1) not in text:
        return f"{text} ({mailto.group(1)})"
    return text


def _inline_text(node: Tag) -> str:
    """The text of an element as one Markdown line: emphasis kept, links as text, breaks as spaces."""
    return _clean(_inline(node))


def _blocks(node: Tag) -> list[str]:
    out: list[str] = []
    pending: list[str] = []
    for child in node.children:
        if isinstance(child, Comment) or (isinstance(child, Tag) and child.name in _DROP):
            continue
        if isinstance(child, Tag) and child.name in _BLOCKS:
            _flush(pending, out)
            out.extend(_block(child))
        else:
            pending.append(_inline(child))
    _flush(pending, out)
    return [block for block in out if block.strip()]


def _flush(pending: list[str], out: list[str]) -> None:
    text = _clean("".join(pending))
    if text:
        out.append(text)
    pending.clear()


def _block(tag: Tag) -> list[str]:
    if tag.name in _HEADINGS:
        text = _clean(_inline(tag, plain=True))
        return [f"{'#' * _HEADINGS[tag.name]} {text}"] if text else []
    if tag.name in _LISTS:
        return ["\n".join(_list_lines(tag, depth=0))]
    if tag.name == "table":  # its caption names it: a line of its own before the rows
        caption = tag.find("caption", recursive=False)
        named = _clean(_inline(caption, plain=True)) if caption else ""
        return [named, _table_to_markdown(tag)] if named else [_table_to_markdown(tag)]
    if tag.name == "pre":
        return [fenced(tag.get_text().strip("\n"))]
    if tag.name == "blockquote":
        return ["\n".join(f"> {line}" if line else ">" for line in "\n\n".join(_blocks(tag)).split("\n"))]
    if tag.name == "li":  # a stray <li> outside any list
        return [f"- {_inline_text(tag)}"]
    if tag.name == "hr":
        return []
    return _blocks(tag)


def _inline(node: PageElement, plain: bool = False) -> str:
    """Markdown for inline content; ``plain`` drops emphasis marks (a heading reads "Leave rules")."""
    if isinstance(node, Comment):
        return ""
    if isinstance(node, NavigableString):
        return str(node)
    if not isinstance(node, Tag) or node.name in _DROP:  # a parsed tree holds only tags and strings
        return ""
    if node.name == "br":
        return " "
    inner = "".join(_inline(child, plain) for child in node.children)
    return _decorate(node, inner, plain)


def _decorate(tag: Tag, inner: str, plain: bool = False) -> str:
    """Wrap inline text the way Markdown writes it, keeping the whitespace that was around it."""
    text = inner.strip()
    if not text:
        return " " if inner else ""
    lead = " " if inner[:1].isspace() else ""
    trail = " " if inner[-1:].isspace() else ""
    if plain and tag.name in ("strong", "b", "em", "i"):
        return inner
    if tag.name in ("strong", "b") and not text.startswith("**"):
        return f"{lead}**{text}**{trail}"
    if tag.name in ("em", "i") and not text.startswith("_"):
        return f"{lead}_{text}_{trail}"
    if tag.name == "code":
        return f"{lead}`{text}`{trail}"
    if tag.name == "a":
        return _link_text(tag, inner)
    if tag.name in _BLOCKS:
        return f" {text} "
    return inner


def _link_text(tag: Tag, inner: str) -> str:
    href = str(tag.get("href") or "")
    if href.startswith("mailto:"):
        address = href.removeprefix("mailto:").split("?")[0]
        if address and address not in inner:
            return f"{inner} ({address})"
    return inner


def _list_lines(tag: Tag, depth: int) -> list[str]:
    """One line per item; a list nested without an ``<li>`` around it, or stray text, is kept too.

    Editors write ``<ul><li>a</li><ul><li>b</li></ul></ul>``; reading only ``<li>`` children lost ``b``.
    """
    lines: list[str] = []
    number = 1
    for child in tag.children:
        if isinstance(child, Tag) and child.name in _LISTS:
            lines.extend(_list_lines(child, depth + 1))
        elif isinstance(child, Tag) and child.name == "li":
            text, nested = _item_parts(child, depth)
            if text:
                marker = f"{number}." if tag.name == "ol" else "-"
                lines.append(f"{'  ' * depth}{marker} {text}")
                number += 1
            lines.extend(nested)
        elif text := _clean(_inline(child)):
            lines.append(f"{'  ' * depth}- {text}")
    return lines


def _item_parts(item: Tag, depth: int) -> tuple[str, list[str]]:
    """An ``<li>``'s own text, and the lines of the lists nested inside it."""
    nested = [child for child in item.find_all(list(_LISTS)) if child.find_parent("li") is item]
    for sub in nested:
        sub.extract()
    return _inline_text(item), [line for sub in nested for line in _list_lines(sub, depth + 1)]


def _table_to_markdown(table: Tag) -> str:
    """Render a <table> as a pipe table; a bold first row (or <th>/<thead>) becomes the header."""
    above: dict[int, tuple[str, int]] = {}
    rows = [_cells(row, above) for row in table.find_all("tr") if row.find_parent("table") is table]
    rows = [row for row in rows if any(cell for cell in row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    rows = [row + [""] * (width - len(row)) for row in rows]
    first = table.find("tr")
    if _is_header_row(first):
        header, body = [cell.strip("*").strip() for cell in rows[0]], rows[1:]
    else:
        header, body = [""] * width, rows
    lines = [_row(header), _row(["---"] * width), *(_row(row) for row in body)]
    return "\n".join(lines)


def _cells(row: Tag, above: dict[int, tuple[str, int]]) -> list[str]:
    """One text per column; ``above`` holds the rowspans still open (column -> text, rows left)."""
    cells: list[str] = []
    for cell in row.find_all(["td", "th"], recursive=False):
        _fill_spanned(cells, above)
        text, rowspan = _cell_text(cell), _span(cell, "rowspan")
        for offset in range(min(_span(cell, "colspan"), 50)):
            cells.append("" if offset else text)  # keep later cells under their own column headers
            if rowspan > 1:
                above[len(cells) - 1] = (cells[-1], rowspan - 1)
    _fill_spanned(cells, above)
    while above and max(above) >= len(cells):  # a span right of a short row: pad up to it, then fill
        cells.append("")
        _fill_spanned(cells, above)
    return cells


def _cell_text(cell: Tag) -> str:
    """A cell on one line: a list inside it becomes "a; b", a pipe is escaped."""
    for sub in cell.find_all(list(_LISTS)):
        items = [_inline_text(li) for li in sub.find_all("li")]
        sub.replace_with(" " + "; ".join(item for item in items if item) + " ")
    return _inline_text(cell).replace("|", "\\|")


def _fill_spanned(cells: list[str], above: dict[int, tuple[str, int]]) -> None:
    """Repeat the text of a cell spanning down from a row above into the columns it covers here.

    Repeated, not left empty: a chunk that starts mid-table repeats only the header row, so each row
    must carry its own label (a DOCX vertically merged cell reads the same way).
    """
    while len(cells) in above:
        text, rows = above.pop(len(cells))
        cells.append(text)
        if rows > 1:
            above[len(cells) - 1] = (text, rows - 1)


def _span(cell: Tag, attribute: str) -> int:
    span = str(cell.get(attribute) or "1").strip()
    return int(span) if span.isdigit() and int(span) > 0 else 1


def _is_header_row(row: Tag | None) -> bool:
    if row is None:
        return False
    cells = row.find_all(["td", "th"], recursive=False)
    if not cells or row.find_parent("thead") or all(cell.name == "th" for cell in cells):
        return True
    return all(_is_bold(cell) for cell in cells)


def _is_bold(cell: Tag) -> bool:
    text = _clean(cell.get_text())
    bold = "".join(tag.get_text() for tag in cell.find_all(["strong", "b"]))
    return bool(text) and _clean(bold) == text


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip()
