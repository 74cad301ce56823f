"""Block Kit for every PolicyPal message: answers, ticket cards, decided cards, give-ups, notices.

Pure functions from core types to ``SlackMessage`` values, so the layout and Slack's limits can be
tested without a server. Limits (NOTES.md): a section holds 3,000 characters, a message 50 blocks,
and a message's blocks fail with ``msg_blocks_too_long`` at about 13,000 characters in all. Long
answers, cards, give-ups, handoffs and notices are split into several messages the same way (``pack``);
nothing is ever cut without saying so. tests/fakes/conformance.py checks every payload against them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.slack.mrkdwn import escape, to_mrkdwn
from bot.cards import CardView, ClickedCard, card_id, when
from bot.types import Answer, Citation, GaveUp, PendingAction

Block = dict[str, Any]

SECTION_CHARS = 3_000
MAX_BLOCKS = 50
MESSAGE_CHARS = 12_000  # below the ~13,000 where Slack answers msg_blocks_too_long
CONTEXT_ELEMENTS = 10
MAX_MESSAGES = 8  # one answer never floods a thread; anything beyond is announced, not dropped silently
FALLBACK_CHARS = 200
FALLBACK_TEXT_CHARS = 40_000  # a message's ``text``: Slack's limit
CARD_TAIL_CHARS = 1_500  # room after a card's body for its buttons and note, or any state line
_FENCE_RESERVE = 8  # room to close and reopen a code block cut between two sections

CONFIRM = "pp_confirm"
CANCEL = "pp_cancel"
HELPFUL = "pp_feedback_helpful"  # the buttons of answers posted before the native feedback buttons
NOT_HELPFUL = "pp_feedback_not_helpful"
FEEDBACK = "pp_feedback"  # the native feedback_buttons element: its value says which, and for which run
MARKDOWN_CHARS = 10_000  # an answer this long or shorter is one markdown block (Slack's limit: 12,000)
HANDOFF = "pp_handoff"
CARD_BLOCK = "pp_card_actions"
CARD_FIELDS = ("category", "summary", "urgency")
FIELD_CHARS = 1_900  # a section field holds 2,000 characters, label included

_TOKENS = re.compile(r"<[^>\s][^>]*>|\S+|\s+")


@dataclass(frozen=True)
class SlackMessage:
    """One chat.postMessage / chat.update payload: blocks plus the plain text Slack notifies with."""

    text: str
    blocks: list[Block]

    def payload(self) -> dict[str, Any]:
        return {"text": self.text, "blocks": self.blocks}


# --- text splitting ---------------------------------------------------------------------------------


def split_text(text: str, limit: int = SECTION_CHARS) -> list[str]:
    """Split mrkdwn into pieces of at most ``limit`` characters, at paragraph, line, then word bounds."""
    if len(text) <= limit:
        return [text] if text.strip() else []
    pieces = _pack(_units(text, limit - _FENCE_RESERVE), limit - _FENCE_RESERVE)
    return _balance_fences(pieces)


def _units(text: str, limit: int) -> list[str]:
    units: list[str] = []
    for paragraph in re.split(r"(?<=\n\n)", text):
        if len(paragraph) <= limit:
            units.append(paragraph)
            continue
        for line in paragraph.splitlines(keepends=True):
            units.extend([line] if len(line) <= limit else _words(line, limit))
    return units


def _words(line: str, limit: int) -> list[str]:
    """A line longer than a section: cut between words, and inside a word only when one is that long."""
    out: list[str] = []
    for token in _TOKENS.findall(line):
        while len(token) > limit:
            out.append(token[:limit])
            token = token[limit:]
        out.append(token)
    return out


def _pack(units: Iterable[str], limit: int) -> list[str]:
    pieces: list[str] = []
    current = ""
    for unit in units:
        if current and len(current) + len(unit) > limit:
            pieces.append(current)
            current = ""
        current += unit
    if current:
        pieces.append(current)
    return [piece.strip("\n") for piece in pieces if piece.strip()]


def _balance_fences(pieces: list[str]) -> list[str]:
    """A code block cut in two is closed at the end of one piece and reopened at the next."""
    balanced: list[str] = []
    carry = False
    for piece in pieces:
        if carry:
            piece = "```\n" + piece
        carry = piece.count("```") % 2 == 1
        balanced.append(piece + "\n```" if carry else piece)
    return balanced


# --- small builders ---------------------------------------------------------------------------------


def section(mrkdwn: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}


def context(*elements: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text} for text in elements]}


def button(label: str, action_id: str, value: str, style: str | None = None) -> Block:
    element: Block = {
        "type": "button",
        "text": {"type": "plain_text", "text": label, "emoji": True},
        "action_id": action_id,
        "value": value,
    }
    if style:
        element["style"] = style
    return element


def plain_field(label: str, value: object) -> Block:
    # plain_text, emoji off: the requester sees the frozen values exactly, with no formatting applied
    return {"type": "plain_text", "text": f"{label}: {value}", "emoji": False}


def sections(mrkdwn: str) -> list[Block]:
    return [section(piece) for piece in split_text(mrkdwn)]


def blocks_size(blocks: Sequence[Block]) -> int:
    """Characters of a message's blocks as Slack counts them for msg_blocks_too_long (JSON text)."""
    return len(json.dumps(list(blocks), ensure_ascii=False))


