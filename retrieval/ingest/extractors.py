"""Text out of binary formats (PDF, DOCX) as rough Markdown, ready for ingest.markdown.

PDF has no structure to read, so headings are guessed cheaply (short Title Case or numbered lines);
DOCX carries styles, so Heading N, list paragraphs and tables map directly.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import docx
from docx.blkcntnr import BlockItemContainer
from docx.document import Document as DocxDocument
from docx.oxml.ns import nsmap, qn
from docx.oxml.text.run import CT_R
from docx.oxml.xmlchemy import BaseOxmlElement
from docx.section import Section, _Footer, _Header
from docx.table import Table, _Cell, _Row
from docx.text.paragraph import Paragraph
from pypdf import PdfReader

from retrieval.errors import ExtractError


@dataclass(frozen=True)
class Extracted:
    markdown: str
    title: str | None = None  # from the file's own metadata, when it has any


_BULLET = re.compile(r"^[•●▪◦■‣–-]\s*")
_NUMBERED = re.compile(r"^(\d{1,2}(?:\.\d{1,2})*)\.?\s+(\S.*)$")
_PAGE_NUMBERS = re.compile(r"\d+")
_SENTENCE_END = (".", "!", "?", ":", ";")
_MINOR_WORDS = frozenset({"a", "an", "and", "as", "at", "by", "for", "in", "of", "on", "or", "the", "to", "with"})
# Runs Word shows, wherever they sit in the paragraph (a tracked insertion, a content control, a field
# result); deleted or moved-away text and text boxes (anchored elsewhere, often twice) stay out.
_SHOWN_RUNS = ".//w:r[not(ancestor::w:del or ancestor::w:moveFrom or ancestor::w:txbxContent)]"
_TABLE_OF_CONTENTS = "./w:sdtPr/w:docPartObj/w:docPartGallery[@w:val='Table of Contents']"


def pdf_to_markdown(data: bytes) -> Extracted:
    """Extract a PDF's text page by page; raise ExtractError for files pypdf cannot read."""
    if b"%PDF-" not in data[:1024]:
        raise ExtractError("not a PDF (no %PDF- header)")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ExtractError("encrypted PDF (needs a password)")
        pages = [page.extract_text() or "" for page in reader.pages]
        title = reader.metadata.title if reader.metadata else None
    except ExtractError:
        raise
    except Exception as exc:  # pypdf signals damage with many exception types
        raise ExtractError(f"unreadable PDF: {exc}") from exc
    if not any(text.strip() for text in pages):
        raise ExtractError("no extractable text (a scanned PDF needs OCR first)")
    shown = [text for text in pages if text.strip()]  # a blank page holds no running lines to compare
    markdown = "\n\n".join(_pdf_page(text) for text in _after_cover_page(shown))
    return Extracted(re.sub(r"^## ", "# ", markdown.lstrip(), count=1), _clean_title(title))


def _after_cover_page(pages: list[str]) -> list[str]:
    """Pages without running lines; a cover page that lacks them is left out of the comparison.

    Compared with a cover too, no line is on every page, and each page's header read as a heading.
    """
    whole, rest = _without_running_lines(pages), pages[:1] + _without_running_lines(pages[1:])
    return rest if len(pages) > 2 and len("".join(rest)) < len("".join(whole)) else whole


def _without_running_lines(pages: list[str]) -> list[str]:
    """Pages with a running header kept on the first page only and a running footer on the last only.

    A line every page starts (or ends) with, page numbers aside, is a header (footer). Left on every
    page it reads as a guessed heading and files the next page's text under "Company Confidential".
    """
    lines = [page.splitlines() for page in pages]
    texts = [[index for index, line in enumerate(page) if line.strip()] for page in lines]
    if len(pages) < 2 or not all(texts):
        return pages
    shortest = min(len(indexes) for indexes in texts)  # every page keeps at least one line
    header = _common_edge(lines, [indexes[: shortest - 1] for indexes in texts])
    footer = _common_edge(lines, [indexes[::-1][: shortest - 1 - header] for indexes in texts])
    kept = []
    for number, (page, indexes) in enumerate(zip(lines, texts, strict=True)):
        top = indexes[:header] if number > 0 else []
        bottom = indexes[len(indexes) - footer :] if number < len(pages) - 1 else []
        kept.append("\n".join(line for index, line in enumerate(page) if index not in {*top, *bottom}))
    return kept


def _common_edge(pages: list[list[str]], edges: list[list[int]]) -> int:
    """How many of these lines, in order from one edge, read the same on every page (page numbers aside)."""
    count = 0
    for position in range(min(len(edge) for edge in edges)):
        lines = [" ".join(page[edge[position]].split()) for page, edge in zip(pages, edges, strict=True)]
        if not _is_running_line(lines):
            break
        count += 1
    return count


