"""What PolicyPal does with a Teams activity, over protocol JSON and the service API; no SDK in here.

``adapters/teams/app.py`` owns the Bot Framework SDK: it authenticates requests, hands activities to
``TeamsBot`` as plain JSON and gives it a ``Connector`` to send, update and look up members with.

Every turn is acknowledged at once and the work continues in a background task:

* **Messages**: 201 straight away (Bot Framework redelivers an activity it waited 15 s for); a task
  shows typing, runs ``handle_message`` and posts the reply as a proactive message to the stored
  conversation reference. The reference, not the turn context, because the turn has ended by then,
  and because the same reference (kept with a pending action) still works after a restart.
  A reply sent without a run (a hint, a refusal, the welcome, a handoff's case) claims the activity
  first, as ``handle_message`` does for a run, so a redelivery never posts it twice
  (adapters/teams/dedupe.py).
* **Card clicks** (``adaptiveCard/action``): the decision itself is quick, but ``service.decide`` also
  runs the ticket and then the model. So the click starts ``decide`` in a task and answers the invoke
  as soon as ``decide`` reports the outcome through ``on_result`` (ticket id, cancelled) or returns
  (refused, expired...), or ``invoke_wait`` seconds after the click (roster lookup included), whichever
  comes first; the continued run's reply follows in the thread. The clicked card is replaced for the
  clicker by the invoke answer and for everyone, at the same moment, by an update of the posted card.

Who is asking: the AAD object id and name come with the activity; email (for group mappings and
tickets) and the guest role come from the conversation roster, fetched once per user and cached. If
the roster cannot be read, the user is treated as a guest for that turn: no write tools.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from adapters.teams import cards
from adapters.teams.activity import (
    THREAD_MARKER,
    Activity,
    addressed_to_bot,
    conversation_key,
    deep_link,
    reference_of,
    tenant_allowed,
    tenant_of,
    to_inbound,
    user_of,
)
from adapters.teams.dedupe import event_id, handled_by_older_release
from bot.errors import DeliveryFailed
from bot.identity import GroupMap
from bot.pending import PendingRecord
from bot.runtime import BackgroundTasks, ExpiringCache
from bot.service import DecisionReply, PolicyPal, Reply
from bot.types import Pending, UserRef

log = logging.getLogger(__name__)

Json = dict[str, Any]
FEEDBACK_VALUES = ("helpful", "not_helpful")
SETTLED = frozenset({"confirmed", "cancelled", "expired", "already_decided"})
NO_LONGER = "This button is no longer available."


class Connector(Protocol):
    """The outbound half of the Bot Framework protocol, addressed by a stored conversation reference."""

    async def send(self, reference: Json, activity: Json) -> str:
        """Post ``activity`` to the reference's conversation; returns the new activity id."""
        ...

    async def update(self, reference: Json, activity_id: str, activity: Json) -> None: ...

    async def member(self, reference: Json, user_id: str) -> Json | None:
        """The roster entry (email, userPrincipalName, userRole) of a conversation member."""
        ...


@dataclass(frozen=True)
class TeamsOptions:
    """How the bot behaves; built once from Settings."""

    allowed_tenants: frozenset[str] = frozenset()
    groups: GroupMap = field(default_factory=GroupMap)
    invoke_wait_s: float = 2.0  # Teams shows "Unable to reach app" after about 5 s
    typing_every_s: float = 3.0  # a typing indicator lasts a few seconds
    profile_ttl_s: float = 600.0
    drain_s: float = 10.0


@dataclass
class Click:
    """One Confirm / Cancel click as the invoke carried it."""

    verb: str
    pending_id: str
    args_hash: str
    user: UserRef
    reference: Json
    published: bool = False  # the decided card already replaced the posted one
    failed: bool = False  # deciding raised: nothing may have been decided