# --- messages ---------------------------------------------------------------------------------------


def answer_messages(answer: Answer, run_id: str, *, actions: bool = True) -> list[SlackMessage]:
    """An answer as one or more messages: text, the cited policies, then feedback and handoff buttons.

    ``actions`` False (a refusal, or a reply that opened a helpdesk case): no buttons, since there is
    no run for them to rate or hand off.
    """
    tail = answer_tail(answer, run_id, actions=actions)
    if (whole := markdown_message(answer, tail)) is not None:
        return [whole]
    body = sections(to_mrkdwn(answer.text)) or [section("_(no answer text)_")]
    return pack(body, tail, run_id)


def answer_tail(answer: Answer, run_id: str, *, actions: bool = True) -> list[Block]:
    """What follows an answer's text: the cited policies, then feedback and "Still need help?"."""
    return [*citation_blocks(answer.citations), *(reply_actions(run_id) if actions else [])]


def markdown_message(answer: Answer, tail: Sequence[Block]) -> SlackMessage | None:
    """The answer as one ``markdown`` block (Slack renders its tables and lists), or None when it does not
    fit one message: then it is split into mrkdwn sections instead."""
    text = answer_markdown(answer)
    blocks = [{"type": "markdown", "text": text}, *tail]
    if not text or len(text) > MARKDOWN_CHARS or not _fits(blocks):
        return None
    return SlackMessage(_fallback([section(to_mrkdwn(answer.text))]), blocks)


_MENTION = re.compile(r"<(?=[!@#])")  # <!channel>, <@U1>, <#C1>: a model's words never ping anyone


def answer_markdown(answer: Answer) -> str:
    """The model's Markdown for a markdown block or a stream: each cite a link to its policy where it has one."""
    text = _MENTION.sub("&lt;", answer.text.strip())
    for citation in answer.citations:
        if citation.source.startswith(("https://", "http://")):
            cite = " › ".join(part for part in (citation.title, citation.heading) if part)
            link = f"[{cite}]({citation.source.replace(')', '%29').replace(' ', '%20')})"
            text = re.sub(rf"\[{re.escape(cite)}\](?!\()", link.replace("\\", "\\\\"), text)
    return text


def citation_blocks(citations: Sequence[Citation]) -> list[Block]:
    """The cited policies (title, heading, link) in context blocks of at most ten elements."""
    lines = list(dict.fromkeys(_citation_line(c) for c in citations))
    return [context(*lines[i : i + CONTEXT_ELEMENTS]) for i in range(0, len(lines), CONTEXT_ELEMENTS)]


