"""What happens after Slack has its ack: Slack event -> Inbound -> service; replies come from the outbox.

Each public coroutine here is the work of one inbox item, run by a bolt listener in
adapters/slack/app.py under the item's lease. None of them posts a reply itself: the service commits
what to say as outbox rows, and ``adapters.slack.sender`` renders and posts them. A failure raises to
the inbox, which runs the item again (another process, or this one a little later) and, if it keeps
failing, tells the person with a reference (``failed``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any, Literal

from adapters.slack.blocks import card_view_message, clicked_card, mention, parse_button_value, parse_feedback
from adapters.slack.inbound import BotIdentity, conversation_key, is_direct_message, thread_of, to_inbound
from adapters.slack.members import ChannelMembers
from adapters.slack.post import SlackPoster, SlackWriter
from adapters.slack.users import UserDirectory
from bot.agent import WORKING, Progress
from bot.attachments import files_not_read
from bot.audience import PlaceNow
from bot.cards import CardView
from bot.delivery import Address
from bot.service import PolicyPal

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
    """Runs the service for Slack; one per process, shared by all listeners."""

    def __init__(
        self,
        service: PolicyPal,
        poster: SlackPoster,
        writer: SlackWriter,
        users: UserDirectory,
        bot: BotIdentity,
        members: ChannelMembers | None = None,
    ) -> None:
        self.service = service
        self.poster = poster
        self.writer = writer
        self.users = users
        self.bot = bot
        self.members = members  # set with POLICYPAL_SHARED_AUDIENCE=members: channel answers for all members

    async def failed(self, where: Where, reference: str) -> None:
        """Work that failed for good: the person hears it, with a reference to quote, through the outbox
        (so a Slack outage that caused the failure delays the message rather than losing it)."""
        note = f":warning: Something went wrong on my side, so I couldn't finish. Reference `{reference}`."
        address = Address("slack", where.channel, where.thread_ts, None, where.user or "", "")
        key = conversation_key(self.bot.team_id, where.channel, where.thread_ts)
        await self.service.notice(address, note, conversation_key=key)

    # --- a message or mention: one run -------------------------------------------------------------

    async def answer(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        """Run the agent for one message; its reply goes to the thread through the outbox."""
        channel, thread = str(event["channel"]), thread_of(event)
        user, link = await asyncio.gather(
            self.users.lookup(str(event["user"])), self.poster.permalink(channel, str(event["ts"]))
        )
        inbound = to_inbound(event, body, user, self.bot, link)
        if inbound.shared and self.members is not None:
            inbound = replace(inbound, members=await self.members.of(channel))
        address = Address("slack", channel, thread, user=user.id, user_name=user.name)
        key = inbound.conversation_key
        if not inbound.text:  # nothing to answer; attached files are never read, and the person is told so
            hint = files_not_read(inbound.files, question=False) if inbound.files else EMPTY_QUESTION_HINT
            await self.service.notice(address, hint, conversation_key=key)
            return
        progress = await self._status(channel, thread)
        try:
            await self.service.handle_message(inbound, progress=progress)
        except Exception:
            # No reply will clear it (Slack does so on the bot's next message): until the inbox runs the
            # item again, or tells the person it failed, the thread must not say it is still working.
            if progress is not None:
                await self.poster.set_status(channel, thread, "")
            raise

    async def _status(self, channel: str, thread: str) -> Progress | None:
        """The thread's status line now, and a hook that keeps it saying what the run does (bot.agent.progress).

        AI-app threads (assistant and agent threads, in DMs and channels) have a status line; elsewhere
        Slack refuses the first call, and the run is not slowed by more.
        """
        if not await self.poster.set_status(channel, thread, STATUS_WORKING, loading=[WORKING]):
            return None

        async def progress(text: str) -> None:
            await self.poster.set_status(channel, thread, STATUS_WORKING, loading=[text])

        return progress

    async def stop(self, event: dict[str, Any], team_id: str) -> None:
        """Slack's stop button on a working session: the thread's run is cancelled (it gives up and hands off)."""
        channel, thread = str(event.get("channel") or ""), str(event.get("thread_ts") or "")
        stopped = await self.service.stop(conversation_key(team_id or self.bot.team_id, channel, thread))
        log.info("stop pressed in %s/%s: %d run(s) cancelled here, others at their next turn", channel, thread, stopped)

    # --- Confirm / Cancel --------------------------------------------------------------------------

    async def decide(self, click: Click, choice: Choice) -> None:
        """A click on a card: decided once by the service; the card changes at once, then for good."""
        pending_id, args_hash = parse_button_value(click.value)
        card = clicked_card(click.value, click.channel, click.message_ts)  # checked against where it was posted
        actor = await self.users.lookup(click.user_id)
        address = Address("slack", click.channel, click.thread_ts, user=click.user_id, user_name=actor.name)

        async def show(view: CardView) -> None:
            await self.writer.update(click.channel, click.message_ts, card_view_message(view))

        await self.service.click(
            pending_id,
            actor,
            choice,
            args_hash,
            address=address,
            who=mention,
            show=show,
            card=card,
            place=self._place_now(click.channel),
        )

    def _place_now(self, channel: str) -> PlaceNow:
        """Who reads a card's channel at the click: its members are read again (through the cache a join
        drops) when the run goes on, as for a question there."""
        shared = not is_direct_message({"channel": channel})
        if not shared or self.members is None:
            return PlaceNow(shared)
        members = self.members
        return PlaceNow(shared, lambda: members.of(channel))

    async def joined(self, event: dict[str, Any]) -> None:
        """Someone joined a channel: the next answer there, from any replica, is built for them too (its
        cached members dropped here, the join recorded in the store for the others)."""
        if self.members is not None and event.get("channel"):
            await self.members.joined(str(event["channel"]))

    # --- feedback and handoff ----------------------------------------------------------------------

    async def rate(self, click: Click) -> None:
        """A click on the native thumbs: the value says which, and for which run."""
        parsed = parse_feedback(click.value)
        if parsed is None:
            log.warning("feedback click with a value this release did not make: %r", click.value[:80])
            return
        rating, run_id = parsed
        await self.feedback(replace(click, value=run_id), "helpful" if rating == "helpful" else "not_helpful")

    async def feedback(self, click: Click, rating: Rating) -> None:
        """Store helpful / not helpful with the run's trace; only the clicker sees the thanks."""
        saved = await self.service.feedback(click.value, rating, click.user_id)
        note = "Thanks, your feedback is saved with this answer." if saved else "I couldn't find that answer's record."
        address = Address("slack", click.channel, click.thread_ts, user=click.user_id)
        await self.service.note(address, note)

    async def handoff(self, click: Click) -> None:
        """Hand the thread to the helpdesk on request; the reply names the case."""
        user = await self.users.lookup(click.user_id)
        link = await self.poster.permalink(click.channel, click.thread_ts)
        key = conversation_key(click.team_id, click.channel, click.thread_ts)
        case = await self.service.request_handoff(key, user, link=link, run_id=click.value or None)
        address = Address("slack", click.channel, click.thread_ts, user=click.user_id, user_name=user.name)
        await self.service.notice(address, case.message, conversation_key=key, case_id=case.case_id)

    # --- assistant threads -------------------------------------------------------------------------

    async def assistant_thread_started(self, event: dict[str, Any]) -> None:
        thread = event.get("assistant_thread") or {}
        if thread.get("channel_id") and thread.get("thread_ts"):
            await self.poster.suggest_prompts(str(thread["channel_id"]), str(thread["thread_ts"]), SUGGESTED_PROMPTS)
