"""The outbound half of the Bot Framework protocol as the rest of the adapter sees it: no SDK in here.

``adapters/teams/app.py`` implements it over botbuilder (``BotFrameworkConnector``); tests may pass
anything with these coroutines.
"""

from __future__ import annotations

from typing import Any, Protocol

from bot.errors import RemoteError

Json = dict[str, Any]


class Connector(Protocol):
    """Posts, updates and roster lookups, addressed by a stored conversation reference (protocol JSON)."""

    async def send(self, reference: Json, activity: Json) -> str:
        """Post ``activity`` to the reference's conversation; returns the new activity id ("" if none came back)."""
        ...

    async def update(self, reference: Json, activity_id: str, activity: Json) -> None: ...

    async def member(self, reference: Json, user_id: str) -> Json | None:
        """The roster entry (email, userPrincipalName, userRole) of a conversation member."""
        ...

    async def members(self, reference: Json) -> list[Json]:
        """The whole roster of the reference's conversation (a team's members, for a channel)."""
        ...

    async def personal(self, reference: Json, user_id: str) -> Json:
        """The reference of the bot's personal (1:1) chat with ``user_id`` (a Teams id, ``29:...``), created
        if need be, in the reference's tenant and service; refused (403) when the bot is not installed for them."""
        ...


def http_status(exc: BaseException) -> int | None:
    """The HTTP status behind a connector exception (msrest keeps the response), if there is one."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    return status if isinstance(status, int) else None


class ConnectorError(RemoteError):
    """A connector failure with what its JSON error body said (``{"error": {"code", "message"}}``), "" if nothing.

    Some refusals differ only there: a stream's 403 ``ContentStreamNotAllowed`` is the person's Stop
    ("Content stream was cancelled by user.") or a timeout ("... exceeded streaming time.").
    """

    def __init__(self, message: str, *, kind: str, status: int | None, code: str = "", said: str = "") -> None:
        super().__init__(message, kind=kind, status=status)
        self.code = code
        self.said = said


def error_body(exc: BaseException) -> tuple[str, str]:
    """The ``code`` and ``message`` of the connector's JSON error body, as msrest deserialized it ("" if none)."""
    error = getattr(getattr(exc, "error", None), "error", None)  # ErrorResponse -> Error
    return str(getattr(error, "code", None) or ""), str(getattr(error, "message", None) or "")


def remote_error(exc: Exception, what: str) -> RemoteError:
    """A connector failure as the outbox reads it: retried when it may pass, given up at once when it cannot.

    The connector has already retried throttling and overload itself (``DeliveryFailed``, passed as
    is). A 5xx or no answer at all may pass; a 400, 403 or 404 (a bot removed from the conversation, an
    activity Teams will not take) will not. What the error body said is kept (``ConnectorError``).
    """
    if isinstance(exc, RemoteError):
        return exc
    status = http_status(exc)
    kind = _KINDS.get(status or 0) or ("unavailable" if status is None or status >= 500 else "validation")
    said = f"HTTP {status}" if status is not None else type(exc).__name__
    code, message = error_body(exc)
    return ConnectorError(f"Teams refused {what}: {said}: {exc}", kind=kind, status=status, code=code, said=message)


_KINDS = {401: "auth", 403: "forbidden", 404: "not_found", 408: "timeout", 429: "rate_limited"}