def _citation_line(citation: Citation) -> str:
    label = " › ".join(part for part in (citation.title, citation.heading) if part)
    if citation.source.startswith(("https://", "http://")):
        return f":page_facing_up: <{citation.source}|{escape(label).replace('|', '¦')}>"
    return f":page_facing_up: {escape(label)}"


def reply_actions(run_id: str, *, handoff: bool = True) -> list[Block]:
    """Slack's own thumbs (stored with the run's trace) and, on request, a handoff to the helpdesk."""
    rate = {"type": "context_actions", "block_id": f"pp_rate_{run_id}"[:255], "elements": [feedback_buttons(run_id)]}
    blocks = [rate]
    if handoff:
        help_button = button("Still need help?", HANDOFF, run_id)
        blocks.append({"type": "actions", "block_id": f"pp_reply_{run_id}"[:255], "elements": [help_button]})
    return blocks


def feedback_buttons(run_id: str) -> Block:
    """The native ``feedback_buttons`` element: one action id, the rating and the run in each value."""

    def choice(label: str, said: str, rating: str) -> Block:
        text = {"type": "plain_text", "text": label, "emoji": True}
        return {"text": text, "accessibility_label": said, "value": f"{rating}:{run_id}"}

    return {
        "type": "feedback_buttons",
        "action_id": FEEDBACK,
        "positive_button": choice("Helpful", "This answer was helpful", "helpful"),
        "negative_button": choice("Not helpful", "This answer was not helpful", "not_helpful"),
    }


def parse_feedback(value: str) -> tuple[str, str] | None:
    """(rating, run id) from a feedback button's value; None for a value this release did not make."""
    rating, _, run_id = value.partition(":")
    return (rating, run_id) if rating in ("helpful", "not_helpful") and run_id else None


def pack(body: Sequence[Block], tail: Sequence[Block], run_id: str) -> list[SlackMessage]:
    """Fill messages up to Slack's block count and size; the tail (sources, buttons) stays together at the end."""
    messages = _fill([[]], body)
    if _fits([*messages[-1], *tail]):
        messages[-1] = [*messages[-1], *tail]
    else:
        messages = _fill([*messages, []], tail)
    if len(messages) > MAX_MESSAGES:
        messages = _announce_overflow(messages, tail, run_id)
    return [SlackMessage(_fallback(blocks), blocks) for blocks in messages]


def _fill(messages: list[list[Block]], blocks: Sequence[Block]) -> list[list[Block]]:
    for block in blocks:
        if messages[-1] and not _fits([*messages[-1], block]):
            messages.append([])
        messages[-1].append(block)
    return messages


def _fits(blocks: Sequence[Block]) -> bool:
    return len(blocks) <= MAX_BLOCKS and blocks_size(blocks) <= MESSAGE_CHARS


def _announce_overflow(messages: list[list[Block]], tail: Sequence[Block], run_id: str) -> list[list[Block]]:
    kept = messages[: MAX_MESSAGES - 1]
    hidden = sum(len(b.get("text", {}).get("text", "")) for m in messages[MAX_MESSAGES - 1 :] for b in m)
    notice = section(
        f":warning: This answer is too long for Slack: about {hidden:,} more characters are not shown. "
        f"Ask a narrower question, or quote reference `{run_id}` to the helpdesk."
    )
    return [*kept, [notice, *tail]]


def _fallback(blocks: Sequence[Block]) -> str:
    for block in blocks:
        text = block.get("text", {}).get("text") if block.get("type") == "section" else None
        if isinstance(text, str) and text:
            return text if len(text) <= FALLBACK_CHARS else text[: FALLBACK_CHARS - 1] + "…"
    return "PolicyPal"


# --- the ticket card --------------------------------------------------------------------------------


def button_value(pending_id: str, args_hash: str) -> str:
    """What a card button carries: the pending id, the hash of the frozen arguments (never the arguments)
    and the card's id, so a click can be checked against the card it came from."""
    return f"{pending_id}:{args_hash}:{card_id(pending_id)}"


