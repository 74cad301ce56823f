"""Runs for the console tests, made the way production makes them: messages through the service and the fake model."""

from __future__ import annotations

import itertools
from typing import Any

from bot.policy_tools import cite_for
from bot.service import PolicyPal, Reply
from bot.types import Inbound, UserRef
from retrieval import Passage
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

ALICE = UserRef("U_ALICE", "Alice", "alice@example.com", groups=("all",))
DANA = UserRef("U_DANA", "Dana", "dana@example.com", groups=("all", "hr"))
RECEIPTS = Passage(
    0.9,
    "expenses.md",
    "Expenses Policy",
    "Expenses Policy > Receipts",
    "expenses.md",
    "Keep receipts for every expense over 25 EUR.",
)
REORG = Passage(
    0.9,
    "reorg.md",
    "Reorg Plan",
    "Reorg Plan > Team changes",
    "reorg.md",
    "Finance and facilities merge in March.",
    audience=("hr",),
)
NOT_IN_POLICY = "That is not in the policy documents. The helpdesk can help."
_events = itertools.count()


class Finds:
    """Finds the receipts passage for receipts, the HR-only reorg passage for readers in hr; else nothing."""

    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Passage]:
        groups = set(filter.groups or ()) if filter is not None else set()
        if "receipt" in query:
            return [RECEIPTS]
        if "reorg" in query and "hr" in groups:
            return [REORG]
        return []


def search(query: str) -> tuple[str, dict[str, str]]:
    return ("search_policies", {"query": query})


async def ask(svc: PolicyPal, question: str, user: UserRef = ALICE, *, shared: bool = False) -> Reply:
    n = next(_events)
    channel = "C_GENERAL" if shared else f"D_{user.id}"
    inbound = Inbound("slack", channel, f"t{n}", user, question, event_id=f"ev{n}", shared=shared)
    reply = await svc.handle_message(inbound)
    assert reply is not None
    return reply


async def answered(svc: PolicyPal, fake: FakeOpenAI, *, shared: bool = False) -> Reply:
    fake.script(tool_calls(search("taxi receipts")), text(f"Yes, keep it [{cite_for(RECEIPTS)}]."))
    return await ask(svc, "do I need a receipt for a taxi?", shared=shared)


async def not_covered(svc: PolicyPal, fake: FakeOpenAI, question: str = "does the company pay for my gym?") -> Reply:
    fake.script(tool_calls(search("gym membership")), text(NOT_IN_POLICY))
    return await ask(svc, question)


async def repeated(svc: PolicyPal, fake: FakeOpenAI) -> Reply:
    """The model searches the same words twice: the repeat guard refuses the second call."""
    fake.script(
        tool_calls(search("lunch receipts")),
        tool_calls(search("lunch receipts")),
        text(f"Keep it [{cite_for(RECEIPTS)}]."),
    )
    return await ask(svc, "receipts for lunch?")


async def restricted(svc: PolicyPal, fake: FakeOpenAI) -> Reply:
    """Dana (hr) asks in a DM: the search may return the HR-only reorg plan, so the trace holds it."""
    fake.script(tool_calls(search("reorg teams")), text(f"They merge in March [{cite_for(REORG)}]."))
    return await ask(svc, "what happens to finance in the reorg?", DANA)


async def ticket(svc: PolicyPal, fake: FakeOpenAI) -> Reply:
    fake.script(
        tool_calls(
            ("create_it_ticket", {"category": "network_vpn", "summary": "VPN keeps dropping", "urgency": "high"})
        )
    )
    return await ask(svc, "my VPN keeps dropping, please open a ticket")
