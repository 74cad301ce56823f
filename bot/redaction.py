"""Keep secrets out of anything a human or another system will read: transcripts, webhooks, email.

Two nets: the exact values of every secret PolicyPal was configured with, and the shapes of common
credentials (API keys, bot tokens, bearer and basic auth, JWTs, private keys, ``password=...``), so a
token a user pasted into a question is caught too. Mapping keys that name a secret have their value
replaced whatever it looks like.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 6  # shorter configured values would redact ordinary words

_PATTERNS = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),  # OpenAI and compatible API keys
    re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{8,}"),  # Slack bot/user/app tokens
    re.compile(r"\bxapp-[A-Za-z0-9-]{8,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\bATATT[A-Za-z0-9_=-]{16,}"),  # Atlassian API token
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWT
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{12,}"),
]
# "password: x", "api_key=x", "my password is x": keep the words, drop the value.
_ASSIGNMENTS = re.compile(
    r"(?i)\b(password|passwd|passcode|pwd|secret|client[_ -]?secret|api[_ -]?key|access[_ -]?token|token)"
    r"(\s*[:=]\s*|\s+is\s+)(\"[^\"]*\"|'[^']*'|\S+)"
)
_SECRET_KEYS = re.compile(r"(?i)(password|passwd|secret|token|api[_-]?key|authorization|cookie|credential)")


class Redactor:
    """Replaces configured secret values and credential-shaped text with ``[redacted]``."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        values = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}
        self._secrets = sorted(values, key=len, reverse=True)  # longest first: no half-replaced secret

    def text(self, value: str) -> str:
        """One string with every secret replaced."""
        for secret in self._secrets:
            value = value.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            value = pattern.sub(REDACTED, value)
        return _ASSIGNMENTS.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", value)

    def value(self, value: Any) -> Any:
        """Any JSON-like value, recursively; keys that name a secret lose their value."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: REDACTED if _names_secret(k, v) else self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value


def _names_secret(key: Any, value: Any) -> bool:
    # Counts such as "input_tokens" are numbers, not secrets; only string values are hidden.
    return isinstance(key, str) and isinstance(value, str) and bool(_SECRET_KEYS.search(key))


def bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with a visible marker saying how much was cut."""
    if len(text) <= limit:
        return text
    marker = f"…[truncated: {len(text) - limit} more characters]"
    return text[:limit] + marker
