"""Readiness: can this process answer people right now? The answer behind ``/readyz``.

Each dependency (database, index, each configured platform) registers a probe: a coroutine that
raises when the dependency cannot be used. Probes run concurrently, each within ``timeout_s``; a
probe of a rate-limited API (Slack's auth.test) keeps its result for ``every_s``. A process that is
shutting down is not ready, whatever its probes say, so a load balancer stops sending it work.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Probe = Callable[[], Awaitable[object]]
OK = "ok"


@dataclass
class _Check:
    probe: Probe
    every_s: float
    checked_at: float = float("-inf")
    result: str = ""


class Readiness:
    """Named probes and the last verdict of each."""

    def __init__(self, timeout_s: float = 3.0) -> None:
        self.timeout_s = timeout_s
        self.draining = False
        self._checks: dict[str, _Check] = {}

    def add(self, name: str, probe: Probe, *, every_s: float = 0.0) -> None:
        self._checks[name] = _Check(probe, every_s)

    async def check(self) -> tuple[bool, dict[str, str]]:
        """(ready, {name: "ok" or what is wrong}); not ready while draining."""
        names = list(self._checks)
        results = await asyncio.gather(*(self._result(self._checks[name]) for name in names))
        verdicts = dict(zip(names, results, strict=True))
        if self.draining:
            verdicts["shutdown"] = "shutting down: finishing the runs in flight"
        return all(v == OK for v in verdicts.values()), verdicts

    async def _result(self, check: _Check) -> str:
        now = time.monotonic()
        if now - check.checked_at < check.every_s:
            return check.result
        check.result = await self._probe(check.probe)
        check.checked_at = now
        return check.result

    async def _probe(self, probe: Probe) -> str:
        try:
            async with asyncio.timeout(self.timeout_s):
                await probe()
        except TimeoutError:
            return f"no answer within {self.timeout_s:.0f} s"
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"[:300]
        return OK
