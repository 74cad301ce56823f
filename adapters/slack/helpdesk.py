"""The Slack helpdesk channel as a handoff destination: a summary message, the transcript in its thread.

The summary names the user, the question in one line, the reason and the link back; the full
Markdown transcript follows as replies in the summary's thread (Slack shows code blocks verbatim).
A delivery that posted its summary but failed in the thread resumes in the thread on the next
attempt, from any process: the outbox row keeps where the summary is and how many parts are in.

Each message is posted once, as the Slack sender's are (adapters/slack/post.py): tried once (no retry
inside the call), with the case and part in its metadata. Slack can take a post whose answer is lost (a
5xx, a dropped connection, a timeout), so the next attempt looks before posting again: for the summary
in the channel's history (when the failure left ``UNSURE`` on the row, or the worker died), for the
next transcript part in the summary's thread (whenever a delivery resumes there). The history is read by
channel id only: a channel configured by name is looked up by the id a post's answer carried, or else
once, with conversations.list.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.post import find_post, may_have_written, post_metadata, slack_error, without_retries
from bot.delivery import Delivery
from bot.helpdesk import HandoffCase, reason_label

log = logging.getLogger(__name__)

CHUNK_CHARS = 3_500  # under Slack's 4,000-character guidance for one message's text
MAX_THREAD_MESSAGES = 15
HEADER_CHARS = 150  # Block Kit header limit
SECTION_CHARS = 2_900  # Block Kit section limit is 3,000
UNSURE = "?"  # saved when posting the summary failed where Slack may have taken it: look for it first
SUMMARY = 0  # the summary's part in its metadata; the transcript's parts are 1, 2, ...
CHANNELS_PAGE = 200  # channels per conversations.list call (Slack's advice: at most 200)
MAX_CHANNEL_PAGES = 50  # up to 10,000 channels read when looking for the helpdesk channel's id
CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{2,}")  # a channel's id, as opposed to a name such as #it-helpdesk
QUESTION_CUT = "…\n_(cut here: too long for one Slack block; the transcript in the thread has the runs as asked)_"


@dataclass(frozen=True)
class _Progress:
    """Where the summary is and how many transcript parts are in its thread, as the outbox row keeps it."""

    channel: str
    ts: str
    posted: int = 0

    def __str__(self) -> str:
        return f"{self.channel}/{self.ts}/{self.posted}"

    @classmethod
    def parse(cls, saved: str | None) -> _Progress | None:
        parts = (saved or "").split("/")
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]))


class SlackChannelDestination:
    """Posts each case to one Slack channel (an id such as C0123, or a name the bot is a member of)."""

    name = "slack"

    def __init__(self, client: AsyncWebClient, channel: str) -> None:
        self._client = without_retries(client)  # posts: a blind second try could post a message twice
        self._reader = client  # looking for an earlier post keeps the client's retries
        self._channel = channel
        self._channel_id: str | None = channel if CHANNEL_ID.fullmatch(channel) else None
        self._unresolved = False  # the name is not among the bot's channels: warned once, not listed again
        self._progress: dict[str, str] = {}  # deliveries outside the outbox resume within this process

    @classmethod
    def from_token(cls, token: str, channel: str, *, base_url: str | None = None) -> SlackChannelDestination:
        if not base_url:
            return cls(AsyncWebClient(token=token), channel)
        return cls(AsyncWebClient(token=token, base_url=base_url.rstrip("/") + "/"), channel)

    async def deliver(self, case: HandoffCase) -> str | None:
        """Outside the outbox: progress is kept in memory, so a retry in this process still resumes."""

        async def remember(progress: str) -> None:
            self._progress[case.case_id] = progress

        delivery = Delivery(row_id=0, key="", progress=self._progress.get(case.case_id), save=remember)
        ref = await self.deliver_tracked(case, delivery)
        self._progress.pop(case.case_id, None)
        return ref

    async def deliver_tracked(self, case: HandoffCase, delivery: Delivery) -> str | None:
        """Post what earlier attempts did not: the summary unless saved, then the remaining parts; what a
        failed attempt may have posted unrecorded (the summary, or the part after the saved ones) is looked
        for first."""
        saved = _Progress.parse(delivery.progress)
        progress = saved or await self._summary(case, delivery)
        chunks = transcript_chunks(case)  # the same parts on every attempt: the case is stored
        look = saved is not None  # resumed: the next part may be in (only it: each is saved before the next is posted)
        for index in range(progress.posted, len(chunks)):
            part = index + 1
            if not (look and await self._find(case, part, progress.channel, progress.ts)):
                await self._client.chat_postMessage(
                    channel=progress.channel,
                    thread_ts=progress.ts,
                    text=chunks[index],
                    metadata=post_metadata(case=case.case_id, part=part),
                )
            look = False
            progress = _Progress(progress.channel, progress.ts, part)
            await delivery.save(str(progress))
        return f"{progress.channel}/{progress.ts}"

    async def _summary(self, case: HandoffCase, delivery: Delivery) -> _Progress:
        """Where the summary is: found where a failed attempt may have posted it, else posted now."""
        if delivery.progress == UNSURE or delivery.uncertain:
            channel = await self._history_channel()
            found = await self._find(case, SUMMARY, channel, None)
            if found is not None:
                progress = _Progress(channel, found)
                await delivery.save(str(progress))
                return progress
        try:
            response = await self._client.chat_postMessage(
                channel=self._channel,
                text=_escape(case.summary_line()),
                blocks=summary_blocks(case),
                unfurl_links=False,
                metadata=post_metadata(case=case.case_id, part=SUMMARY),
            )
        except Exception as exc:
            if may_have_written(exc):  # Slack may have posted it: the next attempt looks before posting
                await delivery.save(UNSURE)
            raise
        progress = _Progress(str(response["channel"]), str(response["ts"]))
        self._channel_id = progress.channel  # Slack answers with the id even when the post named the channel
        await delivery.save(str(progress))  # before the thread: a retry must not post a second summary
        return progress

    async def _history_channel(self) -> str:
        """The helpdesk channel's id, for conversations.history (which takes no name): known from the setting or
        an earlier post's answer, else looked up once; the setting as it is when the name cannot be found."""
        if self._channel_id is None and not self._unresolved:
            self._channel_id = await self._lookup_channel_id()
        return self._channel_id or self._channel

    async def _lookup_channel_id(self) -> str | None:
        """The id of the channel the setting names, from the public and private channels the bot can see; None
        when it is not there (warned once, so not listed again) or Slack cannot be asked (logged, tried again)."""
        name = self._channel.removeprefix("#").lower()
        cursor: str | None = None
        for _ in range(MAX_CHANNEL_PAGES):
            try:
                response = await self._reader.conversations_list(
                    types="public_channel,private_channel", exclude_archived=True, limit=CHANNELS_PAGE, cursor=cursor
                )
            except Exception as exc:
                log.warning("conversations.list failed looking for %s: %s", self._channel, slack_error(exc))
                return None
            for found in response.get("channels") or []:
                if isinstance(found, dict) and str(found.get("name", "")).lower() == name and found.get("id"):
                    return str(found["id"])
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if cursor is None:
                break
        self._unresolved = True
        log.warning(
            "helpdesk channel %s is not among the channels the bot can see; a summary whose post was lost may be "
            "posted again (set POLICYPAL_HELPDESK_SLACK_CHANNEL to the channel's id)",
            self._channel,
        )
        return None

    async def _find(self, case: HandoffCase, part: int, channel: str, thread_ts: str | None) -> str | None:
        """The ts of this case's part if an earlier attempt posted it: the summary in the channel's history, a
        transcript part in the summary's thread. None when it is not there, or Slack cannot be asked (logged)."""
        found = await find_post(self._reader, channel, thread_ts, case=case.case_id, part=part)
        if found is not None:
            log.info("%s: part %d was already in %s (%s); not posted again", case.case_id, part, channel, found)
        return found


