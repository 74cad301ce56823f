"""Who reads a reply, and so which documents it may be built from.

A direct message or a personal chat is read by the asker; a channel, a thread or a group chat by
everyone in it. A reply is built only from documents every reader may read: the asker's groups in
a private place, public documents in a shared one (or, where the member list is known, the groups
all members share). History and traces record the audience each reply was built for, so a later
run in the same thread uses only what its readers may read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bot.identity import EVERYONE
from bot.types import Inbound, UserRef

PUBLIC: tuple[str, ...] = (EVERYONE,)
Readers = Literal["asker", "everyone here", "members"]


@dataclass(frozen=True)
class Audience:
    """The groups every reader of a reply is in (``all`` for anyone), and who those readers are."""

    groups: tuple[str, ...]
    readers: Readers

    @property
    def private(self) -> bool:
        return self.readers == "asker"

    def may_read(self, built_for: Sequence[str] | None) -> bool:
        """Whether these readers may read what was built for ``built_for`` (a history entry's audience).

        Entries stored before audiences were recorded (None) stay in private places only.
        """
        if built_for is None:
            return self.private
        return set(built_for) <= {*self.groups, EVERYONE}

    def can_see(self, document_audience: Sequence[str]) -> bool:
        """Whether these readers may read a document restricted to ``document_audience`` (empty: public)."""
        return not document_audience or bool(set(document_audience) & {*self.groups, EVERYONE})

    def label(self) -> str:
        """For traces and logs: "asker (all, hr)", "everyone here (all)"."""
        return f"{self.readers} ({', '.join(self.groups)})"


def asker_audience(user: UserRef) -> Audience:
    return Audience(tuple(dict.fromkeys((EVERYONE, *user.groups))), "asker")


def place_audience(inbound: Inbound) -> Audience:
    """The audience of a reply where ``inbound`` was asked: the asker alone, or everyone in the place.

    ``inbound.members`` (the place's member list with their groups, when the adapter could read it)
    narrows a shared place to the groups all of them share; without it, a shared place reads public
    documents only. The asker reads the reply too, so they count even when the list leaves them out
    (a Teams shared channel's roster is the host team's; a cached list predates their joining).
    """
    members = inbound.members
    if not inbound.shared:
        return asker_audience(inbound.user)
    if not members:
        return Audience(PUBLIC, "everyone here")
    readers = (inbound.user, *members)
    shared = set.intersection(*(set(asker_audience(reader).groups) for reader in readers))
    ordered = tuple(group for group in asker_audience(inbound.user).groups if group in shared)
    return Audience(ordered, "members")
