"""Every Web API call PolicyPal makes, on slack_sdk's client.

Retries of rate limits (honouring Retry-After), 500/503 and dropped connections within one call are
the client's retry handlers' job (see ``web_client``). ``SlackWriter`` makes the writes the outbox
sends and raises what still fails as a ``RemoteError`` whose kind says whether trying again can help
(the outbox retries, or hands the write to a person). ``SlackPoster`` makes the calls a reply can do
without (a permalink, the status line, suggested prompts): they never raise.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
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
METADATA_TYPE = "policypal_post"  # on every message PolicyPal posts: which outbox row, which part


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

    async def post(self, channel: str, thread_ts: str | None, message: SlackMessage, *, row: int, part: int) -> str:
        """Post in a thread (or the channel); the new message's ts."""
        metadata = {"event_type": METADATA_TYPE, "event_payload": {"row": row, "part": part}}
        extra: dict[str, Any] = {"thread_ts": thread_ts} if thread_ts else {}
        try:
            response = await self.client.chat_postMessage(
                channel=channel, unfurl_links=False, unfurl_media=False, metadata=metadata, **extra,
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
        """Begin a streamed reply in a thread, to ``user`` (Slack needs the recipient outside a DM); its ts."""
        try:
            response = await self.client.chat_startStream(
                channel=channel, thread_ts=thread_ts, markdown_text=markdown,
                recipient_user_id=user or None, recipient_team_id=self.bot.team_id if user else None,
            )
        except Exception as exc:
            raise self._refused("chat.startStream", exc, channel) from None
        return str(response["ts"])

    async def append_stream(self, channel: str, ts: str, markdown: str) -> None:
        try:
            await self.client.chat_appendStream(channel=channel, ts=ts, markdown_text=markdown)
        except Exception as exc:
            raise self._refused("chat.appendStream", exc, channel) from None

    async def stop_stream(self, channel: str, ts: str, blocks: list[Block], *, row: int, part: int) -> None:
        """End a stream: ``blocks`` go under the text, and the row's metadata on the message (for ``find``)."""
        metadata = {"event_type": METADATA_TYPE, "event_payload": {"row": row, "part": part}}
        try:
            await self.client.chat_stopStream(channel=channel, ts=ts, blocks=blocks, metadata=metadata)
        except Exception as exc:
            raise self._refused("chat.stopStream", exc, channel) from None

    async def find(self, channel: str, thread_ts: str | None, *, row: int, part: int) -> str | None:
        """The ts of a message this row's earlier attempt posted, if Slack has it."""
        try:
            response = await self.client.conversations_replies(
                channel=channel, ts=thread_ts or "", include_all_metadata=True, limit=200
            )
        except Exception as exc:  # cannot look: posting again risks a duplicate, not posting risks silence
            log.warning("conversations.replies failed in %s: %s; posting again", channel, slack_error(exc))
            return None
        for message in response.get("messages") or []:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            if metadata.get("event_type") == METADATA_TYPE and payload == {"row": row, "part": part}:
                return str(message["ts"])
        return None

    def _refused(self, method: str, exc: Exception, channel: str) -> RemoteError:
        remote = as_remote(exc, method, channel)
        if slack_error(exc) in CHANNEL_ERRORS:
            log.error(
                "Slack %s failed in channel %s: %s. Invite the bot there (/invite @%s), or check that "
                "SLACK_BOT_TOKEN belongs to the workspace the events come from (%s).",
                method, channel, slack_error(exc), self.bot.name or "PolicyPal", self.bot.team_id,
            )
        return remote


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
