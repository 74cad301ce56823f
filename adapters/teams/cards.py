"""What PolicyPal sends to Teams, as plain protocol JSON: message activities and Adaptive Cards.

Pure functions: nothing here talks to the network or imports an SDK, so the JSON tests read is the
JSON Teams receives, and moving off botbuilder leaves this module untouched.

Cards are version 1.5, the highest Teams renders on desktop, web and mobile, and the first with
Universal Actions: every button is an ``Action.Execute`` whose ``verb`` says what it does and whose
``data`` carries ids only (a pending card carries the pending id, the argument hash and the card's id,
never the arguments, so a click can only confirm the call that was stored, and only from its own card).
A card after a click shows the same frozen facts and one sentence for its state, worded by the core
(``CardView.status``) and shown as TextRuns, so nothing a model, a user or a ticket system wrote is
ever read as Markdown.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bot.cards import CardView, card_id, when
from bot.types import Answer, Citation, GaveUp, Outcome, Pending, PendingAction, TerminationReason

Json = dict[str, Any]

CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
MESSAGE_CONTENT_TYPE = "application/vnd.microsoft.activity.message"  # an invoke answer that keeps the card
CARD_VERSION = "1.5"
CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
TEAMS_WIDTH = "full"  # msteams.width as microsoft-teams-cards' TeamsCardProperties types it

CONFIRM, CANCEL, FEEDBACK, HANDOFF = "confirm", "cancel", "feedback", "handoff"
FACT_FIELDS = (("category", "Category"), ("summary", "Summary"), ("urgency", "Urgency"), ("details", "Details"))

REFUSAL_TEXT = "Sorry, PolicyPal isn't available for your organization. Please ask your IT team."
CLICK_RETRYING_TEXT = (  # the click is in the inbox: it is tried again, and the card shows what it did
    "Sorry, something went wrong on my side with that click. I'm trying again; the card will show what happens."
)
WORKING_TEXT = "Working on it…"
ALREADY_RECEIVED_TEXT = "That click was already received; the card will show what happens."
FEEDBACK_NOT_SAVED_TEXT = "Your feedback could not be saved. Please try again."  # a vote the store refused
EMPTY_TEXT = "Ask me about a company policy, for example: *How many vacation days do I have?*"
HANDOFF_STARTED = "Passing this conversation to the helpdesk…"
WELCOME_TEXT = (
    "Hi, I'm **PolicyPal**. Ask me about company policies, for example: *How many vacation days do I have?* "
    "I answer from the policy documents and show my sources. If something needs IT, I can prepare a ticket, "
    "and nothing is raised until you press **Confirm**. In a channel, @mention me."
)


# --- building blocks ------------------------------------------------------------------------------


def card(body: list[Json], actions: list[Json] | None = None) -> Json:
    """An Adaptive Card 1.5 (full width in Teams, so fact values are not squeezed).

    ``"full"`` in lower case: the value Microsoft's Teams SDK card model accepts (its docs also show
    ``"Full"``; Teams renders either).
    """
    content: Json = {"type": "AdaptiveCard", "$schema": CARD_SCHEMA, "version": CARD_VERSION, "body": body}
    if actions:
        content["actions"] = actions
    content["msteams"] = {"width": TEAMS_WIDTH}
    return content


def text_block(text: str, **style: Any) -> Json:
    return {"type": "TextBlock", "text": text, "wrap": True, **style}


def execute(title: str, verb: str, data: Json, style: str | None = None) -> Json:
    """A Universal Action button: Teams sends it back as an ``adaptiveCard/action`` invoke."""
    action: Json = {"type": "Action.Execute", "title": title, "verb": verb, "data": data}
    if style:
        action["style"] = style
    return action


def message(text: str | None = None, *cards: Json) -> Json:
    """A message activity: Markdown text and any cards as attachments."""
    activity: Json = {"type": "message"}
    if text:
        activity.update(text=text, textFormat="markdown")
    if cards:
        activity["attachments"] = [{"contentType": CARD_CONTENT_TYPE, "content": c} for c in cards]
    return activity


def typing() -> Json:
    return {"type": "typing"}


def invoke_card(content: Json) -> Json:
    """The body of an ``adaptiveCard/action`` answer that replaces the clicked card."""
    return {"statusCode": 200, "type": CARD_CONTENT_TYPE, "value": content}


def invoke_message(text: str) -> Json:
    """An ``adaptiveCard/action`` answer that shows the clicker ``text`` and leaves the card as it is."""
    return {"statusCode": 200, "type": MESSAGE_CONTENT_TYPE, "value": text}


def failure_text(reference: str) -> str:
    """What a person is told when the work for their message or click failed for good."""
    return f"Sorry, something went wrong on my side, so I couldn't finish. Reference `{reference}`."


def handoff_failure_text(run_id: str) -> str:
    """What a person who asked for the helpdesk is told when the case could not be opened."""
    return f"I couldn't reach the helpdesk just now. Please contact them and mention reference `{run_id}`."


# --- replies ------------------------------------------------------------------------------------


def reply_activity(outcome: Outcome, run_id: str, *, from_a_run: bool = True, requester_name: str = "") -> Json:
    """The message for one run's outcome: an answer, a card to confirm, or an honest give-up.

    ``from_a_run`` False (a case opened, a polite refusal): the answer has nothing to rate.
    """
    if isinstance(outcome, Answer) and not from_a_run:
        return message(outcome.text)
    if isinstance(outcome, Answer):
        return message(answer_markdown(outcome), feedback_card(run_id))
    if isinstance(outcome, Pending):
        return message(None, pending_card(outcome.action, requester_name))
    return gave_up_activity(run_id, outcome)


def notice_activity(text: str, *, run_id: str | None = None, case_id: str | None = None) -> Json:
    """A message in the thread without a run of its own: a hint, a welcome, a case id, a recovered run's give-up."""
    if case_id and run_id:  # a run stopped outside any request (its process died): the give-up, with its case
        return gave_up_activity(run_id, GaveUp(TerminationReason.CANCELLED, text, case_id=case_id))
    if case_id and case_id not in text:
        text = f"{text} (case **{case_id}**)".strip()
    return message(text)


