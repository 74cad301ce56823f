"""/readyz's verdict: every probe answers in time, rate-limited probes are cached, draining is never ready."""

from __future__ import annotations

import asyncio

import pytest

from bot.runtime import Readiness

pytestmark = pytest.mark.asyncio


async def ok() -> None:
    return None


async def broken() -> None:
    raise ConnectionRefusedError("database at 127.0.0.1:5432 refused the connection")


async def stuck() -> None:
    await asyncio.sleep(10)


async def test_ready_only_when_every_probe_answers_and_each_failure_says_why():
    readiness = Readiness(timeout_s=0.1)
    readiness.add("database", broken)
    readiness.add("index", stuck)
    readiness.add("slack", ok)
    ready, checks = await readiness.check()
    assert not ready
    assert checks["database"] == "ConnectionRefusedError: database at 127.0.0.1:5432 refused the connection"
    assert checks["index"].startswith("no answer within")
    assert checks["slack"] == "ok"


async def test_a_probe_of_a_rate_limited_api_is_asked_at_most_once_per_period():
    calls = []

    async def auth_test() -> None:
        calls.append(1)

    readiness = Readiness()
    readiness.add("slack", auth_test, every_s=30)
    for _ in range(3):
        assert (await readiness.check())[0]
    assert len(calls) == 1


async def test_a_draining_process_is_not_ready_whatever_its_probes_say():
    readiness = Readiness()
    readiness.add("database", ok)
    readiness.draining = True
    ready, checks = await readiness.check()
    assert not ready and checks["database"] == "ok" and "shutting down" in checks["shutdown"]