def parse_button_value(value: str) -> tuple[str, str]:
    """(pending id, argument hash) of a card button, from this release or an earlier one."""
    pending_id, args_hash, _card = parse_card_value(value)
    return pending_id, args_hash


def parse_card_value(value: str) -> tuple[str, str, str | None]:
    """(pending id, argument hash, card id); the card id is None on a card an earlier release posted."""
    pending_id, _, rest = value.partition(":")
    args_hash, _, card = rest.partition(":")
    return pending_id, args_hash, card or None


def clicked_card(value: str, channel: str, message_ts: str) -> ClickedCard:
    """The card a click on ``value`` came from: the card id it carries and the message it was in."""
    return ClickedCard(parse_card_value(value)[2], (channel, message_ts) if message_ts else None, card_location)


def card_location(posted: dict[str, Any]) -> tuple[str, str] | None:
    """(channel, ts) of a posted card, from what the sender stored (``card_posted``)."""
    channel, ts = posted.get("channel"), posted.get("ts")
    return (str(channel), str(ts)) if channel and ts else None


def card_messages(action: PendingAction) -> list[SlackMessage]:
    """The card as it is posted: one message, or, with a body too long for one, the body split like an
    answer and then a last message with the buttons (the message later clicks and updates refer to)."""
    body = _card_body(action.text, action.tool, action.arguments)
    if _card_fits(body):
        return [card_message(action)]
    return [*pack(body, [], action.id), _card_tail(action)]


def _card_fits(body: Sequence[Block]) -> bool:
    """Whether a card's body leaves room in one message for any tail: buttons and note, or a state line."""
    return len(body) + 2 <= MAX_BLOCKS and blocks_size(body) + CARD_TAIL_CHARS <= MESSAGE_CHARS


def _card_tail(action: PendingAction) -> SlackMessage:
    return SlackMessage(f"Please confirm: {_summary(action.arguments)}", _card_actions(action))


def card_message(action: PendingAction) -> SlackMessage:
    """A proposed write as a card: the model's words, the exact fields, Confirm and Cancel."""
    blocks = [*_card_body(action.text, action.tool, action.arguments), *_card_actions(action)]
    return SlackMessage(f"Please confirm: {_summary(action.arguments)}", blocks)


def _card_actions(action: PendingAction) -> list[Block]:
    """Confirm and Cancel, and who alone may confirm, until when."""
    value = button_value(action.id, action.args_hash)
    buttons = {
        "type": "actions",
        "block_id": CARD_BLOCK,
        "elements": [button("Confirm", CONFIRM, value, "primary"), button("Cancel", CANCEL, value)],
    }
    note = context(
        f"Only <@{action.requester}> can confirm this. Nothing is created until then. "
        f"Expires {when(action.expires_at)}."
    )
    return [buttons, note]


def card_view_message(view: CardView) -> SlackMessage:
    """The card as it stands: open with its buttons, or the same body with who decided, when, and the result.

    A card posted in parts (``card_messages``) is updated in its last part only: the buttons, or the state.
    """
    body = _card_body(view.text, view.tool, view.arguments)
    if view.buttons:
        action = PendingAction(view.pending_id, view.tool, view.arguments, view.args_hash, view.requester,
                               view.text, view.expires_at)
        return card_message(action) if _card_fits(body) else _card_tail(action)
    line = f"{STATE_MARKS.get(view.state, '')} {status_line(view)}".strip()
    blocks = [*body, context(line)] if _card_fits(body) else [context(line)]
    return SlackMessage(f"{_summary(view.arguments)}: {_plain(line)}", blocks)


def status_line(view: CardView) -> str:
    """The card's state in Slack's words: mentions for people, bold ids, the ticket's link."""
    return view.status(mention, strong=lambda text: f"*{escape(text)}*", ticket=_ticket_link, text=escape)


def mention(user_id: str) -> str:
    return f"<@{user_id}>"