def answer_markdown(answer: Answer) -> str:
    """The answer in the Markdown Teams renders, with cited policies as links where they have a URL."""
    if not answer.citations:
        return answer.text
    sources = "\n".join(f"- {citation_markdown(c)}" for c in answer.citations)
    return f"{answer.text}\n\n**Sources**\n\n{sources}"


def citation_markdown(citation: Citation) -> str:
    """``[Title › Heading](url)``; a source that is a file path is shown beside the label instead."""
    label = " › ".join(part for part in (citation.title, citation.heading) if part)
    if citation.source.startswith(("https://", "http://")):
        return f"[{label}]({citation.source})"
    return f"{label} ({citation.source})" if citation.source else label


def gave_up_activity(run_id: str, outcome: GaveUp) -> Json:
    reference = f"Reference: `{run_id}`"
    if outcome.case_id:
        return message(f"{outcome.text}\n\n{reference} · helpdesk case **{outcome.case_id}**")
    return message(f"{outcome.text}\n\n{reference}", handoff_card(run_id))


def feedback_card(run_id: str, note: str | None = None) -> Json:
    """Helpful / Not helpful (stored with the run's trace) and "Still need help?"; after a vote, the note."""
    if note:
        return card([text_block(note, isSubtle=True)], [_handoff_button(run_id)])
    buttons = [
        execute("👍 Helpful", FEEDBACK, {"run_id": run_id, "value": "helpful"}),
        execute("👎 Not helpful", FEEDBACK, {"run_id": run_id, "value": "not_helpful"}),
        _handoff_button(run_id),
    ]
    return card([text_block("Was this helpful?", isSubtle=True, size="Small")], buttons)


def handoff_card(run_id: str) -> Json:
    return card(
        [text_block("A person from the helpdesk can take it from here.", isSubtle=True)], [_handoff_button(run_id)]
    )


def notice_card(text: str) -> Json:
    """One sentence, shown as typed: a refused click's notice names people (display names are not Markdown)."""
    return card([_literal_line(text)])


def _handoff_button(run_id: str) -> Json:
    return execute("Still need help?", HANDOFF, {"run_id": run_id})


# --- the ticket card ----------------------------------------------------------------------------

Who = Callable[[str], str]  # a user id as the card shows that person (their display name)

STATE_MARKS = {"done": "✅", "failed": "⚠️", "unknown": "⚠️", "cancelled": "✖️", "expired": "⌛"}
_STRONG = ("\x02", "\x03")  # brackets a bold span of a state sentence while it is split into runs
_RUNS = re.compile("(\x02[^\x02\x03]*\x03)")


def pending_card(action: PendingAction, requester_name: str = "") -> Json:
    """The open card: the model's text, the exact frozen arguments, and Confirm / Cancel."""
    data = {"pending_id": action.id, "args_hash": action.args_hash, "card_id": card_id(action.id)}
    body = _pending_body(action.text, action.arguments)
    who = requester_name or action.requester
    # TextRuns: the requester's display name is typed by a person, never read as Markdown
    body.append(_literal_line(f"Only {who} can confirm · expires {when(action.expires_at)}", isSubtle=True,
                              size="Small"))
    buttons = [execute("Confirm", CONFIRM, data, style="positive"), execute("Cancel", CANCEL, data)]
    return card(body, buttons)


