"""Block Kit rendering and splitting, without a server: Slack's limits hold and nothing is lost."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from adapters.slack.blocks import (
    CANCEL,
    CONFIRM,
    FEEDBACK,
    HANDOFF,
    MAX_BLOCKS,
    MAX_MESSAGES,
    MESSAGE_CHARS,
    SECTION_CHARS,
    answer_messages,
    blocks_size,
    button_value,
    card_message,
    card_view_message,
    give_up_message,
    handoff_message,
    parse_button_value,
    parse_feedback,
    split_text,
    status_line,
)
from bot.cards import CardView
from bot.store import PendingRecord
from bot.types import Answer, Citation, GaveUp, PendingAction, TerminationReason

NOW = datetime(2025, 3, 4, 10, 30, tzinfo=UTC)
TICKET = {"category": "network_vpn", "summary": "VPN fails *every* time with <NG-809> & more", "urgency": "high"}


def words(text: str) -> list[str]:
    return re.sub(r"```", " ", text).split()


def actions(blocks: list[dict]) -> list[dict]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


def texts(blocks: list[dict]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


# --- splitting --------------------------------------------------------------------------------------


def test_short_text_is_one_piece_and_empty_text_none():
    assert split_text("hello") == ["hello"]
    assert split_text("  \n ") == []


def test_long_text_splits_at_paragraphs_within_the_section_limit_and_keeps_every_word():
    paragraphs = [f"Paragraph {n}: " + "lorem ipsum " * 60 for n in range(20)]
    text = "\n\n".join(paragraphs)
    pieces = split_text(text)
    assert len(pieces) > 1
    assert all(len(p) <= SECTION_CHARS for p in pieces)
    assert all(p.startswith("Paragraph") for p in pieces)  # cut between paragraphs, not inside one
    assert words(" ".join(pieces)) == words(text)


def test_a_single_endless_word_is_cut_hard_but_completely():
    text = "x" * 7_000
    pieces = split_text(text)
    assert all(len(p) <= SECTION_CHARS for p in pieces)
    assert "".join(pieces) == text


def test_a_code_block_cut_in_two_is_closed_and_reopened():
    code = "\n".join(f"line {n} of the config" for n in range(300))
    pieces = split_text(f"Intro\n```\n{code}\n```")
    assert len(pieces) >= 2
    assert all(p.count("```") % 2 == 0 for p in pieces)
    assert all(len(p) <= SECTION_CHARS for p in pieces)


# --- answers ----------------------------------------------------------------------------------------


def test_an_answer_is_one_markdown_block_with_linked_cites_sources_native_thumbs_and_still_need_help():
    citations = (
        Citation("Remote Work Policy", "Working abroad", "https://intranet.example.com/remote"),
        Citation("VPN Guide", "Errors", "examples/policies/vpn.md"),
    )
    text = "**Yes**, up to 4 weeks [Remote Work Policy › Working abroad].\n\n| Days | Who |\n|---|---|\n| 20 | you |"
    (message,) = answer_messages(Answer(text, citations), "run_abc")
    markdown, context, rate, actions = message.blocks
    assert markdown == {
        "type": "markdown",  # Slack renders the table and the lists; no mrkdwn conversion
        "text": "**Yes**, up to 4 weeks [Remote Work Policy › Working abroad](https://intranet.example.com/remote)."
        "\n\n| Days | Who |\n|---|---|\n| 20 | you |",
    }
    cites = [e["text"] for e in context["elements"]]
    assert "<https://intranet.example.com/remote|Remote Work Policy › Working abroad>" in cites[0]
    assert cites[1].endswith("VPN Guide › Errors")  # a file path is no link
    (thumbs,) = rate["elements"]
    assert (rate["type"], thumbs["type"], thumbs["action_id"]) == ("context_actions", "feedback_buttons", FEEDBACK)
    assert [thumbs[b]["value"] for b in ("positive_button", "negative_button")] == ["helpful:run_abc",
                                                                                   "not_helpful:run_abc"]
    assert parse_feedback(thumbs["negative_button"]["value"]) == ("not_helpful", "run_abc")
    assert [(e["action_id"], e["value"]) for e in actions["elements"]] == [(HANDOFF, "run_abc")]
    assert message.text.startswith("*Yes*, up to 4 weeks")  # the notification: mrkdwn, the same words


def test_a_markdown_answer_never_pings_a_channel_or_a_person():
    (message,) = answer_messages(Answer("Ask <!channel> or <@U123> in <#C1>."), "run_ping")
    assert message.blocks[0]["text"] == "Ask &lt;!channel> or &lt;@U123> in &lt;#C1>."


def test_an_answer_too_long_for_one_markdown_block_is_split_into_mrkdwn_sections():
    text = "\n\n".join(f"Point {n}. " + "details " * 200 for n in range(8))  # ~13,000 characters
    messages = answer_messages(Answer(text), "run_split")
    assert len(messages) > 1
    assert all(b["type"] != "markdown" for m in messages for b in m.blocks)


def test_a_long_answer_is_split_into_messages_within_every_limit_without_losing_text():
    text = "\n\n".join(f"Point {n}. " + "details of the policy " * 40 for n in range(60))
    citations = tuple(Citation(f"Policy {n}", "Section", f"https://x.example/{n}") for n in range(13))
    messages = answer_messages(Answer(text, citations), "run_long")
    assert 1 < len(messages) <= MAX_MESSAGES
    for message in messages:
        assert len(message.blocks) <= MAX_BLOCKS
        assert blocks_size(message.blocks) <= MESSAGE_CHARS
        assert all(len(b["text"]["text"]) <= SECTION_CHARS for b in message.blocks if b["type"] == "section")
    sections = [b["text"]["text"] for m in messages for b in m.blocks if b["type"] == "section"]
    assert words(" ".join(sections)) == words(text)
    last = messages[-1].blocks
    assert [b["type"] for b in last[-4:]] == ["context", "context", "context_actions", "actions"]  # 13 cites: 10 + 3
    assert all(len(b["elements"]) <= 10 for m in messages for b in m.blocks if b["type"] == "context")
    assert all(b["type"] not in ("actions", "context_actions") for m in messages[:-1] for b in m.blocks)


def test_an_answer_too_long_for_slack_says_so_instead_of_being_cut_silently():
    text = "\n\n".join("word " * 550 for _ in range(60))  # ~165,000 characters
    messages = answer_messages(Answer(text), "run_huge")
    assert len(messages) == MAX_MESSAGES
    last = texts(messages[-1].blocks)
    assert "too long for Slack" in last and "run_huge" in last
    assert all(blocks_size(m.blocks) <= MESSAGE_CHARS for m in messages)


# --- the card ---------------------------------------------------------------------------------------


def action(**changes) -> PendingAction:
    base = PendingAction(
        id="p123", tool="create_it_ticket", arguments=TICKET, args_hash="h" * 32, requester="U_ALICE",
        text="I can raise a **ticket**. Please confirm.", expires_at=NOW + timedelta(hours=24),
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def decided_card_message(record: PendingRecord) -> Any:
    return card_view_message(CardView.of(record))


def record(state: str, **changes) -> PendingRecord:
    a = action()
    base = PendingRecord(
        id=a.id, run_id="run_1", conversation_key="slack:T:C:1.2", requester=a.requester, tool=a.tool,
        call_id="call_1", arguments=a.arguments, args_hash=a.args_hash, text=a.text, state=state,
        created_at=NOW, expires_at=a.expires_at, decided_at=NOW, decider="U_ALICE", executor=None, finished_at=None,
        result=None, platform_message=None, run_state={},
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_the_card_shows_the_exact_fields_and_buttons_carry_only_id_and_hash():
    message = card_message(action())
    fields = next(b for b in message.blocks if "fields" in b)["fields"]
    assert [f["text"] for f in fields] == [
        "Category: network_vpn",
        "Summary: VPN fails *every* time with <NG-809> & more",
        "Urgency: high",
    ]
    assert all(f["type"] == "plain_text" and f["emoji"] is False for f in fields)  # shown exactly as frozen
    confirm, cancel = actions(message.blocks)
    assert (confirm["action_id"], confirm["style"]) == (CONFIRM, "primary")
    assert cancel["action_id"] == CANCEL and "style" not in cancel
    assert confirm["value"] == cancel["value"] == button_value("p123", "h" * 32)
    assert parse_button_value(confirm["value"]) == ("p123", "h" * 32)
    assert "network_vpn" not in confirm["value"] and "VPN" not in confirm["value"]
    assert message.blocks[0]["text"]["text"] == "I can raise a *ticket*. Please confirm."
    assert "Only <@U_ALICE> can confirm this" in texts(message.blocks)


def test_details_too_long_for_a_field_go_in_their_own_section():
    message = card_message(action(arguments={**TICKET, "details": "d" * 1_950}))
    plain = [b["text"]["text"] for b in message.blocks if b.get("text", {}).get("type") == "plain_text"]
    assert plain == ["Details: " + "d" * 1_950]


def test_a_decided_card_has_no_buttons_and_says_who_when_and_what():
    done = decided_card_message(record("done", result={"status": "created", "ticket_id": "IT-1001", "url": None}))
    assert actions(done.blocks) == []
    line = done.blocks[-1]["elements"][0]["text"]
    assert "Confirmed by <@U_ALICE> at 2025-03-04 10:30 UTC" in line and "*IT-1001*" in line
    cancelled = decided_card_message(record("cancelled")).blocks[-1]["elements"][0]["text"]
    assert "Cancelled by <@U_ALICE>" in cancelled and "Nothing was created" in cancelled
    expired = decided_card_message(record("expired", decider=None, decided_at=None)).blocks[-1]["elements"][0]["text"]
    assert "This request expired at 2025-03-05 10:30 UTC" in expired
    failed = decided_card_message(record("failed", result={"error": "backend down"})).blocks[-1]["elements"][0]
    assert "backend down" in failed["text"]


def test_a_linked_ticket_is_a_link():
    result = {"status": "created", "ticket_id": "INC-7", "url": "https://desk.example.com/INC-7"}
    line = decided_card_message(record("done", result=result)).blocks[-1]["elements"][0]["text"]
    assert "<https://desk.example.com/INC-7|*INC-7*>" in line


def test_the_text_slack_notifies_with_is_escaped_like_the_blocks():
    """``text`` is mrkdwn too: a model-written summary must not ping the channel or hide a link."""
    hostile = "<!channel> <https://evil.example|VPN> down"
    pending = record("open", arguments={**TICKET, "summary": hostile})
    messages = [
        card_message(pending.as_action()),
        decided_card_message(dataclasses.replace(pending, state="cancelled")),
        card_view_message(CardView.of(pending).working("U_ALICE", NOW, "confirm")),
        give_up_message(GaveUp(TerminationReason.DEADLINE, text=hostile), "run_x"),
        handoff_message(hostile, "HD-42"),
    ]
    for message in messages:
        assert "&lt;!channel&gt;" in message.text and "<!channel>" not in message.text, message.text
        assert "|VPN>" not in message.text, message.text  # a Slack link would show "VPN", not where it goes


# --- give-up ----------------------------------------------------------------------------------------


def test_a_give_up_names_the_helpdesk_case_when_there_is_one():
    message = give_up_message(GaveUp(TerminationReason.STEP_BUDGET, case_id="HD-42"), "run_x")
    assert "Helpdesk case *HD-42*" in texts(message.blocks)
    assert HANDOFF not in [e["action_id"] for e in actions(message.blocks)]  # already handed off


def test_a_give_up_without_a_case_carries_the_run_id_and_offers_the_handoff():
    message = give_up_message(GaveUp(TerminationReason.DEADLINE), "run_x")
    assert "`run_x`" in texts(message.blocks)
    assert HANDOFF in [e["action_id"] for e in actions(message.blocks)]


def test_a_ticket_systems_error_on_a_slack_card_cannot_mention_or_link() -> None:
    # the error may quote what the system was sent: on a Slack card it is text, never a ping or a link
    error = "rejected (422): summary <!channel> see <https://evil.test|here> & more"
    view = CardView("p1", "h" * 32, "create_it_ticket", "", {}, "U1", "failed", NOW, decider="U1", decided_at=NOW,
                    result={"error": error})
    line = status_line(view)
    assert "&lt;!channel&gt;" in line and "&lt;https://evil.test|here&gt; &amp; more" in line
    assert "<!channel>" not in line and "<https://evil.test" not in line
