"""The offline model: a deterministic stand-in for an LLM, used when no OPENAI_API_KEY is set.

It reads the chat-completions message list exactly as a hosted model would and answers in the same
shape (text, parallel tool calls, token usage), so the agent loop, budgets and traces run unchanged.
It knows nothing about retrieval beyond the JSON the tools return. One run is at most one round of
tool calls: once results are back after the last user message it answers, so it cannot loop.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from bot.types import Message, ModelReply, ToolCall, Usage

NAME = "policypal-offline"
COMPACTION_PREFIX = "You compress agent conversation history"
TICKET_PROPOSAL = "I can raise an IT ticket for this. Please confirm the details."
NOT_IN_POLICY = "That is not in the policy documents I can search, so I can't give you a policy answer on it."
MAX_PARTS = 3
MAX_QUERY = 300  # the search tool's schema limits
MAX_DETAILS = 2000  # and the ticket tool's
SUMMARY_CHARS = 800
_CHARS_PER_TOKEN = 4

_WH = r"(?:what|when|where|which|who|whom|whose|why|how)"
_AUX = r"(?:am|is|are|was|were|do|does|did|can|could|will|would|shall|should|may|might|must|have|has)"
_SUBJECT = (
    r"(?:i|we|you|they|he|she|it|there|my|our|your|the|a|an|this|that|these|those|employees?|staff"
    r"|contractors?|managers?|someone|anyone|people)"
)
_QUESTION_START = re.compile(rf"^(?:{_WH}\b|{_AUX}\s+{_SUBJECT}\b)", re.I)
_AND_QUESTION = re.compile(rf",?\s+and\s+(?={_WH}\b|{_AUX}\s+{_SUBJECT}\b)", re.I)
_SEPARATORS = re.compile(r";\s+|\s+and also\s+|(?<=[.!?])\s+also\b,?\s*|,\s+also,\s+", re.I)
_GREETING = re.compile(r"^(?:hi|hello|hey|hiya|good (?:morning|afternoon|evening))\b(?:\s+\w+)?\s*[,.!:]+\s*", re.I)
_THANKS_TAIL = re.compile(r"[\s,.!]*\b(?:thanks|thank you|thx|cheers)\b[\s.!]*$", re.I)
_SMALL_TALK = re.compile(
    r"^(?:hi|hello|hey|thanks|thank you|thx|cheers|ok|okay|great|cool|bye|good (?:morning|afternoon|evening))"
    r"(?:\s+\w+)?[\s.!]*$",
    re.I,
)
_MENTION = re.compile(r"<[@#!][^>]*>")
_LEADING_CONNECTOR = re.compile(r"^(?:and|also|so|plus|then)\b[,\s]*", re.I)

_TICKET_REQUEST = re.compile(
    r"\b(?:raise|open|create|log|file|submit|make|lodge)\s+(?:me\s+)?(?:an?\s+|the\s+)?"
    r"(?:it\s+|support\s+|helpdesk\s+|help desk\s+)?(?:ticket|case|incident|support request)\b",
    re.I,
)
_PROBLEM = re.compile(
    r"not working|n't work|does not work|do not work|stopped working|won't (?:start|boot|turn on|connect|load"
    r"|open|charge|print)|\bbroken\b|\bbroke\b|\b(?:can't|cant|cannot|unable to) (?:log ?in|sign ?in|connect"
    r"|access|open|print|get into)|\berror\b|\bcrash|lost my|\bstolen\b|locked out|forgot my password"
    r"|reset my password|\bhacked\b|phishing|ransomware|\bbreach\b|\bvirus\b|malware|no internet"
    r"|keeps (?:crashing|disconnecting|freezing|dropping)|\bfrozen\b|need access|(?:don't|do not) have access",
    re.I,
)
_HYPOTHETICAL = re.compile(
    r"\b(?:what happens if|what should i do if|what do i do if|what to do if|in case|if (?:my|i|a|an|the"
    r"|someone|your|our|you)|polic(?:y|ies)|allowed|permitted|entitled|rules?)\b",
    re.I,
)
_ASKS_MEANING = re.compile(  # "what does error NG-412 mean?", also as one part of a longer question
    r"\b(?:what|which)\s+(?:does|do|is|are)\b[^.!?]*?\b(?:mean|means|meaning|stand for|refer to|error|code)\b[^.!]*\?",
    re.I,
)
_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.I))
    for name, pattern in (
        (
            "security_incident",
            r"stolen|theft|lost my|phishing|ransomware|malware|virus|hacked|breach"
            r"|compromised|suspicious|data leak",
        ),
        ("network_vpn", r"\bvpn\b|wi-?fi|network|internet|connection|disconnect"),
        (
            "accounts_passwords",
            r"password|locked out|log ?in|sign ?in|\bmfa\b|\b2fa\b|two-factor|authenticator"
            r"|account",
        ),
        ("access", r"\baccess\b|permission|shared drive|folder|repositor"),
        (
            "hardware",
            r"laptop|monitor|keyboard|mouse|printer|screen|battery|dock|charger|headset|webcam|phone"
            r"|hardware|device",
        ),
        (
            "software",
            r"software|\bapp\b|application|install|update|outlook|excel|\bword\b|teams|slack|zoom"
            r"|browser|crash|licen[cs]e",
        ),
    )
)
_URGENCY: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("critical", re.compile(r"\bbreach|ransomware|data leak|\bhacked\b", re.I)),
    ("low", re.compile(r"not urgent|no rush|whenever|low priority|when you (?:get|have) a (?:chance|moment)", re.I)),
    (
        "high",
        re.compile(
            r"urgent|\basap\b|a\.s\.a\.p|immediately|emergency|(?:can't|cannot|unable to) work"
            r"|\bstolen\b|lost my (?:laptop|phone)|right now",
            re.I,
        ),
    ),
)

_STOPWORD_TEXT = """
a about above after again all also am an and any are as at be been before being below between
both but by can could did do does doing don down during each few for from further get got had
has have having he her here hers him his how i if in into is it its itself just me more most my
myself no nor not now of off on once only or other our ours out over own please same she should
so some such than that the their theirs them then there these they this those through to too
under until up very want was we were what when where which while who whom whose why will with
would you your yours company policy policies tell know need
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"[a-z0-9€$£]+(?:['’][a-z]+)?")
_TOOL_NAME = re.compile(r'"name"\s*:\s*"([A-Za-z0-9_-]+)"')
_TOOL_CALL_TEXT = re.compile(r"\b([a-z]+_[a-z_]+)\(")
_QUERY_FIELD = re.compile(r'"query"\s*:\s*"((?:[^"\\]|\\.){1,120}?)"')
_CITE_FIELD = re.compile(r'"cite"\s*:\s*"((?:[^"\\]|\\.){1,160}?)"')
_CITE_BRACKETS = re.compile(r'\[([^\[\]\n{}"]{2,120}›[^\[\]\n{}"]{1,120})\]')
# "This policy explains ..." restates the question's words without answering it.
_ABOUT_THE_DOCUMENT = re.compile(
    r"^this (?:policy|standard|document|guide|procedure|page|section)\b.{0,40}\b(?:explains|describes|covers|sets out)",
    re.I,
)
_LIST_ITEM = re.compile(r"^(?:[-*+•]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"“(*])")


