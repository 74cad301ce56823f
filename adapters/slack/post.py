"""Every Web API call PolicyPal makes, on slack_sdk's client.

Retries of rate limits (honouring Retry-After), 500/503 and dropped connections within one call are
the client's retry handlers' job (see ``web_client``), except for the writes that add something:
chat.postMessage, chat.startStream and chat.appendStream. Slack may have carried one out though its
answer was a 5xx or never came, and a blind second try would post the reply twice, begin a second
stream beside the first, or write a passage of a stream twice. Those are tried once (rate limits
aside); the outbox tries again, and the sender first looks for what the failed try may have left
(``may_have_posted``; adapters/slack/streaming.py): in the thread, or, for a post outside any thread (to
a person's DM; to the helpdesk channel, adapters/slack/helpdesk.py), in the conversation's history
(``find_post``). ``SlackWriter`` makes the writes the outbox sends and raises what still fails as a
``RemoteError`` whose kind says whether trying again can help (the outbox retries, or hands the write to
a person); ``UncertainWrite`` when Slack may have done it all the same.
``SlackPoster`` makes the calls a reply can do without (a permalink, the status line, suggested
prompts): they never raise.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.blocks import Block, SlackMessage
from adapters.slack.inbound import BotIdentity
from bot.delivery import Delivery
from bot.errors import RemoteError
from bot.store import DeliveryRecord

log = logging.getLogger(__name__)

# The bot is not in the channel, the channel is gone, or the token belongs to another workspace.
CHANNEL_ERRORS = frozenset({"not_in_channel", "channel_not_found", "is_archived", "restricted_action"})
DEFAULT_API_URL = "https://slack.com/api/"
API_TIMEOUT_S = 15
# A permalink or a status line is worth little next to the answer: never wait out a rate limit for it.
NICE_TO_HAVE_S = 2.0


def slack_session(timeout_s: float = API_TIMEOUT_S) -> aiohttp.ClientSession:
    """The one HTTP session the Slack client shares, with each call's deadline on it: slack_sdk applies its
    own ``timeout`` only to sessions it makes, so on a plain shared session a call could wait aiohttp's
    default five minutes (an outbox write, a member-list read, the token check at start-up)."""
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))


def web_client(token: str | None, session: aiohttp.ClientSession, api_url: str | None) -> AsyncWebClient:
    """slack_sdk's async client on one shared session, with its built-in retry handlers."""
    base_url = api_url or DEFAULT_API_URL
    return AsyncWebClient(
        token=token,
        base_url=base_url if base_url.endswith("/") else base_url + "/",
        session=session,
        timeout=API_TIMEOUT_S,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            AsyncRateLimitErrorRetryHandler(max_retry_count=2),
            AsyncServerErrorRetryHandler(max_retry_count=1),
        ],
    )


def slack_error(exc: BaseException) -> str:
    """Slack's error code (``channel_not_found``), or the exception's type for transport failures."""
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error") or exc.response.status_code)
    return type(exc).__name__


# Answers that mean Slack is having trouble, not that the request is wrong: worth another attempt.
TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"})
METADATA_TYPE = "policypal_post"  # on every message PolicyPal posts: which outbox row (or case), which part
REPLIES_PAGE = 200  # messages per conversations.replies/history call (Slack's advice: at most 200)
MAX_REPLY_PAGES = 10  # a thread or a conversation is read up to 2,000 messages when looking for an earlier post
USER_ID_PREFIXES = ("U", "W")  # a post to a person: Slack puts it in their DM with the app, which has its own id


def as_remote(exc: BaseException, method: str, channel: str) -> RemoteError:
    """A failed Web API call as the outbox reads it: Slack's error code, and whether a retry can help."""
    if isinstance(exc, SlackApiError):
        error, status = slack_error(exc), exc.response.status_code
        kind = "unavailable" if error in TRANSIENT_ERRORS or status >= 500 else "validation"
        if error == "ratelimited" or status == 429:
            kind = "rate_limited"
        return RemoteError(f"Slack {method} in {channel}: {error}", kind=kind, status=status)
    if isinstance(exc, TimeoutError | aiohttp.ClientError | OSError):
        return RemoteError(f"Slack {method} in {channel}: {type(exc).__name__}", kind="unavailable")
    return RemoteError(f"Slack {method} in {channel}: {type(exc).__name__}: {exc}", kind="protocol")


