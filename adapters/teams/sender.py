"""The outbox's Teams sender: each row's ``Post`` rendered as protocol JSON and posted through the connector.

Replies, notices and card updates reach Teams only through here, from whichever process claims the
row: so a reply committed by a process that died is still posted, once, by another. What each kind
becomes:

* ``reply``: the run's outcome. An answer carries the AI label, native citations and the feedback
  loop, split to stay within Teams' size limit (adapters/teams/answers.py); in a personal chat one that
  fits one message is streamed, and any other reply there ends the stream its run's progress began
  (adapters/teams/streaming.py). Cards and give-ups: adapters/teams/cards.py. A ticket card also records where it was
  posted (``pending.set_platform_message``: the reference, its activity id, the requester's name),
  so clicks, the sweeper and later card rows can update it in place. A channel that answers without
  an id showed the card but it cannot be updated later: then nothing is recorded.
* ``notice``: a message in the thread; a recovered run's give-up carries its run id and case.
* ``card``: the card as it stands (``CardView``), replacing the posted one (``target``).
* ``private``: nothing. Teams has no ephemeral message; the click's invoke answer already showed it.
* ``direct``: a message in the person's personal chat with the bot, opened through the connector
  (``Connector.personal``: Teams' create-conversation, which finds the chat if it exists) and kept in
  memory per (tenant, person). The person is ``address.user`` (an AAD object id); the chat is opened
  with their Teams id (``29:...``), the reference's sender when that is them, else from the roster.
  When Teams refuses to open it for good (403: the app is not installed for them personally) the
  private part of a thread's answer is not lost silently: a notice in the thread tells them to add
  the app and ask there. Any other direct post so refused is given up by the outbox (and logged).

Failures are ``RemoteError``s the outbox can act on (adapters/teams/connector.py): throttling and
overload, already retried by the connector, are retried again later; a refusal that cannot change
(403: the bot was removed) gives up at once, and the service hands the conversation to a person.

Teams has no way to look up an earlier post, so a row whose previous attempt died mid-call
(``Delivery.uncertain``) may be posted twice; the activity id of a posted ticket card is saved on the
row before anything else, so a failure after the post never posts the card a second time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from adapters.teams import cards
from adapters.teams.activity import THREAD_MARKER, conversation_type, tenant_of_reference, thread_of_reference
from adapters.teams.answers import answer_activities
from adapters.teams.connector import Connector, Json, remote_error
from adapters.teams.streaming import TeamsStreams
from bot.cards import CardView
from bot.delivery import Delivery, Post, post_destination
from bot.errors import RemoteError
from bot.replies import PRIVATE_PART
from bot.store import DeliveryRecord
from bot.types import Answer, Pending

if TYPE_CHECKING:
    from bot.service import PolicyPal

log = logging.getLogger(__name__)

T = TypeVar("T")
PERSONAL_CHATS_KEPT = 10_000  # personal chat references kept in memory; Teams finds an evicted one again
NOT_INSTALLED = ("{name}I couldn't send you the rest of the answer privately: {bot} isn't added to your personal "
                 "chats. Open a chat with {bot} (Apps, then {bot}, then Add) and ask me there to see it.")


class TeamsSender:
    """Sends the outbox's "teams:chat" rows (the helpdesk channel is the "teams" destination's)."""

    destinations = (post_destination("teams"),)

    def __init__(self, connector: Connector, service: PolicyPal, streams: TeamsStreams | None = None) -> None:
        self._connector = connector
        self._service = service
        self._streams = streams or TeamsStreams(connector)
        self._chats: dict[tuple[str, str], Json] = {}  # (tenant, Teams user id) -> personal chat reference

    def label(self, row: DeliveryRecord) -> str:
        return f"teams post {row.id}"

    async def send(self, row: DeliveryRecord, delivery: Delivery) -> str | None:
        post = Post.from_json(row.payload or {})
        if post.kind == "private":
            return None  # shown to the clicker alone by the invoke answer; Teams has no ephemeral message
        if post.kind == "direct":
            return await self._direct(row, post)
        if post.kind == "card":
            return await self._card(row, post)
        if delivery.uncertain and not delivery.progress:
            log.warning("teams post %s: an earlier attempt may have posted it; Teams cannot look, so it may show twice",
                        row.id)
        reference = await self._reference(row, post)
        outcome = post.reply_outcome() if post.kind == "reply" else None
        # a ticket card posted by an earlier attempt is not posted again
        posted = delivery.progress if isinstance(outcome, Pending) else None
        if not posted:
            posted = await _remote(self._post(row, post, reference, delivery), f"post {row.id}")
        if isinstance(outcome, Pending) and posted:
            await delivery.save(posted)  # before the store write below: a retry must not post the card again
            where = {"reference": reference, "activity_id": posted, "requester_name": _requester_name(post)}
            await self._service.pending.set_platform_message(outcome.action.id, where)
        elif isinstance(outcome, Pending):
            log.warning("teams post %s: the channel answered without an id; card %s cannot be updated later",
                        row.id, outcome.action.id)
        return posted or None

    async def _post(self, row: DeliveryRecord, post: Post, reference: Json, delivery: Delivery) -> str:
        """Post the row's messages in order; in a personal chat an answer in one message is streamed, and
        any other reply ends the stream its run began (adapters/teams/streaming.py)."""
        activities = self._activities(post)
        key, personal = row.conversation_key or "", conversation_type({"conversation": reference.get("conversation")})
        if personal == "personal" and len(activities) == 1 and post.kind == "reply":  # a notice leaves the stream be
            if isinstance(post.reply_outcome(), Answer):
                return await self._streams.deliver(key, reference, delivery, activities[0], grow=True)
            return await self._streams.finish(key, reference, activities[0])
        posted: list[str] = json.loads(delivery.progress) if delivery.progress else []
        for part in range(len(posted), len(activities)):  # a long answer: each part saved before the next
            ends_stream = part == 0 and personal == "personal" and post.kind == "reply"  # the run's progress
            sent = self._streams.finish(key, reference, activities[part]) if ends_stream else self._connector.send(
                reference, activities[part])
            posted.append(await sent)
            if part < len(activities) - 1:
                await delivery.save(json.dumps(posted))
        return posted[-1] if posted else ""

    def _activities(self, post: Post) -> list[Json]:
        if post.kind == "notice":
            return [cards.notice_activity(post.text, run_id=post.run_id, case_id=post.case_id)]
        outcome = post.reply_outcome()
        if isinstance(outcome, Answer):  # the AI label, citations, the feedback loop, within Teams' size
            return answer_activities(outcome, post.run_id or "", from_a_run=post.from_a_run)
        return [cards.reply_activity(outcome, post.run_id or "", from_a_run=post.from_a_run,
                                     requester_name=_requester_name(post))]

    async def _direct(self, row: DeliveryRecord, post: Post) -> str | None:
        """To the person's personal chat; a private part Teams will not let us send there is owned up to instead."""
        place = await self._shared_reference(row, post)
        try:
            key, chat, cached = await self._personal_chat(place, post.address.user, row)
        except RemoteError as exc:
            if exc.retryable or post.reason != PRIVATE_PART:
                raise
            log.warning("teams post %s: no personal chat with %s (%s); telling them in the thread",
                        row.id, post.address.user, exc)
            return await self._not_sent_privately(row, post, place)
        activity = cards.notice_activity(_direct_text(post, place), case_id=post.case_id)
        try:
            return await _remote(self._connector.send(chat, activity), f"post {row.id} to a personal chat") or None
        except RemoteError as exc:
            if exc.retryable or not cached:
                raise
            # The chat we kept was refused (the app was removed, then maybe added again): the next
            # attempt opens it anew, and learns whether it can be reached at all.
            self._chats.pop(key, None)
            raise RemoteError(f"{exc} (a kept personal chat; opened anew on the next attempt)", kind="unavailable",
                              status=exc.status) from exc

    async def _personal_chat(self, place: Json, user: str, row: DeliveryRecord) -> tuple[tuple[str, str], Json, bool]:
        """(cache key, the chat's reference, whether it was kept from before) for the person ``user``."""
        teams_id = await self._teams_id(place, user, row)
        key = (tenant_of_reference(place), teams_id)
        if (chat := self._chats.get(key)) is not None:
            return key, chat, True
        chat = await _remote(self._connector.personal(place, teams_id), f"opening a personal chat for post {row.id}")
        if len(self._chats) >= PERSONAL_CHATS_KEPT:
            self._chats.pop(next(iter(self._chats)))
        self._chats[key] = chat
        return key, chat, False

    async def _teams_id(self, place: Json, user: str, row: DeliveryRecord) -> str:
        """The person's Teams id (``29:...``), which opening a chat needs: ``address.user`` is their AAD object id."""
        if not user:
            raise RemoteError(f"post {row.id} names nobody to send it to", kind="validation")
        sender = place.get("user") or {}
        if user in (sender.get("aadObjectId"), sender.get("id")) and sender.get("id"):
            return str(sender["id"])
        conversation = dict(place.get("conversation") or {})
        conversation["id"] = str(conversation.get("id", "")).partition(THREAD_MARKER)[0]
        # Someone else's message: the roster lookup takes an AAD object id as well as a Teams id.
        member = await _remote(self._connector.member({**place, "conversation": conversation}, user),
                               f"looking up the recipient of post {row.id}")
        if not member or not member.get("id"):
            raise RemoteError(f"post {row.id}: no Teams user {user!r} in the conversation", kind="validation")
        return str(member["id"])

    async def _not_sent_privately(self, row: DeliveryRecord, post: Post, place: Json) -> str | None:
        name = f"{post.address.user_name}: " if post.address.user_name else ""
        bot = str((place.get("bot") or {}).get("name") or "PolicyPal")
        activity = cards.notice_activity(NOT_INSTALLED.format(name=name, bot=bot))
        reference = await self._reference(row, post)
        return await _remote(self._connector.send(reference, activity), f"post {row.id}") or None

    async def _shared_reference(self, row: DeliveryRecord, post: Post) -> Json:
        """A reference of the place the post is about: its bot, tenant and service open the personal chat."""
        if post.address.reference:
            return post.address.reference
        return await self._reference(row, post)

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


def _direct_text(post: Post, place: Json) -> str:
    """The private part of a thread's answer, introduced; or why a reply is here and not in the thread."""
    where = "the channel" if conversation_type({"conversation": place.get("conversation")}) == "channel" else "the chat"
    if post.reason == PRIVATE_PART:
        return f"About your question in {where}, from documents not everyone there may read:\n\n{post.text}"
    return f"I couldn't post my reply in {where}. {post.text}".strip()


def _requester_name(post: Post) -> str:
    return post.address.user_name or post.address.user


async def _remote(call: Awaitable[T], what: str) -> T:
    try:
        return await call
    except RemoteError:
        raise
    except Exception as exc:
        raise remote_error(exc, what) from exc
