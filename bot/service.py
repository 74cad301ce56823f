"""What adapters call: ``handle_message`` for a message, ``click`` for Confirm/Cancel (``decide`` in the
terminal), ``request_handoff`` for "Still need help?", ``note``/``notice`` for replies without a run.

An adapter writes each event to the inbox before its ack (``inbox.accept``); the work runs under the
item's lease. What it concludes (a run, its history, a proposed action, the reply) commits in one
transaction fenced by that lease, as outbox rows the platform's sender renders (``bot.outcomes``):
adapters do not post replies themselves. Every give-up, every confirmed write that failed or may not
have happened and every request for a person opens a helpdesk case before the user is told its id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal

from bot.agent import (
    SYSTEM_PROMPT,
    WORKING,
    AgentDeps,
    DecidedWrite,
    Progress,
    ProposedWrite,
    RunResult,
    RunState,
    Stopwatch,
    ToolContext,
    decided_write,
    execute_confirmed,
    run_agent,
    tell,
    thread_context,
)
from bot.attachments import files_not_read
from bot.audience import Audience, PlaceNow, asker_audience
from bot.cards import CardView, ClickedCard
from bot.clicks import click_notice
from bot.delivery import Address, Inbox, Outbox, Post, current_lease, post_destination
from bot.errors import LeftForLater, StateVersionError
from bot.helpdesk import (
    ACTION_UNKNOWN,
    CARD_NOT_SHOWN,
    REPLY_NOT_DELIVERED,
    TICKET_FAILED,
    USER_REQUEST,
    HandoffCase,
    Helpdesk,
    asks_for_human,
)
from bot.index import OwnedIndex
from bot.outcomes import Outcomes, RunRecord
from bot.pending import Decision, PendingActions
from bot.policy_tools import reply_from_result
from bot.redaction import bounded
from bot.replies import (
    PRIVATE_PART,
    DecisionReply,
    RefusalReason,
    Reply,
    Where,
    card_post,
    reply_posts,
    text_post,
)
from bot.runtime import THIS_PROCESS, Admission, InFlight, Metrics, busy_text, log_context, queued_text
from bot.store import DeliveryRecord, NewPost, PendingRecord, PendingState, Place, RunRow, Store, utcnow
from bot.types import Answer, GaveUp, Inbound, Message, Pending, TerminationReason, UserRef
from bot.unicode_text import clean_text

__all__ = ["DecisionReply", "PolicyPal", "Reply"]

log = logging.getLogger(__name__)

FEEDBACK_COMMENT_CHARS = 2_000  # what a person writes beside a thumbs-down: a few sentences

STALE_EXECUTING = timedelta(minutes=10)  # far beyond any tool timeout: such a call's process is gone
CASE_RETRY_AFTER = timedelta(minutes=1)  # far beyond opening one case: still without one, that attempt failed
CANCELLED_BY_USER = {"status": "cancelled", "note": "cancelled by user"}
PROCESS_OWNER = str(THIS_PROCESS)
Choice = Literal["confirm", "cancel"]
Show = Callable[[CardView], Awaitable[None]]
Who = Callable[[str], str]
StopCheck = Callable[[], Awaitable[bool]]


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
        inbox: Inbox | None = None,
        resources: Sequence[object] = (),
        admission: Admission | None = None,
        metrics: Metrics | None = None,
        embed: Callable[[Sequence[str]], list[list[float]]] | None = None,
    ) -> None:
        self.deps = deps
        self.embed = embed  # texts to the index model's vectors: the console groups gaps by meaning
        self.store = store
        self.pending = pending
        self.searcher = searcher  # closed with the service when the service opened it
        self.helpdesk = helpdesk or Helpdesk(store, budgets=deps.budgets)
        self.outbox = outbox or Outbox(store)  # the server runs it; the console calls run_once
        self.outbox.on_undeliverable = self._undeliverable
        self.inbox = inbox or Inbox(store)
        self.outcomes = Outcomes(store, self.outbox)
        self._resources = tuple(resources)  # ticket backend, destinations: closed with the service
        self.admission = admission  # None: no rate limit and no cap (tests, the console)
        self.metrics = metrics or Metrics()
        self.inflight = InFlight()  # what a graceful shutdown drains
        self.metrics.queued.set_function(lambda: self.admission.slots.queued if self.admission is not None else 0)
        self._stops: dict[str, set[asyncio.Event]] = {}  # conversation -> its running runs' cancel events
        self.redactor = self.helpdesk.redactor  # traces are read by operators: no pasted secrets in them

    # -- a message ----------------------------------------------------------------------------------

    async def handle_message(
        self, inbound: Inbound, cancel: asyncio.Event | None = None, progress: Progress | None = None
    ) -> Reply | None:
        """Run the agent for one message and commit its reply; None when another process answered it.

        A person over their rate gets a polite refusal instead of a run; beyond the process's cap on runs
        at once a message waits its turn (told its place on ``progress``), refused only after the queue wait.
        ``progress``: the platform's status line, told what the run is doing (bot.agent.progress).
        """
        inbound = replace(inbound, text=clean_text(inbound.text))  # storable: no lone surrogates
        with log_context(conversation=inbound.conversation_key, platform=inbound.platform):
            return await self._answer(inbound, cancel, progress)

    async def stop(self, conversation_key: str) -> int:
        """Cancel the runs in a conversation on every replica (a platform's Stop button); how many ran here.

        This process's runs stop at once. The request is also recorded in the store, where a run on
        another replica sees it after its current model call (``_stop_check``); a run that starts after
        the request is not stopped. A cancelled run ends ``cancelled`` as any other: the honest message
        and a helpdesk case. Raises when the store cannot record it (this process's runs are stopped).
        """
        stops = list(self._stops.get(conversation_key, ()))
        for stop in stops:
            stop.set()
        await self.store.stops.request(conversation_key)
        return len(stops)

    async def _answer(
        self, inbound: Inbound, cancel: asyncio.Event | None, progress: Progress | None = None
    ) -> Reply | None:
        where = Where.of(inbound)
        readers = where.readers or asker_audience(inbound.user)
        key = inbound.conversation_key
        history = [] if inbound.starts_thread else await self.store.threads.load_history(key, readers.may_read)
        if not history:
            await self.store.threads.remember_place(_place(inbound))
        if self.admission is not None and not await self.admission.users.allow(_user_key(inbound)):
            return await self._refuse(inbound, where, "rate_limited", self.admission.users.refusal())
        if asks_for_human(inbound.text):
            return await self._hand_over(inbound, where)
        state = _first_state(inbound, history, readers)
        # Attached files are not read: said in the thread just before the answer, committed with it.
        note = files_not_read(inbound.files, question=True) if inbound.files else None
        also = text_post("notice", note, where, _item()) if note else []
        if self.admission is None:
            return await self._run(state, where, cancel, also=also, progress=progress)
        on_queued = (lambda ahead: tell(progress, queued_text(ahead))) if progress is not None else None
        async with self.admission.slots.slot(on_queued) as turn:
            if not turn.admitted:
                return await self._refuse(inbound, where, "busy", busy_text(turn.waited_s))
            if self.inflight.past_grace:  # its turn came too late to run: the next process answers it whole
                raise LeftForLater(f"{inbound.event_id} waited for a slot past the shutdown grace period")
            if turn.queued:
                await tell(progress, WORKING)  # its status line said "Queued" until now
            return await self._run(state, where, cancel, also=also, progress=progress)

    async def _refuse(self, inbound: Inbound, where: Where, reason: RefusalReason, text: str) -> Reply | None:
        """A reply without a run: nothing stored but the reply, the person asks again later."""
        log.info("%s: no run for %s's message (%s)", reason, inbound.user.id, inbound.event_id)
        self.metrics.refused.labels(reason=reason, platform=inbound.platform).inc()
        reply_id = f"{reason}_{uuid.uuid4().hex[:12]}"
        reply = Reply(reply_id, TerminationReason.ANSWERED, Answer(text), inbound.conversation_key, refused=reason)
        committed = await self.outcomes.commit(posts=reply_posts(reply, where, _item()))
        return reply if committed else None

    async def _hand_over(self, inbound: Inbound, where: Where) -> Reply | None:
        """A typed request for a person: open the case at once, no model run."""
        if not await self.outcomes.still_held():
            return None
        key = inbound.conversation_key
        case = await self.request_handoff(key, inbound.user, link=inbound.link, question=inbound.text)
        text = case.user_reply()
        reply = Reply(case.case_id, TerminationReason.ANSWERED, Answer(text), key)
        exchange = self.redactor.value([{"role": "user", "content": inbound.text}, _said(text)])
        readers = where.readers or asker_audience(inbound.user)
        history = (key, exchange, readers.groups)
        committed = await self.outcomes.commit(history=history, posts=reply_posts(reply, where, _item()))
        return reply if committed else None

    # -- a run --------------------------------------------------------------------------------------

    async def _run(
        self,
        state: RunState,
        where: Where,
        cancel: asyncio.Event | None,
        decided: DecidedWrite | None = None,
        also: Sequence[NewPost] = (),
        progress: Progress | None = None,
    ) -> Reply | None:
        context = log_context(run_id=state.run_id, conversation=state.conversation_key, platform=where.platform)
        started = utcnow()
        with context, self.inflight.track(state.run_id, cancel) as stop, self._stoppable(state.conversation_key, stop):
            elsewhere = await self._stop_check(state.conversation_key, stop)
            deps = replace(self.deps, progress=progress or self.deps.progress, stopped_elsewhere=elsewhere)
            self.metrics.in_flight.inc()
            try:
                result = await run_agent(deps, state, stop, decided)
                log.info("run %s ended: %s", result.run_id, result.reason.value)
                private = await self._private_part(result, where, stop, elsewhere)
                if private is not None and result.reason is TerminationReason.NOT_COVERED:
                    result = replace(result, reason=TerminationReason.ANSWERED)  # covered: for the asker, privately
                reply = await self._conclude(result, where, started, also, private, resumed=decided is not None)
            finally:
                self.metrics.in_flight.dec()
        spent = state.spent
        self.metrics.observe_run(
            where.platform, result.reason.value, spent.steps, spent.tokens, spent.cost_usd, result.trace.steps
        )
        return reply

    @contextmanager
    def _stoppable(self, conversation_key: str, stop: asyncio.Event) -> Iterator[None]:
        """While the run lasts, ``stop(conversation_key)`` reaches it."""
        self._stops.setdefault(conversation_key, set()).add(stop)
        try:
            yield
        finally:
            running = self._stops.get(conversation_key, set())
            running.discard(stop)
            if not running:
                self._stops.pop(conversation_key, None)

    async def _stop_check(self, conversation_key: str, stop: asyncio.Event) -> StopCheck | None:
        """How the run hears a Stop pressed on another replica: the conversation's stop mark, read now and
        after each model call; a mark that differs from this one is a stop since, and sets ``stop`` as here.

        None when the store cannot be read now: the run goes on, reached only by a stop in this process.
        """
        try:
            begun = await self.store.stops.mark(conversation_key)
        except Exception:  # one read more per run must not fail a run the store may still record
            log.warning("stop requests unreadable: only a stop here reaches this run", exc_info=True)
            return None

        async def stopped_elsewhere() -> bool:
            if stop.is_set():
                return True
            try:
                now = await self.store.stops.mark(conversation_key)
            except Exception:  # a database blip must not end a run that can still answer
                log.warning("stop requests unreadable this turn: the run goes on", exc_info=True)
                return False
            if now is None or now == begun:  # None: nobody stopped it, or a prune forgot an old stop
                return False
            log.info("stop pressed on another replica: the run is cancelled")
            stop.set()  # from here the run is stopped as if it had been pressed here
            return True

        return stopped_elsewhere

    async def _private_part(
        self, public: RunResult, where: Where, cancel: asyncio.Event, stopped_elsewhere: StopCheck | None = None
    ) -> RunResult | None:
        """What only the asker may read, answered apart: None when the thread's answer is all there is.

        In a shared place the reply is built from what everyone there may read. When the asker may
        read more, the same question runs again with the asker's groups and no tool with a side
        effect; if that answer cites a document the place may not read, it is the private part.
        """
        readers, asker = where.readers, where.asker
        if readers is None or asker is None or not isinstance(public.outcome, Answer):
            return None
        first = public.state
        state = RunState(
            run_id=_new_run_id(),
            user=first.user,
            conversation_key=first.conversation_key,
            messages=[dict(message) for message in first.messages[: first.question_index + 1]],
            question_index=first.question_index,
            audience=asker.groups,
        )
        deps = replace(self.deps, tools=self.deps.tools.reading_only(), stopped_elsewhere=stopped_elsewhere)
        private = await run_agent(deps, state, cancel)
        outcome = private.outcome
        if not isinstance(outcome, Answer):  # the thread's answer stands; the asker is not told of a part
            log.warning(
                "run %s: the private part for %s ended %s; only the thread's answer is sent",
                private.run_id,
                asker.label(),
                private.reason.value,
            )
            return None
        if all(readers.can_see(c.audience) for c in outcome.citations):
            log.info("run %s: nothing restricted answers it for %s", private.run_id, asker.label())
            return None
        log.info(
            "run %s: the part only %s may read goes privately (run %s)", public.run_id, asker.label(), private.run_id
        )
        return private

    async def _conclude(
        self,
        result: RunResult,
        where: Where,
        started: datetime,
        also: Sequence[NewPost],
        private: RunResult | None = None,
        *,
        resumed: bool = False,
    ) -> Reply | None:
        """Store the run with what the user sees (one fenced transaction), then send it. A ``resumed`` run (after
        a card's decision) adds only its answer to the thread: the card's run already kept the question."""
        state, spent = result.state, result.state.spent
        run = self._record(result, where, started)
        reply = Reply(
            result.run_id, result.reason, Answer(""), state.conversation_key, spent.steps, spent.tokens, spent.cost_usd
        )
        outcome = result.outcome
        if isinstance(outcome, ProposedWrite):
            return await self._propose(result, outcome, reply, where, run, also, asked=not resumed)
        if isinstance(outcome, GaveUp):
            if not await self.outcomes.still_held():
                log.warning("run %s: its inbox item was taken over; no case, no reply", result.run_id)
                return None
            outcome = await self._give_up(result, outcome, where.link, run)
        private_runs, private_posts = [], []
        if private is not None and isinstance(outcome, Answer) and isinstance(private.outcome, Answer):
            outcome = replace(outcome, text=f"{outcome.text}\n\n{_private_note(where)}")
            sent = self._record(private, where, started, place="private")
            if where.private_channel:
                sent = replace(sent, exchange=self._exchange(private.state, private.outcome.text))
                private_posts = text_post(
                    "direct", private.outcome.text, where, _item(), run_id=private.run_id, reason=PRIVATE_PART
                )
            private_runs.append(sent)
        reply = replace(reply, outcome=outcome)
        # Thread history keeps questions and what the user was shown (tool traffic lives in the trace), on
        # the run's own row: one INSERT, never a read-modify-write, so concurrent runs all stay.
        run = replace(run, exchange=self._exchange(state, outcome.text, asked=not resumed))
        posts = [*also, *reply_posts(reply, where, _item()), *private_posts]
        committed = await self.outcomes.commit(run=run, also_runs=private_runs, posts=posts)
        return reply if committed else None

    def _exchange(self, state: RunState, answer: str, *, asked: bool = True) -> list[Message]:
        """What the thread's history keeps of a run: the question (unless an earlier run of it kept it) and the
        answer, redacted like traces."""
        said = ([{"role": "user", "content": state.question}] if asked else []) + ([_said(answer)] if answer else [])
        exchange: list[Message] = self.redactor.value(said)
        return exchange

    async def _propose(
        self,
        result: RunResult,
        write: ProposedWrite,
        reply: Reply,
        where: Where,
        run: RunRecord,
        also: Sequence[NewPost],
        *,
        asked: bool = True,
    ) -> Reply | None:
        """A write the model asked for: frozen as a pending action, and its card, committed with the run. The
        thread keeps the question and what the card says, so a message sent while the card is open reads
        as part of the conversation ("what do I do now?")."""
        state = result.state
        text = str(state.messages[-1].get("content") or "")
        run = replace(run, exchange=self._exchange(state, text, asked=asked))
        proposed: list[Reply] = []

        async def propose(tx: Any) -> None:
            action = await self.pending.propose(
                run_id=state.run_id,
                conversation_key=state.conversation_key,
                requester=state.user.id,
                tool=write.tool.name,
                call_id=write.call.id,
                arguments=write.arguments,
                text=text,
                run_state=state.to_dict(),
                conn=tx,
            )
            proposed.append(replace(reply, outcome=Pending(text=text, action=action)))

        def posts() -> list[NewPost]:
            return [*also, *reply_posts(proposed[0], where, _item())]

        committed = await self.outcomes.commit(run=run, before_posts=propose, posts=posts)
        return proposed[0] if committed else None

    async def _give_up(self, result: RunResult, outcome: GaveUp, link: str | None, run: RunRecord) -> GaveUp:
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
            current_run=run.as_row(),
        )
        return replace(outcome, text=case.user_reply(), transcript=case.to_json(), case_id=case.case_id)

    def _record(self, result: RunResult, where: Where, started: datetime, place: str | None = None) -> RunRecord:
        spent = result.state.spent
        shared = where.readers is not None and not where.readers.private
        cited = result.outcome.citations if isinstance(result.outcome, Answer) else ()
        steps = result.trace.step_dicts()
        return RunRecord(
            id=result.run_id,
            conversation_key=result.state.conversation_key,
            platform=where.platform,
            user_id=result.state.user.id,
            question=self.redactor.text(where.question),
            reason=result.reason.value,
            started_at=started,
            steps=spent.steps,
            input_tokens=spent.input_tokens,
            output_tokens=spent.output_tokens,
            cost_usd=spent.cost_usd,
            latency_ms=result.trace.latency_ms,
            model=self.deps.model.name,
            trace=self.redactor.value(steps),
            owner=PROCESS_OWNER,
            audience=list(result.state.reading_groups),
            place=place or ("shared" if shared else "private"),
            citations=[{"title": c.title, "heading": c.heading, "source": c.source} for c in cited],
            guards=",".join(sorted({step["guard"] for step in steps if step.get("guard")})),
        )

    # -- Confirm and Cancel -------------------------------------------------------------------------

    async def click(
        self,
        pending_id: str,
        actor: UserRef,
        decision: Choice,
        args_hash: str,
        *,
        address: Address,
        who: Who = str,
        show: Show | None = None,
        card: ClickedCard | None = None,
        place: PlaceNow | None = None,
    ) -> DecisionReply:
        """A click on a card, for every platform: decided exactly once, the card and the reply through the outbox.

        ``show`` puts a card state up at once where the clicker sees it (buttons off while the decision
        runs, then the call's result while the model writes); the outbox makes the final card stick.
        A click that is refused or lost gets ``notice`` (privately) and the card as it stands. ``card``
        is the card the click came from: a click from another card than the action's own is refused,
        and then no card is shown (the clicked one belongs to another action). ``place``: who reads
        the card's place now; in a shared place the run goes on for them (its members read again after
        the decision), not for those there when the card was proposed. None: for those.
        """
        return await self._decided(
            pending_id, actor, decision, args_hash, address=address, who=who, show=show, card=card, place=place
        )

    async def decide(
        self,
        pending_id: str,
        actor: UserRef,
        decision: Choice,
        args_hash: str,
        on_result: Callable[[DecisionReply], Awaitable[None]] | None = None,
    ) -> DecisionReply:
        """A decision from the terminal: the same exactly-once decision, rendered by the caller.

        ``on_result`` hears the call's result before the model continues.
        """
        return await self._decided(pending_id, actor, decision, args_hash, on_result=on_result)

    async def _decided(
        self,
        pending_id: str,
        actor: UserRef,
        decision: Choice,
        args_hash: str,
        *,
        address: Address | None = None,
        who: Who = str,
        show: Show | None = None,
        on_result: Callable[[DecisionReply], Awaitable[None]] | None = None,
        card: ClickedCard | None = None,
        place: PlaceNow | None = None,
    ) -> DecisionReply:
        lease = current_lease()
        item = lease.item_id if lease else None
        verdict = await self.pending.decide(pending_id, actor.id, decision, args_hash, item_id=item, card=card)
        record = verdict.action
        if verdict.status not in ("confirmed", "cancelled") or record is None:
            if lease is not None and lease.attempt > 1 and _decided_by(verdict, actor, lease.item_id):
                return await self._resume(verdict, actor, address, place)  # this very click, before a crash
            return await self._refused(verdict, decision, address, who)
        where = _click_where(record, decision, address)
        if show is not None:
            await _quietly(show(CardView.of(record).working(actor.id, utcnow(), decision)), record.id)
        watch = Stopwatch()
        cancelled: tuple[dict[str, Any], PendingState] = (CANCELLED_BY_USER, "cancelled")
        result, state = await self._execute(record, actor) if verdict.confirmed else cancelled
        took_ms = watch.ms()
        case = None
        if verdict.confirmed and state != "done":
            case = await self._action_case(
                record, actor, TICKET_FAILED if state == "failed" else ACTION_UNKNOWN, str(result.get("error", ""))
            )
            result = {**result, "case_id": case.case_id, "handoff": case.message}
        view = CardView.of(replace(record, state=state, result=result), case_id=case.case_id if case else None)
        if on_result is not None:
            await _report(on_result, DecisionReply(verdict, result, case=case, card=view))
        shown = show is not None and await _quietly(show(view), record.id)
        card_rows = [] if shown else card_post(view, record.platform_message, where, _item())
        reply = await self._continue(record, actor, decision, result, took_ms, where, card_rows, place)
        return DecisionReply(verdict, result, reply, case, card=view)

    async def _continue(
        self,
        record: PendingRecord,
        actor: UserRef,
        decision: Choice,
        result: dict[str, Any],
        took_ms: float,
        where: Where,
        also: Sequence[NewPost],
        place: PlaceNow | None = None,
    ) -> Reply | None:
        """The run the card interrupted, resumed with the call's result (or "cancelled by user"), for the
        readers its shared place has now."""
        try:
            state = RunState.from_dict(record.run_state)
        except StateVersionError as exc:
            log.error("pending %s: %s", record.id, exc)
            await self.outcomes.commit(posts=also)
            return None
        state.run_id = _new_run_id()
        if place is not None and place.shared:
            readers = await place.audience(actor)
            state = _for_readers(state, readers)
            where = replace(where, readers=readers)
        state.resume_with(record.call_id, _json(result))
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
        return await self._run(state, where, None, decided=decided, also=also)

    async def _resume(
        self, verdict: Decision, actor: UserRef, address: Address | None, place: PlaceNow | None
    ) -> DecisionReply:
        """A click delivered again after a crash: its decision stands; the run it interrupted goes on.

        Still executing, or unknown, is the sweeper's (the call may have happened): nothing runs here.
        """
        record = verdict.action
        if record is None or record.state not in ("done", "failed", "cancelled"):
            return DecisionReply(verdict)
        decision: Choice = "cancel" if record.state == "cancelled" else "confirm"
        result = record.result or CANCELLED_BY_USER
        log.warning("pending %s: the click's work was cut short; resuming its run", record.id)
        view = CardView.of(record)
        where = _click_where(record, decision, address)
        rows = card_post(view, record.platform_message, where, _item())
        reply = await self._continue(record, actor, decision, result, 0.0, where, rows, place)
        return DecisionReply(verdict, result, reply, card=view)

    async def _refused(self, verdict: Decision, decision: Choice, address: Address | None, who: Who) -> DecisionReply:
        """A click that did not decide: the clicker is told why, privately; the card shows what stands."""
        notice = click_notice(verdict, who, decision)
        record = verdict.action
        view = CardView.of(record) if record is not None and verdict.status != "wrong_card" else None
        if address is None:
            return DecisionReply(verdict, card=view, notice=notice)
        where = Where(address.platform, record.conversation_key if record else "", "", None, address)
        posts = text_post("private", notice, where, _item())
        # The card as it stands, where a stale card may show something else: never for someone else's
        # click on an open card (nothing changed), never while executing (the winning click shows it).
        stale = verdict.status in ("hash_mismatch", "expired", "already_decided")
        if record is not None and view is not None and stale and record.state != "executing":
            posts += card_post(view, record.platform_message, where, _item())
        await self.outcomes.commit(posts=posts)
        return DecisionReply(verdict, card=view, notice=notice)

    async def _execute(self, record: PendingRecord, actor: UserRef) -> tuple[dict[str, Any], PendingState]:
        tool = self.deps.tools.get(record.tool)
        context = ToolContext(actor, record.run_id, record.conversation_key, idempotency_key=record.id)
        ok, result = await execute_confirmed(tool, record.arguments, context)
        state: PendingState = "done" if ok and "error" not in result else "failed"
        if result.get("status") == "unknown":  # the request reached the system, and no answer came back
            state = "unknown"
        await self.pending.finish(record.id, state=state, result=result)
        return result, state

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

    # -- replies without a run ----------------------------------------------------------------------

    async def notice(
        self, address: Address, text: str, *, conversation_key: str = "", case_id: str | None = None
    ) -> bool:
        """A message in the thread that needs no run (a hint, a welcome, a case id), through the outbox."""
        where = Where(address.platform, conversation_key, "", None, address)
        return await self.outcomes.commit(posts=text_post("notice", text, where, _item(), case_id=case_id))

    async def note(self, address: Address, text: str, *, conversation_key: str = "") -> bool:
        """A note only ``address.user`` sees (thanks for feedback), through the outbox."""
        where = Where(address.platform, conversation_key, "", None, address)
        return await self.outcomes.commit(posts=text_post("private", text, where, _item()))

    async def request_handoff(
        self,
        conversation_key: str,
        user: UserRef,
        *,
        link: str | None = None,
        question: str | None = None,
        run_id: str | None = None,
    ) -> HandoffCase:
        """Open a case for a person who asked for one ("Still need help?", "I want a human").

        One case per answer: asking twice after the same run returns the same case. ``run_id`` is the
        answer whose button was clicked: in a thread of several answers, that one is the case's
        question, not the newest (a run of another conversation is ignored: the button's value is
        the client's to send).
        """
        clicked = await self.store.runs.get(run_id) if run_id else None
        if clicked is not None and clicked.conversation_key == conversation_key:
            latest: RunRow | None = clicked
        else:
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

    async def feedback(
        self, run_id: str, value: Literal["helpful", "not_helpful"], user_id: str, comment: str = ""
    ) -> bool:
        """Store ``user_id``'s rating of a run, replacing only their own earlier one (anyone who sees an answer
        in a shared place may rate it); a comment is redacted (people paste tokens) and bounded."""
        said = bounded(self.redactor.text(comment.strip()), FEEDBACK_COMMENT_CHARS) if comment.strip() else None
        return await self.store.runs.set_feedback(run_id, value, user_id, said)

    async def run_of_post(self, platform: str, conversation_key: str, message_id: str) -> str | None:
        """The run whose reply a platform posted as ``message_id``: native feedback (Teams' thumbs) names
        only the message it is on. None for a message that is no run's answer."""
        row = await self.store.outbox.posted_as(conversation_key, post_destination(platform), message_id)
        post = Post.from_json(row.payload or {}) if row is not None else None
        return post.run_id if post is not None and post.kind == "reply" and post.from_a_run else None

    # -- recovery (the sweeper) ---------------------------------------------------------------------

    async def recover(
        self, dead: Sequence[str] = (), older_than: timedelta = STALE_EXECUTING
    ) -> list[tuple[PendingRecord, HandoffCase]]:
        """Actions left executing by a dead process are never re-run: marked unknown, a person checks.

        ``dead``: processes known gone (their heartbeat stopped, or their pid is gone): their actions
        turn unknown at once; without an executor, after ``older_than``. Each gets a case, the card says
        so and the requester is told in the thread. An action whose case could not be opened stays
        unknown without one; a later pass claims it and tries again. Each is returned once.
        """
        stale = [
            *await self.pending.mark_dead_executing_unknown(dead),
            *await self.pending.mark_stale_executing_unknown(older_than),
        ]
        now = utcnow()
        caseless = await self.store.pending.claim_caseless_unknown(now - CASE_RETRY_AFTER, now)
        recovered = []
        for record in [*stale, *caseless]:
            if (case := await self._unknown_case(record)) is not None:
                await self._tell_unknown(record, case)
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

    async def _tell_unknown(self, record: PendingRecord, case: HandoffCase) -> None:
        """The card says it is not known whether the call happened (with the case); the requester hears it."""
        where = await self._where_of(record.conversation_key, record.requester)
        view = CardView.of(replace(record, state="unknown"), case_id=case.case_id)
        posts = [
            *card_post(view, record.platform_message, where, None),
            *text_post("notice", case.user_reply(), where, None, run_id=record.run_id, case_id=case.case_id),
        ]
        try:
            await self.outcomes.commit(posts=posts)
        except Exception:
            log.exception("pending %s: telling the requester failed", record.id)

    async def card_posted(self, pending_id: str, where: dict[str, Any]) -> None:
        """Where a platform posted a card (its sender says): later states update that message."""
        await self.pending.set_platform_message(pending_id, where)

    async def card_expired(self, record: PendingRecord) -> None:
        """An expired action's card says so (the sweeper expires them)."""
        where = await self._where_of(record.conversation_key, record.requester)
        await self.outcomes.commit(posts=card_post(CardView.of(record), record.platform_message, where, None))

    async def tell(self, conversation_key: str, text: str, *, run_id: str | None, case_id: str | None) -> bool:
        """Post in a conversation's thread outside any request (a run recovered from a dead process)."""
        where = await self._where_of(conversation_key, "")
        if where.address is None:
            log.warning("no way to post on %s: %s was not told: %s", where.platform, conversation_key, text)
            return False
        return await self.outcomes.commit(posts=text_post("notice", text, where, None, run_id=run_id, case_id=case_id))

    async def card_not_shown(self, pending_id: str) -> HandoffCase | None:
        """A confirmation card the platform would not take: withdraw the action and open a case.

        Nobody can decide a card they never saw, and the run is waiting on it: without this the
        request would sit unseen until it expired. The case hands the conversation, with the
        proposed call, to a person. None when the action was decided or gone meanwhile.
        """
        record = await self.pending.withdraw(pending_id)
        if record is None:
            return None
        log.error(
            "pending %s (%s for %s): its card could not be posted; withdrawn and handed to the helpdesk",
            record.id,
            record.tool,
            record.requester,
        )
        detail = f"The confirmation card for {record.tool} could not be posted; nothing was done."
        return await self._action_case(record, UserRef(record.requester), CARD_NOT_SHOWN, detail)

    async def _undeliverable(self, row: DeliveryRecord, error: str) -> None:
        """A platform write the outbox gave up on: a person follows up, and the user is told another way."""
        post = Post.from_json(row.payload or {})
        if post.kind in ("card", "private", "direct"):
            return  # a card update or a note lost is logged by the outbox; a case for it would be noise
        key = row.conversation_key or ""
        if post.kind == "notice" and post.reason == REPLY_NOT_DELIVERED:  # the thread is out of reach: the person
            if post.address.user:
                direct = Post("direct", post.address, text=post.text, case_id=post.case_id, reason=error)
                await self.outcomes.commit(posts=[NewPost(row.destination, direct.to_json(), key, None)])
            return
        outcome = post.reply_outcome() if post.kind == "reply" else None
        if isinstance(outcome, Pending):
            case = await self.card_not_shown(outcome.action.id)
        else:
            case = await self.helpdesk.open_case(
                origin=f"undelivered:{row.id}",
                reason=REPLY_NOT_DELIVERED,
                user=UserRef(post.address.user, post.address.user_name),
                conversation_key=key,
                question=post.text or "",
                run_id=post.run_id,
                detail=f"The reply could not be posted: {error}",
            )
        if case is not None:  # said in the thread if the thread takes it, else to the person directly
            notice = Post(
                "notice", post.address, text=case.user_reply(), case_id=case.case_id, reason=REPLY_NOT_DELIVERED
            )
            await self.outcomes.commit(posts=[NewPost(row.destination, notice.to_json(), key, None)])

    async def _where_of(self, conversation_key: str, user: str) -> Where:
        place = await self.store.threads.get_place(conversation_key) or Place.from_key(conversation_key)
        address = None
        if self.outbox.delivers(post_destination(place.platform)):
            address = Address(place.platform, place.channel, place.thread, place.address, user)
        return Where(place.platform, conversation_key, "", place.link, address)

    async def close(self) -> None:
        """Release the model client, the index, backends and destinations, then the database."""
        for resource in (self.deps.model, self.searcher, *self._resources):
            closer = getattr(resource, "aclose", None)
            if closer is not None:
                await closer()
        await self.store.close()


def _item() -> str | None:
    lease = current_lease()
    return lease.item_id if lease else None


def _decided_by(verdict: Decision, actor: UserRef, item_id: str) -> bool:
    """Did this very click (its inbox item, not merely its clicker) decide the action?"""
    record = verdict.action
    return (
        verdict.status == "already_decided"
        and record is not None
        and record.decider == actor.id
        and record.decided_item == item_id
    )


def _click_where(record: PendingRecord, decision: Choice, address: Address | None) -> Where:
    platform = address.platform if address else record.conversation_key.partition(":")[0]
    return Where(platform, record.conversation_key, f"({decision} {record.tool})", None, address)


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


async def _quietly(work: Awaitable[None], pending_id: str) -> bool:
    """Show a card state now; a failure is logged (the outbox row makes the final state stick)."""
    try:
        await work
    except Exception:
        log.exception("pending %s: showing the card failed; the outbox will", pending_id)
        return False
    return True


async def _report(on_result: Callable[[DecisionReply], Awaitable[None]], early: DecisionReply) -> None:
    """Tell the caller the call's result; a failed report must not lose the model's reply."""
    try:
        await on_result(early)
    except Exception:
        action = early.decision.action
        log.exception("pending %s: reporting the result failed; the run continues", action.id if action else "?")


def _first_state(inbound: Inbound, history: list[Message], readers: Audience) -> RunState:
    """A new run's state: the system prompt, the thread so far (what its readers may read), the question."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, *thread_context(history, inbound.text)]
    return RunState(
        run_id=_new_run_id(),
        user=inbound.user,
        conversation_key=inbound.conversation_key,
        messages=messages,
        question_index=len(messages) - 1,
        audience=readers.groups,
    )


def _for_readers(state: RunState, readers: Audience) -> RunState:
    """A saved run, for the readers its place has at the click.

    When they may read all it was built for, only its audience changes. When someone has joined who
    may not, what the run read before the card (thread history, search results, a summary of them)
    is not theirs to read: it goes on from the question and the decided call alone, searching again
    if it must. The card's own text stays: it is already in the place.
    """
    if readers.may_read(state.reading_groups) or state.pending_turn is None:
        state.audience = readers.groups
        return state
    log.info(
        "run %s: its place's readers changed (now %s); it goes on without what it read before",
        state.run_id,
        readers.label(),
    )
    state.restart_from_decision(readers.groups, lambda source: readers.can_see(source.audience))
    return state


def _private_note(where: Where) -> str:
    if where.private_channel:
        return PRIVATE_PART_SENT
    return PRIVATE_PART_ASK


PRIVATE_PART_SENT = "Part of the answer comes from documents not everyone here may read: I've sent it to you privately."
PRIVATE_PART_ASK = (
    "Part of the answer comes from documents not everyone here may read: ask me in a personal chat to see it."
)