# Slack's own word that the work may have been done in part before the error ("It's possible some aspect of
# the operation succeeded before the error was raised"), whatever the HTTP status.
PARTLY_DONE_ERRORS = frozenset({"internal_error", "fatal_error"})


class UncertainWrite(RemoteError):
    """A write that failed where Slack may have carried it out all the same: no answer in time, a dropped
    connection, a 5xx, or an error Slack says can follow part of the work. Look before writing again."""


def may_have_written(exc: BaseException) -> bool:
    """Whether a failed call may nevertheless have been carried out by Slack.

    Only an answer proves that nothing was done: ``ok: false`` with an error code (``feature_not_enabled``,
    ``ratelimited``, ...) below HTTP 500, other than the two Slack says can come after part of the work;
    or a failure before the request left (no connection could be made, arguments the client refused).
    """
    if isinstance(exc, SlackApiError):
        error = exc.response.get("error")
        return exc.response.status_code >= 500 or not error or error in PARTLY_DONE_ERRORS
    return not isinstance(exc, aiohttp.ClientConnectorError | SlackRequestError)


def may_have_posted(row: DeliveryRecord, delivery: Delivery) -> bool:
    """Whether an earlier attempt at this row may have posted without it being recorded, so the thread is
    looked at (``SlackWriter.find``) before posting.

    Not only when its process died (``uncertain``): any failed attempt may have left a post behind. Slack
    can take a message whose answer never arrives (a timeout, a dropped connection, a 5xx), and a step
    after the post (recording a card's place) can fail; posting again blindly would repeat the reply.
    """
    return delivery.uncertain or row.last_error is not None