STATE_MARKS = {
    "working": ":hourglass_flowing_sand:",
    "executing": ":hourglass_flowing_sand:",
    "done": ":white_check_mark:",
    "failed": ":warning:",
    "unknown": ":warning:",
    "cancelled": ":heavy_multiplication_x:",
    "expired": ":hourglass:",
}


def _ticket_link(ticket_id: str, url: str | None) -> str:
    label = f"*{escape(ticket_id)}*"
    return f"<{url}|{label}>" if url else label


def _card_body(text: str, tool: str, arguments: dict[str, Any]) -> list[Block]:
    intro = to_mrkdwn(text) if text.strip() else f"I can run *{escape(tool)}* for you with these details:"
    short = {k: v for k, v in arguments.items() if k in CARD_FIELDS and len(str(v)) <= FIELD_CHARS}
    fields = [plain_field(name.capitalize(), short[name]) for name in CARD_FIELDS if name in short]
    blocks = sections(intro)
    if fields:
        blocks.append({"type": "section", "fields": fields})
    for name, value in arguments.items():
        if name not in short and value not in (None, ""):
            blocks.extend(plain_sections(f"{name.capitalize()}: {value}"))
    return blocks


def plain_sections(text: str) -> list[Block]:
    return [{"type": "section", "text": {"type": "plain_text", "text": p, "emoji": False}} for p in split_text(text)]


def _summary(arguments: dict[str, Any]) -> str:
    """The model-written summary for a message's ``text``, which Slack reads as mrkdwn: escaped like the blocks."""
    return escape(str(arguments.get("summary") or "a pending request"))


def _plain(mrkdwn: str) -> str:
    return re.sub(r"<@([A-Z0-9]+)>", r"@\1", mrkdwn).replace("*", "")


# --- give-up, handoff, notices ---------------------------------------------------------------------


def give_up_messages(gave_up: GaveUp, run_id: str) -> list[SlackMessage]:
    """The honest message, and the helpdesk case id (or, until a case exists, the run id to quote); split
    like an answer when longer than one message holds. The text is converted and escaped, never raw Markdown."""
    if gave_up.case_id:
        ref = f"Helpdesk case *{escape(gave_up.case_id)}* · run `{run_id}`"
    else:
        ref = f"If you contact the helpdesk, quote reference `{run_id}`."
    tail = [context(ref), *reply_actions(run_id, handoff=not gave_up.case_id)]
    return pack(sections(to_mrkdwn(gave_up.text)), tail, run_id)


def give_up_message(gave_up: GaveUp, run_id: str) -> SlackMessage:
    """``give_up_messages`` for a text known to fit one message."""
    return _one(give_up_messages(gave_up, run_id))


def handoff_messages(text: str, case_id: str | None, run_id: str | None = None) -> list[SlackMessage]:
    """What the helpdesk handoff says, with the case id (or a reference), split when too long for one message."""
    ref = f"Helpdesk case *{escape(case_id)}*" if case_id else f"Reference `{run_id}`" if run_id else ""
    return pack(sections(to_mrkdwn(text)), [context(ref)] if ref else [], case_id or run_id or "")


def handoff_message(text: str, case_id: str | None, run_id: str | None = None) -> SlackMessage:
    """``handoff_messages`` for a text known to fit one message."""
    return _one(handoff_messages(text, case_id, run_id))


def notice_messages(mrkdwn: str) -> list[SlackMessage]:
    """A message without a run (errors, hints, a private part); the text is already mrkdwn. Split like an
    answer when longer than one message holds; one that fits notifies with its whole text."""
    body = sections(mrkdwn)
    if _fits(body) and len(mrkdwn) <= FALLBACK_TEXT_CHARS:
        return [SlackMessage(_plain(mrkdwn), body)]
    return pack(body, [], "")


def notice_message(mrkdwn: str) -> SlackMessage:
    """``notice_messages`` for a text known to fit one message."""
    return _one(notice_messages(mrkdwn))


def _one(messages: list[SlackMessage]) -> SlackMessage:
    if len(messages) != 1:
        raise ValueError(f"{len(messages)} messages where one was expected: post them all")
    return messages[0]
