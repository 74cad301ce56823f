"""What happens after Slack has its ack: Slack event -> Inbound -> service -> Block Kit in the thread.

Each public coroutine here is one background job started by a bolt listener in adapters/slack/app.py.
None of them raises to its caller: ``guarded`` turns an unexpected failure into a reply with a
reference, because at the platform edge errors become replies, never silence.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from adapters.slack.blocks import (
    answer_messages,
    card_message,
    decided_card_message,
    give_up_message,
    handoff_message,
    in_progress_card_message,
    notice_message,
    parse_button_value,
)
from adapters.slack.inbound import BotIdentity, conversation_key, thread_of, to_inbound
from adapters.slack.post import SlackPoster
from adapters.slack.users import UserDirectory
from bot import cards as wording
from bot.service import DecisionReply, PolicyPal, Reply
from bot.store import PendingRecord, utcnow
from bot.types import Answer, Pending, PendingAction

log = logging.getLogger(__name__)

Choice = Literal["confirm", "cancel"]
Rating = Literal["helpful", "not_helpful"]

STATUS_WORKING = "is reading the policies…"
EMPTY_QUESTION_HINT = "Ask me about a company policy, e.g. _Can I work from abroad for three weeks?_"
SUGGESTED_PROMPTS = (
    {"title": "Work from abroad", "message": "Can I work from abroad for three weeks?"},
    {"title": "Expenses", "message": "What can I expense when I travel for work?"},
    {"title": "Report a lost laptop", "message": "I lost my work laptop. What should I do?"},
)


@dataclass(frozen=True)
class Where:
    """The thread a job answers in, and who to tell when it cannot."""

    channel: str
    thread_ts: str
    user: str | None = None


@dataclass(frozen=True)
class Click:
    """One button click from a block_actions payload."""

    user_id: str
    team_id: str
    channel: str
    message_ts: str
    thread_ts: str
    value: str

    @classmethod
    def from_payload(cls, body: dict[str, Any], action: dict[str, Any]) -> Click:
        container = body.get("container") or {}
        message = body.get("message") or {}
        message_ts = str(container.get("message_ts") or message.get("ts") or "")
        return cls(
            user_id=str(body["user"]["id"]),
            team_id=str((body.get("team") or {}).get("id") or body["user"].get("team_id", "")),
            channel=str(container.get("channel_id") or body["channel"]["id"]),
            message_ts=message_ts,
            thread_ts=str(container.get("thread_ts") or message.get("thread_ts") or message_ts),
            value=str(action.get("value") or ""),
        )

    @property
    def where(self) -> Where:
        return Where(self.channel, self.thread_ts, self.user_id)


class SlackBridge:
    """Runs the service for Slack and renders its replies; one per process, shared by all listeners."""

    def __init__(self, service: PolicyPal, poster: SlackPoster, users: UserDirectory, bot: BotIdentity) -> None:
        self.service = service
        self.poster = poster
        self.users = users
        self.bot = bot
        self._deciding: set[str] = set()  # pending ids whose first click is being decided here

    async def guarded(self, job: Awaitable[None], where: Where, what: str) -> None:
        """Run a job; an unexpected failure is logged with a reference and told to the user."""
        try:
            await job
        except Exception:
            reference = "err_" + uuid.uuid4().hex[:12]
            log.exception("Slack %s failed in %s/%s (reference %s)", what, where.channel, where.thread_ts, reference)
            note = f":warning: Something went wrong on my side, so I couldn't finish. Reference `{reference}`."
            await self.poster.post(where.channel, where.thread_ts, notice_message(note), user=where.user)

    # --- a message or mention: one run -------------------------------------------------------------

    async def answer(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        """Run the agent for one message and reply in its thread; a redelivered event runs nothing."""
        channel, thread = str(event["channel"]), thread_of(event)
        user, link = await asyncio.gather(
            self.users.lookup(str(event["user"])), self.poster.permalink(channel, str(event["ts"]))
        )
        inbound = to_inbound(event, body, user, self.bot, link)
        if not inbound.text:  # no run to dedupe it: claim the event, or every redelivery posts the hint again
            if await self.service.claim_event("slack", inbound.event_id):
                await self.poster.post(channel, thread, notice_message(EMPTY_QUESTION_HINT), user=user.id)
            return
        # Assistant threads are DM threads; elsewhere setStatus fails quietly and nothing is shown.
        status = bool(event.get("channel_type") == "im" and event.get("thread_ts"))
        if status:
            status = await self.poster.set_status(channel, thread, STATUS_WORKING)
        reply = await self.service.handle_message(inbound)
        if reply is None:  # a retry of an event already handled (here or by another replica)
            if status:
                await self.poster.set_status(channel, thread, "")
            return
        await self.render(reply, Where(channel, thread, user.id))

    async def render(self, reply: Reply, where: Where) -> None:
        """An outcome as Slack messages: the answer, a ticket card, or the give-up with its reference."""
        outcome = reply.outcome
        if isinstance(outcome, Answer):
            messages = answer_messages(outcome, reply.run_id, actions=reply.from_a_run)
            await self.poster.post_all(where.channel, where.thread_ts, messages, user=where.user)
        elif isinstance(outcome, Pending):
            await self._post_card(outcome.action, where)
        else:
            message = give_up_message(outcome, reply.run_id)
            await self.poster.post(where.channel, where.thread_ts, message, user=where.user)

    async def _post_card(self, action: PendingAction, where: Where) -> None:
        ts = await self.poster.post(where.channel, where.thread_ts, card_message(action), user=where.user)
        if ts is not None:
            ref = {"platform": "slack", "channel": where.channel, "ts": ts, "thread_ts": where.thread_ts}
            await self.service.pending.set_platform_message(action.id, ref)
            return
        case = await self.service.card_not_shown(action.id)  # nobody can confirm a card they never saw
        if case is not None:
            message = handoff_message(case.user_reply(), case.case_id, case.run_id)
            await self.poster.post(where.channel, where.thread_ts, message, user=where.user)

    # --- Confirm / Cancel --------------------------------------------------------------------------

    async def decide(self, click: Click, choice: Choice) -> None:
        """Apply the requester's click; anyone else is told who may, and nothing changes.

        The card shows the call's result (ticket id, or cancelled) as soon as it is known, through
        ``on_result``; the continued run's reply follows in the thread when the model is done.
        """
        pending_id, args_hash = parse_button_value(click.value)
        record = await self._requesters_record(click, pending_id, choice)
        if record is None:
            return
        card_shown = False

        async def on_result(early: DecisionReply) -> None:
            nonlocal card_shown
            card_shown = True
            await self._show_result(click, early, record)

        decided = await self._decide(click, record, choice, args_hash, on_result)
        await self._show_decision(click, decided, record, card_shown=card_shown)

    async def _requesters_record(self, click: Click, pending_id: str, choice: Choice) -> PendingRecord | None:
        """The stored action if the clicker is its requester; otherwise a private note and None."""
        record = await self.service.pending.get(pending_id)
        if record is None:
            note = "This request no longer exists."
        elif click.user_id != record.requester:
            note = f"Only <@{record.requester}> can {choice} this."
        else:
            return record
        await self.poster.ephemeral(click.channel, click.user_id, click.thread_ts, note)
        return None

    async def _decide(
        self,
        click: Click,
        record: PendingRecord,
        choice: Choice,
        args_hash: str,
        on_result: Callable[[DecisionReply], Awaitable[None]],
    ) -> DecisionReply:
        """Buttons off at once (first click only), then the service's exactly-once decision."""
        actor = await self.users.lookup(click.user_id)
        first = record.id not in self._deciding
        self._deciding.add(record.id)
        try:
            if first and record.state == "open" and record.expires_at > utcnow():
                working = in_progress_card_message(record, actor.id, utcnow(), choice)
                await self.poster.update(click.channel, click.message_ts, working)
            return await self.service.decide(record.id, actor, choice, args_hash, on_result=on_result)
        except Exception:
            await self._restore_if_open(click, record.id)  # ``guarded`` then tells the user
            raise
        finally:
            if first:
                self._deciding.discard(record.id)

    async def _restore_if_open(self, click: Click, pending_id: str) -> None:
        """After a failed decision, a card nobody decided gets its buttons back instead of "Working on it…"."""
        try:
            fresh = await self.service.pending.get(pending_id)
        except Exception:
            log.exception("could not reload pending %s after a failed decision", pending_id)
            return
        if fresh is not None and fresh.state == "open":
            await self.poster.update(click.channel, click.message_ts, card_message(fresh.as_action()))

    async def _show_result(self, click: Click, decided: DecisionReply, before: PendingRecord) -> None:
        """The decided card: who, when, and the ticket id or the reason it failed."""
        fresh = await self.service.pending.get(before.id) or decided.decision.action or before
        case_id = decided.case.case_id if decided.case else None
        await self.poster.update(click.channel, click.message_ts, decided_card_message(fresh, case_id))

    async def _show_decision(
        self, click: Click, decided: DecisionReply, before: PendingRecord, *, card_shown: bool
    ) -> None:
        if decided.status in ("confirmed", "cancelled"):
            if not card_shown:
                await self._show_result(click, decided, before)
            if decided.reply is not None:
                await self.render(decided.reply, click.where)
            return
        fresh = await self.service.pending.get(before.id) or decided.decision.action or before
        await self.poster.ephemeral(click.channel, click.user_id, click.thread_ts, decision_note(decided, fresh))
        if fresh.state == "open":  # a refused click (hash mismatch): put the real buttons back
            await self.poster.update(click.channel, click.message_ts, card_message(fresh.as_action()))
        elif fresh.state != "executing":  # executing: the winning click updates the card when it is done
            await self.poster.update(click.channel, click.message_ts, decided_card_message(fresh))

    # --- feedback and handoff ----------------------------------------------------------------------

    async def feedback(self, click: Click, rating: Rating) -> None:
        """Store helpful / not helpful with the run's trace; only the clicker sees the thanks."""
        saved = await self.service.feedback(click.value, rating, click.user_id)
        note = "Thanks, your feedback is saved with this answer." if saved else "I couldn't find that answer's record."
        await self.poster.ephemeral(click.channel, click.user_id, click.thread_ts, note)

    async def handoff(self, click: Click) -> None:
        """Hand the thread to the helpdesk on request; the reply names the case."""
        user = await self.users.lookup(click.user_id)
        link = await self.poster.permalink(click.channel, click.thread_ts)
        key = conversation_key(click.team_id, click.channel, click.thread_ts)
        case = await self.service.request_handoff(key, user, link=link)
        message = handoff_message(case.message, case.case_id)
        await self.poster.post(click.channel, click.thread_ts, message, user=click.user_id)

    # --- assistant threads -------------------------------------------------------------------------

    async def assistant_thread_started(self, event: dict[str, Any]) -> None:
        thread = event.get("assistant_thread") or {}
        if thread.get("channel_id") and thread.get("thread_ts"):
            await self.poster.suggest_prompts(str(thread["channel_id"]), str(thread["thread_ts"]), SUGGESTED_PROMPTS)


def decision_note(decided: DecisionReply, record: PendingRecord) -> str:
    """What a refused or late click is told, with Slack mentions instead of raw user ids."""
    if decided.status == "expired":
        return wording.expired(record.expires_at)
    if decided.status == "already_decided" and record.decider:
        return wording.already_decided(record.state, f"<@{record.decider}>", record.decided_at)
    if decided.status == "not_requester":
        return f"Only <@{record.requester}> can decide this."
    return decided.decision.message
