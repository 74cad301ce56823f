"""Group membership for audience filters and tool permissions, from a configurable mapping."""

from __future__ import annotations

import json

from bot.errors import ConfigError

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

    @property
    def configured(self) -> bool:
        """Whether any user is mapped: without a map, groups come from elsewhere (the terminal's --group)."""
        return bool(self._mapping)

    def names(self) -> frozenset[str]:
        """Every group the map names, and "all": the only audiences anyone can be in."""
        return frozenset({EVERYONE, *(str(group) for groups in self._mapping.values() for group in groups)})


def known_groups(user_groups: str | None) -> frozenset[str] | None:
    """The group names a document's audience may use at index time (POLICYPAL_USER_GROUPS), or None when
    no groups are configured: then any name is accepted, as before groups existed."""
    try:
        groups = GroupMap.from_json(user_groups)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return groups.names() if groups.configured else None