class SlackWriter:
    """The writes the outbox sends: each returns what Slack answered, or raises a ``RemoteError``.

    Every message carries its outbox row and part in its metadata, so after a crash the writer can
    look for a post it may already have made (``find``) instead of making it twice.
    """

    def __init__(self, client: AsyncWebClient, bot: BotIdentity) -> None:
        self.client = client
        self.bot = bot
        self._once = without_retries(client)  # for the writes that add something: see the module's docstring

    async def post(self, channel: str, thread_ts: str | None, message: SlackMessage, *, row: int, part: int) -> str:
        """Post in a thread (or the channel); the new message's ts. Tried once (rate limits aside): a retry
        that finds Slack took the first try's post (``may_have_posted``) does not post it again."""
        metadata = post_metadata(row=row, part=part)
        extra: dict[str, Any] = {"thread_ts": thread_ts} if thread_ts else {}
        try:
            response = await self._once.chat_postMessage(
                channel=channel,
                unfurl_links=False,
                unfurl_media=False,
                metadata=metadata,
                **extra,
                **message.payload(),
            )
        except Exception as exc:
            raise self._refused("chat.postMessage", exc, channel) from None
        return str(response["ts"])

    async def update(self, channel: str, ts: str, message: SlackMessage) -> None:
        """Replace a message in place (a card's new state)."""
        try:
            await self.client.chat_update(channel=channel, ts=ts, **message.payload())
        except Exception as exc:
            raise self._refused("chat.update", exc, channel) from None

    async def ephemeral(self, channel: str, user: str, thread_ts: str | None, text: str) -> None:
        """A note only ``user`` sees, in the thread they clicked in."""
        extra: dict[str, Any] = {"thread_ts": thread_ts} if thread_ts else {}
        try:
            await self.client.chat_postEphemeral(channel=channel, user=user, text=text, **extra)
        except Exception as exc:
            raise self._refused("chat.postEphemeral", exc, channel) from None

    async def start_stream(self, channel: str, thread_ts: str, user: str, markdown: str) -> str:
        """Begin a streamed reply in a thread, to ``user`` (Slack needs the recipient outside a DM); its ts.

        Tried once (rate limits aside), within the session's deadline (``slack_session``). Raises
        ``UncertainWrite`` when Slack may have begun the stream all the same (``may_have_written``): the
        caller looks for it in the thread."""
        try:
            response = await self._once.chat_startStream(
                channel=channel,
                thread_ts=thread_ts,
                markdown_text=markdown,
                recipient_user_id=user or None,
                recipient_team_id=self.bot.team_id if user else None,
            )
        except Exception as exc:
            refused = self._refused("chat.startStream", exc, channel)
            if may_have_written(exc):
                raise UncertainWrite(str(refused), kind=refused.kind, status=refused.status) from None
            raise refused from None
        return str(response["ts"])

    async def append_stream(self, channel: str, ts: str, markdown: str) -> None:
        """Add to a stream, tried once (rate limits aside): an append Slack made though its answer was lost
        would be written twice by a second try; on failure the whole answer replaces the stream instead."""
        try:
            await self._once.chat_appendStream(channel=channel, ts=ts, markdown_text=markdown)
        except Exception as exc:
            raise self._refused("chat.appendStream", exc, channel) from None

    async def stop_stream(self, channel: str, ts: str, blocks: list[Block], *, row: int, part: int) -> None:
        """End a stream: ``blocks`` go under the text, and the row's metadata on the message (for ``find``)."""
        metadata = post_metadata(row=row, part=part)
        try:
            await self.client.chat_stopStream(channel=channel, ts=ts, blocks=blocks, metadata=metadata)
        except Exception as exc:
            raise self._refused("chat.stopStream", exc, channel) from None

    async def find(self, channel: str, thread_ts: str | None, *, row: int, part: int) -> str | None:
        """The ts of a message this row's earlier attempt posted, if Slack has it: in the thread, or, for a post
        outside any thread (a person's DM, addressed by their user id), in the conversation's history."""
        conversation = channel if thread_ts else await self.conversation(channel)
        if conversation is None:  # logged: posting again risks a duplicate, not posting risks silence
            return None
        return await find_post(self.client, conversation, thread_ts, row=row, part=part)

    async def conversation(self, channel: str) -> str | None:
        """The id of the conversation a post to ``channel`` lands in. A user id stands for the person's DM with
        the app, which conversations.history knows only by its own id (conversations.open, idempotent, gives
        it); None when Slack cannot say (logged)."""
        if not channel.startswith(USER_ID_PREFIXES):
            return channel
        try:
            response = await self.client.conversations_open(users=channel)
        except Exception as exc:
            error = slack_error(exc)
            log.warning("conversations.open failed for %s: %s (the bot needs im:write); posting again", channel, error)
            return None
        dm = response.get("channel")
        return str(dm["id"]) if isinstance(dm, dict) and dm.get("id") else None

    async def replies(
        self, channel: str, thread_ts: str | None, *, oldest: str | None = None
    ) -> list[dict[str, Any]] | None:
        """A thread's messages with their metadata, oldest first: all of them, or with ``oldest`` (a ts) those
        after it; None when Slack cannot be asked (logged). See ``read_messages``."""
        return await read_messages(self.client, channel, thread_ts, oldest=oldest)

    def is_ours(self, message: dict[str, Any]) -> bool:
        """Whether a message from conversations.replies is this bot's."""
        user, bot = message.get("user"), message.get("bot_id")
        return bool(user and user == self.bot.user_id) or bool(bot and bot == self.bot.bot_id)

    def _refused(self, method: str, exc: Exception, channel: str) -> RemoteError:
        remote = as_remote(exc, method, channel)
        if slack_error(exc) in CHANNEL_ERRORS:
            log.error(
                "Slack %s failed in channel %s: %s. Invite the bot there (/invite @%s), or check that "
                "SLACK_BOT_TOKEN belongs to the workspace the events come from (%s).",
                method,
                channel,
                slack_error(exc),
                self.bot.name or "PolicyPal",
                self.bot.team_id,
            )
        return remote


def post_metadata(**payload: str | int) -> dict[str, Any]:
    """The metadata on a message PolicyPal posts, naming what it is (an outbox row and part, a case and part),
    so that a retry can find the message an earlier attempt posted instead of posting it twice."""
    return {"event_type": METADATA_TYPE, "event_payload": payload}


def posted(messages: Sequence[dict[str, Any]], **payload: str | int) -> str | None:
    """The ts of the message carrying ``payload`` in its metadata (put on by a post or a stream's stop)."""
    for message in messages:
        if _payload(message) == payload:
            return str(message["ts"])
    return None


