from bot.agent.compaction import apply_compaction, plan_compaction, turns


def _call_turn(n: int) -> list[dict]:
    calls = [
        {"id": f"c{n}a", "type": "function", "function": {"name": "s", "arguments": "{}"}},
        {"id": f"c{n}b", "type": "function", "function": {"name": "s", "arguments": "{}"}},
    ]
    return [
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": f"c{n}a", "content": "r"},
        {"role": "tool", "tool_call_id": f"c{n}b", "content": "r"},
    ]


def _history(n_turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "the question"}]
    for n in range(n_turns):
        messages += _call_turn(n)
    return messages


def test_an_assistant_message_and_its_tool_results_form_one_unit():
    units = turns(_history(2)[2:])
    assert [len(u) for u in units] == [3, 3]


def test_nothing_to_fold_when_only_the_kept_turns_exist():
    assert plan_compaction(_history(3), question_index=1, keep_turns=3) is None


def test_compaction_pins_system_and_question_and_keeps_the_last_three_turns_whole():
    history = _history(6)
    plan = plan_compaction(history, question_index=1, keep_turns=3)
    assert plan is not None
    compacted = apply_compaction(plan, "found X")
    assert compacted[:2] == history[:2]
    assert compacted[2]["role"] == "assistant" and "found X" in compacted[2]["content"]
    assert compacted[3:] == history[-9:]
    # every tool result still follows the assistant message that called it
    for i, message in enumerate(compacted):
        if message["role"] == "tool":
            owner = next(m for m in reversed(compacted[:i]) if m["role"] == "assistant")
            assert message["tool_call_id"] in {c["id"] for c in owner.get("tool_calls", [])}
