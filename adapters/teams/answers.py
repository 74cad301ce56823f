"""An answer as Teams' AI surface shows it: the AI-generated label, native citations, the feedback loop, and
no activity over Teams' size limit. Plain protocol JSON, no SDK (as adapters/teams/cards.py).

- The label and the citations are one entity, ``https://schema.org/Message`` with ``additionalType``
  ``["AIGeneratedContent"]``; each citation is a ``Claim`` whose ``position`` matches an ``[n]`` marker
  in the text (the model's ``[Title › Heading]`` cites become those markers), with the document's title,
  its link, an abstract from the cited passage and, for a classified document, its sensitivity label
  (``usageInfo``). Teams shows at most 20, names up to 80 characters and abstracts up to 160.
- ``channelData.feedbackLoopEnabled``: Teams' own thumbs (with a comment box) under the answer; a vote
  arrives as a ``message/submitAction`` invoke (adapters/teams/handler.py) and is stored like Slack's.
- Teams refuses an activity of about 28 KB and more, counted as sent (``activity_bytes``: JSON with every
  non-ASCII character escaped): a long answer is split at paragraphs into several messages of at most
  ``MESSAGE_BYTES``, each with the citations its own markers need; the last has the feedback loop and
  "Still need help?".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from adapters.teams.cards import Json, card, execute, message, text_block
from bot.types import Answer, Citation

AI_MESSAGE = "https://schema.org/Message"
MAX_CITATIONS = 20
NAME_CHARS = 80
ABSTRACT_CHARS = 160
# Teams refuses an activity of about 28 KB: leave room for what the connector adds (from, recipient,
# conversation, serviceUrl) and the card under the last part.
MESSAGE_BYTES = 20_000
MIN_PART_BYTES = 1_000  # a part's text is never cut smaller to make room for its citations
# The label entity and the message around a part's text (and its "citation" key), counted once a part.
LABEL_BYTES = len(json.dumps({"type": "message", "text": "", "textFormat": "markdown", "entities": [
    {"type": AI_MESSAGE, "@type": "Message", "@context": "https://schema.org", "@id": "",
     "additionalType": ["AIGeneratedContent"], "citation": []}]}).encode())
_MARK = re.compile(r"\[(\d+)\]")
HANDOFF = "handoff"


@dataclass(frozen=True)
class CitedText:
    """The answer's text with ``[n]`` markers, and the citation claims the markers point at."""

    text: str
    claims: dict[int, Json]


def cited_text(answer: Answer) -> CitedText:
    """Each cite the model wrote (``[Title › Heading]``) as its citation's ``[n]``; uncited sources are dropped."""
    text, claims = answer.text.strip(), {}
    for position, citation in enumerate(answer.citations[:MAX_CITATIONS], start=1):
        marked = re.sub(rf"\[{re.escape(_cite(citation))}\](?:\([^)\s]*\))?", f"[{position}]", text)
        if marked != text:
            text, claims[position] = marked, claim(position, citation)
    return CitedText(text, claims)


def claim(position: int, citation: Citation) -> Json:
    """One citation as Teams shows it: title (and heading) as the name, the link, the passage's start."""
    appearance: Json = {
        "@type": "DigitalDocument",
        "name": _short(_cite(citation), NAME_CHARS),
        "abstract": _short(citation.abstract or _cite(citation), ABSTRACT_CHARS),
    }
    if citation.source.startswith(("https://", "http://")):
        appearance["url"] = citation.source
    if citation.classification:  # the document's own label: Teams shows it on the citation
        label = citation.classification.strip()
        appearance["usageInfo"] = {
            "@type": "CreativeWork",
            "name": label[:1].upper() + label[1:],
            "description": f"This document is classified {label}.",
        }
    return {"@type": "Claim", "position": position, "appearance": appearance}


def ai_entity(claims: list[Json]) -> Json:
    """The AI-generated label, with the citations of this message."""
    entity: Json = {
        "type": AI_MESSAGE,
        "@type": "Message",
        "@context": "https://schema.org",
        "@id": "",
        "additionalType": ["AIGeneratedContent"],
    }
    if claims:
        entity["citation"] = claims
    return entity


def labelled(activity: Json, claims: list[Json] | None = None) -> Json:
    """Any message the model wrote, with the AI-generated label (and its citations)."""
    return {**activity, "entities": [*activity.get("entities", []), ai_entity(claims or [])]}


