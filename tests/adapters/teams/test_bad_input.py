"""Bodies the Bot Framework SDK cannot read as an activity: a 400 and a log line, never a 500 with a traceback."""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest

from tests.adapters.teams.test_app import Teams

pytestmark = pytest.mark.asyncio



WRONG_PARTS = {  # a JSON object, but with a part of the wrong type where the SDK reads an object or a list
    "a sender that is a number": {"from": 5},
    "a conversation that is a string": {"conversation": "19:general"},
    "entities that are a number": {"entities": 5},
}


async def post_raw(teams: Teams, body: bytes) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.post(
        teams.url, data=body, headers={"Content-Type": "application/json"}
    ) as response:
        return response.status, await response.text()


@pytest.mark.parametrize("name", list(WRONG_PARTS))
async def test_an_activity_with_a_part_of_the_wrong_type_gets_400_and_a_log_line(
    teams: Teams, caplog: pytest.LogCaptureFixture, name: str
):
    caplog.set_level(logging.WARNING)
    activity = {**teams.channel.personal_message("How many vacation days?"), **WRONG_PARTS[name]}
    status, text = await post_raw(teams, json.dumps(activity).encode())
    await teams.settle()

    assert status == 400, (name, status, text)
    assert any(r.name == "adapters.teams.app" and "400" in r.getMessage() for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR
            and "AUTHENTICATION IS OFF" not in r.getMessage()] == []  # fmt: skip
    assert teams.channel.recorded == [] and teams.model.requests == []


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b"null"])
async def test_a_body_that_is_not_a_json_object_is_refused_with_a_log_line(
    teams: Teams, caplog: pytest.LogCaptureFixture, body: bytes
):
    caplog.set_level(logging.WARNING)
    status, _ = await post_raw(teams, body)
    assert status == 400
    assert any(r.name == "adapters.teams.app" and "400" in r.getMessage() for r in caplog.records)
