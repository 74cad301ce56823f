"""The reply written from a decided write's result when no model call is left."""

from __future__ import annotations

from bot.agent.decided import DecidedWrite, reply_from_result
from bot.agent.trace import Step


def decided(tool: str, decision: str, result: dict) -> DecidedWrite:
    return DecidedWrite(tool, decision, result, Step("decision", tool))  # type: ignore[arg-type]


def test_a_ticket_result_is_told_as_the_ticket_tool_tells_it():
    created = {"status": "created", "ticket_id": "IT-1001", "url": "https://it.example/IT-1001"}
    assert reply_from_result(decided("create_it_ticket", "confirm", created)) == (
        "Done: I raised ticket IT-1001 (https://it.example/IT-1001). The IT team will follow up."
    )
    failed = {"status": "failed", "error": "The ticket was not created: timeout.", "handoff": "Case HD-1001 is open."}
    assert reply_from_result(decided("create_it_ticket", "confirm", failed)) == (
        "Sorry, I couldn't raise the ticket (The ticket was not created: timeout). Case HD-1001 is open."
    )
    cancelled = {"status": "cancelled", "note": "cancelled by user"}
    assert reply_from_result(decided("create_it_ticket", "cancel", cancelled)) == "OK, I did not raise a ticket."


def test_another_write_gets_plain_words():
    cancelled = reply_from_result(decided("reset_mfa", "cancel", {"status": "cancelled"}))
    assert cancelled == "OK, cancelled: nothing was done."
    assert reply_from_result(decided("reset_mfa", "confirm", {"error": "denied"})) == "That did not go through: denied."
    assert reply_from_result(decided("reset_mfa", "confirm", {"status": "ok"})) == "Done."
