"""One retry policy for every remote call: what it retries, when it stops, and what it says when it does."""

from __future__ import annotations

import pytest

from bot.delivery import RetryPolicy, Transient, with_retries
from bot.errors import DeliveryFailed

NO_WAIT = RetryPolicy(attempts=3, first_s=0, max_wait_s=0, total_s=5, jitter=0)


class Throttled(Exception):
    """What an SDK raises for a 429 (not one of our errors): the classifier reads its Retry-After."""

    status, retry_after = 429, 0.0


def throttled(exc: Exception) -> Transient | None:
    return Transient(Throttled.retry_after, Throttled.status) if isinstance(exc, Throttled) else None


async def test_giving_up_on_a_rate_limit_keeps_its_retry_after_for_the_next_scheduler() -> None:
    calls = 0

    async def refuse() -> None:
        nonlocal calls
        calls += 1
        raise Throttled()

    with pytest.raises(DeliveryFailed) as failed:
        await with_retries(refuse, NO_WAIT, throttled, what="Teams reply")
    assert calls == 3
    assert (failed.value.status, failed.value.retry_after) == (429, 0.0)


async def test_a_failure_that_will_not_change_is_raised_at_once() -> None:
    calls = 0

    async def forbidden() -> None:
        nonlocal calls
        calls += 1
        raise PermissionError("403")

    with pytest.raises(PermissionError):
        await with_retries(forbidden, NO_WAIT, throttled, what="Teams reply")
    assert calls == 1
