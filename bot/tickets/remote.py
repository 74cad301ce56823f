"""What the remote ticket backends share: retries that end in a ``TicketError``, and basic auth.

Each remote backend sends the pending action id the way its API allows, so a retry after a timeout
or a 5xx does not create a second ticket (see each module). Failures become ``TicketError`` with the
API's own message, after retries for what is retryable.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable

from bot.delivery import JsonHttp, with_retries
from bot.errors import RemoteError, TicketError
from bot.tickets.base import Ticket


def basic_auth(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def create_with_retries(
    http: JsonHttp,
    attempt: Callable[[], Awaitable[Ticket]],
    recover: Callable[[], Awaitable[Ticket | None]] | None = None,
) -> Ticket:
    """Retries as the policy allows; what still fails becomes a TicketError the model can explain.

    ``recover`` runs before each retry, after an ambiguous failure: when it cannot answer (an error,
    or an answer we cannot read), sending again would be blind, so the outcome is unknown instead.
    """
    checked = None if recover is None else _or_unchecked(recover, http.service)
    try:
        return await with_retries(attempt, http.policy.retry(), what=http.service, recover=checked)
    except _Unchecked as exc:
        raise TicketError(str(exc), kind=UNKNOWN) from None
    except RemoteError as exc:
        raise TicketError(str(exc), kind=UNKNOWN if reached(exc) else exc.kind) from None


class _Unchecked(Exception):
    """The check for an earlier attempt's ticket failed: not a RemoteError, so no retry swallows it."""


def _or_unchecked(
    recover: Callable[[], Awaitable[Ticket | None]], service: str
) -> Callable[[], Awaitable[Ticket | None]]:
    async def check() -> Ticket | None:
        try:
            return await recover()
        except Exception as exc:  # a malformed search answer too: any failure means we cannot know
            raise _Unchecked(
                f"{service} may have created the ticket, and the check for it failed ({type(exc).__name__}: {exc})"
            ) from exc

    return check


UNKNOWN = "unknown"  # a TicketError kind: the system got the request and may have made the ticket


def reached(exc: RemoteError) -> bool:
    """Whether the request got to the system before it failed: no answer in time, its own server error, or
    a success we cannot read (``protocol``: a 2xx without a usable id, so the ticket most likely exists).
    Then nobody can say the ticket was not made; a refused connection or a 4xx says it was not."""
    if exc.kind in ("timeout", "protocol"):
        return True
    return exc.kind == "unavailable" and exc.status is not None and exc.status >= 500
