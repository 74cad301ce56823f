"""What the vendors accept, checked on every payload the fakes receive: Slack Block Kit and Adaptive Cards.

The fake Slack Web API and the fake Bot Framework connector run each message through these checks and
answer a failing one the way the platform does (``invalid_blocks``, a 400), so the app sees the refusal
it would get in production. Every problem is also recorded in ``VIOLATIONS``; the autouse fixture in
tests/conftest.py fails any test that added one, so every test that talks to a fake is a conformance test.
A test that provokes a violation on purpose takes it with ``take()``.

Slack: each block must parse with slack_sdk's Block Kit models and round-trip unchanged (an unknown
block, element or key is dropped by ``Block.parse``), pass their validators (``to_dict`` validates
every nested object: button text 75, action_id 255, value 2,000, header 150, 10 fields ...), and stay
within the documented limits those models do not check (NOTES.md): every text object 3,000 characters,
a section field 2,000, 50 blocks a message (100 in a view), 12,000 characters in all its markdown blocks,
a message's text 40,000 (a stream's ``markdown_text`` 12,000 a call), and its blocks about 13,000 characters
of JSON in all (``msg_blocks_too_long``).

Teams: every card validates against the Adaptive Cards 1.5 schema (tests/data/adaptive-card-1.5.0.json,
microsoft/AdaptiveCards, MIT) and names a version up to 1.5 (the highest Teams renders), except the Teams
host property ``msteams``, which that schema does not know; it is checked against what Microsoft's Teams
SDK card model (microsoft-teams-cards, ``TeamsCardProperties``) accepts: ``width`` is only ``"full"``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft6Validator
from jsonschema.exceptions import best_match
from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block

DATA = Path(__file__).resolve().parent.parent / "data"
ADAPTIVE_CARD_SCHEMA = DATA / "adaptive-card-1.5.0.json"
CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
CARD_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5")  # the schema's, and the highest Teams renders

TEXT_OBJECT_CHARS = 3_000
FIELD_CHARS = 2_000
MESSAGE_BLOCKS = 50
VIEW_BLOCKS = 100
MESSAGE_TEXT_CHARS = 40_000
MARKDOWN_CHARS = 12_000  # every markdown block of a message together
BLOCKS_JSON_CHARS = 13_000  # where Slack answers msg_blocks_too_long (NOTES.md)

# microsoft-teams-cards' TeamsCardProperties: width is Literal["full"]; entities are mentions.
MSTEAMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"width": {"enum": ["full"]}, "entities": {"type": "array", "items": {"type": "object"}}},
}

VIOLATIONS: list[str] = []  # every problem any fake saw since the current test began


def report(source: str, problems: list[str]) -> None:
    VIOLATIONS.extend(f"{source}: {problem}" for problem in problems)


def take() -> list[str]:
    """The violations recorded so far, removed: for a test that sends a bad payload on purpose."""
    found = list(VIOLATIONS)
    VIOLATIONS.clear()
    return found


# --- Slack --------------------------------------------------------------------------------------------


def slack_refusal(method: str, params: dict[str, Any]) -> tuple[str, list[str]] | None:
    """Slack's error code and the problems for a message or view it would refuse; None when it is fine."""
    problems = block_problems(params.get("blocks"), MESSAGE_BLOCKS) if "blocks" in params else []
    view = params.get("view")
    if isinstance(view, dict):
        problems += block_problems(view.get("blocks"), VIEW_BLOCKS)
    if problems:
        return "invalid_blocks", problems
    text = params.get("text")
    if isinstance(text, str) and len(text) > MESSAGE_TEXT_CHARS:
        return "msg_too_long", [f"{method} text has {len(text):,} characters (limit {MESSAGE_TEXT_CHARS:,})"]
    streamed = params.get("markdown_text")  # chat.startStream / appendStream / stopStream, each call
    if isinstance(streamed, str) and len(streamed) > MARKDOWN_CHARS:
        return "msg_too_long", [f"{method} markdown_text has {len(streamed):,} characters (limit {MARKDOWN_CHARS:,})"]
    size = len(json.dumps(params.get("blocks") or [], ensure_ascii=False))
    if size > BLOCKS_JSON_CHARS:
        return "msg_blocks_too_long", [f"{method} blocks are {size:,} characters of JSON (about {BLOCKS_JSON_CHARS:,})"]
    return None


