"""Text that can be stored and sent: a lone UTF-16 surrogate (``\\ud800``) is valid in a JSON escape and
in a Python ``str``, but cannot be encoded as UTF-8, so every database write and HTTP body carrying it fails.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Replace lone surrogates with U+FFFD: inbound text (a user's message, a model's reply) must be storable."""
    if text.isascii():  # the common case, without a regex scan
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be written to a database or an HTTP body as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
