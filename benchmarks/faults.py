"""`policypal serve` under faults, at the issue's sizes: what is lost, what is said twice, when the last reply came.

The scenarios are tests/adapters/server/faults.py's (the tests run them small): kill -9 of a server
0, 300 and 1000 ms after the acks of a 50-event burst, during a slow users.info, while Slack holds
half the replies, and with a third of the burst at each of those points; the Slack Web API failing
for 10 s (an error, then HTTP 503, then every method a reply needs) while 48 questions come in; two
replicas on one PostgreSQL database with one frozen for 36 s (the default POLICYPAL_WORKER_STALE_S
of 30 s) before its runs conclude, or between a commit and its post (also for 5 s with a 3 s stale
time), or for 45 s inside a transaction; PostgreSQL refusing connections for 30 s; a crash while the
ticket webhook holds a confirmed ticket, and a ticket webhook answering after the timeout. Each
prints events sent, acknowledged (and 503s that were delivered again), lost, duplicated, replies
per thread and the time from the fault to the last reply, then what it checked that failed, if any.

    python benchmarks/faults.py [--only NAME ...] [--postgres URL] [--events 50]

``--postgres`` (default: $POLICYPAL_TEST_POSTGRES_URL) names a database beside which each PostgreSQL
scenario creates, upgrades and drops its own; without one those scenarios are skipped, saying so.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.adapters.server import faults
from tests.adapters.server.harness import build_index

Scenario = Callable[[Path, Path, str | None, int], faults.Figures]
EVERY_METHOD = ("chat.postMessage", "chat.update", "users.info", "chat.getPermalink", "conversations.replies")


def _kill(**fault: Any) -> Scenario:
    return lambda root, index, _pg, events: faults.kill_after_ack(root, index, events=events, **fault)


def _slack(outage: faults.Outage, methods: tuple[str, ...] = ("chat.postMessage", "chat.update")) -> Scenario:
    return lambda root, index, _pg, events: faults.slack_outage(
        root, index, outage_s=10.0, outages=[outage], methods=methods, per_kind=max(events // 3, 1)
    )


def _postgres(work: Callable[[Path, Path, str, int], faults.Figures]) -> Scenario:
    def scenario(root: Path, index: Path, postgres: str | None, events: int) -> faults.Figures:
        assert postgres is not None
        return work(root, index, postgres, events)

    scenario.needs_postgres = True  # type: ignore[attr-defined]
    return scenario


SCENARIOS: dict[str, Scenario] = {
    "kill-0ms": _kill(kill_after_ms=0),
    "kill-300ms": _kill(kill_after_ms=300),
    "kill-1000ms": _kill(kill_after_ms=1000),
    "kill-slow-users-info": _kill(hold="users.info", hold_s=3.0),
    "kill-slack-holding-replies": _kill(hold="posts", hold_s=3.0),
    "kill-everything-in-flight": _kill(hold="everything", hold_s=3.0),
    "slack-internal-error": _slack(("internal_error", 200)),
    "slack-503": _slack(("service_unavailable", 503)),
    "slack-every-method": _slack(("internal_error", 200), EVERY_METHOD),
    "stalled-replica": _postgres(
        lambda root, index, pg, events: faults.stalled_replica(
            root, index, pg, events=events, stall_s=36.0, stale_s=None
        )
    ),
    "frozen-between-commit-and-post": _postgres(
        lambda root, index, pg, _events: faults.frozen_between_commit_and_send(
            root, index, pg, stall_s=36.0, stale_s=None
        )
    ),
    "frozen-between-commit-and-post-stale-3s": _postgres(
        lambda root, index, pg, _events: faults.frozen_between_commit_and_send(
            root, index, pg, stall_s=5.0, stale_s=3.0
        )
    ),
    "frozen-inside-a-transaction": _postgres(
        lambda root, index, pg, _events: faults.frozen_inside_a_transaction(
            root, index, pg, stall_s=45.0, stale_s=30.0, sweep_s=1.0
        )
    ),
    "postgres-outage": _postgres(
        lambda root, index, pg, events: faults.postgres_outage(
            root,
            index,
            pg,
            before=events // 2,
            during=events - events // 2,
            outage_s=30.0,
            model_delay_s=2.0,
            redeliver_every_s=1.0,
        )
    ),
    "crash-during-ticket": lambda root, index, _pg, _events: faults.crash_during_ticket(root, index),
    "ticket-webhook-timeout": lambda root, index, _pg, _events: faults.ticket_webhook_timeout(
        root, index, timeout_s=2.0, answers_after_s=5.0, attempts=3
    ),
    "users-info-failing-once": lambda root, index, _pg, _events: faults.users_info_failing_once(root, index),
}


def run(name: str, scenario: Scenario, root: Path, index: Path, postgres: str | None, events: int) -> dict:
    if getattr(scenario, "needs_postgres", False) and not postgres:
        print(f"\n{name}: skipped (no PostgreSQL: pass --postgres or set {faults.POSTGRES_ENV})", flush=True)
        return {"scenario": name, "skipped": "no PostgreSQL"}
    work = root / name
    work.mkdir()
    started = time.monotonic()
    try:
        figures = scenario(work, index, postgres, events)
    except faults.ScenarioFailed as failed:
        figures = failed.figures
    took = time.monotonic() - started
    verdict = "ok" if figures.ok else "FAILED"
    print(f"\n[{name}] {verdict} in {took:.0f} s\n{figures.summary()}", flush=True)
    return {"name": name, "ok": figures.ok, "took_s": round(took, 1), **figures.as_dict()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        choices=sorted(SCENARIOS),
        help="run only this scenario (repeatable): " + ", ".join(SCENARIOS),
    )
    parser.add_argument(
        "--postgres",
        default=faults.postgres_url(),
        metavar="URL",
        help=f"PostgreSQL beside which scratch databases are made (default: ${faults.POSTGRES_ENV})",
    )
    parser.add_argument("--events", type=int, default=50, help="events per burst (default 50)")
    args = parser.parse_args()
    chosen = {name: SCENARIOS[name] for name in args.only} if args.only else SCENARIOS
    results = []
    with tempfile.TemporaryDirectory(prefix="policypal-faults-") as tmp:
        root = Path(tmp)
        index = build_index(root / "index")
        for name, scenario in chosen.items():
            results.append(run(name, scenario, root, index, args.postgres, args.events))
    print("\nscenario                                   sent  acked  503s  lost  dup  last reply")
    for result in results:
        if "skipped" in result:
            print(f"{result['scenario']:<42} skipped: {result['skipped']}")
            continue
        last = f"{result['last_reply_s']:.1f} s" if result["last_reply_s"] is not None else "-"
        mark = "" if result["ok"] else "  FAILED"
        print(
            f"{result['name']:<42} {result['sent']:>4}  {result['acknowledged']:>5}  {result['refused']:>4}  "
            f"{result['lost']:>4}  {result['duplicated']:>3}  {last:>10}{mark}"
        )
    print(json.dumps(results, default=str))
    return 0 if all(r.get("ok", True) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
