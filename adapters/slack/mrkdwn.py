"""Markdown (what the model writes) to Slack mrkdwn (what Slack renders).

Slack's mrkdwn is not Markdown: bold is ``*x*``, italic ``_x_``, strike ``~x~``, links ``<url|text>``,
no headings and no list syntax, and ``&``, ``<`` and ``>`` must be escaped or Slack reads them as
markup. What is emphasis, code or a link is decided by a CommonMark parser (markdown-it-py, with
strikethrough), as any Markdown renderer decides it, so ``***a** b*`` or ``**`` in a code span are
paired by the spec and not by the order of regexes; this module only writes the parsed tree in
Slack's syntax. Code (fenced and inline) is kept verbatim apart from the escaping Slack needs.
Tables are not parsed: their lines pass through as text, which reads as well in Slack.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.tree import SyntaxTreeNode

log = logging.getLogger(__name__)

# A bare URL, without the punctuation or emphasis markers that may close a sentence or a span after it.
_BARE_URL = re.compile(r"(?:https?://|mailto:)[^\s<>\x00]*[^\s<>\x00*_~.,:;!?'\"]")
_SCHEME = re.compile(r"(?:^|[^A-Za-z0-9])(https?|mailto)$")
_WEB = re.compile(r"(?:https?://|mailto:)")
# Slack's marks, outermost first: bold italic is ``*_x_*``.
_MARKS = {"strong": "*", "em": "_", "s": "~"}


def _bare_url(state: StateInline, silent: bool) -> bool:
    """At the ``:`` of a bare URL: the URL is one piece of text, so ``__init__`` or ``a*b*c`` in it is
    never emphasis, and a span around it still closes after it."""
    scheme = _SCHEME.search(state.pending) if state.src[state.pos] == ":" else None
    start = state.pos - len(scheme.group(1)) if scheme else -1
    url = _BARE_URL.match(state.src, start, state.posMax) if start >= 0 else None
    if url is None:
        return False
    if not silent:
        state.pending = state.pending[: start - state.pos]
        state.push("text", "", 0).content = url.group(0)
    state.pos = url.end()
    return True


# HTML off: the model's ``<team>`` is text to show, not a tag.
# maxNesting: a list or quote nested past markdown-it's default of 20 would lose its text.
_PARSER = MarkdownIt("commonmark", {"html": False, "maxNesting": 100}).enable("strikethrough")
_PARSER.inline.ruler.before("linkify", "bare_url", _bare_url)


def escape(text: str) -> str:
    """Escape the three characters Slack treats as markup: & < >."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """Convert the model's Markdown to mrkdwn, keeping code blocks verbatim; nothing written is dropped."""
    env: dict[str, Any] = {}
    try:
        text = _blocks(SyntaxTreeNode(_PARSER.parse(markdown, env)).children)
    except RecursionError:  # nested deeper than a tree can be built: shown as written rather than not at all
        log.warning("Markdown nested too deep to convert (%d characters): sent as plain text", len(markdown))
        return escape(markdown.strip())
    return text + _unused_references(env, text)


def _unused_references(env: dict[str, Any], text: str) -> str:
    """Reference definitions no link used ("Sources:\n[1]: https://..."), which a renderer hides, as lines."""
    references = env.get("references") or {}
    unused = [(label, str(ref.get("href", ""))) for label, ref in references.items()]
    lines = [f"[{escape(label)}]: <{_url(href)}>" for label, href in unused if href and _url(href) not in text]
    return "".join(f"\n{line}" for line in lines) if text else "\n".join(lines)


def _blocks(nodes: Sequence[SyntaxTreeNode]) -> str:
    """Blocks apart as in the source: on the next line, or after one blank line (a list right under its
    lead-in stays there). A rule is dropped, leaving its blank line: Slack has none."""
    out: list[str] = []
    end = None
    for node in nodes:
        if node.type == "hr":
            continue
        start = node.map[0] if node.map else 0
        if end is not None:
            out.append("\n" * min(2, max(1, start - end + 1)))
        out.append(_block(node))
        end = _end(node)
    return "".join(out)


def _end(node: SyntaxTreeNode) -> int:
    """The line after a block's last line of text (a list's own range also takes the blank lines after it)."""
    if node.type in ("bullet_list", "ordered_list", "list_item", "blockquote") and node.children:
        return _end(node.children[-1])
    return node.map[1] if node.map else 0


