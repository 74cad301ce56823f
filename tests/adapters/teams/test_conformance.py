"""Teams takes what PolicyPal sends: every card is Adaptive Cards 1.5 (the Teams host property ``msteams``
as Microsoft's Teams SDK models it), and the app manifest is valid on the schema its ``$schema`` names.

The schemas are the vendors' own files, copied into tests/data (see tests/data/README.md). The fake
connector checks every card it receives the same way (tests/fakes/conformance.py), so every Teams test
also checks the cards it causes; here each card the adapter can build is checked directly.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from jsonschema import Draft4Validator

from adapters.teams import cards
from adapters.teams.package import MANIFEST_DIR, filled_manifest
from bot.cards import ERROR_CHARS, CardView
from bot.types import Answer, Citation, GaveUp, Outcome, Pending, PendingAction, TerminationReason
from tests.fakes import conformance
from tests.fakes.bot_connector import FakeBotConnector

DATA = Path(__file__).resolve().parents[2] / "data"
APP_ID = "0f3c2b1a-1234-4cde-8f00-0123456789ab"
NOW = datetime(2026, 3, 4, 10, 30, tzinfo=UTC)
TICKET = {"category": "network_vpn", "summary": "VPN **fails** [verify](https://evil)", "urgency": "high",
          "details": "since Monday"}  # fmt: skip
ACTION = PendingAction("p1", "create_it_ticket", TICKET, "h1", "aad-alice", "Shall I raise this?", NOW)
CITED = Citation("Travel", "Flights", "https://intranet.example/travel", abstract="Economy class.")
STATES = ("open", "working", "executing", "done", "failed", "unknown", "cancelled", "expired")


def view(state: str) -> CardView:
    result = {"done": {"ticket_id": "IT-1001", "url": "https://it.example/IT-1001"}, "failed": {"error": "x" * 5_000}}
    return CardView("p1", "h1", "create_it_ticket", "Shall I?", TICKET, "aad-alice", state, NOW + timedelta(hours=1),
                    decider="aad-alice", decided_at=NOW, result=result.get(state), case_id="HD-1002",
                    choice="confirm")  # fmt: skip


def every_card() -> dict[str, dict]:
    built = {
        "pending": cards.pending_card(ACTION, "Alice"),
        "feedback": cards.feedback_card("run_1"),
        "feedback, voted": cards.feedback_card("run_1", note="Thanks."),
        "handoff": cards.handoff_card("run_1"),
        "notice": cards.notice_card("Hello"),
        "helpdesk summary": cards.handoff_summary_card(
            case_id="HD-1001", user="Alice", question="Receipts?", reason="step_budget",
            link="https://teams.microsoft.com/l/message/1", platform="teams",
        ),
        "helpdesk summary, no link": cards.handoff_summary_card(
            case_id="HD-1001", user="", question="", reason="", link=None
        ),
    }  # fmt: skip
    built |= {f"card, {state}": cards.card_view(view(state), lambda _user: "Alice") for state in STATES}
    built["card, refused click"] = cards.card_view(view("open"), lambda _user: "Alice", notice="Only Alice can.")
    return built


@pytest.mark.parametrize(("name", "card"), list(every_card().items()))
def test_every_card_the_adapter_builds_is_adaptive_cards_1_5(name, card):
    assert conformance.adaptive_card_problems(card) == [], name
    assert card["version"] == "1.5" and card["msteams"] == {"width": "full"}


OUTCOMES: dict[str, Outcome] = {
    "answer": Answer("Economy class [Travel › Flights].", (CITED,)),
    "pending": Pending(ACTION.text, ACTION),
    "give-up": GaveUp(TerminationReason.DEADLINE, "I couldn't finish."),
    "give-up with a case": GaveUp(TerminationReason.DEADLINE, "I couldn't finish.", case_id="HD-1001"),
}


@pytest.mark.parametrize("name", list(OUTCOMES))
def test_every_reply_activitys_cards_are_adaptive_cards_1_5(name):
    activity = cards.reply_activity(OUTCOMES[name], "run_1", requester_name="Alice")
    assert conformance.activity_card_problems(activity) == []


def test_msteams_width_is_checked_against_the_teams_sdk_model():
    """The plain schema knows no ``msteams``; the Teams SDK's card model takes ``width: "full"`` only."""
    card = cards.notice_card("Hello")
    assert conformance.adaptive_card_problems(card) == []
    problems = conformance.adaptive_card_problems({**card, "msteams": {"width": "Full"}})
    assert len(problems) == 1 and "'Full' is not one of ['full']" in problems[0]


@pytest.mark.parametrize(
    ("change", "found"),
    [
        ({"version": "2.0"}, "version"),
        ({"body": [{"type": "Sparkle", "text": "x"}]}, "/body/0"),
        ({"body": [{"type": "TextBlock"}]}, "/body/0"),  # a TextBlock needs its text
        ({"actions": [{"type": "Action.Execute", "title": "Go", "style": "loud"}]}, "/actions/0"),
        ({"speakk": "typo"}, "speakk"),
    ],
)
def test_a_card_outside_the_schema_is_refused_with_where_it_is_wrong(change, found):
    problems = conformance.adaptive_card_problems({**cards.notice_card("Hello"), **change})
    assert problems and found in " ".join(problems)


@pytest.mark.asyncio
async def test_the_fake_connector_refuses_a_bad_card_as_teams_does_and_records_it():
    bad = cards.message(None, {**cards.notice_card("Hello"), "msteams": {"width": "Full"}})
    async with FakeBotConnector() as channel, aiohttp.ClientSession() as session:
        url = f"{channel.service_url}v3/conversations/a%3Apersonal-29%3Aalice/activities"
        async with session.post(url, json=bad) as refused:
            status = refused.status
        async with session.post(url, json=cards.message("hi", cards.notice_card("Hello"))) as taken:
            assert taken.status == 200
    assert status == 400 and channel.violations and len(channel.messages()) == 1
    assert conformance.take()  # taken: sent on purpose


# --- the manifest ---------------------------------------------------------------------------------------


def test_the_packaged_manifest_is_valid_on_the_teams_schema_of_its_version():
    manifest = filled_manifest(APP_ID, MANIFEST_DIR)
    version = manifest["manifestVersion"]
    schema_file = DATA / f"teams-manifest-v{version}.schema.json"
    assert manifest["$schema"].endswith(f"/v{version}/MicrosoftTeams.schema.json")
    assert schema_file.exists(), f"copy the v{version} Teams schema into tests/data (tests/data/README.md)"
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    errors = [f"{e.json_path}: {e.message}" for e in Draft4Validator(schema).iter_errors(manifest)]
    assert errors == []


def test_a_ticket_systems_long_error_is_capped_on_the_teams_card_too():
    state = cards.card_view(view("failed"), lambda _user: "Alice")["body"][-1]
    sentence = "".join(run["text"] for run in state["inlines"])
    assert len(sentence) < ERROR_CHARS + 200 and "x" * ERROR_CHARS not in sentence and "…" in sentence
