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
from bot.config import ConfigError, Settings
from bot.helpdesk.outbox import Delivery

CHANNEL_ID = "msteams"
TRANSCRIPT_CHARS = 20_000  # Teams refuses messages of about 28 KB; leave room for markup


def teams_destination(settings: Settings) -> TeamsChannelDestination:
    """The destination ``adapters.helpdesk_destinations`` builds from settings."""
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
        self._reference = {
            "channelId": CHANNEL_ID,
            "serviceUrl": settings.helpdesk_teams_service_url,
            "conversation": {"id": settings.helpdesk_teams_conversation_id, "isGroup": True},
            "bot": {"id": settings.microsoft_app_id or "policypal"},
        }

    async def deliver(self, case: Any) -> str | None:
        """Post the case summary, then the full transcript in its reply chain; raises when refused."""
        return await self._transcript(case, await self._summary(case))

    async def deliver_tracked(self, case: Any, delivery: Delivery) -> str | None:
        """Post what earlier attempts did not: the card unless its id was saved, then the transcript."""
        root = delivery.progress
        if not root:
            root = await self._summary(case)
            if root:
                await delivery.save(root)  # before the transcript: a retry must not post the card again
        return await self._transcript(case, root)

    async def _summary(self, case: Any) -> str:
        posted = await self._connector.send(self._reference, cards.message(summary_text(case), summary_card(case)))
        return str(posted or "")

    async def _transcript(self, case: Any, root: str) -> str | None:
        if root:
            await self._connector.send(self._thread(root), cards.message(transcript_text(case)))
        return root or None

    def _thread(self, root_id: str) -> dict[str, Any]:
        """The summary's reply chain: a channel thread is addressed as ``<channel>;messageid=<root>``."""
        conversation = {**self._reference["conversation"]}
        conversation["id"] = f"{conversation['id']};messageid={root_id}"
        return {**self._reference, "conversation": conversation}


def summary_card(case: Any) -> dict[str, Any]:
    """The card for a case, reading its fields defensively (the case type is still settling)."""
    user = getattr(case, "user", None)
    return cards.handoff_summary_card(
        case_id=str(getattr(case, "case_id", "")),
        user=_user_label(user),
        question=_question(case),
        reason=_reason(case),
        link=getattr(case, "link", None),
        platform=str(getattr(case, "platform", "") or ""),
    )


def summary_text(case: Any) -> str:
    """A one-line fallback (notifications and clients that do not render cards)."""
    return f"New helpdesk case {getattr(case, 'case_id', '')} from {_user_label(getattr(case, 'user', None))}"


def transcript_text(case: Any) -> str:
    """The case's Markdown transcript, bounded below Teams' message size with a visible marker."""
    render = getattr(case, "to_markdown", None)
    text = str(render()) if callable(render) else summary_text(case)
    if len(text) <= TRANSCRIPT_CHARS:
        return text
    more, case_id = len(text) - TRANSCRIPT_CHARS, getattr(case, "case_id", "")
    marker = f"…[transcript truncated: {more} more characters; see `policypal handoffs {case_id}`]"
    return f"{text[:TRANSCRIPT_CHARS]}\n\n{marker}"


def _question(case: Any) -> str:
    line = getattr(case, "question_line", None)
    if callable(line):
        return str(line())
    return str(getattr(case, "question", "") or "")


def _reason(case: Any) -> str:
    reason = str(getattr(case, "reason", "") or "")
    try:
        from bot.helpdesk.markdown import reason_label
    except ImportError:  # an older core without labels: the raw reason still says it
        return reason
    return str(reason_label(reason)) if reason else ""


def _user_label(user: Any) -> str:
    if user is None:
        return "unknown"
    name, email, user_id = (getattr(user, key, None) for key in ("name", "email", "id"))
    label = name or user_id or "unknown"
    return f"{label} ({email})" if email else str(label)
