"""What PolicyPal does with a Teams activity, over protocol JSON and the service API; no SDK in here.

``adapters/teams/app.py`` owns the Bot Framework SDK: it authenticates requests, hands activities to
``TeamsBot`` as plain JSON and gives it a ``Connector`` to send, update and look up members with.

Nothing Teams was told we have can be lost: every message, install and card click is written to the
inbox (``inbox.accept``) before its HTTP answer. When the write fails the request gets a 503 and Bot
Framework delivers it again; a redelivery of one already written runs nothing. The inbox then does
the work in the background, under the item's lease, from the stored activity alone: so a process
that dies mid-way has its item taken over by another (the sweeper), which does it again, and a
failure is retried before the person is told, with a reference (``_failed``).

None of the work posts a reply itself. The service commits what to say (a run's answer, a card, a
notice) as outbox rows, and ``adapters.teams.sender`` posts them. What the adapter still sends
directly: typing indicators, the live states of a clicked card (``show``), the apology for work that
failed for good, and invoke answers.

* **Messages**: 201 once written; the item's work shows typing, resolves who is asking and runs
  ``handle_message``. A hint (no question), a refusal (a tenant not served) and the welcome (install
  in a personal chat) are notices through the outbox, so each is said once per activity too.
* **Card clicks** (``adaptiveCard/action``): Confirm / Cancel go to ``service.click`` in the item's
  work; the invoke waits for it, at most ``invoke_wait_s`` after the click arrived (roster lookup
  included), and is answered with the card as the work reports it: the decided card if the call's
  result comes in time, else the "working" card, else "Working on it…" (the card is left as it is).
  Each state reported (``show``) also replaces the posted card for everyone, in order. A refused or
  late click is answered with the card as it stands and why nothing happened. "Still need help?" is
  an inbox item too (the case notice through the outbox); feedback is stored while the invoke waits
  (it posts nothing but the invoke answer; a vote the store refuses is answered with a message saying so,
  and the card keeps its buttons).

Who is asking: the AAD object id and name come with the activity; email (for group mappings and
tickets) and the guest role come from the conversation roster, fetched once per user and cached. If
the roster cannot be read, the user is treated as a guest for that turn: no write tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from adapters.teams import cards
from adapters.teams.activity import (
    THREAD_MARKER,
    Activity,
    address_of,
    addressed_to_bot,
    clicked_card,
    conversation_key,
    conversation_type,
    deep_link,
    reference_of,
    tenant_allowed,
    tenant_of,
    to_inbound,
    user_of,
)
from adapters.teams.connector import Connector, Json
from adapters.teams.dedupe import handled_by_older_release, inbox_id
from adapters.teams.sender import TeamsSender
from adapters.teams.streaming import TeamsStreams
from bot.agent import WORKING, tell
from bot.attachments import files_not_read
from bot.audience import MemberLists, PlaceNow
from bot.cards import CardView, ClickedCard
from bot.clicks import click_notice
from bot.errors import RemoteError
from bot.identity import GroupMap
from bot.pending import PendingRecord
from bot.replies import DecisionReply
from bot.runtime import BackgroundTasks, ExpiringCache
from bot.service import PolicyPal
from bot.store import InboxRecord
from bot.types import Inbound, UserRef

log = logging.getLogger(__name__)

MESSAGE, WELCOME, CLICK, HANDOFF = "teams.message", "teams.welcome", "teams.click", "teams.handoff"
FEEDBACK_VALUES = ("helpful", "not_helpful")
NO_LONGER = "This button is no longer available."
NOT_FOUND = "This request no longer exists."
Choice = Literal["confirm", "cancel"]
Vote = Literal["stored", "ignored", "not_saved"]  # what became of a vote: "not_saved" is told to the voter
Who = Callable[[str], str]


@dataclass(frozen=True)
class TeamsOptions:
    """How the bot behaves; built once from Settings."""

    allowed_tenants: frozenset[str] = frozenset()
    groups: GroupMap = field(default_factory=GroupMap)
    invoke_wait_s: float = 2.0  # Teams shows "Unable to reach app" after about 5 s
    typing_every_s: float = 3.0  # a typing indicator lasts a few seconds
    profile_ttl_s: float = 600.0
    answer_ttl_s: float = 600.0  # how long a click's answer is kept for a redelivered invoke
    members_cap: int | None = None  # answer in channels and group chats for every member (up to this many)
    members_ttl_s: float = 300.0
    drain_s: float = 10.0


class _Answer:
    """The answer to one click's invoke: filled in by the click's work, read by the request waiting for it."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline  # loop time: the invoke is answered by then, with whatever is known
        self.body: Json | None = None
        self.settled = asyncio.Event()

    def offer(self, body: Json, *, settled: bool = True) -> None:
        """The card as the work now reports it; ``settled`` once nothing better is coming before the deadline."""
        self.body = body
        if settled:
            self.settled.set()

    @property
    def waiting(self) -> bool:
        return not self.settled.is_set()

    async def wait(self, deadline: float) -> Json:
        """The best answer known by ``deadline`` (loop time); "Working on it…" (card unchanged) if none is."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.settled.wait(), max(deadline - asyncio.get_running_loop().time(), 0.0))
        return self.body or cards.invoke_message(cards.WORKING_TEXT)


class _Answers:
    """The answers of this process's recent clicks, by inbox id (a redelivered invoke gets the same)."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[float, _Answer]] = {}

    def get(self, key: str) -> _Answer | None:
        entry = self._entries.get(key)
        return entry[1] if entry else None

    def open(self, key: str, deadline: float) -> _Answer:
        now = asyncio.get_running_loop().time()
        for old in [k for k, (at, _) in self._entries.items() if now - at > self._ttl_s]:
            del self._entries[old]
        answer = _Answer(deadline)
        self._entries[key] = (now, answer)
        return answer

    def drop(self, key: str) -> None:
        self._entries.pop(key, None)


