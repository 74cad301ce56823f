"""Retrying a call that another system refused for now: one policy for ticket systems, webhooks and platforms.

The caller says what counts as transient (``Transient``: a 429 with its Retry-After, a 5xx, a
timeout); anything else is raised at once, because a 400 or a 403 will not change. Waits grow
exponentially from ``first_s``, each capped at ``max_wait_s`` (a server's Retry-After included: a
reply minutes late is no better than an error), and all of them together stay within ``total_s``.
After an ambiguous failure the first attempt may have acted, so before each retry ``recover`` can look
for its result (a ticket carrying our correlation id) and return that instead of trying again.
When the budget runs out the call fails with ``DeliveryFailed``, a ``RemoteError`` carrying the last
failure's kind and status.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from bot.errors import DeliveryFailed, RemoteError

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: attempts, the first wait, the cap on any one wait, the total time, and jitter."""

    attempts: int = 5
    first_s: float = 0.5
    max_wait_s: float = 8.0
    total_s: float = 30.0
    jitter: float = 0.2  # +-20 %: replicas that failed together do not retry in step

    def wait_s(self, attempt: int, retry_after: float | None) -> float:
        """The pause before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_wait_s)
        backoff: float = self.first_s * 2.0 ** (attempt - 1)
        if self.jitter:
            backoff *= random.uniform(1 - self.jitter, 1 + self.jitter)
        return min(backoff, self.max_wait_s)


@dataclass(frozen=True)
class Transient:
    """A failure worth another attempt: the peer's Retry-After (seconds) and HTTP status, when known."""

    retry_after_s: float | None = None
    status: int | None = None


def remote_transient(exc: Exception) -> Transient | None:
    """The classifier for ``RemoteError``: rate limits, 5xx, unreachable hosts and timeouts are transient."""
    if isinstance(exc, RemoteError) and exc.retryable:
        return Transient(exc.retry_after, exc.status)
    return None


async def with_retries(
    work: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    transient: Callable[[Exception], Transient | None] = remote_transient,
    *,
    what: str,
    recover: Callable[[], Awaitable[T | None]] | None = None,
) -> T:
    """Run ``work`` until it succeeds, fails for good, or the policy's budget runs out (``DeliveryFailed``).

    ``what`` names the call (and its conversation or service) in the log.
    """
    started = time.monotonic()
    for attempt in range(1, policy.attempts + 1):
        if attempt > 1 and recover is not None and (found := await _quietly(recover)) is not None:
            return found
        try:
            return await work()
        except Exception as exc:
            verdict = transient(exc)
            if verdict is None:
                raise
            elapsed = time.monotonic() - started
            wait = policy.wait_s(attempt, verdict.retry_after_s)
            if attempt == policy.attempts or elapsed + wait > policy.total_s:
                log.error("%s failed: %s after %d attempts in %.1f s; giving up",
                          what, _describe(exc, verdict), attempt, elapsed)
                raise _exhausted(exc, verdict, what, attempt) from exc
            log.warning("%s: %s (attempt %d of %d); retrying in %.1f s",
                        what, _describe(exc, verdict), attempt, policy.attempts, wait)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable: the loop returns or raises")  # attempts >= 1


async def _quietly(recover: Callable[[], Awaitable[T | None]]) -> T | None:
    try:
        return await recover()
    except RemoteError as exc:  # a failed check must not hide the retry that follows
        log.warning("idempotency check failed: %s", exc)
        return None


def _describe(exc: Exception, verdict: Transient) -> str:
    if isinstance(exc, RemoteError):
        return str(exc)
    return f"HTTP {verdict.status}" if verdict.status is not None else type(exc).__name__


def _exhausted(exc: Exception, verdict: Transient, what: str, attempts: int) -> DeliveryFailed:
    if isinstance(exc, RemoteError):  # its message is already worded for the user and the model
        return DeliveryFailed(str(exc), kind=exc.kind, status=exc.status, retry_after=exc.retry_after)
    message = f"{what}: {_describe(exc, verdict)} after {attempts} attempts"
    return DeliveryFailed(message, kind="unavailable", status=verdict.status, retry_after=verdict.retry_after_s)
