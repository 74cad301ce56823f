"""What `ask`, `chat` and `decide` need of a service: this process's PolicyPal, or the running server's.

The terminal commands (console.py) are written against this, so the same code prompts, formats and
prints whether the service runs here or in the `policypal serve` that holds the index (served.py).
"""

from __future__ import annotations

from typing import Protocol

from bot.delivery import DeliveryResult
from bot.service import Choice, DecisionReply, Reply
from bot.types import Inbound, UserRef


class StoredCall(Protocol):
    """A pending action as stored: the hash a later decision must name."""

    @property
    def args_hash(self) -> str: ...


class PendingLookup(Protocol):
    async def get(self, pending_id: str) -> StoredCall | None: ...


class CaseDelivery(Protocol):
    async def run_once(
        self, case_number: int | None = None, *, timeout_s: float | None = None
    ) -> list[DeliveryResult]: ...


class TerminalService(Protocol):
    """A message, a decision, a pending action's lookup and a case's delivery: all a terminal asks for."""

    @property
    def pending(self) -> PendingLookup: ...

    @property
    def outbox(self) -> CaseDelivery: ...

    async def handle_message(self, inbound: Inbound) -> Reply | None: ...

    async def decide(
        self, pending_id: str, actor: UserRef, decision: Choice, args_hash: str
    ) -> DecisionReply: ...
