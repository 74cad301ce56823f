"""Tool registry: schemas, descriptions, consequence class, permission, validation and dispatch.

A tool never raises into the loop: every problem with a call becomes a ``ToolRefusal`` whose message
is what the model reads as that call's result.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import fastjsonschema
from jsonschema import Draft202012Validator

from bot.agent.canonical import canonical_json, to_json
from bot.errors import ToolRefusal
from bot.types import UserRef
from bot.unicode_text import is_utf8


class Consequence(StrEnum):
    READ = "read"  # runs freely
    WRITE = "write"  # a side effect: needs the requester's confirmation first


@dataclass(frozen=True)
class ToolContext:
    user: UserRef
    run_id: str
    conversation_key: str
    idempotency_key: str | None = None  # the pending action id for a confirmed write
    groups: tuple[str, ...] | None = None  # whose documents a search may return; None: the user's

    @property
    def reading_groups(self) -> tuple[str, ...]:
        return self.groups if self.groups is not None else self.user.groups


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    consequence: Consequence
    handler: Handler
    allowed_groups: frozenset[str] | None = None  # None: every user
    guests_allowed: bool | None = None  # None: reads yes, writes no
    parameters_for: Callable[[tuple[str, ...]], dict[str, Any]] | None = None  # as offered to these readers
    activity: Callable[[dict[str, Any]], str] | None = None  # what the person is told while it runs

    def schema(self, groups: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The schema offered to the model; with ``groups``, described for those readers only.

        The parameters validated stay ``parameters``: only what is offered may name what some readers
        must not see (the search tool's section names, as the choices of its ``section``), so a name
        guessed outside those choices still reaches the tool, which says which sections exist.
        """
        parameters = self.parameters_for(groups) if self.parameters_for and groups is not None else self.parameters
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }

    def permits(self, user: UserRef) -> bool:
        guests_ok = self.guests_allowed if self.guests_allowed is not None else self.consequence == "read"
        if user.is_guest and not guests_ok:
            return False
        return self.allowed_groups is None or bool(self.allowed_groups & set(user.groups))


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Draft202012Validator] = {}
        self._fast: dict[str, Callable[[Any], Any]] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        Draft202012Validator.check_schema(tool.parameters)
        self._tools[tool.name] = tool
        self._validators[tool.name] = Draft202012Validator(tool.parameters)
        self._fast[tool.name] = fastjsonschema.compile(tool.parameters)

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self, groups: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        """Every tool's schema, described for readers with ``groups`` (None: as registered)."""
        return [tool.schema(groups) for tool in self._tools.values()]

    def reading_only(self) -> ToolRegistry:
        """The tools without side effects: for a reply that must not propose anything."""
        return ToolRegistry(tool for tool in self._tools.values() if tool.consequence == Consequence.READ)

    def get(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(self._tools) or "none"
            raise ToolRefusal(f"Unknown tool {name!r}. Available tools: {available}.")
        return tool

    def parse(self, name: str, raw_arguments: str) -> tuple[Tool, dict[str, Any]]:
        """Resolve the tool and decode its arguments, refusing what the model should correct."""
        tool = self.get(name)
        try:
            arguments = _decode(raw_arguments)
        except json.JSONDecodeError as exc:
            raise ToolRefusal(f"Arguments for {name} are not valid JSON ({exc.msg} at char {exc.pos}).") from None
        except (RecursionError, ValueError):  # nesting past the parser's limit, a number too long to convert
            raise ToolRefusal(f"Arguments for {name} are nested too deeply or hold a value too large.") from None
        if not isinstance(arguments, dict):
            raise ToolRefusal(f"Arguments for {name} must be a JSON object.")
        return tool, arguments

    def validate(self, tool: Tool, arguments: dict[str, Any]) -> None:
        """Compiled check first (it runs on every call); jsonschema names every problem when it fails."""
        _require_storable(tool.name, arguments)
        try:
            self._fast[tool.name](arguments)
            return
        except fastjsonschema.JsonSchemaException:
            pass
        errors = sorted(self._validators[tool.name].iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            problems = "; ".join(_describe(error) for error in errors[:5])
            raise ToolRefusal(f"Invalid arguments for {tool.name}: {problems}.")

    def authorise(self, tool: Tool, user: UserRef) -> None:
        if not tool.permits(user):
            raise ToolRefusal(
                f"Not permitted: {tool.name} is not available to this user.",
                denied_write=tool.consequence == Consequence.WRITE,
            )


def history_arguments(raw_arguments: str) -> str:
    """The arguments a call is sent back with in the history: always the text of a JSON object.

    Ollama decodes every earlier call's arguments and answers 400 when they are no object (as do
    proxies translating the history for another provider), so a call refused for its arguments would
    make every later request fail. Text that already is an object goes back verbatim; what decoding
    repaired (a raw newline, a second encoding) goes back repaired; anything else as ``{}``: the
    call's observation tells the model what was wrong.
    """
    try:
        if isinstance(json.loads(raw_arguments), dict):
            return raw_arguments
    except (RecursionError, ValueError):  # JSONDecodeError is a ValueError
        pass
    try:
        arguments = _decode(raw_arguments)
        return to_json(arguments) if isinstance(arguments, dict) else "{}"
    except (RecursionError, ValueError):
        return "{}"


def _decode(raw_arguments: str) -> Any:
    """Decoded arguments: empty text is no arguments, and a second encoding is undone."""
    arguments = _loads(raw_arguments or "{}")
    return _unwrap(arguments) if isinstance(arguments, str) else arguments


def _loads(text: str) -> Any:
    """JSON that may hold a literal newline or tab inside a string, as some compatible endpoints send
    (Gemini's among them): what the model meant is plain, and refusing would only bring the same call back."""
    return json.loads(text, strict=False)


def _unwrap(text: str) -> Any:
    """Arguments some compatible servers encode twice (a JSON string holding the JSON object), decoded.

    The model did nothing wrong there, so refusing would only make it resend the same call.
    """
    try:
        return _loads(text)
    except (RecursionError, ValueError):  # JSONDecodeError is a ValueError
        return text


def _describe(error: Any) -> str:
    where = "/".join(str(part) for part in error.path)
    return f"{where}: {error.message}" if where else error.message


def _require_storable(name: str, arguments: dict[str, Any]) -> None:
    """Arguments are hashed, stored and sent as UTF-8 JSON: a lone surrogate (``\\ud800``) would fail there,
    and a NUL character (``\\u0000``) in PostgreSQL, where a frozen call's text is stored."""
    try:
        encoded = canonical_json(arguments)
    except RecursionError:
        raise ToolRefusal(f"Arguments for {name} are nested too deeply.") from None
    if not is_utf8(encoded):
        raise ToolRefusal(
            f"Invalid arguments for {name}: the text contains an unpaired surrogate escape (like \\ud800), "
            "which is not valid Unicode. Send the text without it."
        )
    if _holds_nul(arguments):
        raise ToolRefusal(
            f"Invalid arguments for {name}: the text contains a NUL character (\\u0000). Send the text without it."
        )


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False
