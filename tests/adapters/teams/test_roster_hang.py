"""Teams' roster not answering: a question is still answered, without waiting out msrest's 100 s."""

from __future__ import annotations

import pytest

import adapters.teams.app as teams_module
from tests.adapters.teams.test_app import Teams
from tests.fakes.bot_connector import ALICE
from tests.fakes.openai_server import text

pytestmark = pytest.mark.asyncio


async def test_a_question_is_answered_while_the_roster_lookup_still_hangs(
    teams: Teams, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(teams_module, "ROSTER_TIMEOUT_S", 0.5)
    teams.model.script(text("You get 25 days a year."))
    roster_answers = teams.channel.hold_roster()  # every member lookup waits for this
    try:
        await teams.post(teams.channel.personal_message("How many vacation days do I get?"))
        # The roster answers only after the reply is here (``finally``): without a bound the reply waited 100 s.
        reply = await teams.channel.wait_for(lambda r: r.type == "message", timeout=30)
    finally:
        roster_answers.set()

    assert reply.text == "You get 25 days a year."
    assert teams.channel.member_lookups == [(f"a:personal-{ALICE['id']}", ALICE["id"])]
    (run,) = await teams.service.store.runs.recent()
    assert run.user_id == ALICE["aadObjectId"]
