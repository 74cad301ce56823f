import json

import pytest

from bot.agent import Consequence, Tool, ToolRegistry
from bot.errors import ToolRefusal
from bot.types import UserRef


async def _noop(arguments, ctx):
    return {"ok": True}


def _registry() -> ToolRegistry:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}, "kind": {"enum": ["a", "b"]}},
        "required": ["n"],
        "additionalProperties": False,
    }
    return ToolRegistry(
        [
            Tool("count", "counts", schema, Consequence.READ, _noop),
            Tool("write_it", "writes", {"type": "object"}, Consequence.WRITE, _noop, allowed_groups=frozenset({"it"})),
        ]
    )


def test_unknown_tool_refusal_lists_the_available_tools():
    with pytest.raises(ToolRefusal, match="Available tools: count, write_it"):
        _registry().get("delete_everything")


def test_arguments_that_are_not_json_are_refused_with_the_position():
    with pytest.raises(ToolRefusal, match="not valid JSON"):
        _registry().parse("count", '{"n": 1')


def test_schema_violations_name_the_field_and_the_problem():
    registry = _registry()
    tool, args = registry.parse("count", '{"n": 0, "kind": "c", "extra": 1}')
    with pytest.raises(ToolRefusal) as refusal:
        registry.validate(tool, args)
    message = str(refusal.value)
    assert "n: 0 is less than the minimum of 1" in message
    assert "kind: 'c' is not one of ['a', 'b']" in message
    assert "Additional properties are not allowed" in message


def test_writes_are_refused_to_guests_and_to_users_outside_the_allowed_groups():
    registry = _registry()
    tool = registry.get("write_it")
    with pytest.raises(ToolRefusal) as refusal:
        registry.authorise(tool, UserRef("u1", groups=("sales",)))
    assert refusal.value.denied_write
    with pytest.raises(ToolRefusal):
        registry.authorise(tool, UserRef("u2", groups=("it",), is_guest=True))
    registry.authorise(tool, UserRef("u3", groups=("it",)))


def test_guests_may_use_read_tools():
    registry = _registry()
    registry.authorise(registry.get("count"), UserRef("guest", is_guest=True))


def test_schemas_are_in_chat_completions_function_format():
    schema = _registry().schemas()[0]
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "count"
    assert schema["function"]["parameters"]["required"] == ["n"]


def test_arguments_nested_past_the_parsers_limit_are_refused_not_raised():
    deep = '{"n": ' + "[" * 3_000 + "]" * 3_000 + "}"
    with pytest.raises(ToolRefusal, match="nested too deeply"):
        _registry().parse("count", deep)


def test_arguments_with_a_lone_surrogate_are_refused_at_validation():
    registry = _registry()
    tool, args = registry.parse("write_it", '{"summary": "Laptop \\ud800 broken"}')
    with pytest.raises(ToolRefusal, match="not valid Unicode"):
        registry.validate(tool, args)
    tool, args = registry.parse("write_it", '{"summary": "Laptop \\ud83d\\ude00 broken"}')  # a pair is fine
    registry.validate(tool, args)


def test_arguments_with_a_nul_character_are_refused_at_validation_as_postgresql_cannot_store_them():
    registry = _registry()
    for raw in ('{"summary": "Laptop \\u0000 broken"}', '{"summary": "ok", "tags": [{"a\\u0000": "b"}]}'):
        tool, args = registry.parse("write_it", raw)
        with pytest.raises(ToolRefusal, match="NUL character"):
            registry.validate(tool, args)
    tool, args = registry.parse("write_it", '{"summary": "A \\\\u0000 typed out is text"}')  # a backslash and "u0000"
    registry.validate(tool, args)


def test_arguments_a_server_encoded_twice_are_decoded_once_more():
    _, arguments = _registry().parse("count", json.dumps('{"n": 1}'))
    assert arguments == {"n": 1}
    with pytest.raises(ToolRefusal, match="must be a JSON object"):
        _registry().parse("count", json.dumps("n is one"))
