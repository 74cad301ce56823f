"""Who reads a reply, and so which documents it may be built from.

A direct message or a personal chat is read by the asker; a channel, a thread or a group chat by
everyone in it. A reply is built only from documents every reader may read: the asker's groups in
a private place, public documents in a shared one (or, where the member list is known, the groups
all members share). History and traces record the audience each reply was built for, so a later
run in the same thread uses only what its readers may read.

Who is in a place is read again for every reply: for a question, and when a run goes on after a
Confirm or Cancel click (someone may have joined since the card was posted). Adapters cache member
lists a while (``MemberLists``) and drop a place's list when someone joins it; the join is recorded
in the store, so every replica drops its copy too.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from bot.identity import EVERYONE
from bot.runtime import ExpiringCache
from bot.types import Inbound, UserRef

log = logging.getLogger(__name__)

PUBLIC: tuple[str, ...] = (EVERYONE,)
Readers = Literal["asker", "everyone here", "members"]
Members = tuple[UserRef, ...]
MembersNow = Callable[[], Awaitable[Members | None]]  # a place's member list read now; None: it cannot be
Seen = tuple[int, ...]  # the join counts a member list was read under (empty without a join log)


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
    """The audience of a reply where ``inbound`` was asked: the asker alone, or everyone in the place."""
    return audience_of(inbound.user, shared=inbound.shared, members=inbound.members)


def audience_of(asker: UserRef, *, shared: bool, members: Members | None) -> Audience:
    """Who reads a reply to ``asker``: they alone in a private place, everyone in a shared one.

    ``members`` (the place's member list with their groups, when the adapter could read it) narrows a
    shared place to the groups all of them share; without it, a shared place reads public documents
    only. The asker reads the reply too, so they count even when the list leaves them out (a Teams
    shared channel's roster is the host team's; a cached list predates their joining).
    """
    if not shared:
        return asker_audience(asker)
    if not members:
        return Audience(PUBLIC, "everyone here")
    readers = (asker, *members)
    common = set.intersection(*(set(asker_audience(reader).groups) for reader in readers))
    ordered = tuple(group for group in asker_audience(asker).groups if group in common)
    return Audience(ordered, "members")


@dataclass(frozen=True)
class PlaceNow:
    """A card's place as a click finds it: shared or not, and how to read who is in it now.

    A run that goes on after Confirm or Cancel posts its answer where the card is, so it is built for
    the people there at the click, not those there when the card was proposed.
    """

    shared: bool
    members: MembersNow | None = None  # None: no member list is read (a shared place reads public documents)

    async def audience(self, requester: UserRef) -> Audience:
        """The readers now; a member list that cannot be read makes a shared place public (fail closed)."""
        members = None
        if self.shared and self.members is not None:
            try:
                members = await self.members()
            except Exception as exc:  # the adapters' lookups say None; a raise here must not open the place
                log.warning("the place's members could not be read (%s); answering from public documents", exc)
        return audience_of(requester, shared=self.shared, members=members)


class JoinLog(Protocol):
    """Joins recorded where every replica reads them (the store's ``joins``): how many each place has had."""

    async def record(self, place: str) -> None: ...

    async def counts(self, places: Sequence[str]) -> Mapping[str, int]: ...


@dataclass
class _Known:
    within: str | None  # the larger place whose joins count for this one too
    seen: Seen = ()  # the joins the log had for both when this place's list was last looked up


class MemberLists:
    """Each place's member list, cached ``ttl_s``; someone joining a place makes its next read fresh.

    ``joined`` drops the place's list, and a read already under way when someone joined is neither
    shared with later callers nor kept: it may predate the newcomer. ``within`` names a larger place
    (a team, for its channels) whose joins drop the lists of the places in it too. A list that cannot
    be read (None) is not kept: the next caller tries again.

    With a ``joins`` log shared by the replicas, ``joined`` also records the join there, and every
    lookup first reads the place's (and its larger place's) join counts: a list is kept under the
    counts read before it was loaded, so one loaded before a join that any replica recorded is not
    used again. The counts are the database's, compared for equality: no clock takes part. When the
    log cannot be read, no cached list is trusted: the members are read afresh (and not kept).
    Without a log, another replica's copy ages out by its ``ttl_s``. ``scope`` keeps places of
    different platforms and workspaces apart in the log.
    """

    def __init__(
        self,
        ttl_s: float,
        max_places: int = 1_000,
        clock: Callable[[], float] = time.monotonic,
        *,
        joins: JoinLog | None = None,
        scope: str = "",
    ) -> None:
        self._lists: ExpiringCache[tuple[str, Seen], Members] = ExpiringCache(ttl_s, max_places, clock)
        self._places: OrderedDict[str, _Known] = OrderedDict()
        self._max_places = max_places
        self._joins = joins
        self._scope = scope

    async def of(self, place: str, load: MembersNow, *, within: str | None = None) -> Members | None:
        """``place``'s members, cached or read by ``load`` (concurrent callers share one read)."""
        known = self._remember(place, within)
        try:
            seen = await self._seen(place, within)
        except Exception as exc:  # fail closed: a join may be there unseen, so no cached list is trusted
            log.warning("the join log could not be read (%s); reading the members of %s afresh", exc, place)
            return await load()
        if seen != known.seen:  # someone joined since the list was read (or it is the first look)
            self._lists.forget((place, known.seen))
            known.seen = seen
        return await self._lists.get_or_load((place, seen), load)

    async def joined(self, place: str) -> None:
        """Someone joined ``place``: its list, and those of the places within it, are read afresh next time,
        here and (with a join log) in every replica. Raises when the log cannot record it."""
        for key, known in self._places.items():
            if place in (key, known.within):
                self._lists.forget((key, known.seen))
        if self._joins is not None:
            await self._joins.record(self._logged(place))

    def _remember(self, place: str, within: str | None) -> _Known:
        known = self._places.get(place)
        if known is None or known.within != within:
            if known is not None:
                self._lists.forget((place, known.seen))
            known = self._places[place] = _Known(within)
        self._places.move_to_end(place)
        while len(self._places) > self._max_places:
            old, gone = self._places.popitem(last=False)
            self._lists.forget((old, gone.seen))
        return known

    async def _seen(self, place: str, within: str | None) -> Seen:
        """The joins the log has for ``place`` and ``within`` (one read); () without a log."""
        if self._joins is None:
            return ()
        places = [self._logged(place), *([self._logged(within)] if within is not None else [])]
        counts = await self._joins.counts(places)
        return tuple(counts.get(logged, 0) for logged in places)

    def _logged(self, place: str) -> str:
        return f"{self._scope}:{place}" if self._scope else place
