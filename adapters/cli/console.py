"""The terminal chat: the embedded default, so a new user sees a whole run without Slack or Teams."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal, TextIO

from adapters.cli.prompting import INTERRUPTED, read_line
from adapters.cli.terminal_service import TerminalService
from adapters.destinations import destinations
from bot.cards import when
from bot.config import Settings
from bot.delivery import DeliveryResult
from bot.helpdesk import case_number
from bot.service import DecisionReply, PolicyPal, Reply
from bot.store import utcnow
from bot.types import Answer, GaveUp, Inbound, Pending, UserRef
from bot.wiring import SAMPLE_POLICIES, open_service
from retrieval import IndexMissingError, PolicyIndexError

Decide = Literal["confirm", "cancel"] | None
HANDED_OVER = 3  # the exit code when the person was handed to the helpdesk rather than helped
DELIVERY_WAIT_S = 10.0  # the terminal waits this long for the helpdesk; failures stay in the outbox


def inbound(text: str, user: UserRef, thread: str) -> Inbound:
    return Inbound(
        platform="console", channel="terminal", thread=thread, user=user, text=text, event_id=uuid.uuid4().hex
    )


async def ask(
    service: TerminalService,
    question: str,
    user: UserRef,
    *,
    answer_pending: Decide = None,
    as_json: bool = False,
    prompt: Callable[[str], str] | None = input,
    out: TextIO = sys.stdout,
) -> int:
    """One question; a pending ticket is confirmed or cancelled by flag, by prompt (not with --json), or left open."""
    reply = await service.handle_message(inbound(question, user, uuid.uuid4().hex[:12]))
    assert reply is not None  # a fresh event id is never a duplicate
    decided: DecisionReply | None = None
    interrupted = False
    if isinstance(reply.outcome, Pending):
        if not as_json:
            out.write(render(reply) + "\n")
        try:  # --json never prompts: stdout holds only the object, and a script is never left waiting
            choice = answer_pending or (None if as_json else _prompt_choice(prompt))
        except KeyboardInterrupt:  # Ctrl-C at the prompt: neither confirmed nor cancelled
            choice, interrupted = None, True
        if choice is not None:
            decided = await decide(service, reply.outcome, user, choice)
        elif not as_json:  # no terminal, input ended, or Ctrl-C: say how to decide, or it looks done
            out.write(_left_open(reply.outcome) + "\n")
    if as_json:
        out.write(json.dumps(outcome_json(reply, decided), indent=2, ensure_ascii=False) + "\n")
    elif decided is not None:
        out.write(render_decision(decided) + "\n")
    elif not isinstance(reply.outcome, Pending):
        out.write(render(reply) + "\n")
    await deliver_cases(service, reply, decided, out=None if as_json else out)
    if interrupted:
        return INTERRUPTED
    final = decided.reply if decided and decided.reply else reply
    if isinstance(final.outcome, Answer | Pending) and not _failed_call(decided):
        return 0
    return HANDED_OVER


async def decide(service: TerminalService, pending: Pending, user: UserRef, choice: str) -> DecisionReply:
    action = pending.action
    return await service.decide(action.id, user, choice, action.args_hash)  # type: ignore[arg-type]


async def chat(
    service: TerminalService, user: UserRef, *, read: Callable[[str], str] = input, out: TextIO = sys.stdout
) -> int:
    """A conversation in one thread: follow-ups see the earlier questions and answers."""
    thread = uuid.uuid4().hex[:12]
    out.write("PolicyPal: ask about company policies. Empty line or Ctrl-D to quit.\n")
    while True:
        try:
            question = read_line(read, "you> ").strip()
        except EOFError:
            return 0
        except KeyboardInterrupt:
            out.write("\n")
            return INTERRUPTED
        if not question:
            return 0
        reply = await service.handle_message(inbound(question, user, thread))
        assert reply is not None
        out.write(render(reply) + "\n")
        decided = None
        if isinstance(reply.outcome, Pending):
            try:
                choice = _read_choice(read)  # the next line, from wherever the questions come (a pipe too)
            except KeyboardInterrupt:  # the action stays open, and the terminal says how to decide it
                out.write(_left_open(reply.outcome) + "\n")
                return INTERRUPTED
            if choice is None:
                out.write(_left_open(reply.outcome) + "\n")
            else:
                decided = await decide(service, reply.outcome, user, choice)
                out.write(render_decision(decided) + "\n")
        await deliver_cases(service, reply, decided, out=out)


async def deliver_cases(
    service: TerminalService, reply: Reply, decided: DecisionReply | None, *, out: TextIO | None
) -> None:
    """Deliver the helpdesk cases this exchange opened, waiting a bounded time; failures stay queued."""
    for case_id in _case_ids(reply, decided):
        results = await service.outbox.run_once(case_number(case_id), timeout_s=DELIVERY_WAIT_S)
        if out is None:
            continue
        for result in results:
            out.write(_delivery_line(case_id, result) + "\n")


def _delivery_line(case_id: str, result: DeliveryResult) -> str:
    if result.status == "delivered":
        return f"({case_id} sent to the helpdesk via {result.destination})"
    if result.status == "retrying":
        return f"({case_id} not yet sent via {result.destination}: {result.detail}; it stays queued)"
    return f"({case_id} could not be sent via {result.destination}: {result.detail}; see policypal handoffs --failed)"


def _case_ids(reply: Reply, decided: DecisionReply | None) -> list[str]:
    replies = [reply, *([decided.reply] if decided and decided.reply else [])]
    found = [r.outcome.case_id for r in replies if isinstance(r.outcome, GaveUp) and r.outcome.case_id]
    found += [r.run_id for r in replies if case_number(r.run_id) is not None]  # a typed request for a human
    if decided is not None and decided.case is not None:
        found.append(decided.case.case_id)
    return list(dict.fromkeys(found))


def _failed_call(decided: DecisionReply | None) -> bool:
    """The confirmed call failed or may not have happened: a case was opened, though the continued
    run's reply ("Sorry, I couldn't raise the ticket ...") is an Answer, so a script must not read success."""
    return decided is not None and decided.case is not None


