"""Canonical JSON: one spelling per value, so equal arguments hash and compare equal."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def args_hash(tool: str, arguments: dict[str, Any]) -> str:
    """Hash of a tool call as frozen: the card carries this, never the arguments themselves."""
    return hashlib.sha256(canonical_json({"tool": tool, "arguments": arguments}).encode()).hexdigest()[:32]
