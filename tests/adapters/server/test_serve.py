"""`policypal serve` as a process: ready, observable, polite under load, and nobody left without an answer.

Each test starts the real server (``python -m adapters.cli serve``) in a subprocess on a copy of a small
index, with the fake OpenAI and Slack servers in threads of this process, and talks to it as Slack
does: signed events over loopback HTTP, or envelopes over the fake's Socket Mode WebSocket.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

from tests.adapters.server.harness import (
    API_KEY,
    SECRET,
    metric,
    policypal,
    running,
    server_env,
    wait_calls,
    wait_until,
)
from tests.fakes.openai_server import FakeOpenAI, delay, text, tool_calls
from tests.fakes.slack_api import FakeSlackAPI, SlackCall, dm_event, event_envelope

ALICE, BOB, CAROL = "U_ALICE", "U_BOB", "U_CAROL"
ANSWER = "Yes, for up to four weeks a year with your manager's approval [Remote Work Policy › Working abroad]."


def in_thread(event: dict) -> callable:
    return lambda call: call.get("thread_ts") == event["ts"]


def reply_text(call: SlackCall) -> str:
    return f"{call.get('text', '')}\n{call.block_text}"


def test_a_ready_server_answers_counts_the_run_and_logs_json_with_its_context(
    tmp_path: Path, built_index: Path, model: FakeOpenAI, slack: FakeSlackAPI
):
    model.script(tool_calls(("search_policies", {"query": "work abroad"})), text(ANSWER))
    env = server_env(tmp_path, built_index, model, slack)
    with running(env, tmp_path) as server:
        assert server.get("/healthz") == (200, '{"status": "ok"}')
        status, body = server.get("/readyz")
        assert status == 200 and json.loads(body)["checks"] == {"database": "ok", "index": "ok", "slack": "ok"}
        event = dm_event(ALICE, "Can I work abroad for three weeks?")
        assert server.send_event(event_envelope(event)) == 200
        (reply,) = wait_calls(slack, "chat.postMessage", where=in_thread(event))
        assert "four weeks" in reply_text(reply)
        status, metrics = server.get("/metrics")
        index_during_serve = policypal(["index", str(built_index.parent / "policies")], env, tmp_path)
        assert server.stop(signal.SIGTERM) == 0
    assert metric(metrics, "policypal_runs_total", reason="answered", platform="slack") == 1.0
    assert metric(metrics, "policypal_run_steps_count") == 1.0 and metric(metrics, "policypal_run_steps_sum") == 2.0
    assert metric(metrics, "policypal_run_tokens_count") == 1.0 and metric(metrics, "policypal_run_cost_usd_sum") > 0
    assert metric(metrics, "policypal_model_latency_seconds_count") == 2.0
    assert metric(metrics, "policypal_tool_latency_seconds_count", tool="search_policies") == 1.0
    assert metric(metrics, "policypal_platform_requests_total", platform="slack", status="200") == 1.0
    assert metric(metrics, "policypal_pending_actions", state="open") == 0.0
    # The index is held by the server: `policypal index` hands the paths to it (adapters/control/).
    assert index_during_serve.returncode == 0, index_during_serve.stderr
    assert "indexed by the running `policypal serve`" in index_during_serve.stderr
    assert "unchanged (skipped) (2)" in index_during_serve.stdout
    lines = server.log_lines()
    run_lines = [line for line in lines if line.get("run_id")]
    assert run_lines and all(line["platform"] == "slack" and line["conversation"] for line in run_lines)
    assert any("ended: answered" in line["message"] for line in run_lines)
    assert API_KEY not in server.logs() and SECRET not in server.logs()


def test_sigterm_lets_a_quick_run_finish_and_gives_a_slow_one_the_give_up_and_a_case(
    tmp_path: Path, built_index: Path, model: FakeOpenAI, slack: FakeSlackAPI
):
    # The slow reply would come after the 1.5 s grace but well within the 20 s default: a server that
    # waited for its runs, or took the default, would post it.
    model.script(delay(0.5, text("Quick answer.")), delay(10, text("Never sent.")))
    env = server_env(tmp_path, built_index, model, slack, POLICYPAL_SHUTDOWN_GRACE_S="1.5")
    with running(env, tmp_path) as server:
        quick, slow = dm_event(ALICE, "quick question"), dm_event(BOB, "slow question", channel="D0BOB")
        server.send_event(event_envelope(quick))
        wait_until(lambda: len(model.requests) == 1, what="the quick run's model call")
        server.send_event(event_envelope(slow))
        wait_until(lambda: len(model.requests) == 2, what="the slow run's model call")
        code = server.stop(signal.SIGTERM)  # its 30 s timeout only stops a hung test
        model.mark("server exited")
    (quick_reply,) = slack.calls_to("chat.postMessage", in_thread(quick))
    (slow_reply,) = slack.calls_to("chat.postMessage", in_thread(slow))
    assert code == 0, (code, server.logs())
    # The quick run's reply came before the exit, the slow one's never: the server cut that run at the grace.
    before_exit = model.events_until("server exited")
    assert "reply 1" in before_exit and "reply 2" not in before_exit, (before_exit, server.logs())
    assert "Quick answer." in reply_text(quick_reply)
    assert "stopped before it finished" in reply_text(slow_reply) and "HD-1001" in reply_text(slow_reply)


def test_sigterm_leaves_socket_mode_before_the_drain_and_runs_in_flight_still_reply(
    tmp_path: Path, built_index: Path, model: FakeOpenAI, slack: FakeSlackAPI
):
    model.script(delay(3, text("Answer for the run in flight.")), text("Should never be asked."))
    env = server_env(tmp_path, built_index, model, slack, SLACK_APP_TOKEN=slack.app_token)
    del env["SLACK_SIGNING_SECRET"]  # Socket Mode only: events arrive over the WebSocket
    with running(env, tmp_path) as server:
        wait_until(lambda: slack.open_sockets == 1, what="the Socket Mode connection")
        first = dm_event(ALICE, "question in flight")
        first_id = slack.push_from_thread(event_envelope(first))
        wait_until(lambda: first_id in slack.acks and len(model.requests) == 1, what="the first event's ack and run")
        server.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: not accepting(server.port), what="shutdown to begin (the HTTP port closed)")
        late = dm_event(BOB, "question during shutdown", channel="D0BOB")
        late_id = slack.push_from_thread(event_envelope(late))  # None: no connection left
        time.sleep(1.0)
        draining = server.proc.poll() is None  # the first run has about 2 s to go
        sockets_during_drain, runs_during_drain = slack.open_sockets, len(model.requests)
        code = server.proc.wait(timeout=30)
    assert draining and code == 0, server.logs()
    assert late_id not in slack.acks and runs_during_drain == 1, "an event arriving during the drain was taken"
    assert sockets_during_drain == 0, "Socket Mode stayed connected during the drain"
    (reply,) = slack.calls_to("chat.postMessage", in_thread(first))  # the Web API still works without the socket
    assert "Answer for the run in flight." in reply_text(reply)
    assert slack.calls_to("chat.postMessage", in_thread(late)) == [] and not slack.problems
    # A first delivery over Socket Mode carries retry_attempt 0: not a redelivery.
    assert not any("redelivered" in line["message"] for line in server.log_lines())


def accepting(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_message_whose_process_was_killed_mid_run_is_answered_once_after_restart(
    tmp_path: Path, built_index: Path, model: FakeOpenAI, slack: FakeSlackAPI
):
    # It was acknowledged (written to the inbox) before the kill: the restarted server's sweeper takes it
    # over and runs it again, so the person gets the answer, once, instead of an apology.
    model.script(delay(60, text("Never sent.")), text("Upgrades need your manager's approval first."))
    env = server_env(tmp_path, built_index, model, slack)
    event = dm_event(ALICE, "Can I expense a hotel upgrade?")
    with running(env, tmp_path, "first") as server:
        assert server.send_event(event_envelope(event)) == 200
        wait_until(lambda: model.requests, what="the run's model call")
        server.stop(signal.SIGKILL)
    assert slack.calls_to("chat.postMessage", in_thread(event)) == []
    with running(env, tmp_path, "restarted") as server:
        (recovered,) = wait_calls(slack, "chat.postMessage", where=in_thread(event))

        def recovered_count() -> float | None:  # the item is counted by the pass that took it over
            return metric(server.get("/metrics")[1], "policypal_recovered_total", kind="event")

        wait_until(lambda: recovered_count() is not None, timeout_s=5, what="the recovery counted")
        count = recovered_count()
        assert server.stop(signal.SIGTERM) == 0  # whatever else it would have done, it has done by now
    assert recovered["channel"] == event["channel"]
    assert "manager's approval" in reply_text(recovered) and len(model.requests) == 2
    assert count == 1.0 and slack.calls_to("chat.postMessage", in_thread(event)) == [recovered]


def test_too_many_questions_and_a_full_process_get_polite_replies(
    tmp_path: Path, built_index: Path, model: FakeOpenAI, slack: FakeSlackAPI
):
    model.script(text("One."), text("Two."), delay(3, text("Carol's answer.")))
    env = server_env(
        tmp_path,
        built_index,
        model,
        slack,
        POLICYPAL_USER_RUNS_PER_MINUTE="2",
        POLICYPAL_MAX_CONCURRENT_RUNS="1",
        POLICYPAL_QUEUE_WAIT_S="0.2",
    )
    with running(env, tmp_path) as server:
        alice = [dm_event(ALICE, f"question {n}") for n in range(3)]
        for event in alice:
            server.send_event(event_envelope(event))
            wait_calls(slack, "chat.postMessage", where=in_thread(event))
        carol = dm_event(CAROL, "a slow one", channel="D0CAROL")
        server.send_event(event_envelope(carol))
        wait_until(lambda: len(model.requests) == 3, what="Carol's run")
        bob = dm_event(BOB, "me too", channel="D0BOB")
        server.send_event(event_envelope(bob))
        (busy,) = wait_calls(slack, "chat.postMessage", where=in_thread(bob))
        (carols,) = wait_calls(slack, "chat.postMessage", where=in_thread(carol))
        _, metrics = server.get("/metrics")
    (limited,) = slack.calls_to("chat.postMessage", in_thread(alice[2]))
    assert "2 questions in the last minute" in reply_text(limited)
    assert "answering a lot of questions right now" in reply_text(busy)
    assert "Carol's answer." in reply_text(carols) and len(model.requests) == 3
    assert metric(metrics, "policypal_refused_messages_total", reason="rate_limited", platform="slack") == 1.0
    assert metric(metrics, "policypal_refused_messages_total", reason="busy", platform="slack") == 1.0


def test_a_bad_configuration_is_refused_with_every_problem_listed(tmp_path: Path, model: FakeOpenAI):
    env = server_env(
        tmp_path,
        tmp_path / "no-index-here",
        model,
        SLACK_BOT_TOKEN="xoxb-only-the-token",
        MicrosoftAppId="1f3c-app-id-without-password",
        POLICYPAL_DATABASE_URL="postgresql+asyncpg://bot:hunter2hunter2@127.0.0.1:1/policypal",
        POLICYPAL_MODEL="our-own-llama",
        POLICYPAL_HELPDESK_WEBHOOK_URL="https://helpdesk.example.com/hook",
    )
    served = policypal(["serve", "--port", "1"], env, tmp_path)
    checked = policypal(["config", "check"], env, tmp_path)
    assert served.returncode == checked.returncode == 2
    assert served.stderr.strip().endswith(checked.stderr.strip())
    message = checked.stderr
    assert "PolicyPal cannot start: 6 configuration problems." in message, message
    for expected in (
        "Cannot reach the database postgresql+asyncpg://bot:***@127.0.0.1:1/policypal",
        "No policy index at",
        "No price is known for model 'our-own-llama'",
        "neither SLACK_SIGNING_SECRET (HTTP) nor SLACK_APP_TOKEN (Socket Mode) is",
        "Teams: set both MicrosoftAppId and MicrosoftAppPassword",
        "POLICYPAL_HELPDESK_WEBHOOK_URL needs POLICYPAL_HELPDESK_WEBHOOK_SECRET",
    ):
        assert expected in message, (expected, message)
    assert "hunter2hunter2" not in message


def test_config_check_of_a_good_configuration_says_what_would_run(
    tmp_path: Path, built_index: Path, model: FakeOpenAI, slack: FakeSlackAPI
):
    checked = policypal(["config", "check"], server_env(tmp_path, built_index, model, slack), tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "Configuration OK." in checked.stdout and "Slack:    on" in checked.stdout
    assert not (tmp_path / "policypal.db").exists()  # a check changes nothing
