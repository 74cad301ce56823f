"""A confirmed ticket that could not be created: `ask --yes` and `decide` exit 3, as a run handed to the helpdesk.

The continued run's reply ("Sorry, I couldn't raise the ticket ... case HD-1001") is an Answer, so both
commands exited 0 and a script that raises tickets with `ask --yes` read success when nothing was raised.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.cli.console import HANDED_OVER, ask, decide_by_id
from bot.config import Settings
from bot.models.offline import OfflineModel
from bot.service import PolicyPal
from bot.wiring import build_model, open_service
from retrieval import PolicyIndex
from tests.bot.helpers import ALICE

STOLEN = "My laptop was stolen from my car this morning"  # the offline model proposes a ticket for it


@pytest.fixture
async def unreachable_tickets(tmp_path: Path, sample_index: PolicyIndex) -> AsyncIterator[PolicyPal]:
    """The offline model with the ticket webhook on the discard port: nothing listens, creation fails."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, tickets="webhook", tickets_webhook_url="http://127.0.0.1:9/tickets",
        tickets_webhook_secret="a-webhook-secret-of-some-length", tickets_attempts=1,
    )  # fmt: skip
    assert isinstance(build_model(settings), OfflineModel)
    service = await open_service(settings, searcher=sample_index)
    try:
        yield service
    finally:
        await service.close()


async def test_ask_yes_exits_3_when_the_confirmed_ticket_could_not_be_created(unreachable_tickets: PolicyPal) -> None:
    out = io.StringIO()
    code = await ask(unreachable_tickets, STOLEN, ALICE, answer_pending="confirm", as_json=True, out=out)
    outcome = json.loads(out.getvalue())
    assert outcome["decision"] == "confirmed" and outcome["ticket"] is None and outcome["case_id"]
    assert await unreachable_tickets.store.tickets.count() == 0
    assert code == HANDED_OVER == 3


async def test_decide_confirm_exits_3_when_the_ticket_could_not_be_created(unreachable_tickets: PolicyPal) -> None:
    asked = io.StringIO()
    assert await ask(unreachable_tickets, STOLEN, ALICE, prompt=None, as_json=True, out=asked) == 0  # left open
    pending_id = json.loads(asked.getvalue())["pending"]["id"]
    out = io.StringIO()
    code = await decide_by_id(unreachable_tickets, pending_id, ALICE, "confirm", out=out)
    assert "The action failed: The ticket was not created" in out.getvalue()
    assert code == HANDED_OVER