async def find_post(client: AsyncWebClient, channel: str, thread_ts: str | None, **payload: str | int) -> str | None:
    """The ts of the message carrying ``payload`` that an earlier attempt posted: looked for in the thread, or (no
    ``thread_ts``) among the conversation's newest messages, read until it turns up. None when it is not there, or
    when Slack cannot be asked (logged: posting again risks a duplicate, not posting risks silence)."""
    messages = await read_messages(client, channel, thread_ts, until=lambda found: posted(found, **payload) is not None)
    if messages is None:
        log.warning("could not look in %s for %s posted before; posting it again", channel, payload)
        return None
    return posted(messages, **payload)


async def read_messages(
    client: AsyncWebClient,
    channel: str,
    thread_ts: str | None,
    *,
    oldest: str | None = None,
    until: Callable[[list[dict[str, Any]]], bool] | None = None,
) -> list[dict[str, Any]] | None:
    """A conversation's messages with their metadata, in Slack's order: a thread's (conversations.replies)
    oldest first, or without ``thread_ts`` the conversation's own (conversations.history: a DM's, a
    channel's, outside threads) newest first. All of them, or with ``oldest`` (a ts) those after it, or the
    pages read until ``until`` holds for what was read; None when Slack cannot be asked (logged).

    Page by page, not the first page only: what a retry looks for in a thread was posted last, and a busy
    thread or channel runs to hundreds of messages. More than ``MAX_REPLY_PAGES`` pages are not read.
    """
    messages: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_REPLY_PAGES):
        page = await _page(client, channel, thread_ts, oldest, cursor)
        if page is None:
            return None
        found, cursor = page
        messages += found
        if cursor is None or (until is not None and until(messages)):
            return messages
    where = f"thread {thread_ts}" if thread_ts else "the history"
    log.warning("%s in %s: only its first %d messages were read", where, channel, len(messages))
    return messages


async def _page(
    client: AsyncWebClient, channel: str, thread_ts: str | None, oldest: str | None, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None] | None:
    """One page of conversations.replies (or, without ``thread_ts``, .history) and the next page's cursor
    (None on the last); None on failure."""
    extra: dict[str, Any] = {name: value for name, value in (("oldest", oldest), ("cursor", cursor)) if value}
    try:
        if thread_ts:
            response = await client.conversations_replies(
                channel=channel, ts=thread_ts, include_all_metadata=True, limit=REPLIES_PAGE, **extra
            )
        else:
            response = await client.conversations_history(
                channel=channel, include_all_metadata=True, limit=REPLIES_PAGE, **extra
            )
    except Exception as exc:
        method = "conversations.replies" if thread_ts else "conversations.history"
        log.warning("%s failed in %s: %s", method, channel, slack_error(exc))
        return None
    messages = [m for m in response.get("messages") or [] if isinstance(m, dict)]
    return messages, (response.get("response_metadata") or {}).get("next_cursor") or None


def row_part(message: dict[str, Any]) -> tuple[int, int] | None:
    """The outbox row and part a message's metadata names; None for a message without ours (a stream not
    yet stopped, someone else's message, a helpdesk case's)."""
    payload = _payload(message)
    if not isinstance(payload, dict) or set(payload) != {"row", "part"}:
        return None
    return payload["row"], payload["part"]


def _payload(message: dict[str, Any]) -> Any:
    """The payload of PolicyPal's metadata on a message; None on a message without it."""
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != METADATA_TYPE:
        return None
    return metadata.get("event_payload")


def without_retries(client: AsyncWebClient) -> AsyncWebClient:
    """The same client (token, session, URL) whose only retries are rate limits', which Slack did not act on."""
    once = copy.copy(client)
    once.retry_handlers = [h for h in client.retry_handlers if isinstance(h, AsyncRateLimitErrorRetryHandler)]
    return once


