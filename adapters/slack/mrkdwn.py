"""Markdown (what the model writes) to Slack mrkdwn (what Slack renders).

Slack's mrkdwn is not Markdown: bold is ``*x*``, italic ``_x_``, strike ``~x~``, links ``<url|text>``,
no headings and no list syntax, and ``&``, ``<`` and ``>`` must be escaped or Slack reads them as
markup. Code (fenced and inline) is passed through untouched, apart from the escaping Slack needs.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*```")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_QUOTE = re.compile(r"^(\s*>+\s?)(.*)$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# A link target may hold balanced parentheses (Wikipedia's Foo_(bar)), one level deep.
_LINK = re.compile(r"!?\[([^\]\n]+)\]\(\s*<?((?:[^()\s>]|\([^()\s>]*\))+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<(https?://[^>\s]+|mailto:[^>\s]+)>")
# A bare URL, without the punctuation or emphasis markers that may close a sentence or a span after it.
_BARE_URL = re.compile(r"(?:https?://|mailto:)[^\s<>\x00]*[^\s<>\x00*_~.,:;!?'\"]")
# Bold italic first: left to the bold rule, ``***x***`` became the mis-nested ``*_x*_``. Slack's form is ``*_x_*``.
_BOLD_ITALIC = re.compile(r"(?<![\w*])\*\*\*(?=[^\s*])(.+?)(?<=[^\s*])\*\*\*(?![\w*])")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)")
_ITALIC = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_STASH = re.compile("\x00(\\d+)\x00")
_BOLD_MARK = "\x01"


def escape(text: str) -> str:
    """Escape the three characters Slack treats as markup: & < >."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """Convert the model's Markdown to mrkdwn, keeping code blocks verbatim."""
    lines: list[str] = []
    in_fence = False
    for line in markdown.replace("\r\n", "\n").split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
            lines.append("```")  # Slack ignores a language tag, and would show it as text
        elif in_fence:
            lines.append(escape(line))
        else:
            lines.append(_convert_line(line))
    if in_fence:
        lines.append("```")  # an unclosed fence would swallow the rest of the message
    return "\n".join(lines).strip("\n")


def _convert_line(line: str) -> str:
    if _RULE.match(line):
        return ""
    if heading := _HEADING.match(line):
        return f"*{_inline(heading.group(1))}*"
    if bullet := _BULLET.match(line):
        indent = bullet.group(1).replace("\t", "    ")
        return f"{indent}• {_inline(bullet.group(2))}"
    if quote := _QUOTE.match(line):
        return "> " + _inline(quote.group(2))
    return _inline(line)


def _inline(text: str) -> str:
    """Inline spans: code, links and bare URLs are set aside first so emphasis rules never reach inside them."""
    stash: list[str] = []

    def keep(rendered: str) -> str:
        stash.append(rendered)
        return f"\x00{len(stash) - 1}\x00"

    def restore(held: str) -> str:
        # A link's label may hold a code span set aside before it: restore what is inside, too.
        return _STASH.sub(lambda m: restore(stash[int(m.group(1))]), held)

    text = _CODE_SPAN.sub(lambda m: keep(f"`{escape(m.group(2))}`"), text)
    text = _LINK.sub(lambda m: keep(_link(m.group(2), restore(escape(m.group(1))))), text)
    text = _AUTOLINK.sub(lambda m: keep(f"<{_url(m.group(1))}>"), text)
    text = _BARE_URL.sub(lambda m: keep(escape(m.group(0))), text)
    text = escape(text)
    text = _BOLD_ITALIC.sub(lambda m: f"{_BOLD_MARK}_{m.group(1)}_{_BOLD_MARK}", text)
    text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(1) or m.group(2)}{_BOLD_MARK}", text)
    text = _ITALIC.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    text = text.replace(_BOLD_MARK, "*")
    return restore(text)


def _link(url: str, label: str) -> str:
    """``<url|label>`` for a web or mail target; ``label`` is already mrkdwn (escaped, code restored)."""
    if not re.match(r"(https?://|mailto:)", url):
        return f"{label} ({escape(url)})"  # a relative or odd target: show it, never a broken link
    return f"<{_url(url)}|{label.replace('|', '¦')}>"


def _url(url: str) -> str:
    """A link target Slack cannot read as markup: ``|`` would hide the URL behind a label, and a ``<`` or
    ``>`` inside it would close the link early and open another token (``<!channel|x>`` pings)."""
    return url.replace("|", "%7C").replace("<", "%3C").replace(">", "%3E")
