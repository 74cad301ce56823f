"""The outbox's Teams sender: each row's ``Post`` rendered as protocol JSON and posted through the connector.

Replies, notices and card updates reach Teams only through here, from whichever process claims the
row: so a reply committed by a process that died is still posted, once, by another. What each kind
becomes:

* ``reply``: the run's outcome (adapters/teams/cards.py). A ticket card also records where it was
  posted (``pending.set_platform_message``: the reference, its activity id, the requester's name),
  so clicks, the sweeper and later card rows can update it in place. A channel that answers without
  an id showed the card but it cannot be updated later: then nothing is recorded.
* ``notice``: a message in the thread; a recovered run's give-up carries its run id and case.
* ``card``: the card as it stands (``CardView``), replacing the posted one (``target``).
* ``private``: nothing. Teams has no ephemeral message; the click's invoke answer already showed it.
* ``direct``: refused (``RemoteError`` "validation"): Teams cannot start a personal chat without a
  personal conversation reference, which the bot does not keep. The service just logs it.

Failures are ``RemoteError``s the outbox can act on (adapters/teams/connector.py): throttling and
overload, already retried by the connector, are retried again later; a refusal that cannot change
(403: the bot was removed) gives up at once, and the service hands the conversation to a person.

Teams has no way to look up an earlier post, so a row whose previous attempt died mid-call
(``Delivery.uncertain``) may be posted twice; the activity id of a posted ticket card is saved on the
row before anything else, so a failure after the post never posts the card a second time.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from adapters.teams import cards
from adapters.teams.activity import thread_of_reference
from adapters.teams.connector import Connector, Json, remote_error
from bot.cards import CardView
from bot.delivery import Delivery, Post, post_destination
from bot.errors import RemoteError
from bot.store import DeliveryRecord
from bot.types import Pending

if TYPE_CHECKING:
    from bot.service import PolicyPal

log = logging.getLogger(__name__)

T = TypeVar("T")
NO_DIRECT = "Teams cannot message a person outside the conversation: the bot keeps no personal chat reference"


class TeamsSender:
    """Sends the outbox's "teams:chat" rows (the helpdesk channel is the "teams" destination's)."""

    destinations = (post_destination("teams"),)

    def __init__(self, connector: Connector, service: PolicyPal) -> None:
        self._connector = connector
        self._service = service

    def label(self, row: DeliveryRecord) -> str:
        return f"teams post {row.id}"

    async def send(self, row: DeliveryRecord, delivery: Delivery) -> str | None:
        post = Post.from_json(row.payload or {})
        if post.kind == "private":
            return None  # shown to the clicker alone by the invoke answer; Teams has no ephemeral message
        if post.kind == "direct":
            raise RemoteError(NO_DIRECT, kind="validation")
        if post.kind == "card":
            return await self._card(row, post)
        if delivery.uncertain and not delivery.progress:
            log.warning("teams post %s: an earlier attempt may have posted it; Teams cannot look, so it may show twice",
                        row.id)
        reference = await self._reference(row, post)
        outcome = post.reply_outcome() if post.kind == "reply" else None
        posted = delivery.progress  # a ticket card posted by an earlier attempt: not posted again
        if not posted:
            activity = self._activity(post)
            posted = await _remote(self._connector.send(reference, activity), f"post {row.id}")
        if isinstance(outcome, Pending) and posted:
            await delivery.save(posted)  # before the store write below: a retry must not post the card again
            where = {"reference": reference, "activity_id": posted, "requester_name": _requester_name(post)}
            await self._service.pending.set_platform_message(outcome.action.id, where)
        elif isinstance(outcome, Pending):
            log.warning("teams post %s: the channel answered without an id; card %s cannot be updated later",
                        row.id, outcome.action.id)
        return posted or None

    def _activity(self, post: Post) -> Json:
        if post.kind == "notice":
            return cards.notice_activity(post.text, run_id=post.run_id, case_id=post.case_id)
        return cards.reply_activity(
            post.reply_outcome(), post.run_id or "", from_a_run=post.from_a_run, requester_name=_requester_name(post)
        )

    async def _card(self, row: DeliveryRecord, post: Post) -> str:
        target = post.target
        reference, activity_id = target.get("reference"), target.get("activity_id")
        if not isinstance(reference, dict) or not activity_id:
            raise RemoteError(f"card of post {row.id} has no posted message to update", kind="validation")
        view = CardView.from_json(post.card or {})
        names = {view.requester: str(target.get("requester_name") or view.requester)}
        content = cards.card_view(view, lambda user_id: names.get(user_id, user_id))
        await _remote(self._connector.update(reference, str(activity_id), cards.message(None, content)),
                      f"the card of post {row.id}")
        return str(activity_id)

    async def _reference(self, row: DeliveryRecord, post: Post) -> dict[str, Any]:
        """The conversation reference to post to: the post's own, unless it names another thread than the row's.

        A click's address is the invoke's; an invoke that names the channel without its reply chain
        cannot say which thread the card is in, while the row's conversation (the pending action's) can:
        then the reference stored with that conversation's first message is the one to use.
        """
        reference = post.address.reference
        key = row.conversation_key or ""
        if reference and (not key or key.endswith(":{}:{}".format(*thread_of_reference(reference)))):
            return reference
        place = await self._service.store.threads.get_place(key) if key else None
        if place is not None and place.address:
            return place.address
        if reference:
            return reference
        raise RemoteError(f"no conversation reference to post {row.id} to", kind="validation")


def _requester_name(post: Post) -> str:
    return post.address.user_name or post.address.user


async def _remote(call: Awaitable[T], what: str) -> T:
    try:
        return await call
    except RemoteError:
        raise
    except Exception as exc:
        raise remote_error(exc, what) from exc