class SlackPoster:
    """Posts, updates and ephemeral notes in threads; returns None/False instead of raising."""

    def __init__(self, client: AsyncWebClient, bot: BotIdentity) -> None:
        self.client = client
        self.bot = bot

    async def post(self, channel: str, thread_ts: str, message: SlackMessage, *, user: str | None = None) -> str | None:
        """Post in a thread; the new message's ts, or None when Slack refused (already reported)."""
        try:
            response = await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, unfurl_links=False, unfurl_media=False, **message.payload()
            )
        except Exception as exc:
            await self._report("chat.postMessage", exc, channel, user)
            return None
        return str(response["ts"])

    async def post_all(
        self, channel: str, thread_ts: str, messages: Sequence[SlackMessage], *, user: str | None = None
    ) -> list[str]:
        """Post a split answer in order; stop at the first failure so parts never arrive out of order."""
        posted: list[str] = []
        for message in messages:
            ts = await self.post(channel, thread_ts, message, user=user)
            if ts is None:
                break
            posted.append(ts)
        return posted

    async def update(self, channel: str, ts: str, message: SlackMessage) -> bool:
        """Replace a message in place (the card after a decision)."""
        try:
            await self.client.chat_update(channel=channel, ts=ts, **message.payload())
        except Exception as exc:
            await self._report("chat.update", exc, channel, None)
            return False
        return True

    async def ephemeral(self, channel: str, user: str, thread_ts: str | None, text: str) -> bool:
        """A note only ``user`` sees, in the thread they clicked in."""
        extra: dict[str, Any] = {"thread_ts": thread_ts} if thread_ts else {}
        try:
            await self.client.chat_postEphemeral(channel=channel, user=user, text=text, **extra)
        except Exception as exc:
            await self._report("chat.postEphemeral", exc, channel, user)
            return False
        return True

    async def permalink(self, channel: str, ts: str) -> str | None:
        """A link back to the message for the helpdesk; None if Slack cannot give one."""
        try:
            response = await asyncio.wait_for(
                self.client.chat_getPermalink(channel=channel, message_ts=ts), NICE_TO_HAVE_S
            )
        except Exception as exc:
            log.info("chat.getPermalink failed for %s/%s: %s", channel, ts, slack_error(exc))
            return None
        return str(response.get("permalink") or "") or None

    async def set_status(self, channel: str, thread_ts: str, status: str, *, loading: Sequence[str] = ()) -> bool:
        """The thread's status line ("is thinking…"), with ``loading`` messages Slack shows in turn; threads
        without one (not an AI app's) refuse it, so failure is quiet."""
        extra: dict[str, Any] = {"loading_messages": list(loading)} if loading else {}
        try:
            call = self.client.assistant_threads_setStatus(
                channel_id=channel, thread_ts=thread_ts, status=status, **extra
            )
            await asyncio.wait_for(call, NICE_TO_HAVE_S)
        except Exception as exc:
            log.debug("assistant.threads.setStatus failed for %s/%s: %s", channel, thread_ts, slack_error(exc))
            return False
        return True

    async def suggest_prompts(self, channel: str, thread_ts: str, prompts: Sequence[dict[str, str]]) -> bool:
        try:
            await self.client.assistant_threads_setSuggestedPrompts(
                channel_id=channel, thread_ts=thread_ts, prompts=list(prompts)
            )
        except Exception as exc:
            log.warning("assistant.threads.setSuggestedPrompts failed for %s: %s", channel, slack_error(exc))
            return False
        return True

    async def _report(self, method: str, exc: Exception, channel: str, user: str | None) -> None:
        error = slack_error(exc)
        if error in CHANNEL_ERRORS:
            log.error(
                "Slack %s failed in channel %s: %s. Invite the bot there (/invite @%s), or check that "
                "SLACK_BOT_TOKEN belongs to the workspace the events come from (%s).",
                method,
                channel,
                error,
                self.bot.name or "PolicyPal",
                self.bot.team_id,
            )
            if user:
                await self._tell_directly(user, channel, error)
            return
        log.error(
            "Slack %s failed in channel %s: %s", method, channel, error, exc_info=not isinstance(exc, SlackApiError)
        )

    async def _tell_directly(self, user: str, channel: str, error: str) -> None:
        """When the bot cannot speak in a channel, it says so in the user's DM with the app."""
        text = (
            f"I couldn't post my reply in <#{channel}> (Slack said `{error}`). "
            f"Invite me there with `/invite @{self.bot.name or 'PolicyPal'}`, or ask me here."
        )
        try:
            await self.client.chat_postMessage(channel=user, text=text)
        except Exception as exc:
            log.error("could not tell %s about %s in %s either: %s", user, error, channel, slack_error(exc))
