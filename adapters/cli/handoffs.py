"""`policypal handoffs`: list cases, print one case's transcript, show and retry failed deliveries."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TextIO

from bot.config import Settings
from bot.delivery import DeliveryResult
from bot.helpdesk import Destination, HandoffCase, case_number
from bot.store import DeliveryRecord, HandoffRecord, Store, utcnow
from bot.unicode_text import terminal_safe
from bot.wiring import helpdesk_for

DestinationFactory = Callable[[Settings], Sequence[Destination]]


async def show_handoffs(
    settings: Settings,
    case_id: str | None = None,
    *,
    limit: int = 20,
    failed: bool = False,
    retry: bool = False,
    as_json: bool = False,
    destinations: DestinationFactory | None = None,
    out: TextIO | None = None,
) -> int:
    """The command's whole job; exit code 1 for an unknown case or a retry that still failed."""
    out = out or sys.stdout  # looked up now: a default bound at import keeps a stream that may be closed
    store = await Store.open(settings.resolved_database_url)
    try:
        if retry:
            return await _retry(settings, store, case_id, destinations, as_json, out)
        if case_id:
            return await _show(store, case_id, as_json, out)
        return await _list(store, limit, failed, as_json, out)
    finally:
        await store.close()


async def _list(store: Store, limit: int, failed: bool, as_json: bool, out: TextIO) -> int:
    cases = await store.cases.recent(limit, failed_only=failed)
    by_case = _by_case(await store.outbox.deliveries([c.number for c in cases]))
    if as_json:
        rows = [_row_json(c, by_case[c.number]) for c in cases]
        out.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(terminal_safe(_table(cases, by_case, failed)))
    return 0


async def _show(store: Store, case_id: str, as_json: bool, out: TextIO) -> int:
    number = case_number(case_id)
    record = await store.cases.get(number) if number is not None else None
    if record is None:  # with --json, stdout holds JSON or nothing: a script's parser must not read this
        (sys.stderr if as_json else out).write(f"No case {case_id}.\n")
        return 1
    case = HandoffCase.from_record(record)
    deliveries = await store.outbox.deliveries([record.number])
    if as_json:
        data = {**case.to_json(), "deliveries": [_delivery_json(d) for d in deliveries]}
        out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(terminal_safe(case.to_markdown() + "\n## Deliveries\n\n" + _deliveries_text(deliveries)))
    return 0


async def _retry(
    settings: Settings,
    store: Store,
    case_id: str | None,
    factory: DestinationFactory | None,
    as_json: bool,
    out: TextIO,
) -> int:
    if case_id and not await _exists(store, case_id):  # "0 put back" would read as nothing left to retry
        (sys.stderr if as_json else out).write(f"No case {case_id}.\n")
        return 1
    destinations = list(factory(settings) if factory else [])
    try:
        outbox, _ = helpdesk_for(settings, store, destinations)
        number = case_number(case_id) if case_id else None
        reset = await outbox.retry_failed(number)
        results = await outbox.run_once(number)
    finally:
        await _close_all(destinations)
    if as_json:
        data = {"put_back": reset, "attempted": [_attempt_json(r) for r in results]}
        out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(f"{reset} failed deliveries put back in the outbox; {len(results)} attempted now.\n")
        out.write("".join(_result_line(r) for r in results))
    return 1 if any(r.status != "delivered" for r in results) else 0


async def _exists(store: Store, case_id: str) -> bool:
    number = case_number(case_id)
    return number is not None and await store.cases.get(number) is not None


async def _close_all(resources: Sequence[object]) -> None:
    for resource in resources:
        closer = getattr(resource, "aclose", None)
        if closer is not None:
            await closer()


def status_of(deliveries: Sequence[DeliveryRecord]) -> str:
    """One word for a case: failed if any delivery gave up, pending while any is due, else delivered."""
    states = {d.state for d in deliveries}
    if "failed" in states:
        return "failed"
    if states & {"pending", "sending"}:
        return "pending"
    return "delivered" if states else "stored"


def age(moment: datetime, now: datetime | None = None) -> str:
    seconds = max(((now or utcnow()) - moment).total_seconds(), 0)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _by_case(deliveries: Sequence[DeliveryRecord]) -> dict[int, list[DeliveryRecord]]:
    grouped: dict[int, list[DeliveryRecord]] = defaultdict(list)
    for delivery in deliveries:
        if delivery.case_number is not None:
            grouped[delivery.case_number].append(delivery)
    return grouped


def _table(cases: Sequence[HandoffRecord], by_case: dict[int, list[DeliveryRecord]], failed: bool) -> str:
    lines = [f"{'case':<9} {'status':<10} {'reason':<15} {'user':<22} {'age':>5}  question"]
    for record in cases:
        case = HandoffCase.from_record(record)
        user = (case.user.name or case.user.id)[:22]
        status = status_of(by_case[record.number])
        lines.append(
            f"{case.case_id:<9} {status:<10} {case.reason:<15} {user:<22} {age(case.created_at):>5}  "
            f"{case.question_line(60)}"
        )
        if failed:
            failures = [d for d in by_case[record.number] if d.state == "failed"]
            lines += [f"          ✗ {d.destination} ({d.attempts} attempts): {d.last_error}" for d in failures]
    return "\n".join(lines) + "\n"


def _deliveries_text(deliveries: Sequence[DeliveryRecord]) -> str:
    if not deliveries:
        return "Local store only (no destinations were configured when the case was opened).\n"
    return "".join(
        f"- {d.destination}: {d.state}, {d.attempts} attempts"
        + (f", ref {d.external_ref}" if d.external_ref else "")
        + (f", last error: {d.last_error}" if d.last_error and d.state != "delivered" else "")
        + "\n"
        for d in deliveries
    )


def _attempt_json(result: DeliveryResult) -> dict[str, str]:
    return {"case_id": result.case_id, "destination": result.destination, "status": result.status,
            "detail": result.detail}


def _result_line(result: DeliveryResult) -> str:
    return f"{result.case_id} → {result.destination}: {result.status} {result.detail}".rstrip() + "\n"


def _row_json(record: HandoffRecord, deliveries: list[DeliveryRecord]) -> dict[str, Any]:
    case = HandoffCase.from_record(record)
    return {
        "case_id": case.case_id,
        "status": status_of(deliveries),
        "reason": case.reason,
        "user": case.user.name or case.user.id,
        "created_at": case.created_at.isoformat(),
        "question": case.question,
        "deliveries": [_delivery_json(d) for d in deliveries],
    }


def _delivery_json(delivery: DeliveryRecord) -> dict[str, Any]:
    return {
        "destination": delivery.destination,
        "state": delivery.state,
        "attempts": delivery.attempts,
        "last_error": delivery.last_error,
        "external_ref": delivery.external_ref,
        "delivered_at": delivery.delivered_at.isoformat() if delivery.delivered_at else None,
    }
