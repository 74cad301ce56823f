"""An answer as Teams' AI surface shows it: the AI-generated label, native citations, the feedback loop, and
no activity over Teams' size limit. Plain protocol JSON, no SDK (as adapters/teams/cards.py).

- The label and the citations are one entity, ``https://schema.org/Message`` with ``additionalType``
  ``["AIGeneratedContent"]``; each citation is a ``Claim`` whose ``position`` matches an ``[n]`` marker
  in the text (the model's ``[Title › Heading]`` cites become those markers), with the document's title,
  its link, an abstract from the cited passage and, for a classified document, its sensitivity label
  (``usageInfo``). Teams shows at most 20, names up to 80 characters and abstracts up to 160.
- ``channelData.feedbackLoopEnabled``: Teams' own thumbs (with a comment box) under the answer; a vote
  arrives as a ``message/submitAction`` invoke (adapters/teams/handler.py) and is stored like Slack's.
- Teams refuses an activity of about 28 KB and more: a long answer is split at paragraphs into several
  messages of at most ``MESSAGE_BYTES``, each with the citations its own markers need; the last has the
  feedback loop and "Still need help?".
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
    """The answer as one or more messages, each labelled, with its citations; the feedback loop on the last."""
    cited = cited_text(answer)
    parts = split_text(cited.text, MESSAGE_BYTES)
    activities = [labelled(message(part), _claims_in(part, cited.claims)) for part in parts]
    if from_a_run:
        last = activities[-1]
        last["channelData"] = {**last.get("channelData", {}), "feedbackLoopEnabled": True}
        last["attachments"] = [{"contentType": "application/vnd.microsoft.card.adaptive", "content": help_card(run_id)}]
    return activities


def help_card(run_id: str) -> Json:
    """ "Still need help?" under the answer (Teams' own thumbs are above it, from the feedback loop)."""
    body = [text_block("A person from the helpdesk can take it from here.", isSubtle=True, size="Small")]
    return card(body, [execute("Still need help?", HANDOFF, {"run_id": run_id})])


def activity_bytes(activity: Json) -> int:
    """The size Teams counts: the activity's JSON, UTF-8."""
    return len(json.dumps(activity, ensure_ascii=False).encode())


def split_text(text: str, limit: int) -> list[str]:
    """``text`` in parts of at most ``limit`` bytes of JSON, cut between paragraphs, then lines, then words."""
    parts: list[str] = []
    current = ""
    for unit in _units(text, limit):
        if current and _size(current + unit) > limit:
            parts.append(current.strip())
            current = ""
        current += unit
    if current.strip():
        parts.append(current.strip())
    return parts or [""]


def _units(text: str, limit: int) -> list[str]:
    units: list[str] = []
    for paragraph in re.split(r"(?<=\n\n)", text):
        if _size(paragraph) <= limit:
            units.append(paragraph)
            continue
        for word in re.split(r"(?<=\s)", paragraph):
            while _size(word) > limit:  # one word longer than a message: cut inside it
                cut = max(1, len(word) * limit // _size(word) - 1)
                units.append(word[:cut])
                word = word[cut:]
            units.append(word)
    return units


def _size(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode())


def _claims_in(part: str, claims: dict[int, Json]) -> list[Json]:
    return [claims[n] for n in sorted(claims) if f"[{n}]" in part]


def _cite(citation: Citation) -> str:
    return " › ".join(part for part in (citation.title, citation.heading) if part)


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
