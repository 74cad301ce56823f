import json

import pytest

from bot.agent import Spent
from bot.agent.state import STATE_VERSION, PendingTurn, RunState
from bot.errors import StateVersionError
from bot.types import Citation, UserRef


def _state() -> RunState:
    calls = [
        {"id": "a", "type": "function", "function": {"name": "s", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "w", "arguments": "{}"}},
    ]
    return RunState(
        run_id="run_1",
        user=UserRef("U1", "Ann", groups=("all", "it")),
        conversation_key="slack::C1:1.0",
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": calls}],
        question_index=0,
        spent=Spent(steps=1, input_tokens=10, output_tokens=2, cost_usd=0.001),
        seen_calls={"s:{}"},
        searches=1,
        sources={"T › H": Citation("T", "H", "src")},
        pending_turn=PendingTurn(call_id="b", results={"a": '{"results": []}'}),
    )


def test_saved_state_round_trips_through_json_with_its_version():
    data = json.loads(json.dumps(_state().to_dict()))
    assert data["version"] == STATE_VERSION
    restored = RunState.from_dict(data)
    assert restored.to_dict() == _state().to_dict()
    assert restored.user.groups == ("all", "it")


def test_state_from_another_release_is_refused_clearly():
    data = _state().to_dict() | {"version": 99}
    with pytest.raises(StateVersionError, match="version 99"):
        RunState.from_dict(data)


def test_resuming_appends_every_result_of_the_interrupted_turn_in_call_order():
    state = _state()
    state.resume_with("b", '{"status": "cancelled"}')
    assert [m.get("tool_call_id") for m in state.messages[-2:]] == ["a", "b"]
    assert state.pending_turn is None
    with pytest.raises(ValueError):
        state.resume_with("b", "again")
