"""The API adapters call: ``handle_message`` for a user's message, ``decide`` for a Confirm/Cancel click.

Adapters map platform events to ``Inbound`` and render the ``Reply`` they get back; everything that
must survive a restart (event dedupe, thread history, pending actions, traces) goes through the store.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from bot.agent import SYSTEM_PROMPT, AgentDeps, RunResult, run_agent
from bot.conversation import thread_context
from bot.pending import Decision, PendingActions
from bot.run_state import RunState, StateVersionError
from bot.store import PendingRecord, Store
from bot.tools import ToolContext
from bot.turn import ProposedWrite, execute_confirmed
from bot.types import Answer, GaveUp, Inbound, Outcome, Pending, TerminationReason, UserRef

log = logging.getLogger(__name__)

STALE_EXECUTING = timedelta(minutes=10)  # far beyond any tool timeout: such a call's process is gone
CANCELLED_BY_USER = {"status": "cancelled", "note": "cancelled by user"}
PROCESS_OWNER = f"{os.uname().nodename}:{os.getpid()}"


@dataclass(frozen=True)
class Reply:
    """What an adapter renders: one run's outcome and the ids to show or act on."""

    run_id: str
    reason: TerminationReason
    outcome: Outcome
    conversation_key: str
    steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class DecisionReply:
    """The answer to a click: what to show on the card, and the continued run's reply if it ran."""

    decision: Decision
    result: dict[str, Any] | None = None  # the frozen call's result, or "cancelled by user"
    reply: Reply | None = None

    @property
    def status(self) -> str:
        return self.decision.status


class PolicyPal:
    """The platform-neutral service: one per process, shared by every adapter."""

    def __init__(self, deps: AgentDeps, store: Store, pending: PendingActions, searcher: object = None) -> None:
        self.deps = deps
        self.store = store
        self.pending = pending
        self.searcher = searcher  # closed with the service when the service opened it

    async def handle_message(self, inbound: Inbound, cancel: asyncio.Event | None = None) -> Reply | None:
        """Run the agent for one message; None when the event was already handled (a platform retry)."""
        if not await self.store.claim_event(f"{inbound.platform}:{inbound.event_id}"):
            log.info("duplicate event %s ignored", inbound.event_id)
            return None
        history = await self.store.load_history(inbound.conversation_key)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, *thread_context(history, inbound.text)]
        state = RunState(
            run_id=_new_run_id(),
            user=inbound.user,
            conversation_key=inbound.conversation_key,
            messages=messages,
            question_index=len(messages) - 1,
        )
        return await self._run(state, inbound.platform, inbound.text, cancel)

    async def decide(
        self, pending_id: str, actor: UserRef, decision: Literal["confirm", "cancel"], args_hash: str
    ) -> DecisionReply:
        """Apply a click exactly once, run the frozen call if confirmed, then let the model finish."""
        verdict = await self.pending.decide(pending_id, actor.id, decision, args_hash)
        if verdict.status not in ("confirmed", "cancelled") or verdict.action is None:
            return DecisionReply(verdict)
        record = verdict.action
        result = await self._execute(record, actor) if verdict.confirmed else CANCELLED_BY_USER
        try:
            state = RunState.from_dict(record.run_state)
        except StateVersionError as exc:
            log.error("pending %s: %s", pending_id, exc)
            return DecisionReply(verdict, result)
        state.run_id = _new_run_id()
        state.resume_with(record.call_id, _json(result))
        platform = record.conversation_key.split(":", 1)[0]
        reply = await self._run(state, platform, f"({decision} {record.tool})", None)
        return DecisionReply(verdict, result, reply)

    async def recover(self, older_than: timedelta = STALE_EXECUTING) -> list[PendingRecord]:
        """Actions left executing by a dead process are never re-run: mark them unknown for a human."""
        stale = await self.pending.mark_stale_executing_unknown(older_than)
        for record in stale:
            log.error(
                "pending action %s (%s for %s) was executing when its process died; marked unknown, "
                "a human must check whether it happened",
                record.id,
                record.tool,
                record.requester,
            )
        return stale

    async def feedback(self, run_id: str, value: Literal["helpful", "not_helpful"], user_id: str) -> bool:
        return await self.store.set_feedback(run_id, value, user_id)

    async def close(self) -> None:
        """Release the model client, the index and the database, in that order."""
        for resource in (self.deps.model, self.searcher):
            closer = getattr(resource, "aclose", None)
            if closer is not None:
                await closer()
        await self.store.close()

    async def _execute(self, record: PendingRecord, actor: UserRef) -> dict[str, Any]:
        tool = self.deps.tools.get(record.tool)
        context = ToolContext(actor, record.run_id, record.conversation_key, idempotency_key=record.id)
        ok, result = await execute_confirmed(tool, record.arguments, context)
        await self.pending.finish(record.id, ok=ok, result=result)
        return result

    async def _run(self, state: RunState, platform: str, question: str, cancel: asyncio.Event | None) -> Reply:
        await self.store.start_run(
            state.run_id,
            state.conversation_key,
            platform,
            state.user.id,
            question,
            self.deps.model.name,
            PROCESS_OWNER,
        )
        result = await run_agent(self.deps, state, cancel)
        outcome = await self._settle(result)
        await self._persist(result)
        spent = state.spent
        return Reply(
            result.run_id, result.reason, outcome, state.conversation_key, spent.steps, spent.tokens, spent.cost_usd
        )

    async def _settle(self, result: RunResult) -> Outcome:
        """Turn the loop's result into what the user sees, storing what must outlive the process."""
        state = result.state
        if isinstance(result.outcome, ProposedWrite):
            write = result.outcome
            text = str(state.messages[-1].get("content") or "")
            action = await self.pending.propose(
                run_id=state.run_id,
                conversation_key=state.conversation_key,
                requester=state.user.id,
                tool=write.tool.name,
                call_id=write.call.id,
                arguments=write.arguments,
                text=text,
                run_state=state.to_dict(),
            )
            return Pending(text=text, action=action)
        if isinstance(result.outcome, Answer | GaveUp):
            await self._remember(state, result.outcome.text)
        return result.outcome

    async def _remember(self, state: RunState, answer: str) -> None:
        """Thread history keeps questions and final answers only; tool traffic lives in the trace."""
        history = await self.store.load_history(state.conversation_key)
        history.append({"role": "user", "content": state.question})
        history.append({"role": "assistant", "content": answer})
        await self.store.save_history(state.conversation_key, history)

    async def _persist(self, result: RunResult) -> None:
        spent = result.state.spent
        await self.store.finish_run(
            result.run_id,
            reason=result.reason.value,
            steps=spent.steps,
            input_tokens=spent.input_tokens,
            output_tokens=spent.output_tokens,
            cost_usd=spent.cost_usd,
            latency_ms=result.trace.latency_ms,
            trace=result.trace.step_dicts(),
        )


def _new_run_id() -> str:
    return "run_" + uuid.uuid4().hex[:16]


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)
