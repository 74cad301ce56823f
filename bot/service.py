"""The API adapters call: ``handle_message`` for a user's message, ``decide`` for a Confirm/Cancel click,
``request_handoff`` for "Still need help?".

Adapters map platform events to ``Inbound`` and render the ``Reply`` they get back; everything that
must survive a restart (event dedupe, thread history, pending actions, traces, helpdesk cases) goes
through the store. Every give-up, every confirmed write that failed and every request for a human
opens a helpdesk case before the user is told its id (see ``bot.helpdesk``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Literal

from bot.agent import (
    SYSTEM_PROMPT,
    AgentDeps,
    DecidedWrite,
    ProposedWrite,
    RunResult,
    RunState,
    Stopwatch,
    ToolContext,
    decided_write,
    execute_confirmed,
    run_agent,
    thread_context,
)
from bot.errors import StateVersionError
from bot.helpdesk import (
    ACTION_UNKNOWN,
    CARD_NOT_SHOWN,
    TICKET_FAILED,
    USER_REQUEST,
    HandoffCase,
    Helpdesk,
    Outbox,
    asks_for_human,
    case_number,
)
from bot.index import OwnedIndex
from bot.pending import Decision, PendingActions
from bot.policy_tools import reply_from_result
from bot.runtime import BUSY_TEXT, THIS_PROCESS, Admission, InFlight, Metrics, log_context
from bot.store import PendingRecord, Place, Store, utcnow
from bot.types import Answer, GaveUp, Inbound, Message, Outcome, Pending, TerminationReason, UserRef
from bot.unicode_text import clean_text

log = logging.getLogger(__name__)

STALE_EXECUTING = timedelta(minutes=10)  # far beyond any tool timeout: such a call's process is gone
CASE_RETRY_AFTER = timedelta(minutes=1)  # far beyond opening one case: still without one, that attempt failed
CANCELLED_BY_USER = {"status": "cancelled", "note": "cancelled by user"}
PROCESS_OWNER = str(THIS_PROCESS)  # stamped on runs: the sweeper recovers those of dead processes
RefusalReason = Literal["rate_limited", "busy"]


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
    refused: RefusalReason | None = None  # set when no run started: the outcome is a polite refusal

    @property
    def from_a_run(self) -> bool:
        """Whether a run is behind this reply: only then is there a trace to rate and a run to hand off.

        A polite refusal (rate limited, busy) starts no run, and a typed request for a person opens a
        case instead (the reply's id is the case id): feedback or "Still need help?" buttons under
        either could only fail.
        """
        return self.refused is None and case_number(self.run_id) is None


@dataclass(frozen=True)
class DecisionReply:
    """The answer to a click: what to show on the card, and the continued run's reply if it ran."""

    decision: Decision
    result: dict[str, Any] | None = None  # the frozen call's result, or "cancelled by user"
    reply: Reply | None = None
    case: HandoffCase | None = None  # opened when the confirmed call failed: a human follows up

    @property
    def status(self) -> str:
        return self.decision.status


class PolicyPal:
    """The platform-neutral service: one per process, shared by every adapter."""

    def __init__(
        self,
        deps: AgentDeps,
        store: Store,
        pending: PendingActions,
        searcher: OwnedIndex | None = None,
        *,
        helpdesk: Helpdesk | None = None,
        outbox: Outbox | None = None,
        resources: Sequence[object] = (),
        admission: Admission | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.deps = deps
        self.store = store
        self.pending = pending
        self.searcher = searcher  # closed with the service when the service opened it
        self.helpdesk = helpdesk or Helpdesk(store, budgets=deps.budgets)
        self.outbox = outbox or Outbox(store, [])  # the server runs it; the console calls run_once
        self._resources = tuple(resources)  # ticket backend, destinations: closed with the service
        self.admission = admission  # None: no rate limit and no cap (tests, the console)
        self.metrics = metrics or Metrics()
        self.inflight = InFlight()  # what a graceful shutdown drains
        self.redactor = self.helpdesk.redactor  # traces are read by operators: no pasted secrets in them

    async def handle_message(self, inbound: Inbound, cancel: asyncio.Event | None = None) -> Reply | None:
        """Run the agent for one message; None when the event was already handled (a platform retry).

        A person over their rate, or a process at its cap, gets a polite refusal instead of a run.
        """
        if not await self.store.threads.claim_event(f"{inbound.platform}:{inbound.event_id}"):
            log.info("duplicate event %s ignored", inbound.event_id)
            return None
        inbound = replace(inbound, text=clean_text(inbound.text))  # storable: no lone surrogates
        with log_context(conversation=inbound.conversation_key, platform=inbound.platform):
            return await self._answer(inbound, cancel)

    async def _answer(self, inbound: Inbound, cancel: asyncio.Event | None) -> Reply:
        history = await self.store.threads.load_history(inbound.conversation_key)
        if not history:
            await self.store.threads.remember_place(_place(inbound))
        if self.admission is not None and not await self.admission.users.allow(_user_key(inbound)):
            return self._refuse(inbound, "rate_limited", self.admission.users.refusal())  # cases count too
        if asks_for_human(inbound.text):
            return await self._hand_over(inbound)
        state = _first_state(inbound, history)
        await self._begin(state, inbound.platform, inbound.text)  # before any wait: a crash is recovered
        if self.admission is None:
            return await self._run(state, inbound.platform, inbound.text, cancel, inbound.link)
        async with self.admission.slots.slot() as admitted:
            if not admitted:
                await self.store.runs.discard(state.run_id)  # a refusal leaves no run behind
                return self._refuse(inbound, "busy", BUSY_TEXT)
            return await self._run(state, inbound.platform, inbound.text, cancel, inbound.link)

    async def _begin(self, state: RunState, platform: str, question: str) -> None:
        """Record the run as running: from here on, if this process dies, a sweeper answers the user."""
        await self.store.runs.start(
            state.run_id, state.conversation_key, platform, state.user.id, self.redactor.text(question),
            self.deps.model.name, PROCESS_OWNER,
        )

    def _refuse(self, inbound: Inbound, reason: RefusalReason, text: str) -> Reply:
        """A reply without a run: nothing stored, the person asks again later."""
        log.info("%s: no run for %s's message (%s)", reason, inbound.user.id, inbound.event_id)
        self.metrics.refused.labels(reason=reason, platform=inbound.platform).inc()
        reply_id = f"{reason}_{uuid.uuid4().hex[:12]}"
        return Reply(reply_id, TerminationReason.ANSWERED, Answer(text), inbound.conversation_key, refused=reason)

    async def request_handoff(
        self, conversation_key: str, user: UserRef, *, link: str | None = None, question: str | None = None
    ) -> HandoffCase:
        """Open a case for a person who asked for one ("Still need help?", "I want a human").

        One case per answer: asking twice after the same run returns the same case.
        """
        runs = await self.store.runs.of_conversation(conversation_key, limit=1)
        latest = runs[-1] if runs else None
        return await self.helpdesk.open_case(
            origin=f"request:{conversation_key}:{latest.id if latest else 'none'}",
            reason=USER_REQUEST,
            user=user,
            conversation_key=conversation_key,
            question=latest.question if latest else question or "",
            run_id=latest.id if latest else None,
            link=link,
        )

    async def decide(
        self,
        pending_id: str,
        actor: UserRef,
        decision: Literal["confirm", "cancel"],
        args_hash: str,
        on_result: Callable[[DecisionReply], Awaitable[None]] | None = None,
    ) -> DecisionReply:
        """Apply a click exactly once, run the frozen call if confirmed, then let the model finish.

        ``on_result`` hears the decision and the call's result before the model continues, so an
        adapter can update the card at once while a slow model writes the final reply. It only
        reports: if it fails, that is logged and the run still continues.
        """
        verdict = await self.pending.decide(pending_id, actor.id, decision, args_hash)
        if verdict.status not in ("confirmed", "cancelled") or verdict.action is None:
            return DecisionReply(verdict)
        record = verdict.action
        watch = Stopwatch()
        result = await self._execute(record, actor) if verdict.confirmed else CANCELLED_BY_USER
        took_ms = watch.ms()
        case = None
        if verdict.confirmed and _failed(result):
            case = await self._action_case(record, actor, TICKET_FAILED, str(result.get("error", "")))
            result = {**result, "case_id": case.case_id, "handoff": case.message}
        if on_result is not None:
            await _report(on_result, DecisionReply(verdict, result, case=case))
        try:
            state = RunState.from_dict(record.run_state)
        except StateVersionError as exc:
            log.error("pending %s: %s", pending_id, exc)
            return DecisionReply(verdict, result, case=case)
        state.run_id = _new_run_id()
        state.resume_with(record.call_id, _json(result))
        platform = record.conversation_key.split(":", 1)[0]
        decided = decided_write(
            tool=record.tool,
            call_id=record.call_id,
            arguments=record.arguments,
            decider=actor.id,
            decision=decision,
            result=result,
            latency_ms=took_ms,
            reply=reply_from_result(record.tool, decision, result),
        )
        question = f"({decision} {record.tool})"
        await self._begin(state, platform, question)
        reply = await self._run(state, platform, question, None, decided=decided)
        return DecisionReply(verdict, result, reply, case)

    async def recover(self, older_than: timedelta = STALE_EXECUTING) -> list[tuple[PendingRecord, HandoffCase]]:
        """Actions left executing by a dead process are never re-run: mark them unknown for a human.

        Returns each with the helpdesk case opened for it, so a caller that can reach the requester
        (the server's sweeper) tells them too. An action whose case could not be opened (a database
        error, a crash between marking and opening) stays unknown without one; a later pass claims it
        and tries again. So each is returned once, by the pass that opened its case.
        """
        stale = await self.pending.mark_stale_executing_unknown(older_than)
        now = utcnow()
        caseless = await self.store.pending.claim_caseless_unknown(now - CASE_RETRY_AFTER, now)
        recovered = []
        for record in [*stale, *caseless]:
            if (case := await self._unknown_case(record)) is not None:
                recovered.append((record, case))
        return recovered

    async def _unknown_case(self, record: PendingRecord) -> HandoffCase | None:
        """The case for an action marked unknown; None when it failed (logged, retried by a later pass)."""
        log.error(
            "pending action %s (%s for %s) was executing when its process died; marked unknown, "
            "a human must check whether it happened",
            record.id,
            record.tool,
            record.requester,
        )
        detail = f"{record.tool} was executing when its process died: check whether it happened."
        try:
            return await self._action_case(record, UserRef(record.requester), ACTION_UNKNOWN, detail)
        except Exception:  # one failed case must not leave the others unopened and their requesters untold
            log.exception("pending action %s: its case could not be opened; a later pass retries", record.id)
            return None

    async def card_not_shown(self, pending_id: str) -> HandoffCase | None:
        """A confirmation card the platform would not take: withdraw the action and open a case.

        Nobody can decide a card they never saw, and the run is waiting on it: without this the
        request would sit unseen until it expired. The case hands the conversation, with the
        proposed call, to a person; the adapter tells the user its id if it can still reach them.
        None when the action was decided or gone meanwhile (then there is nothing to withdraw).
        """
        record = await self.pending.withdraw(pending_id)
        if record is None:
            return None
        log.error("pending %s (%s for %s): its card could not be posted; withdrawn and handed to the helpdesk",
                  record.id, record.tool, record.requester)
        detail = f"The confirmation card for {record.tool} could not be posted; nothing was done."
        return await self._action_case(record, UserRef(record.requester), CARD_NOT_SHOWN, detail)

    async def claim_event(self, platform: str, event_id: str) -> bool:
        """True the first time any process sees this event: for replies sent without a run."""
        return await self.store.threads.claim_event(f"{platform}:{event_id}")

    async def feedback(self, run_id: str, value: Literal["helpful", "not_helpful"], user_id: str) -> bool:
        return await self.store.runs.set_feedback(run_id, value, user_id)

    async def close(self) -> None:
        """Release the model client, the index, backends and destinations, then the database."""
        for resource in (self.deps.model, self.searcher, *self._resources):
            closer = getattr(resource, "aclose", None)
            if closer is not None:
                await closer()
        await self.store.close()

    async def _execute(self, record: PendingRecord, actor: UserRef) -> dict[str, Any]:
        tool = self.deps.tools.get(record.tool)
        context = ToolContext(actor, record.run_id, record.conversation_key, idempotency_key=record.id)
        ok, result = await execute_confirmed(tool, record.arguments, context)
        await self.pending.finish(record.id, ok=ok and not _failed(result), result=result)
        return result

    async def _action_case(self, record: PendingRecord, user: UserRef, reason: str, detail: str) -> HandoffCase:
        """A case for a confirmed action that failed or may not have happened, so a human follows up."""
        return await self.helpdesk.open_case(
            origin=f"action:{record.id}",
            reason=reason,
            user=user,
            conversation_key=record.conversation_key,
            question=_question_of(record),
            run_id=record.run_id,
            detail=detail,
        )

    async def _hand_over(self, inbound: Inbound) -> Reply:
        """A typed request for a person: open the case at once, no model run."""
        key = inbound.conversation_key
        case = await self.request_handoff(key, inbound.user, link=inbound.link, question=inbound.text)
        text = case.user_reply()
        await self.store.threads.append_history(key, [{"role": "user", "content": inbound.text}, _said(text)])
        return Reply(case.case_id, TerminationReason.ANSWERED, Answer(text), key)

    async def _run(
        self,
        state: RunState,
        platform: str,
        question: str,
        cancel: asyncio.Event | None,
        link: str | None = None,
        decided: DecidedWrite | None = None,
    ) -> Reply:
        context = log_context(run_id=state.run_id, conversation=state.conversation_key, platform=platform)
        with context, self.inflight.track(state.run_id, cancel) as stop:
            self.metrics.in_flight.inc()
            try:
                result = await self._agent(state, platform, question, stop, decided)
                outcome = await self._settle(result, link)
            finally:
                self.metrics.in_flight.dec()
        spent = state.spent
        self.metrics.observe_run(
            platform, result.reason.value, spent.steps, spent.tokens, spent.cost_usd, result.trace.steps
        )
        return Reply(
            result.run_id, result.reason, outcome, state.conversation_key, spent.steps, spent.tokens, spent.cost_usd
        )

    async def _agent(
        self, state: RunState, platform: str, question: str, stop: asyncio.Event, decided: DecidedWrite | None
    ) -> RunResult:
        """The loop, then its result stored (the run was recorded as running by ``_begin``)."""
        result = await run_agent(self.deps, state, stop, decided)
        await self._persist(result)  # first, so a give-up's case carries this run's trace
        log.info("run %s ended: %s", result.run_id, result.reason.value)
        return result

    async def _settle(self, result: RunResult, link: str | None = None) -> Outcome:
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
        outcome = result.outcome
        if isinstance(outcome, GaveUp):
            outcome = await self._give_up(result, outcome, link)
        if isinstance(outcome, Answer | GaveUp):
            await self._remember(state, outcome.text)
        return outcome

    async def _give_up(self, result: RunResult, outcome: GaveUp, link: str | None) -> GaveUp:
        """Open the case (stored before the user hears of it) and tell the user its id."""
        state = result.state
        case = await self.helpdesk.open_case(
            origin=f"run:{result.run_id}",
            reason=result.reason.value,
            user=state.user,
            conversation_key=state.conversation_key,
            question=state.question,
            run_id=result.run_id,
            link=link,
        )
        return replace(outcome, text=case.user_reply(), transcript=case.to_json(), case_id=case.case_id)

    async def _remember(self, state: RunState, answer: str) -> None:
        """Thread history keeps questions and final answers only; tool traffic lives in the trace.

        One append (an INSERT), never a read-modify-write: two messages answered at once in a thread,
        by this process or another replica, both stay in its history.
        """
        exchange = [{"role": "user", "content": state.question}, _said(answer)]
        await self.store.threads.append_history(state.conversation_key, exchange)

    async def _persist(self, result: RunResult) -> None:
        spent = result.state.spent
        await self.store.runs.finish(
            result.run_id,
            reason=result.reason.value,
            steps=spent.steps,
            input_tokens=spent.input_tokens,
            output_tokens=spent.output_tokens,
            cost_usd=spent.cost_usd,
            latency_ms=result.trace.latency_ms,
            trace=self.redactor.value(result.trace.step_dicts()),
        )


def _place(inbound: Inbound) -> Place:
    return Place(
        key=inbound.conversation_key,
        platform=inbound.platform,
        tenant=inbound.tenant,
        channel=inbound.channel,
        thread=inbound.thread,
        link=inbound.link,
        address=inbound.address,
    )


def _user_key(inbound: Inbound) -> str:
    """One person across threads and replicas: platform, workspace or tenant, user id."""
    return f"{inbound.platform}:{inbound.tenant}:{inbound.user.id}"


def _failed(result: dict[str, Any]) -> bool:
    """A tool result is a failure when the call raised or the backend reported an error."""
    return "error" in result


def _question_of(record: PendingRecord) -> str:
    try:
        return RunState.from_dict(record.run_state).question
    except (StateVersionError, KeyError, IndexError, TypeError):
        return record.text


def _said(text: str) -> Message:
    return {"role": "assistant", "content": text}


def _new_run_id() -> str:
    return "run_" + uuid.uuid4().hex[:16]


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)


async def _report(on_result: Callable[[DecisionReply], Awaitable[None]], early: DecisionReply) -> None:
    """Tell the adapter the call's result; a failed card update must not lose the model's reply."""
    try:
        await on_result(early)
    except Exception:
        action = early.decision.action
        log.exception("pending %s: reporting the result to the adapter failed; the run continues",
                      action.id if action else "?")


def _first_state(inbound: Inbound, history: list[Message]) -> RunState:
    """A new run's state: the system prompt, the thread so far, and the question."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, *thread_context(history, inbound.text)]
    return RunState(
        run_id=_new_run_id(),
        user=inbound.user,
        conversation_key=inbound.conversation_key,
        messages=messages,
        question_index=len(messages) - 1,
    )
