"""Teams' Stop button on a streamed reply in a personal chat, kept as Slack's is: pressed while the run works,
the run is stopped (it ends cancelled, with the usual give-up); pressed while the answer is written out, the
rest of it is not posted. A stream that timed out still delivers the answer as a plain message."""

from __future__ import annotations

import logging

import pytest

from bot.agent.progress import WORKING
from tests.adapters.teams.test_app import Teams, conversation_key_of
from tests.adapters.teams.test_native_ai import long_answer_citing_first_passage, stream_info
from tests.fakes.bot_connector import STREAM_TIMED_OUT
from tests.fakes.openai_server import text, tool_calls

pytestmark = pytest.mark.asyncio

UNWANTED = "The answer nobody waits for any more."
SEARCH = ("search_policies", {"query": "annual leave days"})


def informative(teams: Teams) -> list[str]:
    """The informative updates Teams showed (refused ones are not recorded)."""
    return [r.text for r in teams.channel.typing if (stream_info(r) or {}).get("streamType") == "informative"]


async def ask(teams: Teams) -> str:
    """Ask in a personal chat and wait until its reply is delivered and everything settled; its conversation key."""
    activity = teams.channel.personal_message("How many vacation days do I get?")
    await teams.post(activity)
    key = conversation_key_of(activity)
    await teams.delivered(key)
    await teams.settle()
    return key


async def test_stop_pressed_while_the_run_works_cancels_the_run_and_its_answer_is_never_posted(teams: Teams):
    teams.model.script(tool_calls(SEARCH), text(UNWANTED))
    teams.channel.stop_stream_after("informative")  # Stop pressed while the first progress line shows
    key = await ask(teams)
    (run,) = await teams.service.store.runs.of_conversation(key)
    assert run.reason == "cancelled"
    assert len(teams.model.requests) == 1  # the held answer was never asked for, let alone posted
    (reply,) = teams.channel.messages()  # the give-up, as a plain message: Teams takes nothing more on the stream
    assert stream_info(reply) is None and reply.text.startswith("This request was stopped before it finished.")
    assert "helpdesk case" in reply.text and UNWANTED not in reply.text  # the usual give-up and handoff
    assert informative(teams) == [WORKING]  # nothing more shown once Stop was pressed
    assert [(r.type, r.status, r.streamed) for r in teams.channel.refusals] == [("typing", 403, True)]


async def test_stop_pressed_while_the_answer_is_written_out_posts_none_of_the_rest(
    teams: Teams, caplog: pytest.LogCaptureFixture
):
    teams.model.script(tool_calls(SEARCH), long_answer_citing_first_passage())
    teams.channel.stop_stream_after("streaming")  # Stop pressed once the answer's first part shows
    with caplog.at_level(logging.INFO, logger="adapters.teams.streaming"):
        key = await ask(teams)
    (run,) = await teams.service.store.runs.of_conversation(key)
    assert run.reason == "answered"
    assert teams.channel.messages() == []  # no final, and no plain message with the rest of the answer
    (stream,) = teams.channel.streams.values()
    assert [kind for kind, _ in stream.updates].count("streaming") == 1 and stream.final is None
    assert [(r.type, r.status) for r in teams.channel.refusals] == [("typing", 403)]  # the update after Stop
    assert (await teams.service.store.outbox.of_conversation(key))[0].attempts == 1  # done, not retried
    assert any("pressed Stop; the rest of the answer is not posted" in r.message for r in caplog.records)


@pytest.mark.parametrize("phase", ["informative", "streaming"])
async def test_a_stream_that_timed_out_still_delivers_the_answer_as_a_plain_message(teams: Teams, phase: str):
    teams.model.script(tool_calls(SEARCH), long_answer_citing_first_passage())
    teams.channel.stop_stream_after(phase, message=STREAM_TIMED_OUT)
    key = await ask(teams)
    (run,) = await teams.service.store.runs.of_conversation(key)
    assert run.reason == "answered"  # a timeout is no Stop: the run goes on
    (answer,) = teams.channel.messages()
    assert stream_info(answer) is None and answer.text.startswith("You get 25 days a year [1].")
    assert {(r.status, r.streamed) for r in teams.channel.refusals} == {(403, True)}