def card_view(view: CardView, who: Who, notice: str | None = None) -> Json:
    """The card as it stands: open with its buttons, else the same facts and one sentence for its state.

    ``notice``: what only this clicker is told, above the state (a refused or late click).
    """
    warning = [_literal_line(notice, color="Warning", weight="Bolder")] if notice else []
    if view.buttons:  # still open (a refused click on it too): the requester may still decide
        content = pending_card(_action_of(view), who(view.requester))
        content["body"][-1:-1] = warning
        return content
    return card([*_pending_body(view.text, view.arguments), *warning, state_line(view, who)])


def state_line(view: CardView, who: Who) -> Json:
    """The card's state in one sentence (``CardView.status``): names and ids bold, everything shown as typed.

    TextRuns, not a TextBlock: a ticket system's error text or a display name is never read as Markdown.
    """
    opening, closing = _STRONG

    def named(user_id: str) -> str:
        return _plain(who(user_id))

    sentence = view.status(named, strong=lambda text: f"{opening}{_plain(text)}{closing}")
    mark = STATE_MARKS.get(view.state)
    runs: list[Json] = [{"type": "TextRun", "text": f"{mark} "}] if mark else []
    for part in _RUNS.split(sentence):
        if part.startswith(opening) and part.endswith(closing):
            runs.append({"type": "TextRun", "text": part[1:-1], "weight": "Bolder"})
        elif part:
            runs.append({"type": "TextRun", "text": part})
    return {"type": "RichTextBlock", "inlines": runs}


def _literal_line(text: str, **style: Any) -> Json:
    return {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": text, **style}]}


def _plain(text: str) -> str:
    return text.translate({ord(c): None for c in _STRONG})


def _action_of(view: CardView) -> PendingAction:
    return PendingAction(view.pending_id, view.tool, view.arguments, view.args_hash, view.requester, view.text,
                         view.expires_at)


def _pending_body(text: str, arguments: dict[str, Any]) -> list[Json]:
    """The frozen arguments exactly as they will run, in TextRuns: Adaptive Cards read a TextBlock or a
    FactSet as Markdown, so a model-written ``**Approved**`` or ``[verify](https://evil)`` would format
    itself or hide a link there; a TextRun is shown as typed."""
    body = [text_block("Create an IT ticket?", weight="Bolder", size="Medium")]
    if text:
        body.append(plain_block(text))
    body += [
        plain_block(str(arguments[name]), label=title)
        for name, title in FACT_FIELDS
        if arguments.get(name) not in (None, "")
    ]
    return body


def plain_block(text: str, *, label: str | None = None) -> Json:
    """Text shown literally (never Markdown), after an optional bold label."""
    runs: list[Json] = [{"type": "TextRun", "text": f"{label}: ", "weight": "Bolder"}] if label else []
    return {"type": "RichTextBlock", "inlines": [*runs, {"type": "TextRun", "text": text}]}


def card_fields(card: Json) -> dict[str, str]:
    """The labelled values of a ticket card, as the requester sees them (for logs and tests)."""
    return {
        block["inlines"][0]["text"].removesuffix(": "): block["inlines"][1]["text"]
        for block in card.get("body", [])
        if block.get("type") == "RichTextBlock" and len(block["inlines"]) == 2
        and block["inlines"][0].get("weight") == "Bolder" and block["inlines"][0]["text"].endswith(": ")
    }


# --- the helpdesk summary -----------------------------------------------------------------------


def handoff_summary_card(
    *, case_id: str, user: str, question: str, reason: str, link: str | None, platform: str = ""
) -> Json:
    """What the helpdesk channel sees for a new case: who, the question in one line, why, and a way back.

    The question and the user's name are typed by the user, so they are TextRuns (shown as typed): in a
    TextBlock or a FactSet a ``[verify](https://evil)`` would show the helpdesk a disguised link.
    """
    facts = [{"title": "Case", "value": case_id}, {"title": "Reason", "value": reason or "requested by the user"}]
    if platform:
        facts.append({"title": "From", "value": platform})
    body = [
        text_block("New helpdesk case from PolicyPal", weight="Bolder", size="Medium"),
        plain_block(_one_line(question) or "(no question text)"),
        plain_block(user or "unknown", label="User"),
        {"type": "FactSet", "facts": facts},
    ]
    actions = [{"type": "Action.OpenUrl", "title": "Open the conversation", "url": link}] if link else None
    return card(body, actions)


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