class _Results:
    """The card each action's winning click showed here once its call's result was known, by pending id.

    A second click while the first one's call runs is refused with the card saying "Creating it
    now…"; when the first runs in this process, the second can wait for its result instead (within its
    own invoke's deadline), so both clickers see the ticket.
    """

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[float, asyncio.Future[CardView]]] = {}

    def shown(self, pending_id: str, view: CardView) -> None:
        result = self._result(pending_id)
        if not result.done():
            result.set_result(view)

    async def wait(self, pending_id: str, deadline: float) -> CardView | None:
        result = self._result(pending_id)
        try:
            return await asyncio.wait_for(asyncio.shield(result), max(deadline - asyncio.get_running_loop().time(), 0))
        except TimeoutError:
            return None

    def _result(self, pending_id: str) -> asyncio.Future[CardView]:
        now = asyncio.get_running_loop().time()
        for old in [k for k, (at, _) in self._entries.items() if now - at > self._ttl_s]:
            del self._entries[old]
        if pending_id not in self._entries:
            self._entries[pending_id] = (now, asyncio.get_running_loop().create_future())
        return self._entries[pending_id][1]


class _PostedCard:
    """The clicked card's message, updated for everyone in the order the click's work reports its states.

    The "working" state goes in the background (the call must not wait for it); the next state waits
    for it, so it never lands after the result. A failure of the result's update raises: the service
    then writes the card to the outbox, which makes it stick.
    """

    def __init__(self, connector: Connector, reference: Json, activity_id: str | None, tasks: BackgroundTasks):
        self._connector = connector
        self._reference = reference
        self._activity_id = activity_id
        self._tasks = tasks
        self._working: asyncio.Task[Any] | None = None

    async def show(self, content: Json, *, working: bool) -> None:
        if self._activity_id is None:
            if working:
                return
            raise RemoteError("the click names no card message to update", kind="validation")
        if working:
            self._working = self._tasks.spawn(self._quietly(content), name="teams-card-working")
            return
        if self._working is not None:
            await asyncio.gather(self._working, return_exceptions=True)
        await self._connector.update(self._reference, self._activity_id, cards.message(None, content))

    async def _quietly(self, content: Json) -> None:
        assert self._activity_id is not None
        try:
            await self._connector.update(self._reference, self._activity_id, cards.message(None, content))
        except Exception as exc:  # the result's update follows; this state only said "working"
            log.warning("teams: showing card %s as working failed: %s", self._activity_id, exc)


