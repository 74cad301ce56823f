"""Canonical JSON: one spelling per value, so equal arguments hash and compare equal."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Built once: json.dumps with any option builds a new encoder per call, which costs more than the encoding.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_PLAIN = json.JSONEncoder(ensure_ascii=False)


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


def to_json(value: Any) -> str:
    """JSON with non-ASCII kept as is (what the model reads), without a new encoder per call."""
    return _PLAIN.encode(value)


def args_hash(tool: str, arguments: dict[str, Any]) -> str:
    """Hash of a tool call as frozen: the card carries this, never the arguments themselves."""
    return hashlib.sha256(canonical_json({"tool": tool, "arguments": arguments}).encode()).hexdigest()[:32]
