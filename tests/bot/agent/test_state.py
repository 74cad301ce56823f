import json

import pytest

from bot.agent import Spent
from bot.agent.state import STATE_VERSION, PendingTurn, RunState, call_key, cited_in
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


def test_restarting_from_a_decision_keeps_the_question_and_the_decided_call_only():
    state = _state()
    state.messages.insert(0, {"role": "system", "content": "prompt"})
    state.messages.insert(1, {"role": "user", "content": "earlier thread message"})
    state.question_index = 2
    state.messages.insert(3, {"role": "tool", "tool_call_id": "x", "content": "a restricted passage"})
    state.seen_calls = {call_key("s", {"query": "vpn"}), call_key("w", {"summary": "VPN down"})}
    state.sources["HR › Pay"] = Citation("HR", "Pay", "hr.md", audience=("hr",))

    state.restart_from_decision(("all",), lambda source: not source.audience)

    assert [m.get("content") for m in state.messages[:2]] == ["prompt", "q"]
    assert [c["id"] for c in state.messages[2]["tool_calls"]] == ["b"]  # the other call's result was read
    assert state.question == "q" and state.question_index == 1
    assert state.pending_turn == PendingTurn("b", {})
    assert state.seen_calls == {call_key("w", {"summary": "VPN down"})}  # searches may run again
    assert list(state.sources) == ["T › H"] and state.audience == ("all",)
    state.resume_with("b", '{"status": "created"}')
    assert [m.get("tool_call_id") for m in state.messages[-1:]] == ["b"]


def test_restarting_a_run_that_waits_for_nothing_is_an_error():
    state = _state()
    state.pending_turn = None
    with pytest.raises(ValueError, match="not waiting"):
        state.restart_from_decision(("all",), lambda source: True)


SOURCES = {
    "Acceptable Use Policy": Citation("Acceptable Use Policy", "", "https://intranet/aup"),
    "Acceptable Use Policy › General principles": Citation("Acceptable Use Policy", "General principles", "x"),
    "Security Incident Reporting Policy › Related policies": Citation(
        "Security Incident Reporting Policy", "Related policies", "y"
    ),
}


@pytest.mark.parametrize(
    ("text", "headings"),
    [
        # A document named in the answer's words is not its opening passage cited (it was listed as a source).
        (
            "See POL-IT-006 Acceptable Use Policy [Security Incident Reporting Policy › Related policies].",
            ["Related policies"],
        ),
        ("Never share your credentials [Acceptable Use Policy › General principles].", ["General principles"]),
        # The opening passage cited in brackets, alone or beside another cite, counts.
        ("Scope: everyone [Acceptable Use Policy].", [""]),
        ("Scope [Acceptable Use Policy › General principles; Acceptable Use Policy]", ["", "General principles"]),
        ("Scope [ Acceptable Use Policy ]", [""]),
    ],
)
def test_a_document_title_counts_as_a_cite_only_in_brackets(text, headings):
    assert [c.heading for c in cited_in(text, SOURCES)] == headings
