"""`policypal serve` under faults: nothing acknowledged is lost, nothing is said twice, nothing confirmed runs twice.

The scenarios live in tests/adapters/server/faults.py (benchmarks/faults.py runs them at the issue's
sizes); here each runs small: a few events, outages of a few seconds. Each scenario raises, with all
its figures, when a thread got no reply or more than one, or a run or Web API call happened that
should not have. Nothing here asserts how long anything took.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.server import faults


@pytest.fixture
def postgres() -> str:
    url = faults.postgres_url()
    if not url:
        pytest.skip(f"{faults.POSTGRES_ENV} not set; the scenario needs PostgreSQL")
    return url


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"hold": "users.info", "hold_s": 1.5}, id="during-a-slow-users.info"),
        pytest.param({"hold": "everything", "hold_s": 1.5}, id="with-lookups-runs-and-replies-in-flight"),
    ],
)
def test_kill_9_after_the_acks_loses_nothing_and_says_nothing_twice(tmp_path: Path, built_index: Path, fault):
    figures = faults.kill_after_ack(tmp_path, built_index, events=6, **fault)
    assert figures.lost == figures.duplicated == 0


def test_slack_failing_then_recovering_delivers_each_reply_card_and_give_up_once(tmp_path: Path, built_index: Path):
    figures = faults.slack_outage(tmp_path, built_index, outage_s=2.0, outages=faults.OUTAGES)  # error, then 503
    assert figures.lost == figures.duplicated == 0


def test_users_info_failing_once_does_not_turn_an_employee_into_a_guest(tmp_path: Path, built_index: Path):
    """A transient users.info error is retried; only a lasting answer makes someone a guest."""
    faults.users_info_failing_once(tmp_path, built_index)


@pytest.mark.postgres
def test_a_frozen_replica_is_taken_over_and_writes_nothing_when_it_wakes(
    tmp_path: Path, built_index: Path, postgres: str
):
    figures = faults.stalled_replica(tmp_path, built_index, postgres, events=3, stall_s=3.0, stale_s=2.0, sweep_s=0.5)
    assert figures.lost == figures.duplicated == 0


@pytest.mark.postgres
def test_a_replica_frozen_inside_a_transaction_does_not_stop_the_others_taking_over(
    tmp_path: Path, built_index: Path, postgres: str
):
    """A frozen holder of one inbox row lock must not stall the sweep: the others are taken over."""
    # A stays frozen until B has answered (60 s at most): the order of events, not a busy machine's speed
    faults.frozen_inside_a_transaction(
        tmp_path, built_index, postgres, stall_s=60.0, stale_s=2.0, sweep_s=0.5, until_taken_over=True
    )


@pytest.mark.postgres
def test_postgres_refusing_connections_then_recovering_answers_every_question_once(
    tmp_path: Path, built_index: Path, postgres: str
):
    figures = faults.postgres_outage(tmp_path, built_index, postgres, before=2, during=2, outage_s=2.0)
    assert figures.lost == figures.duplicated == 0 and figures.refused >= 2


def test_a_crash_during_a_confirmed_ticket_is_reported_unknown_and_never_re_run(tmp_path: Path, built_index: Path):
    figures = faults.crash_during_ticket(tmp_path, built_index)
    assert figures.notes["webhook requests"] == 1


def test_a_ticket_webhook_that_times_out_after_receiving_the_request_is_unknown_never_not_created(
    tmp_path: Path, built_index: Path
):
    figures = faults.ticket_webhook_timeout(tmp_path, built_index, timeout_s=1.0, answers_after_s=2.5, attempts=2)
    assert figures.notes["action"] == "unknown"