class TeamsBot:
    """Maps Teams activities to inbox items and service calls, and outcomes back to cards."""

    def __init__(self, service: PolicyPal, connector: Connector, options: TeamsOptions | None = None) -> None:
        self.service = service
        self.connector = connector
        self.options = options or TeamsOptions()
        self._tasks = BackgroundTasks("Teams")
        self._profiles: ExpiringCache[tuple[str, str], Json] = ExpiringCache(self.options.profile_ttl_s)
        # Dropped when someone joins (membersAdded); with members audiences, in every replica through the store.
        joins = service.store.joins if self.options.members_cap is not None else None
        self._rosters = MemberLists(self.options.members_ttl_s, joins=joins, scope="teams")
        self._names: ExpiringCache[str, str] = ExpiringCache(self.options.profile_ttl_s)  # AAD id -> name
        self._answers = _Answers(self.options.answer_ttl_s)
        self._results = _Results(self.options.answer_ttl_s)
        self._started = datetime.now(UTC)  # activities sent before this may have met an older release
        # personal chats' streams: begun by a run, ended by its reply; Teams' Stop on one stops the run
        self._streams = TeamsStreams(connector, stop=service.stop)

    def register(self) -> None:
        """Handle this platform's inbox items and send its outbox rows here (at start)."""
        inbox = self.service.inbox
        inbox.register(MESSAGE, self._work_message, on_failure=self._failed)
        inbox.register(WELCOME, self._work_welcome)  # a welcome lost for good is not worth an apology
        inbox.register(CLICK, self._work_click, on_failure=self._failed)
        inbox.register(HANDOFF, self._work_handoff, on_failure=self._failed)
        self.service.outbox.register(TeamsSender(self.connector, self.service, self._streams))

    # --- before the HTTP answer: written down, or not acknowledged ------------------------------

    async def on_message(self, activity: Activity) -> None:
        """Write a message addressed to the bot to the inbox; everything else is ignored.

        Raises when it cannot be written (the caller answers 503, so Teams delivers it again).
        """
        if not addressed_to_bot(activity):
            return
        self._remember_name(activity)
        if not await self._accept(activity, MESSAGE):
            log.info("teams: activity %s was delivered before; not run again", activity.get("id"))

    async def on_members_added(self, activity: Activity) -> None:
        """Welcome a user who installs the bot in personal chat; channel installs stay quiet. Someone added
        to a team, channel or group chat drops its cached roster, in every replica (the join is recorded in
        the store first: raises when it cannot be, so Teams delivers the activity again): the next answer
        there is built for them too."""
        bot_id = (activity.get("recipient") or {}).get("id")
        added = {str(member.get("id")) for member in activity.get("membersAdded") or []}
        personal = (activity.get("conversation") or {}).get("conversationType") == "personal"
        if not personal:  # a personal chat's reader is its one member
            for place in _roster_places(activity):
                await self._rosters.joined(place)
        if bot_id not in added or not personal:
            return
        if not tenant_allowed(tenant_of(activity), self.options.allowed_tenants):
            log.info("teams: not greeting tenant %r, which is not allowed", tenant_of(activity))
            return
        await self._accept(activity, WELCOME)

    async def on_card_action(self, activity: Activity) -> Json:
        """Answer an ``adaptiveCard/action`` invoke; returns the invoke response body. Raises when a click
        that must be written down cannot be (the caller answers 503)."""
        if not tenant_allowed(tenant_of(activity), self.options.allowed_tenants):
            return cards.invoke_card(cards.notice_card(cards.REFUSAL_TEXT))
        verb, data = _action_of(activity)
        if data is None:
            log.warning("teams: malformed card action in invoke %s; answered as unavailable", activity.get("id"))
            return cards.invoke_card(cards.notice_card(NO_LONGER))
        self._remember_name(activity)
        if verb in (cards.CONFIRM, cards.CANCEL):
            return await self._click(activity, data)
        if verb == cards.FEEDBACK:
            return await self._feedback(activity, data)
        if verb == cards.HANDOFF:
            if not await self._accept(activity, HANDOFF):
                log.info(
                    "teams: handoff invoke %s was delivered before; the case is already on its way", activity.get("id")
                )
            return cards.invoke_card(cards.notice_card(cards.HANDOFF_STARTED))
        return cards.invoke_card(cards.notice_card(NO_LONGER))

    async def _click(self, activity: Activity, data: Json) -> Json:
        if not isinstance(data.get("pending_id"), str) or not isinstance(data.get("args_hash"), str):
            return cards.invoke_card(cards.notice_card(NOT_FOUND))
        deadline = asyncio.get_running_loop().time() + self.options.invoke_wait_s  # the whole answer
        key = inbox_id(activity)
        if (earlier := self._answers.get(key)) is not None:  # delivered again, to the process working on it
            log.info("teams: invoke %s delivered again; answering with the card as it stands", activity.get("id"))
            return await earlier.wait(deadline)
        answer = self._answers.open(key, deadline)  # before the write: the work may start at once
        try:
            written = await self._accept(activity, CLICK)
        except BaseException:
            self._answers.drop(key)
            raise
        if not written:  # delivered again, to another process than the one that has it
            self._answers.drop(key)
            log.info("teams: invoke %s was delivered before; its work answers it", activity.get("id"))
            return cards.invoke_message(cards.ALREADY_RECEIVED_TEXT)
        return await answer.wait(deadline)

    async def _accept(self, activity: Activity, kind: str) -> bool:
        return await self.service.inbox.accept(inbox_id(activity), "teams", kind, {"activity": activity})

    # --- the inbox's work: from the stored activity alone ---------------------------------------

    async def _work_message(self, item: InboxRecord) -> None:
        activity: Activity = item.payload["activity"]
        if await self._older_release(item, activity):
            return
        reference = reference_of(activity)
        if not tenant_allowed(tenant_of(activity), self.options.allowed_tenants):
            log.info("teams: tenant %r is not allowed; refusing politely", tenant_of(activity))
            await self._notice(activity, user_of(activity, self.options.groups), cards.REFUSAL_TEXT)
            return
        personal = conversation_type(activity) == "personal"  # streams there: no typing dots beside them
        typing = None if personal else self._tasks.spawn(self._keep_typing(reference), name="teams-typing")
        try:
            user = await self._user(activity, reference)
            inbound = to_inbound(activity, user)
            if inbound.shared and self.options.members_cap is not None:
                inbound = replace(inbound, members=await self._place_members(activity, reference))
            if not inbound.text:
                await self._notice(
                    activity, user, files_not_read(inbound.files, question=False) if inbound.files else cards.EMPTY_TEXT
                )
                return
            await self._run(inbound, reference, personal=personal)  # the reply goes out through the outbox
        finally:
            if typing is not None:
                typing.cancel()

    async def _run(self, inbound: Inbound, reference: Json, *, personal: bool) -> None:
        """The run, with its progress as the chat's informative stream updates in a personal chat."""
        key = inbound.conversation_key
        progress = self._streams.progress(key, reference) if personal else None
        await tell(progress, WORKING)  # best-effort, logged when it fails: never worth failing the run for
        if await self.service.handle_message(inbound, progress=progress) is None:
            self._streams.forget(key)  # another process answered: no reply from here continues the stream

    async def _work_welcome(self, item: InboxRecord) -> None:
        activity: Activity = item.payload["activity"]
        if await self._older_release(item, activity):
            return
        await self._notice(activity, user_of(activity, self.options.groups), cards.WELCOME_TEXT)

    async def _work_click(self, item: InboxRecord) -> None:
        """Confirm or Cancel, decided once by the service; the card changes at once, then for good."""
        activity: Activity = item.payload["activity"]
        verb, data = _action_of(activity)
        choice: Choice = "cancel" if verb == cards.CANCEL else "confirm"
        pending_id, args_hash = str((data or {}).get("pending_id")), str((data or {}).get("args_hash"))
        answer = self._answers.get(item.id)  # None: recovered here after its invoke was answered elsewhere
        try:
            user = await self._clicker(activity, hurry=answer is not None and answer.waiting)
            who = self._who(user)
            reference, card_id = clicked_card(activity)
            posted = _PostedCard(self.connector, reference, card_id, self._tasks)

            async def show(view: CardView) -> None:
                content = cards.card_view(view, who)
                working = view.state == "working"
                if answer is not None:
                    answer.offer(cards.invoke_card(content), settled=not working)
                if not working:
                    self._results.shown(pending_id, view)
                await posted.show(content, working=working)

            decided = await self.service.click(
                pending_id,
                user,
                choice,
                args_hash,
                address=address_of(activity, user),
                who=who,
                show=show,
                card=_clicked(activity, data or {}),
                place=self._place_now(activity),
            )
        except Exception:
            if answer is not None and answer.waiting:  # nothing shown yet: the card stays, the work is retried
                answer.offer(cards.invoke_message(cards.CLICK_RETRYING_TEXT))
            raise
        if answer is None or not answer.waiting:
            return
        view = decided.card  # refused or late (nothing was shown), or showing failed
        if decided.notice is not None and view is not None and view.state == "executing":
            later = await self._results.wait(pending_id, answer.deadline)  # another click here is running the call
            decided = replace(decided, card=later or view)
        answer.offer(self._answer_body(decided, user, choice))

    async def _work_handoff(self, item: InboxRecord) -> None:
        """Hand the thread to the helpdesk on request; the notice names the case."""
        activity: Activity = item.payload["activity"]
        if await self._older_release(item, activity):
            return
        reference = reference_of(activity)
        user = await self._user(activity, reference)
        card_message = {**activity, "id": activity.get("replyToId") or activity.get("id")}
        key = conversation_key(activity, user)
        _verb, data = _action_of(activity)
        clicked = str((data or {}).get("run_id") or "") or None  # the answer whose button was clicked
        case = await self.service.request_handoff(key, user, link=deep_link(card_message), run_id=clicked)
        await self.service.notice(address_of(activity, user), case.message, conversation_key=key, case_id=case.case_id)

    async def _failed(self, item: InboxRecord, error: str) -> None:
        """Work that failed for good: the person hears it, with a reference to quote (best effort, direct).

        A message's run may have begun its chat's progress stream: the apology ends it, or Teams (one
        stream a chat) keeps the progress line spinning and the next question's run would continue it.
        """
        activity: Activity = item.payload.get("activity") or {}
        if item.kind == HANDOFF:
            _verb, data = _action_of(activity)
            text = cards.handoff_failure_text(str((data or {}).get("run_id") or item.id))
        else:
            text = cards.failure_text(item.id)
        if item.kind == MESSAGE and conversation_type(activity) == "personal":
            key = conversation_key(activity, user_of(activity, self.options.groups))
            await self._streams.finish(key, reference_of(activity), cards.message(text))
            return
        await self.connector.send(reference_of(activity), cards.message(text))

    async def _older_release(self, item: InboxRecord, activity: Activity) -> bool:
        """An activity a release from before the inbox answered (its first attempt only: see dedupe.py)."""
        if item.attempts > 1 or not await handled_by_older_release(self.service, activity, self._started):
            return False
        log.info("teams: activity %s was handled before an upgrade; not run again", activity.get("id"))
        return True

    async def _notice(self, activity: Activity, user: UserRef, text: str) -> None:
        key = conversation_key(activity, user)
        await self.service.notice(address_of(activity, user), text, conversation_key=key)

    async def _keep_typing(self, reference: Json) -> None:
        """A lost typing indicator costs nothing but the dots: log it and keep the run going."""
        while True:
            try:
                await self.connector.send(reference, cards.typing())
            except Exception as exc:
                log.warning("typing indicator not sent: %s", exc)
            await asyncio.sleep(self.options.typing_every_s)

    # --- what a click is answered with ----------------------------------------------------------

    def _answer_body(self, decided: DecisionReply, user: UserRef, choice: Choice) -> Json:
        """The card as the click left it; a click that did not decide also says why, to the clicker alone."""
        record = decided.decision.action
        who = self._who(user, record)
        view = decided.card
        if decided.notice is None:
            return cards.invoke_card(cards.card_view(view, who)) if view else cards.invoke_message(cards.WORKING_TEXT)
        notice = click_notice(decided.decision, who, choice)  # in the words the card uses for people
        if decided.decision.status == "wrong_card":  # the clicked card is another action's: it stays as it is
            return cards.invoke_message(notice)
        if view is None:
            return cards.invoke_card(cards.notice_card(notice))
        if notice == view.status(who):  # an expired card says so itself
            return cards.invoke_card(cards.card_view(view, who))
        return cards.invoke_card(cards.card_view(view, who, notice=notice))

    def _who(self, user: UserRef, record: PendingRecord | None = None) -> Who:
        """A user id as cards show it: the clicker's and the requester's names, else any name seen lately."""
        names = {user.id: user.name} if user.name else {}
        stored = (record.platform_message or {}).get("requester_name") if record is not None else None
        if record is not None and stored:
            names.setdefault(record.requester, str(stored))

        def who(user_id: str) -> str:
            return names.get(user_id) or self._names.get(user_id) or user_id

        return who

    def _remember_name(self, activity: Activity) -> None:
        sender = activity.get("from") or {}
        if sender.get("aadObjectId") and sender.get("name"):
            self._names.put(str(sender["aadObjectId"]), str(sender["name"]))

    # --- feedback -------------------------------------------------------------------------------

    async def on_feedback_loop(self, activity: Activity) -> Vote:
        """Teams' own thumbs on an answer (a ``message/submitAction`` invoke): stored with the run, as Slack's
        are. The invoke names the message, not the run: the outbox row that posted it does. The comment
        Teams asks for is kept with the rating (redacted, bounded). A store failure is logged with the run
        and returned as "not_saved", never raised: the SDK answers an error raised in an invoke with a 501."""
        value = _object(activity.get("value"))  # any other shape is a vote not understood: still a 200
        action = _object(value.get("actionValue"))
        reaction = action.get("reaction") if value.get("actionName") == "feedback" else None
        rating = {"like": "helpful", "dislike": "not_helpful"}.get(str(reaction))
        message_id = str(activity.get("replyToId") or "")
        if rating is None or not message_id or not tenant_allowed(tenant_of(activity), self.options.allowed_tenants):
            log.info("teams: feedback invoke %s not understood; ignored", activity.get("id"))
            return "ignored"
        user = user_of(activity, self.options.groups)
        comment = _feedback_text(action.get("feedback"))
        try:
            run_id = await self.service.run_of_post("teams", conversation_key(activity, user), message_id)
        except Exception:
            log.exception("teams: feedback on message %s not saved: its run could not be looked up", message_id)
            return "not_saved"
        if run_id is None:
            log.info("teams: feedback on message %s, which is no answer on record", message_id)
            return "ignored"
        return await self._store_vote(run_id, rating == "helpful", user, comment, message_id)

    async def _store_vote(self, run_id: str, helpful: bool, user: UserRef, comment: str, message_id: str) -> Vote:
        """Store a vote from either path (the feedback loop, a card's buttons); a store failure is logged with the
        run and returned as "not_saved", for the invoke's answer to tell the voter."""
        try:
            stored = await self.service.feedback(run_id, "helpful" if helpful else "not_helpful", user.id, comment)
        except Exception:
            log.exception("teams: feedback on run %s (message %s) not saved", run_id, message_id)
            return "not_saved"
        if not stored:
            log.info("teams: feedback on run %s, which is no longer on record; ignored", run_id)
        return "stored" if stored else "ignored"

    async def _feedback(self, activity: Activity, data: Json) -> Json:
        """A card's Helpful / Not helpful button. A vote the store refuses is told to the clicker (it was not
        saved), and the card keeps its buttons to click again."""
        run_id, value = data.get("run_id"), data.get("value")
        if not isinstance(run_id, str) or value not in FEEDBACK_VALUES:
            return cards.invoke_card(cards.notice_card(NO_LONGER))
        user = user_of(activity, self.options.groups)
        message_id = str(activity.get("replyToId") or "")
        vote = await self._store_vote(run_id, value == "helpful", user, "", message_id)
        if vote == "not_saved":
            return cards.invoke_message(cards.FEEDBACK_NOT_SAVED_TEXT)
        note = "Thanks for the feedback." if vote == "stored" else "That answer is no longer on record."
        return cards.invoke_card(cards.feedback_card(run_id, note))

    # --- identity -------------------------------------------------------------------------------

    async def _clicker(self, activity: Activity, *, hurry: bool) -> UserRef:
        """The roster profile (email for the ticket, usually cached); while an invoke waits (``hurry``), only
        if it comes within half the invoke budget.

        Teams gives up on an invoke after about 5 s. The AAD object id in the activity is all
        ``click`` needs (only the requester decides); without the roster the clicker counts as a
        guest, as in any turn where the roster cannot be read. A slower lookup is not abandoned: it
        completes in the background (``drain`` waits for it), so the next click finds the profile cached.
        """
        reference = reference_of(activity)
        if not hurry:  # recovered, or retried: nobody is waiting for this answer
            return await self._user(activity, reference)
        wait = self.options.invoke_wait_s / 2
        # Shielded and held: a lookup past the wait still finishes and fills the cache for later clicks.
        lookup = self._tasks.spawn(self._user(activity, reference), name="teams-roster")
        try:
            return await asyncio.wait_for(asyncio.shield(lookup), wait)
        except TimeoutError:
            fallback = user_of(activity, self.options.groups)
            log.warning(
                "teams: roster lookup for %s took over %.1f s; deciding with the activity's identity", fallback.id, wait
            )
            return replace(fallback, is_guest=True)

    async def _user(self, activity: Activity, reference: Json) -> UserRef:
        """Who sent the activity, with email and guest role from the roster (cached for a while)."""
        sender_id = str((activity.get("from") or {}).get("id") or "")
        if activity.get("channelId") != "msteams":
            return user_of(activity, self.options.groups)  # the Emulator has no Teams roster or guests
        key = (tenant_of(activity), sender_id)
        member = await self._profiles.get_or_load(key, lambda: self._member(reference, sender_id))
        user = user_of(activity, self.options.groups, member)
        if member is None:
            # Without the roster we cannot tell a guest from a member: no write tools this time.
            return replace(user, is_guest=True)
        return user

    async def _place_members(self, activity: Activity, reference: Json) -> tuple[UserRef, ...] | None:
        """Everyone who reads this channel or group chat, with groups; None (public documents) when the
        roster cannot be read whole or is longer than the cap. Cached a while per conversation, until
        someone joins it (or, for a channel, its team)."""
        conversation = dict(reference.get("conversation") or {})
        conversation["id"] = str(conversation.get("id", "")).partition(THREAD_MARKER)[0]
        key, *team = _roster_places(activity)
        return await self._rosters.of(
            key,
            lambda: self._roster({**reference, "conversation": conversation}, activity),
            within=team[0] if team else None,
        )

    def _place_now(self, activity: Activity) -> PlaceNow:
        """Who reads a clicked card's conversation: its roster is read again (through the cache a join
        drops) when the run goes on, as for a question there."""
        shared = conversation_type(activity) != "personal"
        if not shared or self.options.members_cap is None:
            return PlaceNow(shared)
        return PlaceNow(shared, lambda: self._place_members(activity, reference_of(activity)))

    async def _roster(self, reference: Json, activity: Activity) -> tuple[UserRef, ...] | None:
        bot_id = str((activity.get("recipient") or {}).get("id") or "")
        try:
            entries = [e for e in await self.connector.members(reference) if str(e.get("id")) != bot_id]
        except Exception as exc:
            log.warning("teams: the roster could not be read (%s); answering there from public documents", exc)
            return None
        cap = self.options.members_cap or 0
        if not entries or len(entries) > cap:
            log.info("teams: %d members (cap %d): answering there from public documents", len(entries), cap)
            return None
        return tuple(user_of({"from": entry}, self.options.groups, entry) for entry in entries)

    async def _member(self, reference: Json, user_id: str) -> Json | None:
        conversation = dict(reference.get("conversation") or {})
        conversation["id"] = str(conversation.get("id", "")).partition(THREAD_MARKER)[0]
        try:
            return await self.connector.member({**reference, "conversation": conversation}, user_id)
        except Exception as exc:
            log.warning("teams: roster lookup for %s failed (%s); treating the user as a guest", user_id, exc)
            return None

    # --- background work ------------------------------------------------------------------------

    async def drain(self) -> None:
        """Let items being worked on, then this adapter's own tasks, finish (up to ``drain_s``): for shutdown."""
        await self.service.inbox.drain(self.options.drain_s)
        await self._tasks.drain(self.options.drain_s)