class TeamsBot:
    """Maps Teams activities to service calls and outcomes back to messages and cards."""

    def __init__(self, service: PolicyPal, connector: Connector, options: TeamsOptions | None = None) -> None:
        self.service = service
        self.connector = connector
        self.options = options or TeamsOptions()
        self._tasks = BackgroundTasks("Teams")
        self._profiles: ExpiringCache[tuple[str, str], Json] = ExpiringCache(self.options.profile_ttl_s)
        self._started = datetime.now(UTC)  # activities sent before this may have met an older release

    # --- messages -------------------------------------------------------------------------------

    def on_message(self, activity: Activity) -> None:
        """Accept a message: questions run in the background; everything else is ignored."""
        if not addressed_to_bot(activity):
            return
        reference = reference_of(activity)
        if not tenant_allowed(tenant_of(activity), self.options.allowed_tenants):
            log.info("teams: tenant %r is not allowed; refusing politely", tenant_of(activity))
            self._spawn(self._reply_once(activity, reference, cards.message(cards.REFUSAL_TEXT)))
            return
        self._spawn(self._answer(activity, reference))

    def on_members_added(self, activity: Activity) -> None:
        """Greet a user who installs the bot in personal chat; channel installs stay quiet."""
        bot_id = (activity.get("recipient") or {}).get("id")
        added = {str(member.get("id")) for member in activity.get("membersAdded") or []}
        personal = (activity.get("conversation") or {}).get("conversationType") == "personal"
        if bot_id not in added or not personal:
            return
        if not tenant_allowed(tenant_of(activity), self.options.allowed_tenants):
            log.info("teams: not greeting tenant %r, which is not allowed", tenant_of(activity))
            return
        self._spawn(self._reply_once(activity, reference_of(activity), cards.message(cards.WELCOME_TEXT)))

    async def _answer(self, activity: Activity, reference: Json) -> None:
        typing = self._spawn(self._keep_typing(reference))
        try:
            user = await self._user(activity, reference)
            inbound = to_inbound(activity, user)
            if not inbound.text:
                await self._reply_once(activity, reference, cards.message(cards.EMPTY_TEXT))
                return
            if await handled_by_older_release(self.service, activity, self._started):
                log.info("teams: activity %s was handled before an upgrade; not run again", activity.get("id"))
                return
            reply = await self.service.handle_message(inbound)  # claims the activity's event id
        except Exception:
            log.exception("teams: run for activity %s failed", activity.get("id"))
            await self._send_safely(reference, cards.message(cards.ERROR_TEXT))
            return
        finally:
            typing.cancel()
        if reply is not None:  # None: a redelivered activity that already ran
            await self._post_reply(reference, reply, user.name)

    async def _reply_once(self, activity: Activity, reference: Json, reply: Json) -> None:
        """Send a reply that has no run behind it once per activity, however often Teams delivers it."""
        try:
            first = await self._claim(activity)
        except Exception:
            log.exception("teams: could not claim activity %s; replying anyway", activity.get("id"))
            first = True  # a repeated notice beats silence
        if first:
            await self._send_safely(reference, reply)
        else:
            log.info("teams: activity %s was already answered", activity.get("id"))

    async def _claim(self, activity: Activity) -> bool:
        """True the first time any process (this release or an older one) sees this activity."""
        if await handled_by_older_release(self.service, activity, self._started):
            return False
        return await self.service.claim_event("teams", event_id(activity))

    async def _post_reply(self, reference: Json, reply: Reply, requester_name: str) -> None:
        """Post a run's outcome in the thread; a pending card also remembers where it was posted."""
        activity_id = await self._send_safely(reference, cards.reply_activity(reply, requester_name))
        if not isinstance(reply.outcome, Pending):
            return
        if activity_id is None:  # not posted (refused after the retries, logged): nobody can confirm it
            case = await self.service.card_not_shown(reply.outcome.action.id)
            if case is not None:
                await self._send_safely(reference, cards.message(case.user_reply()))
        elif activity_id:  # a channel that answers without an id showed the card; it cannot be updated later
            where = {"reference": reference, "activity_id": activity_id, "requester_name": requester_name}
            await self.service.pending.set_platform_message(reply.outcome.action.id, where)

    async def _keep_typing(self, reference: Json) -> None:
        """A lost typing indicator costs nothing but the dots: log it and keep the run going."""
        while True:
            try:
                await self.connector.send(reference, cards.typing())
            except Exception as exc:
                log.warning("typing indicator not sent: %s", exc)
            await asyncio.sleep(self.options.typing_every_s)

    # --- card clicks ----------------------------------------------------------------------------

    async def on_card_action(self, activity: Activity) -> Json:
        """Answer an ``adaptiveCard/action`` invoke quickly; returns the invoke response body."""
        if not tenant_allowed(tenant_of(activity), self.options.allowed_tenants):
            return cards.invoke_card(cards.notice_card(cards.REFUSAL_TEXT))
        verb, data = _action_of(activity)
        if data is None:
            log.warning("teams: malformed card action in invoke %s; answered as unavailable", activity.get("id"))
            return cards.invoke_card(cards.notice_card(NO_LONGER))
        user = user_of(activity, self.options.groups)
        if verb in (cards.CONFIRM, cards.CANCEL):
            deadline = time.monotonic() + self.options.invoke_wait_s  # the whole answer, roster included
            user = await self._clicker(activity, user)
            return await self._decide_click(activity, user, verb, data, deadline)
        if verb == cards.FEEDBACK:
            return await self._feedback(user, data)
        if verb == cards.HANDOFF:
            return self._handoff(activity, data)
        return cards.invoke_card(cards.notice_card(NO_LONGER))

    async def _clicker(self, activity: Activity, fallback: UserRef) -> UserRef:
        """The roster profile (email for the ticket, usually cached) if it comes within half the invoke budget.

        Teams gives up on an invoke after about 5 s. The AAD object id in the activity is all
        ``decide`` needs (only the requester decides); without the roster the clicker counts as a
        guest, as in any turn where the roster cannot be read. A slower lookup is not abandoned: it
        completes in the background (``drain`` waits for it), so the next click finds the profile cached.
        """
        wait = self.options.invoke_wait_s / 2
        # Shielded and held: a lookup past the wait still finishes and fills the cache for later clicks.
        lookup = self._spawn(self._user(activity, reference_of(activity)))
        try:
            return await asyncio.wait_for(asyncio.shield(lookup), wait)
        except TimeoutError:
            log.warning("teams: roster lookup for %s took over %.1f s; deciding with the activity's identity",
                        fallback.id, wait)
            return replace(fallback, is_guest=True)

    async def _decide_click(self, activity: Activity, user: UserRef, verb: str, data: Json, deadline: float) -> Json:
        pending_id, args_hash = data.get("pending_id"), data.get("args_hash")
        if not isinstance(pending_id, str) or not isinstance(args_hash, str):
            return cards.invoke_card(cards.notice_card("This request no longer exists."))
        click = Click(verb, pending_id, args_hash, user, reference_of(activity))
        outcome: asyncio.Future[DecisionReply | None] = asyncio.get_running_loop().create_future()
        self._spawn(self._decide(click, outcome))
        try:
            decided = await asyncio.wait_for(asyncio.shield(outcome), max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            decided = None  # the card says "Working on it…"; the posted card is updated when it is done
        record = await self.service.pending.get(pending_id)
        if click.failed and record is not None and record.state == "open":
            # Nothing was decided: the buttons stay, so the requester can try again.
            return cards.invoke_card(cards.pending_card(record.as_action(), _requester_name(record, user)))
        return cards.invoke_card(self._click_card(record, decided, user))

    def _click_card(self, record: PendingRecord | None, decided: DecisionReply | None, user: UserRef) -> Json:
        if record is None:
            return cards.notice_card("This request no longer exists.")
        action, who = record.as_action(), _requester_name(record, user)
        line = cards.outcome_line(record.state, record.result, who, record.expires_at)
        status = decided.status if decided else None
        if status == "not_requester" or (status is None and user.id != record.requester):
            return cards.decided_card(action, line, notice=f"Only {who} can confirm or cancel this request.")
        if status == "hash_mismatch" and decided is not None:
            return cards.decided_card(action, line, notice=decided.decision.message)
        if record.state == "open":  # the wait ran out before the decision was stored
            line = "Working on it…"
        return cards.decided_card(action, line)

    async def _decide(self, click: Click, outcome: asyncio.Future[DecisionReply | None]) -> None:
        """Apply the click; the card changes when the outcome is known, the reply when the model is done."""

        async def on_result(reply: DecisionReply) -> None:
            _settle(outcome, reply)
            await self._publish_once(click)

        try:
            decided = await self.service.decide(
                click.pending_id, click.user, click.verb, click.args_hash, on_result=on_result  # type: ignore[arg-type]
            )
        except Exception:
            log.exception("teams: deciding %s failed", click.pending_id)
            click.failed = True
            _settle(outcome, None)
            await self._decision_failed(click)
            return
        _settle(outcome, decided)  # refusals and expiry return without a result to report
        if decided.status in SETTLED:  # the posted card shows the state for everyone
            await self._publish_once(click)
        if decided.reply is not None:  # the continued run, after a confirm or cancel
            record = await self.service.pending.get(click.pending_id)
            where = (record.platform_message or {}) if record else {}
            await self._post_reply(where.get("reference") or click.reference, decided.reply, click.user.name)

    async def _decision_failed(self, click: Click) -> None:
        """Say so in the thread, and give a still-open card its buttons back: never a silent "Working on it…"."""
        try:
            record = await self.service.pending.get(click.pending_id)
        except Exception:
            log.exception("teams: could not reload %s after a failed decision", click.pending_id)
            record = None
        where = (record.platform_message or {}) if record else {}
        still_open = record is not None and record.state == "open"
        text = cards.DECIDE_ERROR_TEXT if still_open or record is None else cards.DECIDED_ERROR_TEXT
        await self._send_safely(where.get("reference") or click.reference, cards.message(text))
        if record is None or not still_open or not where.get("activity_id") or not where.get("reference"):
            return
        activity = cards.message(None, cards.pending_card(record.as_action(), _requester_name(record, click.user)))
        try:
            await self.connector.update(where["reference"], where["activity_id"], activity)
        except Exception:
            log.exception("teams: restoring the card of %s failed", record.id)

    async def _publish_once(self, click: Click) -> None:
        if click.published:
            return
        click.published = True
        record = await self.service.pending.get(click.pending_id)
        # Executing: another click is running the call and publishes its outcome when done; a
        # "Creating the ticket…" sent from here could land after that (a throttled update) and stay.
        if record is not None and record.state != "executing":
            await self._publish(record, click.user)

    async def _publish(self, record: PendingRecord, user: UserRef) -> None:
        """Replace the posted card for everyone with the decided one."""
        where = record.platform_message or {}
        if not where.get("activity_id") or not where.get("reference"):
            log.warning("teams: pending %s has no posted card to update", record.id)
            return
        line = cards.outcome_line(record.state, record.result, _requester_name(record, user), record.expires_at)
        activity = cards.message(None, cards.decided_card(record.as_action(), line))
        try:
            await self.connector.update(where["reference"], where["activity_id"], activity)
        except DeliveryFailed:
            log.error("teams: the posted card of %s still shows it open", record.id)  # the cause is logged
        except Exception:
            log.exception("teams: updating the card of %s failed", record.id)

    # --- feedback and handoff -------------------------------------------------------------------

    async def _feedback(self, user: UserRef, data: Json) -> Json:
        run_id, value = data.get("run_id"), data.get("value")
        if not isinstance(run_id, str) or value not in FEEDBACK_VALUES:
            return cards.invoke_card(cards.notice_card(NO_LONGER))
        stored = await self.service.feedback(run_id, value, user.id)
        note = "Thanks for the feedback." if stored else "That answer is no longer on record."
        return cards.invoke_card(cards.feedback_card(run_id, note))

    def _handoff(self, activity: Activity, data: Json) -> Json:
        run_id = str(data.get("run_id") or "")
        self._spawn(self._hand_off(activity, run_id))
        return cards.invoke_card(cards.notice_card(cards.HANDOFF_STARTED))

    async def _hand_off(self, activity: Activity, run_id: str) -> None:
        reference = reference_of(activity)
        try:
            if not await self._claim(activity):  # a redelivered invoke: the case was already posted
                log.info("teams: handoff invoke %s was already answered", activity.get("id"))
                return
            user = await self._user(activity, reference)
            text = await self._request_handoff(activity, user, run_id)
        except Exception:
            log.exception("teams: handoff for %s failed", run_id)
            text = f"I couldn't reach the helpdesk just now. Please contact them and mention reference `{run_id}`."
        await self._send_safely(reference, cards.message(text))

    async def _request_handoff(self, activity: Activity, user: UserRef, run_id: str) -> str:
        card_message = {**activity, "id": activity.get("replyToId") or activity.get("id")}
        case = await self.service.request_handoff(conversation_key(activity, user), user, link=deep_link(card_message))
        text, case_id = case.message, case.case_id
        if case_id and case_id not in text:
            text = f"{text} (case **{case_id}**)".strip()
        return text or f"I've passed this to the helpdesk: case **{case_id}**."

    # --- identity -------------------------------------------------------------------------------

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

    async def _member(self, reference: Json, user_id: str) -> Json | None:
        conversation = dict(reference.get("conversation") or {})
        conversation["id"] = str(conversation.get("id", "")).partition(THREAD_MARKER)[0]
        try:
            return await self.connector.member({**reference, "conversation": conversation}, user_id)
        except Exception as exc:
            log.warning("teams: roster lookup for %s failed (%s); treating the user as a guest", user_id, exc)
            return None

    # --- background work ------------------------------------------------------------------------

    async def _send_safely(self, reference: Json, activity: Json) -> str | None:
        try:
            return await self.connector.send(reference, activity)
        except DeliveryFailed:
            return None  # retried until the budget ran out, and logged with the conversation
        except Exception:
            log.exception("teams: sending to %s failed", (reference.get("conversation") or {}).get("id"))
            return None

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self._tasks.spawn(work)

    async def drain(self) -> None:
        """Let running work finish (up to ``drain_s``), then cancel what is left: for shutdown."""
        await self._tasks.drain(self.options.drain_s)

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


def _requester_name(record: PendingRecord, user: UserRef) -> str:
    stored = (record.platform_message or {}).get("requester_name")
    if stored:
        return str(stored)
    return user.name if user.id == record.requester and user.name else record.requester


def _settle(outcome: asyncio.Future[DecisionReply | None], value: DecisionReply | None) -> None:
    if not outcome.done():
        outcome.set_result(value)