def _left_open(pending: Pending) -> str:
    action = pending.action
    return (
        f"Left open: action {action.id} is still pending; decide it later with "
        f"`policypal decide {action.id} confirm` or `cancel` (a script can ask with --yes or --no)."
    )


def _prompt_choice(prompt: Callable[[str], str] | None) -> Decide:
    """`ask` prompts only on a terminal: a script is never left waiting (it passes --yes or --no)."""
    if prompt is None or (not sys.stdin.isatty() and prompt is input):
        return None
    return _read_choice(prompt)


def _read_choice(prompt: Callable[[str], str]) -> Decide:
    """Confirm on y or yes, cancel on anything else; None (left open) when the input has ended.

    Ctrl-C raises KeyboardInterrupt at once (not at the next Enter), so the caller leaves the action open.
    """
    try:
        answer = read_line(prompt, "Confirm? [y/N] ").strip().lower()
    except KeyboardInterrupt:
        sys.stdout.write("\n")  # end the prompt's line (input() wrote it there): what follows starts afresh
        raise
    except EOFError:
        sys.stdout.write("\n")
        return None
    return "confirm" if answer in ("y", "yes") else "cancel"


def render(reply: Reply) -> str:
    outcome = reply.outcome
    if isinstance(outcome, Answer):
        body = outcome.text
        if outcome.citations:
            sources = "\n".join(f"  - {c.title} › {c.heading} ({c.source})" for c in outcome.citations)
            body += "\n\nSources:\n" + sources
    elif isinstance(outcome, Pending):
        body = render_card(outcome)
    else:
        body = f"{outcome.text}\n(reference: {reply.run_id}, reason: {outcome.reason})"
    return body


def render_card(pending: Pending) -> str:
    action = pending.action
    fields = "\n".join(f"│ {name:<9} {action.arguments.get(name, '')}" for name in ("category", "summary", "urgency"))
    lines = [f"┌ {action.tool}: needs your confirmation", f"│ {pending.text}" if pending.text else "│", fields]
    lines.append(f"└ pending {action.id} · expires {when(action.expires_at)}")
    return "\n".join(lines)


def render_decision(decided: DecisionReply) -> str:
    parts = [decided.decision.message] if decided.decision.message else []
    if decided.result is not None:
        parts.append(_result_line(decided.result))
    if decided.reply is not None:
        parts.append(render(decided.reply))
    return "\n".join(parts)


def _result_line(result: dict[str, Any]) -> str:
    if "ticket_id" in result:
        link = f" ({result['url']})" if result.get("url") else ""
        return f"Ticket {result['ticket_id']} created{link}."
    if result.get("status") == "cancelled":
        return "Cancelled: no ticket was raised."
    handoff = f" {result['handoff']}" if result.get("handoff") else ""
    return f"The action failed: {result.get('error', result)}{handoff}"