def block_problems(blocks: Any, max_blocks: int = MESSAGE_BLOCKS) -> list[str]:
    """Why Slack would refuse these blocks, one line per problem, with a JSON pointer as Slack gives."""
    if not isinstance(blocks, list):
        return [f"blocks must be a list, not {type(blocks).__name__} [json-pointer:/blocks]"]
    problems = [f"{len(blocks)} blocks, no more than {max_blocks} allowed [json-pointer:/blocks]"]
    problems = problems if len(blocks) > max_blocks else []
    for i, block in enumerate(blocks):
        problems += [f"{p} [json-pointer:/blocks/{i}]" for p in _one_block(block)]
    markdown = sum(len(str(b.get("text", ""))) for b in blocks if isinstance(b, dict) and b.get("type") == "markdown")
    if markdown > MARKDOWN_CHARS:
        problems.append(f"markdown blocks hold {markdown:,} characters, no more than {MARKDOWN_CHARS:,} in all")
    return problems


def _one_block(block: Any) -> list[str]:
    if not isinstance(block, dict):
        return ["a block must be an object"]
    try:
        parsed = Block.parse(block)
        rendered = parsed.to_dict() if parsed is not None else None
    except SlackObjectFormationError as exc:
        return [str(exc)]
    if rendered is None:
        return [f"unknown block type {block.get('type')!r}"]
    problems = [] if rendered == block else [f"not Block Kit as slack_sdk models it (kept {rendered})"]
    return problems + _length_problems(block)


def _length_problems(value: Any, path: str = "") -> list[str]:
    """The limits slack_sdk's models leave unchecked: every text object, and each section field."""
    problems: list[str] = []
    if isinstance(value, dict):
        text = value.get("text")
        if value.get("type") in ("plain_text", "mrkdwn") and isinstance(text, str) and len(text) > TEXT_OBJECT_CHARS:
            problems.append(f"text object of {len(text):,} characters at {path or '/'} (limit {TEXT_OBJECT_CHARS:,})")
        for i, field in enumerate(value.get("fields") or [] if value.get("type") == "section" else []):
            size = len(str(field.get("text", ""))) if isinstance(field, dict) else 0
            if size > FIELD_CHARS:
                problems.append(f"section field of {size:,} characters at {path}/fields/{i} (limit {FIELD_CHARS:,})")
        for key, item in value.items():
            problems += _length_problems(item, f"{path}/{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            problems += _length_problems(item, f"{path}/{i}")
    return problems


# --- Teams --------------------------------------------------------------------------------------------


@cache
def _card_validator() -> Draft6Validator:
    return Draft6Validator(json.loads(ADAPTIVE_CARD_SCHEMA.read_text(encoding="utf-8")))


def adaptive_card_problems(card: Any) -> list[str]:
    """Why a card is not Adaptive Cards 1.5 (its ``msteams`` checked against the Teams SDK's model instead)."""
    if not isinstance(card, dict):
        return ["a card must be an object"]
    plain = {key: value for key, value in card.items() if key != "msteams"}
    problems = [_explain(e) for e in _card_validator().iter_errors(plain)]
    if card.get("version") not in CARD_VERSIONS:
        problems.append(f"version {card.get('version')!r}: Teams renders Adaptive Cards up to 1.5 (NOTES.md)")
    if "msteams" in card:
        problems += [f"msteams: {_explain(e)}" for e in Draft6Validator(MSTEAMS_SCHEMA).iter_errors(card["msteams"])]
    return problems


def activity_card_problems(activity: Any) -> list[str]:
    """The problems of every Adaptive Card attached to an activity."""
    attachments = activity.get("attachments") if isinstance(activity, dict) else None
    problems: list[str] = []
    for i, attachment in enumerate(attachments or []):
        if isinstance(attachment, dict) and attachment.get("contentType") == CARD_CONTENT_TYPE:
            problems += [f"attachments/{i}: {p}" for p in adaptive_card_problems(attachment.get("content"))]
    return problems


def _explain(error: Any) -> str:
    """The deepest reason under an ``anyOf`` (which element or property is wrong), with where it is."""
    deepest = best_match(error.context) if error.context else error
    where = "/" + "/".join(str(part) for part in deepest.absolute_path)
    return f"{deepest.message[:300]} at {where}"