def _is_running_line(lines: list[str]) -> bool:
    """The same line on every page, or one whose only difference is a number counting up with the pages.

    Any other difference in numbers is content: "Grade 3 25 days" ending one page and "Grade 5 28 days"
    the next are table rows, and dropping the first lost it.
    """
    if len({_PAGE_NUMBERS.sub("#", line) for line in lines}) > 1:
        return False
    numbers = zip(*([int(n) for n in _PAGE_NUMBERS.findall(line)] for line in lines), strict=True)
    varying = [list(run) for run in numbers if len(set(run)) > 1]
    return not varying or (len(varying) == 1 and varying[0] == list(range(varying[0][0], varying[0][0] + len(lines))))


def _pdf_page(text: str) -> str:
    """Rough Markdown for one page: bullets, guessed headings, a blank line after paragraph-ending lines."""
    text = re.sub(r"([a-z])-\n([a-z])", r"\1\2", text)  # re-join words hyphenated at line ends
    lines = [line.strip() for line in text.splitlines()]
    widest = max((len(line) for line in lines), default=0)
    out: list[str] = []
    after_break = True  # the page start, a blank line, a sentence end or a heading: a heading may follow
    for index, line in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else ""
        level = _heading_level(line, following) if after_break else 0
        if level:
            out += ["", "#" * level + " " + _NUMBERED.sub(r"\1 \2", line), ""]
        else:
            out += _pdf_line(line, widest)
        after_break = bool(level) or not line or line.endswith(_SENTENCE_END)
    return "\n".join(out)


def _pdf_line(line: str, widest: int) -> list[str]:
    if _BULLET.match(line):
        return [_BULLET.sub("- ", line)]
    ends_paragraph = line.endswith(_SENTENCE_END) and len(line) < 0.75 * widest
    return [line, ""] if ends_paragraph else [line]


def _heading_level(line: str, following: str) -> int:
    """2 for a short Title Case line, deeper for "1.2 Foo"; 0 when the line reads as prose."""
    if not line or len(line) > 60 or line.endswith((*_SENTENCE_END, ",")) or following[:1].islower():
        return 0
    numbered = _NUMBERED.match(line)
    words = (numbered.group(2) if numbered else line).split()
    if not 1 <= len(words) <= 8 or not _is_title_case(words):
        return 0
    return min(numbered.group(1).count(".") + 2, 6) if numbered else 2


def _is_title_case(words: list[str]) -> bool:
    significant = [word for word in words if word.lower() not in _MINOR_WORDS]
    capitalised = [word for word in significant if word[:1].isupper() or word[:1].isdigit()]
    return bool(significant) and words[0][:1].isupper() and len(capitalised) >= 0.6 * len(significant)


def docx_to_markdown(data: bytes) -> Extracted:
    """Extract a DOCX body in order: Heading N styles, list paragraphs as bullets, tables as pipe tables."""
    if not data.startswith(b"PK"):
        raise ExtractError("not a DOCX (not a zip archive)")
    try:
        document = docx.Document(io.BytesIO(data))
        items = _inner_content(document._body)
        shift = 1 if any(_style(item) == "Title" for item in items) else 0  # Heading 1 sits under a Title
        blocks = [_docx_block(item, shift) for item in items]
        headers, footers = _running_texts(document, "header"), _running_texts(document, "footer")
        title = document.core_properties.title
    except Exception as exc:  # python-docx raises zip, XML and KeyError alike for damaged files
        raise ExtractError(f"unreadable DOCX: {exc}") from exc
    return Extracted("\n\n".join(block for block in [*headers, *blocks, *footers] if block), _clean_title(title))


def _running_texts(document: DocxDocument, kind: str) -> list[str]:
    """Each distinct page header (or footer) text once, in section order; they open (close) the text.

    As with a PDF's running lines, they often say what applies to the whole document ("Confidential",
    a version or owner); dropping them lost that silently, and repeating them per section adds noise.
    """
    texts: dict[str, None] = {}
    for section in document.sections:
        for part in _shown_parts(document, section, kind):
            if not part.is_linked_to_previous:  # a linked part repeats an earlier section's
                texts.update(dict.fromkeys(_running_lines(part)))
    return list(texts)


def _shown_parts(document: DocxDocument, section: Section, kind: str) -> list[_Header | _Footer]:
    """The section's header (footer) definitions Word shows: first-page and even-page ones when enabled."""
    parts = [getattr(section, kind)]
    if section.different_first_page_header_footer:
        parts.append(getattr(section, f"first_page_{kind}"))
    if document.settings.odd_and_even_pages_header_footer:
        parts.append(getattr(section, f"even_page_{kind}"))
    return parts