def _block(node: SyntaxTreeNode) -> str:
    match node.type:
        case "paragraph":
            return _spans(node)
        case "heading":
            text = _spans(node, frozenset({"strong"}))
            return f"*{text}*" if text else ""
        case "fence" | "code_block":  # Slack ignores a fence's language tag, and would show it as text
            return f"```\n{escape(node.content)}```"
        case "bullet_list" | "ordered_list":
            return _blocks(node.children)
        case "list_item":
            marker = f"{node.info}{node.markup}" if node.parent and node.parent.type == "ordered_list" else "•"
            lines = _blocks(node.children).split("\n")
            rest = [" " * (len(marker) + 1) + line if line else "" for line in lines[1:]]
            return "\n".join([f"{marker} {lines[0]}".rstrip(), *rest])
        case "blockquote":
            body = _blocks(node.children)
            if _within(node, "blockquote"):  # Slack quotes one level deep
                return body
            return "\n".join(f"> {line}" if line else ">" for line in body.split("\n"))
    return escape(node.content)


def _within(node: SyntaxTreeNode, kind: str) -> bool:
    parent = node.parent
    while parent is not None and parent.type != kind:
        parent = parent.parent
    return parent is not None


def _spans(block: SyntaxTreeNode, marks: frozenset[str] = frozenset()) -> str:
    """A paragraph's or heading's text (its one inline child)."""
    return "".join(_inline(node, marks) for child in block.children for node in child.children)


def _inline(node: SyntaxTreeNode, marks: frozenset[str]) -> str:
    """One inline node; ``marks`` are the Slack marks already open around it."""
    match node.type:
        case "text":
            return escape(node.content)
        case "softbreak" | "hardbreak":
            return "\n"
        case "code_inline":
            return f"`{escape(node.content)}`"
        case "link" | "image":
            return _link(node, marks)
        case "strong" | "em" | "s":
            return _styled(node, marks)
    return escape(node.content)


def _styled(node: SyntaxTreeNode, marks: frozenset[str]) -> str:
    """Emphasis in Slack's marks, outermost first (``***x***`` is ``*_x_*``), a mark already open not opened
    again. Inside a word Slack shows no emphasis at all, so there the Markdown stays as written (``2*3*4``)."""
    chain, children = [node], _nonempty(node)
    while len(children) == 1 and children[0].type in _MARKS:
        chain.append(children[0])
        children = _nonempty(children[0])
    kinds = {span.type for span in chain}
    if _touches_word(node):
        opened, kinds = "".join(span.markup for span in chain), set()
    else:
        opened = "".join(mark for kind, mark in _MARKS.items() if kind in kinds and kind not in marks)
    inner = "".join(_inline(child, marks | kinds) for child in children)
    return f"{opened}{inner}{opened[::-1]}"


def _nonempty(node: SyntaxTreeNode) -> list[SyntaxTreeNode]:
    """A span's children without the empty text the parser leaves where delimiters were."""
    return [child for child in node.children if child.type != "text" or child.content]


def _touches_word(node: SyntaxTreeNode) -> bool:
    before, after = node.previous_sibling, node.next_sibling
    return (before is not None and before.type == "text" and before.content[-1:].isalnum()) or (
        after is not None and after.type == "text" and after.content[:1].isalnum()
    )


def _link(node: SyntaxTreeNode, marks: frozenset[str]) -> str:
    """``<url|label>`` for a web or mail target (an image is a link to it); any other target is shown, never a
    broken link. The parser has already percent-encoded the target and refused ``javascript:`` and the like."""
    url = str(node.attrs.get("href") or node.attrs.get("src") or "")
    label = "".join(_inline(child, marks) for child in node.children)
    if not _WEB.match(url):
        shown = escape(_PARSER.normalizeLinkText(url))  # as written, not percent-encoded
        return label if node.markup == "autolink" or not url else f"{label} ({shown})".lstrip()
    if node.markup == "autolink" or not label:
        return f"<{_url(url)}>"
    return f"<{_url(url)}|{label.replace('|', '¦')}>"  # a | would end the label


def _url(url: str) -> str:
    """A link target Slack cannot read as markup: ``|`` would hide the URL behind a label, and a ``<`` or
    ``>`` inside it would close the link early and open another token (``<!channel|x>`` pings)."""
    return url.replace("|", "%7C").replace("<", "%3C").replace(">", "%3E")
