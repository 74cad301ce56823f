"""Text that can be stored, sent and shown: a lone UTF-16 surrogate (``\\ud800``) is valid in a JSON escape
and in a Python ``str``, but cannot be encoded as UTF-8, so every database write and HTTP body carrying it
fails; and control characters (ESC sequences, a bare carriage return) in chat text would reach an
operator's terminal through `policypal traces` and `policypal handoffs`.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # all but tab and the line ends


def clean_text(text: str) -> str:
    """Storable, printable inbound text (a user's message, a model's reply): lone surrogates become U+FFFD,
    control characters are dropped and carriage returns become line ends."""
    if text.isascii() and text.isprintable():  # the common case, without a regex scan
        return text
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", _SURROGATE.sub(REPLACEMENT, text))


def terminal_safe(text: str) -> str:
    """Text for a terminal: control characters other than tab and newline shown as escapes, never obeyed."""
    text = text.replace("\r\n", "\n")
    return re.sub("[\x00-\x08\x0b-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be written to a database or an HTTP body as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