def _running_lines(part: _Header | _Footer) -> list[str]:
    """A header's paragraphs, and its tables' rows as "a, b" lines (a logo | title | version table)."""
    lines = []
    for item in _inner_content(part):
        if isinstance(item, Table):
            lines += [", ".join(filter(None, _row_texts(row))) for row in item.rows]
        else:
            lines.append(" ".join(_paragraph_text(item).split()))
    return [line for line in lines if line]


def _inner_content(container: BlockItemContainer) -> list[Paragraph | Table]:
    """Paragraphs and tables in order, those inside content controls too (``iter_inner_content`` skips them)."""
    return [
        Paragraph(element, container) if element.tag == qn("w:p") else Table(_unwrap_row_controls(element), container)
        for element in _block_elements(container._element)
    ]


def _unwrap_row_controls(table: BaseOxmlElement) -> BaseOxmlElement:
    """Rows and cells held in content controls (a repeating section) made direct children, in place.

    python-docx reads only a table's direct ``w:tr`` and a row's direct ``w:tc``: rows a form repeats
    were lost silently. The document was parsed for this extraction alone, so changing it is safe.
    """
    while controls := table.xpath("./w:sdt | ./w:tr/w:sdt"):
        for control in controls:
            parent, content = control.getparent(), control.find(qn("w:sdtContent"))
            at = parent.index(control)
            parent.remove(control)
            for offset, child in enumerate(list(content) if content is not None else []):
                parent.insert(at + offset, child)
    return table


def _block_elements(parent: BaseOxmlElement) -> list[BaseOxmlElement]:
    """``w:p`` and ``w:tbl`` children, unwrapping ``w:sdt``; a table of contents only repeats the headings."""
    elements: list[BaseOxmlElement] = []
    for child in parent.iterchildren(qn("w:p"), qn("w:tbl"), qn("w:sdt")):
        if child.tag != qn("w:sdt"):
            elements.append(child)
        elif not child.xpath(_TABLE_OF_CONTENTS, namespaces=nsmap):  # sdt has no python-docx class
            for content in child.iterchildren(qn("w:sdtContent")):
                elements += _block_elements(content)
    return elements


def _paragraph_text(paragraph: Paragraph) -> str:
    """The text Word shows; ``paragraph.text`` reads only direct runs and links, dropping inserted or filled-in text."""
    runs: list[CT_R] = paragraph._p.xpath(_SHOWN_RUNS)
    return "".join(run.text for run in runs)


def _style(item: Paragraph | Table) -> str:
    return item.style.name if isinstance(item, Paragraph) and item.style is not None else ""


def _docx_block(item: Paragraph | Table, shift: int) -> str:
    if isinstance(item, Table):
        return _docx_table(item)
    text, style = _paragraph_text(item).strip(), _style(item)
    if not text:
        return ""
    if style == "Title":
        return f"# {text}"
    if match := re.fullmatch(r"Heading (\d)", style):
        return f"{'#' * min(int(match.group(1)) + shift, 6)} {text}"
    depth = _list_depth(item, style)
    return f"{'  ' * depth}- {text}" if depth is not None else text


def _list_depth(paragraph: Paragraph, style: str) -> int | None:
    """Nesting from the paragraph's numbering level, else from a "List Bullet 2" style name."""
    levels = paragraph._p.xpath("./w:pPr/w:numPr/w:ilvl/@w:val")
    if levels:
        return int(levels[0])
    if not style.startswith("List") and not paragraph._p.xpath("./w:pPr/w:numPr"):
        return None
    number = re.search(r" (\d)$", style)
    return int(number.group(1)) - 1 if number else 0


def _docx_table(table: Table) -> str:
    rows = [[text.replace("|", "\\|") for text in _row_texts(row)] for row in table.rows]
    if not rows:
        return ""
    width = max(len(cells) for cells in rows)
    lines = ["| " + " | ".join(cells + [""] * (width - len(cells))) + " |" for cells in rows]
    lines.insert(1, "| " + " | ".join(["---"] * width) + " |")
    return "\n".join(lines)


def _row_texts(row: _Row) -> list[str]:
    """One text per grid column: a merged cell's in its first column, the others it spans left empty.

    python-docx returns a merged cell once per column it spans; dropping the repeats shifted every
    later cell left, under the wrong header.
    """
    texts: list[str] = []
    previous = None
    for cell in row.cells:
        texts.append(_cell_text(cell) if cell._tc is not previous else "")
        previous = cell._tc
    return texts


def _cell_text(cell: _Cell) -> str:
    """A cell's paragraphs and nested tables on one line; ``cell.text`` leaves nested tables out."""
    parts = []
    for item in _inner_content(cell):
        if isinstance(item, Table):
            parts.append("; ".join(", ".join(filter(None, _row_texts(row))) for row in item.rows))
        else:
            parts.append(_paragraph_text(item))
    return " ".join(" ".join(parts).split())


def _clean_title(title: str | None) -> str | None:
    title = " ".join((title or "").split())
    return title or None