def summary_blocks(case: HandoffCase) -> list[dict[str, Any]]:
    """Header, key facts as fields, the question, and where the transcript is."""
    header = f"{case.case_id} · {reason_label(case.reason)}"[:HEADER_CHARS]
    user = f"<@{case.user.id}>" if case.platform == "slack" else _escape(case.user.name or case.user.id)
    if case.user.email:
        user += f" ({_escape(case.user.email)})"
    link = f"<{case.link}|open the conversation>" if case.link else _escape(f"{case.platform} {case.channel}")
    fields = [
        ("User", user),
        ("Reason", _escape(case.reason)),
        ("Where", link),
        ("Opened", f"{case.created_at:%H:%M} UTC"),
    ]
    return [
        {"type": "header", "text": {"type": "plain_text", "text": header}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{k}*\n{v}"} for k, v in fields]},
        {"type": "section", "text": {"type": "mrkdwn", "text": _question(case.question)}},
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"Transcript in the thread · `policypal handoffs {case.case_id}`"}],
        },
    ]


def transcript_chunks(case: HandoffCase) -> list[str]:
    """The Markdown transcript as code blocks of at most ``CHUNK_CHARS``, split on line boundaries."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in _lines(case.to_markdown().replace("```", "'''")):
        if size + len(line) + 1 > CHUNK_CHARS and current:
            chunks.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        chunks.append("\n".join(current))
    if len(chunks) > MAX_THREAD_MESSAGES:
        rest = len(chunks) - MAX_THREAD_MESSAGES + 1
        chunks = chunks[: MAX_THREAD_MESSAGES - 1]
        chunks.append(f"({rest} more parts: the whole transcript is `policypal handoffs {case.case_id}`)")
        return [_code(c) for c in chunks[:-1]] + chunks[-1:]
    return [_code(c) for c in chunks]


def _lines(text: str) -> Iterator[str]:
    """The transcript's lines; one longer than a part (a long question, a pasted log) goes on in the next
    pieces, never cut off: the helpdesk reads everything the person wrote."""
    for line in text.splitlines():
        while len(line) > CHUNK_CHARS:
            yield line[:CHUNK_CHARS]
            line = line[CHUNK_CHARS:]
        yield line


def _question(question: str) -> str:
    """The question quoted for the summary; one too long for a section is cut visibly, never silently."""
    quoted = _quote(question)
    if len(quoted) <= SECTION_CHARS:
        return quoted
    cut = re.sub(r"&[a-z]*$", "", quoted[: SECTION_CHARS - len(QUESTION_CUT)])  # never half an &lt;
    return cut.rstrip() + QUESTION_CUT


def _code(text: str) -> str:
    return f"```\n{_escape(text)}\n```"


def _quote(text: str) -> str:
    return "\n".join(f">{_escape(line)}" for line in (text.strip() or "(no question)").splitlines())


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
