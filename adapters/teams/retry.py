"""Retrying Bot Framework connector calls that the channel refused for now (throttling, overload).

The connector answers 429 (with ``Retry-After``), 412, 502, 503 and 504 when it is busy; one such
answer must not lose a reply or a card. Other failures are not retried: a 400 or 403 will not change.
Waits grow exponentially, each capped, and all of them together stay within ``total_s``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
TRANSIENT = frozenset({412, 429, 502, 503, 504})


class DeliveryFailed(Exception):
    """The connector kept refusing a call until the retry budget ran out (already logged)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: attempts, the first wait, the cap on any one wait, and the total time."""

    attempts: int = 5
    first_s: float = 0.5
    max_wait_s: float = 8.0  # also caps Retry-After: a reply minutes late is no better than an error
    total_s: float = 30.0

    def wait_s(self, attempt: int, retry_after: float | None) -> float:
        """The pause before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_wait_s)
        backoff = self.first_s * 2 ** (attempt - 1)
        return min(backoff * random.uniform(0.8, 1.2), self.max_wait_s)  # jitter: replicas do not retry in step


async def with_retries(work: Callable[[], Awaitable[T]], policy: RetryPolicy, what: str) -> T:
    """Run ``work``, retrying transient HTTP refusals; ``what`` names the call (and conversation) in the log."""
    started = time.monotonic()
    for attempt in range(1, policy.attempts + 1):
        try:
            return await work()
        except Exception as exc:
            status = http_status(exc)
            if status not in TRANSIENT:
                raise
            elapsed = time.monotonic() - started
            wait = policy.wait_s(attempt, retry_after_s(exc))
            if attempt == policy.attempts or elapsed + wait > policy.total_s:
                log.error("teams: %s failed: HTTP %s after %d attempts in %.1f s; giving up",
                          what, status, attempt, elapsed)
                raise DeliveryFailed(f"{what}: HTTP {status} after {attempt} attempts") from exc
            log.warning("teams: %s got HTTP %s (attempt %d); retrying in %.1f s", what, status, attempt, wait)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable: the loop returns or raises")  # attempts >= 1


def http_status(exc: BaseException) -> int | None:
    """The HTTP status behind a connector exception (msrest keeps the response), if there is one."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None) or getattr(response, "status", None)
    return status if isinstance(status, int) else None


def retry_after_s(exc: BaseException) -> float | None:
    """``Retry-After`` in seconds, given as seconds or as an HTTP date; None when absent or unreadable."""
    headers: Any = getattr(getattr(exc, "response", None), "headers", None) or {}
    value = str(headers.get("Retry-After") or "").strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError):
        return None