def outcome_json(reply: Reply, decided: DecisionReply | None = None) -> dict[str, Any]:
    """One object for scripts: the first run, the pending action and, if decided, the continued run."""
    final = decided.reply if decided and decided.reply else reply
    data: dict[str, Any] = {"run_id": reply.run_id, **_outcome_fields(final)}
    if isinstance(reply.outcome, Pending):
        action = reply.outcome.action
        data["pending"] = {
            "id": action.id,
            "tool": action.tool,
            "arguments": action.arguments,
            "args_hash": action.args_hash,
            "expires_at": action.expires_at.isoformat(),
            "state": decided.decision.status if decided else "open",
        }
    if decided is not None:
        data["decision"] = decided.status
        data["ticket"] = decided.result if decided.result and "ticket_id" in decided.result else None
        if decided.case is not None:
            data["case_id"] = decided.case.case_id
        data["final_run_id"] = final.run_id
    return data


def _outcome_fields(reply: Reply) -> dict[str, Any]:
    outcome = reply.outcome
    fields: dict[str, Any] = {
        "reason": reply.reason.value,
        "answer": None,
        "citations": [],
        "steps": reply.steps,
        "tokens": reply.tokens,
        "cost_usd": round(reply.cost_usd, 6),
    }
    if isinstance(outcome, Answer):
        fields["answer"] = outcome.text
        fields["citations"] = [{"title": c.title, "heading": c.heading, "source": c.source} for c in outcome.citations]
    elif isinstance(outcome, GaveUp):
        fields["answer"] = outcome.text
        fields["case_id"] = outcome.case_id
    return fields


async def run_terminal(settings: Settings, args: argparse.Namespace, user_id: str) -> int:
    """Entry for `policypal ask|chat|decide`: open the service on embedded defaults and run the command."""
    try:
        service = await _open_indexing_first(settings)
    except PolicyIndexError as exc:  # e.g. `policypal serve` holds the embedded index
        print(exc, file=sys.stderr)
        return 1
    try:
        await recover_unless_served(service, timedelta(seconds=settings.worker_stale_s))
        return await run_command(service, args, user_id)
    finally:
        await service.close()


async def _open_indexing_first(settings: Settings) -> PolicyPal:
    """The service; on first use (no index yet) the sample policies are indexed, then it opens.

    Opening is the check: checking for the index before opening it opened the index twice on every run.
    """
    wanted = destinations(settings)
    try:
        return await open_service(settings, destinations=wanted)
    except IndexMissingError:  # raised before anything else is opened
        ensure_sample_index(settings)
        return await open_service(settings, destinations=wanted)


async def run_command(service: TerminalService, args: argparse.Namespace, user_id: str) -> int:
    """`ask`, `chat` or `decide` on a service: this process's own, or the running server's (served.py)."""
    user, out = UserRef(id=user_id, name=user_id, groups=tuple(args.group)), sys.stdout  # stdout as it is now
    if args.command == "ask":
        choice: Decide = "confirm" if args.yes else "cancel" if args.no else None
        return await ask(service, args.question, user, answer_pending=choice, as_json=args.json, out=out)
    if args.command == "chat":
        return await chat(service, user, out=out)
    return await decide_by_id(service, args.pending_id, user, args.decision, out=out)


async def recover_unless_served(service: PolicyPal, alive_within: timedelta, out: TextIO = sys.stderr) -> int:
    """Mark actions a dead process left executing as unknown, and say so, when no server is alive.

    A live server's sweeper recovers them and tells each requester in their own chat; a terminal
    that did it instead would leave a Slack or Teams user uninformed. Returns how many it recovered.
    """
    now = utcnow()
    beats = await service.store.workers.heartbeats()
    if any(now - beat < alive_within for beat in beats.values()):  # as the sweeper judges
        return 0
    recovered = await service.recover()
    for record, case in recovered:
        out.write(f"Pending action {record.id} ({record.tool}) was interrupted: {case.user_reply()}\n")
    return len(recovered)


async def decide_by_id(
    service: TerminalService, pending_id: str, user: UserRef, choice: str, out: TextIO = sys.stdout
) -> int:
    """Decide a pending action from a later process: the card's hash comes from the stored call."""
    record = await service.pending.get(pending_id)
    if record is None:
        out.write(f"No pending action {pending_id}.\n")
        return 1
    decided = await service.decide(pending_id, user, choice, record.args_hash)  # type: ignore[arg-type]
    out.write(render_decision(decided) + "\n")
    if decided.reply is not None:
        await deliver_cases(service, decided.reply, decided, out=out)
    if decided.status not in ("confirmed", "cancelled"):
        return 1
    return HANDED_OVER if _failed_call(decided) else 0


def ensure_sample_index(settings: Settings) -> None:
    """First use on embedded defaults: index the sample policies so `ask` works at once."""
    from adapters.cli.index import index_if_missing

    index_if_missing(settings.retrieval(), SAMPLE_POLICIES)