def answer_activities(answer: Answer, run_id: str, *, from_a_run: bool = True) -> list[Json]:
    """The answer as one or more messages, each labelled, with its citations; the feedback loop on the last.

    Each part is held to the size of the whole message it becomes (its citations, and room for the card and
    the feedback loop of the last), not to its text alone: 20 citations can add 10 KB to a part.
    """
    cited = cited_text(answer)
    room = activity_bytes(_finished(message("x"), run_id)) - activity_bytes(message("x")) if from_a_run else 0
    activities = [_part(part, cited.claims) for part in split_text(cited.text, MESSAGE_BYTES - room, cited.claims)]
    if from_a_run:
        activities[-1] = _finished(activities[-1], run_id)
    return activities


def _part(text: str, claims: dict[int, Json]) -> Json:
    """One message of an answer: its text, labelled, with the citations its markers need."""
    return labelled(message(text), _claims_in(text, claims))


def _finished(last: Json, run_id: str) -> Json:
    """The answer's last message: with Teams' feedback loop and "Still need help?"."""
    return {
        **last,
        "channelData": {**last.get("channelData", {}), "feedbackLoopEnabled": True},
        "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content": help_card(run_id)}],
    }


def help_card(run_id: str) -> Json:
    """ "Still need help?" under the answer (Teams' own thumbs are above it, from the feedback loop)."""
    body = [text_block("A person from the helpdesk can take it from here.", isSubtle=True, size="Small")]
    return card(body, [execute("Still need help?", HANDOFF, {"run_id": run_id})])


def activity_bytes(activity: Json | str) -> int:
    """The size Teams receives: the activity's (or a text's) JSON as the connector client writes it.

    msrest sends a body as ``json.dumps(body)``: ASCII, everything else escaped (``\\uXXXX``), so a
    Chinese or Japanese character is 6 bytes on the wire and an emoji 12 (a surrogate pair), not the
    3 and 4 of UTF-8. Counted as UTF-8, a part "within" the limit was twice it and refused (413).
    """
    return len(json.dumps(activity))  # ASCII: a character is a byte


def split_text(text: str, limit: int, claims: dict[int, Json] | None = None) -> list[str]:
    """``text`` in parts whose messages (text, label and the ``claims`` each part's markers need) are at most
    ``limit`` bytes of JSON, cut between paragraphs, then lines, then words."""
    claims = claims or {}
    claim_bytes = {n: activity_bytes(c) + 2 for n, c in claims.items()}  # and the ", " between them

    def size(text: str, marks: set[int]) -> int:  # at least the message's size: counted, not built, for speed
        return activity_bytes(text) + LABEL_BYTES + sum(claim_bytes[n] for n in marks)

    unit_limit = max(limit - LABEL_BYTES - sum(claim_bytes.values()), MIN_PART_BYTES)
    parts: list[str] = []
    current, marks = "", set[int]()
    for unit in _units(text, unit_limit):
        more = marks | _marks(unit, claims)
        if current and size(current + unit, more) > limit:
            parts.append(current.strip())
            current, more = "", _marks(unit, claims)
        current, marks = current + unit, more
    if current.strip():
        parts.append(current.strip())
    return parts or [""]


def _marks(text: str, claims: dict[int, Json]) -> set[int]:
    """The citations whose ``[n]`` markers are in ``text``."""
    return {n for n in map(int, _MARK.findall(text)) if n in claims}


def _units(text: str, limit: int) -> list[str]:
    units: list[str] = []
    for paragraph in re.split(r"(?<=\n\n)", text):
        if activity_bytes(paragraph) <= limit:
            units.append(paragraph)
            continue
        for word in re.split(r"(?<=\s)", paragraph):
            while activity_bytes(word) > limit:  # one word longer than a message: cut inside it
                cut = max(1, len(word) * limit // activity_bytes(word) - 1)
                units.append(word[:cut])
                word = word[cut:]
            units.append(word)
    return units


def _claims_in(part: str, claims: dict[int, Json]) -> list[Json]:
    return [claims[n] for n in sorted(claims) if f"[{n}]" in part]


def _cite(citation: Citation) -> str:
    return " › ".join(part for part in (citation.title, citation.heading) if part)


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
