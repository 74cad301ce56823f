"""Remove static-site template syntax (Liquid, Jekyll, Eleventy/Nunjucks, kramdown) from Markdown.

Handbooks built with site generators carry shortcodes that mean nothing outside the site. A few
carry words a reader needs (a Slack channel name, an alert's title), so those become text; the rest go.
"""

from __future__ import annotations

import re

_COMMENT_BLOCK = re.compile(r"\{%-?\s*comment\s*-?%\}.*?\{%-?\s*endcomment\s*-?%\}", re.DOTALL)
# A tag's body never holds another opener or a blank line: an unclosed "{{" in prose must not swallow
# the text up to the next template's close.
_INSIDE = r"(?:(?!\{[{%]|\n[ \t]*\n).)*?"
_TAG = re.compile(rf"\{{%-?({_INSIDE})-?%\}}", re.DOTALL)
_OUTPUT = re.compile(rf"\{{\{{{_INSIDE}\}}\}}", re.DOTALL)
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_KRAMDOWN_LINE = re.compile(r"^[ \t]*\{:[^}\n]*\}[ \t]*$\n?", re.MULTILINE)
_KRAMDOWN_INLINE = re.compile(r"\{:[^}\n]*\}")
_QUOTED = re.compile(r"\"([^\"]*)\"|'([^']*)'")
_TEXT_ARG = re.compile(r"\btext\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
_URL_TAGS = frozenset({"page", "link", "download"})
_BRANCH_TAGS = frozenset({"else", "elsif", "elif", "when"})  # between two branches, both kept
_TAGGED_TARGET = re.compile(r"\]\((?:\{%[^%\n]*%\}|\{(?!%)|[^()\s{])*\)")  # "](url{% else %}url)"


def strip_templates(text: str) -> str:
    """Return Markdown with template tags, HTML comments and kramdown attribute lists removed."""
    text = _COMMENT_BLOCK.sub("", text)
    text = _HTML_COMMENT.sub("", text)
    text = _TAGGED_TARGET.sub(_target_tags, text)
    text = _TAG.sub(lambda match: _render_tag(match.group(1)), text)
    text = _OUTPUT.sub("", text)
    text = _KRAMDOWN_LINE.sub("", text)
    return _KRAMDOWN_INLINE.sub("", text)


def _target_tags(match: re.Match[str]) -> str:
    """A link target's tags rendered without spaces: a space from an else would leave "[text](a b)" unread as a link."""
    return _TAG.sub(lambda tag: _render_tag(tag.group(1)).strip(), match.group(0))


def _render_tag(body: str) -> str:
    """The text a shortcode stands for: kept only where a reader would miss it."""
    name, _, args = body.strip().replace("\n", " ").partition(" ")
    first = _first_quoted(args)
    if name in _URL_TAGS:
        return first or ""  # a link target: the Markdown link keeps its text either way
    if name == "slack_channel" and first:
        return f"#{first.lstrip('#')}"
    if name == "alert" and first:
        return f"\n\n**{first}**\n\n"
    if name == "include":
        return _include_text(args)
    if name in _BRANCH_TAGS:
        return " "  # "Conditional text{% else %}Other branch": two words, not "textOther"
    return ""


def _first_quoted(args: str) -> str | None:
    match = _QUOTED.search(args)
    if match is None:
        return None
    return match.group(1) if match.group(1) is not None else match.group(2)


def _include_text(args: str) -> str:
    """Keep an include's ``text="..."`` argument when it is plain prose, drop the include otherwise."""
    match = _TEXT_ARG.search(args)
    if match is None:
        return ""
    value = match.group(1) if match.group(1) is not None else match.group(2)
    return value if _is_plain(value) else ""


def _is_plain(value: str) -> bool:
    return "<" not in value and "{" not in value and len(value) <= 500
