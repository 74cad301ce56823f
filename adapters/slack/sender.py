"""The outbox's Slack sender: each row's ``Post`` rendered as Block Kit and written with the Web API.

A run's answer that fits one message is written out as Slack's native stream (adapters/slack/streaming.py:
the committed answer in chunks, its stream's ts saved on the row like a post's); anything else is posted.
A reply may be several messages (a long answer is split); each part posted is saved on the row
(``Delivery.save``), so a retry, in any process, goes on from the next part. When an earlier attempt
may have gone through without its outcome being recorded (its process died, or it failed after Slack
may have taken the post: ``may_have_posted``), the sender first looks for the part by its metadata, and
posts it only if it is not there: in the thread, or, for a post to the person's DM ("direct": the private
part of an answer, a reply the thread could not take), in that DM's history (``SlackWriter.find``).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from adapters.slack.blocks import (
    SlackMessage,
    answer_markdown,
    answer_messages,
    answer_tail,
    card_messages,
    card_view_message,
    give_up_messages,
    handoff_messages,
    markdown_message,
    notice_messages,
)
from adapters.slack.mrkdwn import escape, to_mrkdwn
from adapters.slack.post import CHANNEL_ERRORS, SlackWriter, may_have_posted
from adapters.slack.streaming import SlackStreams, StreamedAnswer
from bot.cards import CardView
from bot.delivery import Delivery, Post, post_destination
from bot.errors import RemoteError
from bot.replies import PRIVATE_PART
from bot.store import DeliveryRecord
from bot.types import Answer, GaveUp, Pending, TerminationReason

if TYPE_CHECKING:
    from bot.service import PolicyPal

log = logging.getLogger(__name__)


class SlackSender:
    """Sends the outbox's "slack" rows."""

    destinations = (post_destination("slack"),)

    def __init__(self, writer: SlackWriter, service: PolicyPal, streams: SlackStreams | None = None) -> None:
        self._writer = writer
        self._service = service
        self._streams = streams or SlackStreams(writer)

    def label(self, row: DeliveryRecord) -> str:
        return f"slack post {row.id}"

    async def send(self, row: DeliveryRecord, delivery: Delivery) -> str | None:
        post = Post.from_json(row.payload or {})
        where = post.address
        if post.kind == "card":
            target = post.target
            if not target.get("channel") or not target.get("ts"):
                raise RemoteError(f"card of post {row.id} has no posted message to update", kind="validation")
            card = card_view_message(CardView.from_json(post.card or {}))
            await self._writer.update(str(target["channel"]), str(target["ts"]), card)
            return str(target["ts"])
        if post.kind == "private":
            await self._writer.ephemeral(where.channel, where.user, where.thread or None, post.text)
            return None
        if post.kind == "direct":  # to the person's DM with the app: the thread could not be reached
            posted = await self._post_parts(row, delivery, where.user, "", self._direct(post))
            return posted[-1] if posted else None
        if (streamed := self._streamed(post)) is not None:  # an answer in one message: written out as a stream
            return await self._streams.deliver(row, delivery, (where.channel, where.thread, where.user), streamed)
        messages = self._messages(post)
        posted = await self._post_parts(row, delivery, where.channel, where.thread, messages)
        outcome = post.reply_outcome() if post.kind == "reply" else None
        if isinstance(outcome, Pending):  # the card's buttons come back to this message: remember where it is
            ref = {"platform": "slack", "channel": where.channel, "ts": posted[-1], "thread_ts": where.thread}
            await self._service.card_posted(outcome.action.id, ref)
        return posted[-1] if posted else None

    def _direct(self, post: Post) -> list[SlackMessage]:
        """Why the reply is here and not in the thread, how to fix it, and the case that follows it up;
        or the part of a thread's answer that only this person may read.

        That part is the model's Markdown: made mrkdwn like any answer, or Slack would show its ``**``,
        ``[label](url)`` and ``#`` literally, and read its ``<`` and ``&`` as markup.
        """
        if post.reason == PRIVATE_PART:
            intro = f"About your question in <#{post.address.channel}>, from documents not everyone there may read:"
            return notice_messages(f"{intro}\n\n{to_mrkdwn(post.text)}")
        error = (post.reason or "").rpartition(": ")[2] or "an error"
        bot = self._writer.bot.name or "PolicyPal"
        fix = f"Invite me there with `/invite @{bot}`, or ask me here." if error in CHANNEL_ERRORS else ""
        said = to_mrkdwn(post.text)  # the reply's Markdown as mrkdwn: a file name in it must not become a ping
        text = f"I couldn't post my reply in <#{post.address.channel}> (Slack said `{error}`). {fix} {said}"
        return notice_messages(" ".join(text.split()))

    def _streamed(self, post: Post) -> StreamedAnswer | None:
        """A run's answer that fits one message, in a thread, where Slack streams: else None (posted)."""
        if post.kind != "reply" or not post.address.thread or not self._streams.available:
            return None
        outcome = post.reply_outcome()
        if not isinstance(outcome, Answer):
            return None
        tail = answer_tail(outcome, post.run_id or "", actions=post.from_a_run)
        whole = markdown_message(outcome, tail)
        return StreamedAnswer(answer_markdown(outcome), tail, whole) if whole is not None else None

    def _messages(self, post: Post) -> list[SlackMessage]:
        if post.kind == "notice":
            if post.case_id and post.run_id:  # a run recovered from a dead process: its give-up
                gave_up = GaveUp(TerminationReason.CANCELLED, post.text, case_id=post.case_id)
                return give_up_messages(gave_up, post.run_id)
            if post.case_id:
                return handoff_messages(post.text, post.case_id)
            # The core's plain text, with what people wrote in it (file names): never markup, never a ping.
            return notice_messages(escape(post.text))
        outcome = post.reply_outcome()
        if isinstance(outcome, Answer):
            return answer_messages(outcome, post.run_id or "", actions=post.from_a_run)
        if isinstance(outcome, Pending):
            return card_messages(outcome.action)
        return give_up_messages(outcome, post.run_id or "")

    async def _post_parts(
        self, row: DeliveryRecord, delivery: Delivery, channel: str, thread: str, messages: list[SlackMessage]
    ) -> list[str]:
        """Post the parts not posted yet, in order; each part's ts is saved on the row before the next."""
        posted: list[str] = json.loads(delivery.progress) if delivery.progress else []
        look = may_have_posted(row, delivery)
        for part in range(len(posted), len(messages)):
            found = await self._writer.find(channel, thread, row=row.id, part=part) if look else None
            if found is not None:
                log.info("slack post %s part %d was already posted (%s); not posted again", row.id, part, found)
            ts = found or await self._writer.post(channel, thread, messages[part], row=row.id, part=part)
            posted.append(ts)
            if part < len(messages) - 1:
                await delivery.save(json.dumps(posted))
        return posted
