"""The control socket's JSON forms: what the server encodes, the CLI decodes to the same values, and an
answer that does not decode names what is wrong rather than failing somewhere later."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from adapters.control import protocol as wire
from bot.delivery import DeliveryResult
from bot.helpdesk import HandoffCase
from bot.pending import Decision
from bot.replies import DecisionReply, Reply
from bot.types import Answer, Citation, TerminationReason, UserRef
from retrieval import Passage


def test_answers_decode_to_the_values_the_server_encoded():
    passage = Passage(0.8123456, "leave.md", "Leave", "Leave > Carry-over", "https://x/leave", "Five days carry over.",
                      section="HR", audience=("hr", "managers"), classification="internal")
    delivery = DeliveryResult("HD-1001", "slack:helpdesk", "delivered", "posted")
    reply = Reply("run_1", TerminationReason.ANSWERED, Answer("Five days [1].", (Citation("Leave", "Carry-over", "https://x"),)),
                  "console:t1", steps=2, tokens=1200, cost_usd=0.0004)
    case = HandoffCase("HD-1001", datetime(2026, 12, 5, 9, 30, tzinfo=UTC), "ticket_failed",
                       UserRef("alice", "Alice", "alice@example.com"), "console", "terminal", "t1", None,
                       "my laptop was stolen", {"runs": []}, "console:t1", run_id="run_1", reply_within="4 hours")
    decided = DecisionReply(Decision("confirmed", None, "Confirmed."), {"ticket_id": "IT-1001"}, reply, case,
                            notice="Done.")

    assert wire.passage_from_json(wire.passage_to_json(passage)) == passage
    assert wire.delivery_from_json(wire.delivery_to_json(delivery)) == delivery
    assert wire.reply_from_json(wire.reply_to_json(reply)) == reply
    back = wire.decided_from_json(wire.decided_to_json(decided))
    assert (back.decision.status, back.decision.message, back.result) == ("confirmed", "Confirmed.", decided.result)
    assert back.reply == reply and back.case == case and back.notice == "Done."


@pytest.mark.parametrize(
    ("decode", "value", "said"),
    [
        (wire.passage_from_json, {"score": "high", "doc_id": "d", "title": "", "heading": "", "source": "",
                                  "text": ""}, "a passage that does not decode: `score` should be a valid number"),
        (wire.delivery_from_json, {"label": "HD-1", "destination": "", "status": "lost"},
         "a delivery that does not decode: `status` should be"),
        (wire.reply_from_json, {"run_id": "r", "reason": "finished", "outcome": {}, "conversation_key": "",
                                "steps": 1, "tokens": 1, "cost_usd": 0}, "a reply that does not decode: `reason`"),
        (wire.reply_from_json, {"run_id": "r", "reason": "answered", "outcome": {"type": "poem"},
                                "conversation_key": "", "steps": 1, "tokens": 1, "cost_usd": 0},
         "a reply whose outcome does not decode"),
        (wire.decided_from_json, {"decision": {"status": "maybe", "message": ""}},
         "a decision that does not decode: `decision.status`"),
        (wire.decided_from_json, [], "a decision that does not decode: it must be a JSON object"),
    ],
)
def test_an_answer_that_does_not_decode_names_what_is_wrong(decode, value, said):
    with pytest.raises(wire.Malformed) as raised:
        decode(value)
    assert str(raised.value).startswith(said)
