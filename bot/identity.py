"""Group membership for audience filters and tool permissions, from a configurable mapping."""

from __future__ import annotations

import json

EVERYONE = "all"


class GroupMap:
    """Maps a user id or email to groups; every user is also in "all"."""

    def __init__(self, mapping: dict[str, list[str]] | None = None) -> None:
        self._mapping = {key.lower(): tuple(groups) for key, groups in (mapping or {}).items()}

    @classmethod
    def from_json(cls, text: str | None) -> GroupMap:
        if not text:
            return cls()
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or not all(isinstance(v, list) for v in raw.values()):
                raise ValueError("expected an object of lists")
        except ValueError as exc:
            raise ValueError(
                f'POLICYPAL_USER_GROUPS must be JSON like {{"alice@example.com": ["managers"]}}: {exc}'
            ) from None
        return cls(raw)

    def groups_for(self, *keys: str | None) -> tuple[str, ...]:
        found: list[str] = [EVERYONE]
        for key in keys:
            if key:
                found.extend(self._mapping.get(key.lower(), ()))
        return tuple(dict.fromkeys(found))
