"""Where handoff cases go, from ``POLICYPAL_HELPDESK_*``: the one list the server, console and CLI share.

Any number at once; the local store always holds every case whatever is configured here. A
destination that is half configured is refused at start with the setting that is missing.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.config import Settings
from bot.errors import ConfigError
from bot.helpdesk import Destination, EmailDestination, WebhookDestination


def destinations(settings: Settings) -> list[Destination]:
    """Every configured destination, in the order cases are delivered; ConfigError at the first bad one."""
    return [build(settings) for build in _wanted(settings)]


async def problems(settings: Settings) -> list[str]:
    """Every half-configured destination's problem (``destinations`` stops at the first); builds nothing to keep."""
    found = []
    for build in _wanted(settings):
        try:
            destination = build(settings)
        except ConfigError as exc:
            found.append(str(exc))
            continue
        closer = getattr(destination, "aclose", None)
        if closer is not None:
            await closer()
    return found


def _wanted(settings: Settings) -> list[Callable[[Settings], Destination]]:
    wanted = {
        _slack: settings.helpdesk_slack_channel,
        _teams: settings.helpdesk_teams_conversation_id or settings.helpdesk_teams_service_url,
        _webhook: settings.helpdesk_webhook_url,
        _email: settings.helpdesk_smtp_host,
    }
    return [build for build, configured in wanted.items() if configured]


def _slack(settings: Settings) -> Destination:
    from adapters.slack import SlackChannelDestination

    if settings.slack_bot_token is None:
        raise ConfigError("POLICYPAL_HELPDESK_SLACK_CHANNEL needs SLACK_BOT_TOKEN (a bot in that channel)")
    token = settings.slack_bot_token.get_secret_value()
    channel = settings.helpdesk_slack_channel or ""
    return SlackChannelDestination.from_token(token, channel, base_url=settings.slack_api_url)


def _teams(settings: Settings) -> Destination:
    if not (settings.helpdesk_teams_conversation_id and settings.helpdesk_teams_service_url):
        raise ConfigError(
            "the Teams helpdesk channel needs both POLICYPAL_HELPDESK_TEAMS_SERVICE_URL and "
            "POLICYPAL_HELPDESK_TEAMS_CONVERSATION_ID"
        )
    from adapters.teams import teams_destination  # botbuilder loads only when Teams is configured

    return teams_destination(settings)


def _webhook(settings: Settings) -> Destination:
    secret = settings.helpdesk_webhook_secret.get_secret_value() if settings.helpdesk_webhook_secret else None
    if secret is None:
        raise ConfigError("POLICYPAL_HELPDESK_WEBHOOK_URL needs POLICYPAL_HELPDESK_WEBHOOK_SECRET to sign its bodies")
    return WebhookDestination(
        settings.helpdesk_webhook_url or "", secret, timeout_s=settings.helpdesk_deliver_timeout_s
    )


def _email(settings: Settings) -> Destination:
    recipients = [a.strip() for a in (settings.helpdesk_email_to or "").split(",") if a.strip()]
    if not recipients or not settings.helpdesk_email_from:
        raise ConfigError(
            "POLICYPAL_HELPDESK_SMTP_HOST needs POLICYPAL_HELPDESK_EMAIL_FROM and POLICYPAL_HELPDESK_EMAIL_TO"
        )
    password = settings.helpdesk_smtp_password.get_secret_value() if settings.helpdesk_smtp_password else None
    return EmailDestination(
        settings.helpdesk_smtp_host or "",
        settings.helpdesk_smtp_port,
        sender=settings.helpdesk_email_from,
        recipients=recipients,
        user=settings.helpdesk_smtp_user,
        password=password,
        starttls=settings.helpdesk_smtp_starttls,
        timeout_s=settings.helpdesk_deliver_timeout_s,
    )