class _Candidate(NamedTuple):
    """A sentence that could answer a part; ordered as it appears in the results."""

    rank: int
    position: int
    text: str
    cite: str


@dataclass(frozen=True)
class _Result:
    """One tool result paired with the call that asked for it."""

    name: str
    arguments: dict[str, Any]
    payload: dict[str, Any]


class OfflineModel:
    """ChatModel that answers from the messages alone: no network, no ML, same input, same output."""

    name = NAME

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int,
        timeout: float,
    ) -> ModelReply:
        """Decide the next turn; ``timeout`` is accepted for the protocol and unused (nothing waits)."""
        text, calls = decide(messages, tools)
        return _reply(text, calls, messages, tools, max_tokens)


def decide(messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> tuple[str | None, tuple[ToolCall, ...]]:
    """The whole policy of the offline model: compaction, a new question, or an answer to tool results."""
    if not tools and _system_text(messages).startswith(COMPACTION_PREFIX):
        return summarize_history(_last_user_text(messages)), ()
    turn = _current_turn(messages)
    if any(message.get("role") == "tool" for message in turn):
        return _answer_from_results(_results(turn)), ()
    return _plan(_last_user_text(messages), _tool_names(tools), salt=len(messages))


def estimate_usage(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    text: str | None,
    calls: Sequence[ToolCall] = (),
) -> Usage:
    """Token counts at about four characters a token: what budgets see when no real count exists."""
    prompt = _dumps([*messages, *tools])
    output = (text or "") + (_dumps([call.as_dict() for call in calls]) if calls else "")
    return Usage(input_tokens=_tokens(prompt), output_tokens=_tokens(output))


# --- a new question -------------------------------------------------------------------------------


def _plan(question: str, tool_names: set[str], *, salt: int) -> tuple[str | None, tuple[ToolCall, ...]]:
    cleaned = clean_question(question)
    if not cleaned or _SMALL_TALK.match(cleaned):
        return _small_talk(cleaned), ()
    if "create_it_ticket" in tool_names and is_problem_report(cleaned):
        return TICKET_PROPOSAL, (_tool_call(0, "create_it_ticket", ticket_arguments(question), salt),)
    if "search_policies" not in tool_names:
        return "I can't search the policy documents right now, so I can't answer that reliably.", ()
    parts = split_question(cleaned)
    return None, tuple(_tool_call(n, "search_policies", {"query": part}, salt) for n, part in enumerate(parts))


def _small_talk(text: str) -> str:
    if re.match(r"(?:thanks|thank you|thx|cheers)\b", text, re.I):
        return "You're welcome! Ask me anything else about our policies."
    return "Hello! Ask me anything about our company policies, or tell me about an IT problem."


def clean_question(text: str) -> str:
    """The question without mentions, greetings and sign-offs, on one line."""
    text = _MENTION.sub(" ", text.replace("’", "'"))
    text = " ".join(text.split())
    text = _GREETING.sub("", text)
    stripped = _THANKS_TAIL.sub("", text)
    return (stripped or text).strip()


def split_question(text: str) -> list[str]:
    """Split a multi-part question conservatively: ``?``, ``;``, "and also", "Also," and ``and`` + question."""
    pieces = [clean_question(text)]
    for splitter in (_split_question_marks, _SEPARATORS.split, _split_on_and):
        pieces = [piece for whole in pieces for piece in splitter(whole)]
    parts = _unique(_shorten(_tidy(piece), MAX_QUERY) for piece in pieces if _content_words(piece))
    if len(parts) > MAX_PARTS:
        parts = [*parts[: MAX_PARTS - 1], " ".join(parts[MAX_PARTS - 1 :])]
    return parts or [text]


def _split_question_marks(text: str) -> list[str]:
    return re.split(r"(?<=\?)\s+", text)


def _split_on_and(piece: str) -> list[str]:
    """Only "X and Y" where both sides open like questions: "What is A and can I B?" but not "A and B"."""
    if not _QUESTION_START.match(_tidy(piece)):
        return [piece]
    return _AND_QUESTION.split(piece)


def _tidy(piece: str) -> str:
    piece = _LEADING_CONNECTOR.sub("", piece.strip(" ,;.")).strip()
    return piece[:1].upper() + piece[1:]


def _unique(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    unique = []
    for item in items:
        key = item.lower().rstrip("?")
        if item and key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def is_problem_report(text: str) -> bool:
    """A report of something broken, or an explicit ticket request; not "what is the policy if ..."."""
    text = text.replace("’", "'")
    if _TICKET_REQUEST.search(text):
        return True
    if _ASKS_MEANING.search(text):  # "what does error NG-412 mean?" asks the policy, reports nothing
        return False
    return bool(_PROBLEM.search(text)) and not _HYPOTHETICAL.search(text)


def ticket_arguments(message: str) -> dict[str, str]:
    """create_it_ticket arguments inferred from the user's words, every value from the tool's enums."""
    text = message.replace("’", "'")
    return {
        "category": next((name for name, pattern in _CATEGORIES if pattern.search(text)), "other"),
        "summary": ticket_summary(message),
        "urgency": next((level for level, pattern in _URGENCY if pattern.search(text)), "normal"),
        "details": _shorten(message, MAX_DETAILS),
    }


def ticket_summary(message: str, limit: int = 120) -> str:
    """The first clauses that describe the problem, without "please raise a ticket", on one line."""
    clauses = re.split(r"(?<=[.!?:;])\s+|,\s+", clean_question(message))
    kept = [clause.strip(" ,;:") for clause in clauses if clause.strip() and not _TICKET_REQUEST.search(clause)]
    summary = _tidy(", ".join(part for part in kept[:2] if part)).rstrip(".!")
    if len(summary) < 5:  # the tool's schema asks for at least five characters
        summary = f"IT support request: {summary}".rstrip(": ")
    return _shorten(summary, limit)


# --- answering from tool results ------------------------------------------------------------------


def _answer_from_results(results: Sequence[_Result]) -> str:
    """Compose the reply from this turn's tool results; never adds facts that are not in them."""
    tickets = [result for result in results if result.name == "create_it_ticket"]
    if tickets:
        return _ticket_answer(tickets[-1].payload)
    searches = [result for result in results if result.name == "search_policies" or "results" in result.payload]
    if searches:
        return _search_answer(searches)
    errors = [str(result.payload["error"]) for result in results if "error" in result.payload]
    if errors:
        return f"I couldn't complete that ({_shorten(errors[0], 160)}), so I can't answer it from the policies."
    return NOT_IN_POLICY


def _ticket_answer(payload: dict[str, Any]) -> str:
    if "error" in payload:
        return (
            f"Sorry, I couldn't raise the ticket ({_shorten(str(payload['error']), 160)}). "
            "The helpdesk will follow up with you."
        )
    status = str(payload.get("status", ""))
    if status == "cancelled":
        return "OK, I did not raise a ticket."
    ticket_id = payload.get("ticket_id")
    if ticket_id:
        link = f" ({payload['url']})" if payload.get("url") else ""
        return f"Done: I raised ticket {ticket_id}{link}. The IT team will follow up."
    return f"The ticket request ended with status {status or 'unknown'}."


def _search_answer(searches: Sequence[_Result]) -> str:
    found: list[str] = []
    missing: list[str] = []
    failures: list[str] = []
    for search in searches:
        query = str(search.arguments.get("query", "")).strip() or "that"
        passages = [p for p in search.payload.get("results") or () if isinstance(p, dict)]
        if "error" in search.payload:
            failures.append(str(search.payload["error"]))
        elif passages:
            found.append(_part_answer(query, passages, label=len(searches) > 1))
        else:
            missing.append(
                f'I couldn\'t find "{query.rstrip("?")}" in the policy documents, so it is not covered by the policy.'
            )
    if not found:
        return _nothing_found(failures, bool(missing))
    if len(found) == 1 and not missing:
        return found[0]
    return "\n".join(f"- {line}" for line in [*found, *missing])


def _nothing_found(failures: Sequence[str], searched: bool) -> str:
    if failures and not searched:
        return (
            f"I couldn't search the policy documents just now ({_shorten(failures[0], 160)}), "
            "so I can't answer this from them."
        )
    return NOT_IN_POLICY


def _part_answer(query: str, passages: Sequence[dict[str, Any]], *, label: bool) -> str:
    """The 1-2 sentences of the top passages that share the most (rare) words with the query, cited."""
    candidates = [
        _Candidate(rank, position, unit, _cite(passage))
        for rank, passage in enumerate(passages[:2])
        for position, unit in enumerate(_units(passage))
    ]
    if not candidates:
        return f"The closest passage I found is [{_cite(passages[0])}], but I could not read it."
    scores = _overlap_scores(query, candidates)
    ranked = sorted(range(len(candidates)), key=lambda i: (-scores[i], candidates[i].rank, candidates[i].position))
    best = candidates[ranked[0]].text
    chosen = [ranked[0]]
    for index in ranked[1:]:
        if scores[index] >= scores[ranked[0]] / 2 > 0 and not _overlapping(candidates[index].text, best):
            chosen.append(index)
            break
    body = _with_cites(sorted(candidates[i] for i in chosen))
    words = _content_words(query)
    quoted = _content_words(" ".join(candidates[i].text for i in chosen))
    if len(words & quoted) * 2 < len(words):  # most of the question is not in the passage
        body = f"The closest passage I found: {body}"
    return f"**{_label(query)}** {body}" if label else body


def _overlapping(text: str, other: str) -> bool:
    """One already contains the other (a list item and the sentence that quotes its list)."""
    return text.rstrip(".;: ")[:80] in other or other.rstrip(".;: ")[:80] in text


def _overlap_scores(query: str, candidates: Sequence[_Candidate]) -> list[float]:
    """Query words found in each candidate, rare words weighing more; lower-ranked passages discounted."""
    words = _content_words(query)
    found = [words & _content_words(candidate.text) for candidate in candidates]
    frequency = Counter(word for shared in found for word in shared)
    weight = {word: math.log(1 + len(candidates) / count) for word, count in frequency.items()}
    return [
        sum(weight[word] for word in shared)
        * (1.0 if candidate.rank == 0 else 0.8)
        * (0.5 if _ABOUT_THE_DOCUMENT.match(candidate.text) else 1.0)
        for shared, candidate in zip(found, candidates, strict=True)
    ]


def _label(query: str) -> str:
    if query.endswith(("?", ".", ":")):
        return query
    return f"{query}?" if _QUESTION_START.match(query) else f"{query}:"


def _with_cites(chosen: Sequence[_Candidate]) -> str:
    out: list[str] = []
    for index, candidate in enumerate(chosen):
        out.append(candidate.text)
        if index + 1 == len(chosen) or chosen[index + 1].cite != candidate.cite:
            out.append(f"[{candidate.cite}]")
    return " ".join(out)


def _cite(passage: dict[str, Any]) -> str:
    if passage.get("cite"):
        return str(passage["cite"])
    named = " › ".join(str(passage[key]) for key in ("title", "heading") if passage.get(key))
    return named or str(passage.get("source") or "policy document")


def _units(passage: dict[str, Any]) -> list[str]:
    """Sentences, list items and table rows of a passage; a sentence ending in ":" carries its list."""
    units: list[str] = []
    lead: int | None = None  # the sentence that introduces the list being read
    for kind, block in _blocks(str(passage.get("text", "")), _cite(passage).lower()):
        if kind == "item":
            units.append(_shorten(block, 300))
            if lead is not None and len(units[lead]) + len(block) < 400:
                head = units[lead]
                joiner = " " if head.endswith(":") else "; "
                units[lead] = head.removesuffix(".") + joiner + block.rstrip(";,. ") + "."
            else:
                lead = None  # the list is too long to quote whole: stop before it reads as complete
            continue
        sentences = [_shorten(s, 300) for s in _SENTENCE_END.split(block) if _content_words(s)]
        units.extend(sentences)
        lead = len(units) - 1 if kind == "text" and sentences and sentences[-1].endswith(":") else None
    return units


def _blocks(text: str, cite: str) -> Iterator[tuple[str, str]]:
    """("text", paragraph) | ("item", list item) | ("row", table row), without headings or rules."""
    lines = [line.strip() for line in text.splitlines()]
    paragraph: list[str] = []
    for index, line in enumerate(lines):
        item = _LIST_ITEM.match(line)
        if line and not item and not line.startswith("|") and not _is_rule(line) and not _is_heading(line, cite):
            paragraph.append(_plain(line))
            continue
        if paragraph:
            yield "text", " ".join(paragraph)
            paragraph = []
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if item:
            yield "item", _plain(line[item.end() :])
        elif line.startswith("|") and not _is_rule(line) and not _is_rule(following):  # a header precedes |---|
            yield "row", _table_row(line)
    if paragraph:
        yield "text", " ".join(paragraph)


def _is_rule(line: str) -> bool:
    return bool(line) and set(line) <= set("|-: ")


def _is_heading(line: str, cite: str) -> bool:
    """Markdown headings, and a heading-path line ("Policy > Section") that repeats the cite."""
    if line.startswith("#"):
        return True
    lowered = _plain(line).lower().replace(" > ", " › ").strip()
    if lowered == cite:
        return True
    if lowered.endswith((".", "!", "?", ":", ";")) or len(lowered) <= 3:
        return False
    return all(segment.strip() in cite for segment in lowered.split("›"))


def _table_row(line: str) -> str:
    cells = [_plain(cell).strip(" .") for cell in line.strip("|").split("|") if cell.strip(" .")]
    if len(cells) < 2:
        return "".join(cells)
    return f"{cells[0]}: {', '.join(cells[1:])}."


def _plain(text: str) -> str:
    return re.sub(r"\*\*|__|`", "", text).strip()


# --- compaction -----------------------------------------------------------------------------------


def summarize_history(history: str) -> str:
    """An extractive summary of a conversation: questions, tools used, sources and tickets, bounded.

    The history may be JSON (a message list, or ``{"messages": [...]}``) or a role-prefixed transcript;
    whatever the shape, only strings that occur in it are copied out.
    """
    messages, haystack = _parse_history(history)
    questions = _unique(_shorten(clean_question(m["content"]), 140) for m in messages if m["role"] == "user")
    answers = [m["content"] for m in messages if m["role"] == "assistant" and m["content"].strip()]
    bullets = [
        _bullet("Asked", questions),
        _bullet("Tools called", _counted(_TOOL_NAME.findall(haystack) + _TOOL_CALL_TEXT.findall(haystack))),
        _bullet("Searched for", _unique(_QUERY_FIELD.findall(haystack))),
        _bullet("Sources", _unique(_CITE_FIELD.findall(haystack) + _CITE_BRACKETS.findall(haystack))),
        _bullet("Tickets", _unique(re.findall(r"\bIT-\d+\b", haystack))),
        _bullet("Last answer", [_shorten(answers[-1], 200)] if answers else []),
    ]
    return _bounded("\n".join(bullet for bullet in bullets if bullet), SUMMARY_CHARS) or "- (empty history)"


def _parse_history(history: str) -> tuple[list[dict[str, str]], str]:
    """Messages with text content, and the history as one searchable string with JSON fully unescaped."""
    try:
        loaded = json.loads(history)
    except ValueError:
        return _parse_transcript(history), history
    if isinstance(loaded, dict):
        loaded = loaded.get("messages", [])
    if not isinstance(loaded, list):
        return _parse_transcript(history), history
    messages = [
        {"role": str(item.get("role", "")), "content": _content_text(item.get("content"))}
        for item in loaded
        if isinstance(item, dict)
    ]
    return messages, json.dumps(_deep_decode(loaded), ensure_ascii=False)


def _deep_decode(value: Any) -> Any:
    """Decode JSON nested in strings (tool arguments, tool results) so fields can be read directly."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return _deep_decode(json.loads(value))
        except ValueError:
            return value
    if isinstance(value, dict):
        return {key: _deep_decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_deep_decode(item) for item in value]
    return value


def _parse_transcript(history: str) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    for line in history.splitlines():
        match = re.match(
            r"^\s*[-*]?\s*(?:\[[^\]]*\]\s*)?(user|assistant|tool|system)\b[^:\n]{0,40}:\s*(.*)$", line, re.I
        )
        if match:
            messages.append({"role": match[1].lower(), "content": match[2]})
        elif messages:
            messages[-1]["content"] += "\n" + line
    if not messages:  # no roles at all: treat lines ending in "?" as the questions
        return [{"role": "user", "content": line} for line in history.splitlines() if line.strip().endswith("?")]
    return messages


def _counted(names: Sequence[str]) -> list[str]:
    """ "search_policies ×2": how often each tool ran, in first-use order."""
    return [f"{name} ×{names.count(name)}" if names.count(name) > 1 else name for name in _unique(names)]


def _bullet(label: str, items: Sequence[str]) -> str:
    return f"- {label}: " + "; ".join(items) if items else ""


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return cut[: cut.rfind(" ")] + "…" if " " in cut else cut + "…"


# --- reading the message list ---------------------------------------------------------------------


def _system_text(messages: Sequence[Message]) -> str:
    return next((_content_text(m.get("content")) for m in messages if m.get("role") == "system"), "").lstrip()


def _last_user_index(messages: Sequence[Message]) -> int:
    return max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)


def _last_user_text(messages: Sequence[Message]) -> str:
    index = _last_user_index(messages)
    return _content_text(messages[index].get("content")) if index >= 0 else ""


def _current_turn(messages: Sequence[Message]) -> Sequence[Message]:
    """Everything after the last user message: this run's tool calls and their results."""
    return messages[_last_user_index(messages) + 1 :]


def _results(turn: Sequence[Message]) -> list[_Result]:
    calls = {
        call.get("id"): call.get("function", {})
        for message in turn
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or ()
    }
    results = []
    for message in turn:
        if message.get("role") != "tool":
            continue
        function = calls.get(message.get("tool_call_id"), {})
        name = str(function.get("name") or message.get("name") or "")
        results.append(_Result(name, _json_object(function.get("arguments")), _payload(message.get("content"))))
    return results


def _payload(content: Any) -> dict[str, Any]:
    """A tool result as a dict; plain text becomes ``{"text": ...}``, error strings stay errors."""
    text = _content_text(content)
    loaded = _json_object(text) or _salvage_results(text)
    if loaded:
        return loaded
    return {"error": text} if text.lower().startswith("error") else {"text": text}


def _salvage_results(text: str) -> dict[str, Any]:
    """The passages of a search result the agent cut short (its JSON no longer parses): whole ones, then
    the cite and text of the one that was cut."""
    match = re.match(r'\s*\{\s*"results"\s*:\s*\[', text)
    if not match:
        return {}
    decoder = json.JSONDecoder()
    passages: list[Any] = []
    position = match.end()
    while True:
        position += len(text[position:]) - len(text[position:].lstrip(" ,\n\t"))
        try:
            passage, position = decoder.raw_decode(text, position)
        except ValueError:
            break
        passages.append(passage)
    cut = _partial_passage(text[position:])
    return {"results": [p for p in [*passages, cut] if isinstance(p, dict) and p]}


def _partial_passage(fragment: str) -> dict[str, str]:
    cite = re.search(r'"cite"\s*:\s*"((?:[^"\\]|\\.)*)"', fragment)
    body = re.search(r'"text"\s*:\s*"((?:[^"\\]|\\.)*)', fragment)
    if not cite or not body:
        return {}
    return {"cite": _unescape(cite[1]), "text": _unescape(body[1])}


def _unescape(fragment: str) -> str:
    try:
        return str(json.loads(f'"{fragment.removesuffix(chr(92))}"'))
    except ValueError:
        return fragment


def _json_object(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        loaded = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _content_text(content: Any) -> str:
    """Message content as text, whether a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _tool_names(tools: Sequence[dict[str, Any]]) -> set[str]:
    return {str((tool.get("function") or tool).get("name", "")) for tool in tools}


# --- building the reply ---------------------------------------------------------------------------


def _tool_call(index: int, name: str, arguments: dict[str, Any], salt: int) -> ToolCall:
    """Deterministic ids, unique within a thread: the salt is the length of the history."""
    encoded = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    digest = hashlib.sha256(f"{salt}:{index}:{name}:{encoded}".encode()).hexdigest()[:8]
    return ToolCall(id=f"call_{index}_{digest}", name=name, arguments=encoded)


def _reply(
    text: str | None,
    calls: tuple[ToolCall, ...],
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    max_tokens: int,
) -> ModelReply:
    finish = "tool_calls" if calls else "stop"
    usage = estimate_usage(messages, tools, text, calls)
    if text and usage.output_tokens > max_tokens:
        # Like a real model: stop mid-text at the cap. Tool calls are kept whole (they are small).
        calls_chars = len(_dumps([call.as_dict() for call in calls])) if calls else 0
        text = text[: max(0, max_tokens * _CHARS_PER_TOKEN - calls_chars)]
        usage = estimate_usage(messages, tools, text, calls)
        finish = "length"
    return ModelReply(text=text, tool_calls=calls, usage=usage, finish_reason=finish, model=NAME)


def _content_words(text: str) -> set[str]:
    return {_stem(word) for word in _WORD.findall(text.lower()) if word not in _STOPWORDS and len(word) > 1}


def _stem(word: str) -> str:
    """Crude suffix folding so "expenses"/"expense" and "carried"/"carry" meet; enough for overlap."""
    word = re.sub(r"['’]s$", "", word)
    if not word.endswith("ss"):
        for suffix, replacement in (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("s", "")):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)] + replacement
                break
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return _bounded(text, limit)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / _CHARS_PER_TOKEN))