def _roster_places(activity: Activity) -> list[str]:
    """The roster cache's keys for an activity's conversation: the conversation (without its thread), then
    its team when it is a team's channel (a member added to the team reads every channel of it)."""
    conversation = str((activity.get("conversation") or {}).get("id") or "").partition(THREAD_MARKER)[0]
    team = str(((activity.get("channelData") or {}).get("team") or {}).get("id") or "")
    tenant = tenant_of(activity)  # a GUID: no colon, so "tenant:conversation" names one place
    return [f"{tenant}:{conversation}", *([f"{tenant}:team:{team}"] if team else [])]


def _clicked(activity: Activity, data: Json) -> ClickedCard:
    """The card a Confirm / Cancel invoke came from: the card id its data carries, the message it is in.

    Compared as (channel, activity id): activity ids repeat across conversations, and the thread
    marker may be written differently by the invoke and the stored reference.
    """
    card = data.get("card_id")
    message = activity.get("replyToId")
    channel = str((activity.get("conversation") or {}).get("id") or "").partition(THREAD_MARKER)[0]
    return ClickedCard(
        str(card) if card is not None else None, (channel, str(message)) if message else None, _card_location
    )


def _card_location(posted: Json) -> tuple[str, str] | None:
    """(channel, activity id) of a posted card, from what the sender stored (its reference and activity id)."""
    reference, activity_id = posted.get("reference"), posted.get("activity_id")
    conversation = reference.get("conversation") if isinstance(reference, dict) else None
    channel = str(conversation.get("id") or "") if isinstance(conversation, dict) else ""
    return (channel.partition(THREAD_MARKER)[0], str(activity_id)) if channel and activity_id else None


def _action_of(activity: Activity) -> tuple[str, Json | None]:
    """The verb and data of an ``Action.Execute`` invoke; data None when the shape is not a card's."""
    value = activity.get("value")
    action = value.get("action") if isinstance(value, dict) else None
    if not isinstance(action, dict):
        return "", None
    data = action.get("data")
    if data is None:
        data = {}
    return str(action.get("verb") or ""), data if isinstance(data, dict) else None


def _object(raw: Any) -> Json:
    """``raw`` when it is a JSON object, else an empty one: invoke values come as the sender wrote them."""
    return raw if isinstance(raw, dict) else {}


def _feedback_text(raw: Any) -> str:
    """The comment of a feedback-loop vote: Teams sends it JSON-encoded (``{"feedbackText": "..."}``)."""
    if not isinstance(raw, str) or not raw.strip():
        return ""
    try:
        decoded = json.loads(raw)
    except ValueError:
        return raw  # plain text: kept as written
    text = decoded.get("feedbackText") if isinstance(decoded, dict) else None
    return text if isinstance(text, str) else ""
