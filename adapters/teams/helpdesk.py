"""A helpdesk destination that posts each handoff case to a Teams channel as an Adaptive Card.

The bot posts proactively through the Bot Framework connector, with the same credentials as the
adapter, to ``POLICYPAL_HELPDESK_TEAMS_SERVICE_URL`` + ``POLICYPAL_HELPDESK_TEAMS_CONVERSATION_ID``
(the channel's conversation id, which the bot must be installed in). A failed post raises, so the
handoff can record the failure and try elsewhere.

A delivery is two posts: the summary card, then the transcript in the card's reply chain. The
card's id is saved on the outbox row as soon as it is posted, so a retry (in this process or any
other) posts only the transcript, never a second card for the same case.
"""

from __future__ import annotations

from typing import Any

from adapters.teams import cards
from adapters.teams.answers import activity_bytes
from bot.config import Settings
from bot.delivery import Delivery
from bot.errors import ConfigError
from bot.helpdesk import HandoffCase, reason_label
from bot.types import UserRef

CHANNEL_ID = "msteams"
# Teams refuses an activity of about 28 KB of JSON as the connector sends it (``activity_bytes``: non-ASCII
# escaped): a character of Japanese is 6 bytes there, an emoji 12, a quote or a newline 2. Leave room for
# the marker and what the connector adds.
TRANSCRIPT_BYTES = 20_000


def teams_destination(settings: Settings) -> TeamsChannelDestination:
    """The destination ``adapters.destinations`` builds from settings."""
    return TeamsChannelDestination(settings)


class TeamsChannelDestination:
    """Delivers a handoff case to one Teams channel; ``deliver`` returns the posted message id."""

    name = "teams"

    def __init__(self, settings: Settings, connector: Any = None) -> None:
        if not settings.helpdesk_teams_service_url or not settings.helpdesk_teams_conversation_id:
            raise ConfigError(
                "Teams helpdesk: set POLICYPAL_HELPDESK_TEAMS_SERVICE_URL and POLICYPAL_HELPDESK_TEAMS_CONVERSATION_ID."
            )
        if connector is None:
            from adapters.teams.app import connector_for

            connector = connector_for(settings)
        self._connector = connector
        self._reference: dict[str, Any] = {
            "channelId": CHANNEL_ID,
            "serviceUrl": settings.helpdesk_teams_service_url,
            "conversation": {"id": settings.helpdesk_teams_conversation_id, "isGroup": True},
            "bot": {"id": settings.microsoft_app_id or "policypal"},
        }

    async def deliver(self, case: HandoffCase) -> str | None:
        """Post the case summary, then the full transcript in its reply chain; raises when refused."""
        return await self._transcript(case, await self._summary(case))

    async def deliver_tracked(self, case: HandoffCase, delivery: Delivery) -> str | None:
        """Post what earlier attempts did not: the card unless its id was saved, then the transcript."""
        root = delivery.progress
        if not root:
            root = await self._summary(case)
            if root:
                await delivery.save(root)  # before the transcript: a retry must not post the card again
        return await self._transcript(case, root)

    async def _summary(self, case: HandoffCase) -> str:
        posted = await self._connector.send(self._reference, cards.message(summary_text(case), summary_card(case)))
        return str(posted or "")

    async def _transcript(self, case: HandoffCase, root: str) -> str | None:
        if root:
            await self._connector.send(self._thread(root), cards.message(transcript_text(case)))
        return root or None

    def _thread(self, root_id: str) -> dict[str, Any]:
        """The summary's reply chain: a channel thread is addressed as ``<channel>;messageid=<root>``."""
        conversation: dict[str, Any] = {**self._reference["conversation"]}
        conversation["id"] = f"{conversation['id']};messageid={root_id}"
        return {**self._reference, "conversation": conversation}


def summary_card(case: HandoffCase) -> dict[str, Any]:
    """The card for a case: who, the question in one line, why, and a way back to the conversation."""
    return cards.handoff_summary_card(
        case_id=case.case_id,
        user=_user_label(case.user),
        question=case.question_line(),
        reason=reason_label(case.reason) if case.reason else "",
        link=case.link,
        platform=case.platform,
    )


def summary_text(case: HandoffCase) -> str:
    """A one-line fallback (notifications and clients that do not render cards)."""
    return f"New helpdesk case {case.case_id} from {_user_label(case.user)}"


def transcript_text(case: HandoffCase) -> str:
    """The case's Markdown transcript, bounded below Teams' message size (in bytes) with a visible marker."""
    text = case.to_markdown()
    if activity_bytes(text) <= TRANSCRIPT_BYTES:
        return text
    kept = _start_within(text, TRANSCRIPT_BYTES)
    more = len(text) - len(kept)
    marker = f"…[transcript truncated: {more} more characters; see `policypal handoffs {case.case_id}`]"
    return f"{kept}\n\n{marker}"


def _start_within(text: str, limit: int) -> str:
    """The longest start of ``text`` whose JSON is at most ``limit`` bytes (found by halving)."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if activity_bytes(text[:middle]) <= limit else (low, middle - 1)
    return text[:low]


def _user_label(user: UserRef) -> str:
    name, email, user_id = user.name, user.email, user.id
    label = name or user_id or "unknown"
    return f"{label} ({email})" if email else str(label)
