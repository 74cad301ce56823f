"""Bad query values and path numbers: a 400 (or 404) that names the problem, never a 500."""

from __future__ import annotations

import pytest

from tests.adapters.web import scenario
from tests.adapters.web.scenario import Finds

pytestmark = pytest.mark.asyncio

HUGE = "9" * 30


async def test_unusual_digits_huge_numbers_and_odd_cursors_are_refused_not_server_errors(start_console, fake_openai):
    console = await start_console(Finds())
    await scenario.answered(console.service, fake_openai)
    refused = {
        "/console/?days=%C2%B2": "days must be",  # "²" is a digit to str.isdigit, not to int()
        "/console/gaps?days=%C2%B2": "days must be",
        "/console/gaps.csv?days=%C2%B2": "days must be",
        "/console/cases?before=%C2%B2": "before must be a case number",
        f"/console/cases?before={HUGE}": "before must be a case number",
        "/console/runs?before=2026-01-01|x": "before must be a cursor",  # no UTC offset
        "/console/runs?before=2026-01-01T00:00:00%2B00:00|": "before must be a cursor",  # no run id
        "/console/runs?before=0001-01-01T00:00:00%2B05:00|x": "before must be a cursor",  # before year 1 in UTC
        "/console/runs?until=9999-12-31": "until must be",
    }
    got = {path: await console.get(path) for path in refused}
    wrong = {path: (s, body[:80]) for path, (s, body) in got.items() if s != 400 or refused[path] not in body}
    assert wrong == {}
    status, body = await console.get(f"/console/cases/{HUGE}")
    assert status == 404 and "No case" in body
    status, _ = await console.get("/console/runs?before=2026-01-01T00:00:00%2B05:00|x")  # a cursor in another zone
    assert status == 200
