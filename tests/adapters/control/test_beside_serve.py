"""The CLI beside a real `policypal serve` process: `search`, `ask`, `chat` and `decide` are the server's work.

One server for the module (a start costs seconds); each CLI command is its own process with the same
environment, as an operator would type it. The proof that the server did the work: the CLI names the
server's pid, and the server's own log has the search and every run, with their ids.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.server.harness import Server, policypal, running, server_env
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

ANSWER = "You may carry over up to five unused days [Leave › Carrying over]."
THROUGH = " through the control socket"  # how the server logs what it does for a CLI command
TICKET = {"category": "network_vpn", "summary": "NorthGate VPN fails with NG-809", "urgency": "high"}


@pytest.fixture(scope="module")
def fake_model() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI.start_in_thread()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, leave_index: Path, fake_model: FakeOpenAI
) -> Iterator[tuple[Server, dict[str, str], Path]]:
    """The server, the environment every command shares with it, and the working directory."""
    root = tmp_path_factory.mktemp("beside-serve")
    env = server_env(root, leave_index, fake_model)
    with running(env, root) as server:
        yield server, env, root


@pytest.fixture
def model(fake_model: FakeOpenAI) -> Iterator[FakeOpenAI]:
    """The module's model, with nothing left scripted by an earlier test."""
    fake_model.script()
    yield fake_model
    fake_model.assert_script_consumed()


def stored(data_dir: Path, query: str, *params: str) -> list[tuple]:
    """Rows of the database the server and every command share (SQLite in the data directory)."""
    with sqlite3.connect(data_dir / "policypal.db") as db:
        return db.execute(query, params).fetchall()


def owner_pid(data_dir: Path, run_id: str) -> int:
    """The pid of the process that ran and stored this run (``host:pid_ns:pid:boot``)."""
    ((owner,),) = stored(data_dir, "SELECT owner FROM runs WHERE id = ?", run_id)
    return int(owner.rsplit(":", 3)[2])


def control_log(server: Server, since: int) -> list[str]:
    """What the server logged doing for the CLI, from log line ``since`` on."""
    said = [line["message"] for line in server.log_lines()[since:]]
    return [message.removesuffix(THROUGH) for message in said if message.endswith(THROUGH)]


def test_search_is_done_by_the_server(served):
    server, env, cwd = served

    found = policypal(["search", "carry over unused days", "-k", "1"], env, cwd)

    assert found.returncode == 0, found.stderr
    assert f"answered by the running `policypal serve`, pid {server.proc.pid}" in found.stderr
    assert found.stdout.startswith("1. Leave > Carrying over")
    assert any(line["message"] == "search through the control socket" for line in server.log_lines())


def test_ask_and_a_two_turn_chat_are_runs_of_the_server(served, model):
    server, env, cwd = served
    search = tool_calls(("search_policies", {"query": "carry over unused days"}))
    follow_up = text("Into the next year [Leave › Carrying over].")
    model.script(search, text(ANSWER), search, text(ANSWER), search, follow_up)

    asked = policypal(["ask", "--json", "--user", "alice", "How many days can I carry over?"], env, cwd)
    chatted = policypal(["chat", "--user", "bob"], env, cwd, stdin="Can I carry days over?\nInto which year?\n\n")

    assert asked.returncode == 0, asked.stderr
    answer = json.loads(asked.stdout)
    assert answer["reason"] == "answered" and answer["citations"][0]["title"] == "Leave"
    assert owner_pid(cwd, answer["run_id"]) == server.proc.pid
    assert chatted.returncode == 0, chatted.stderr
    assert chatted.stdout.count("Sources:") == 2 and "Into the next year" in chatted.stdout
    turns = stored(cwd, "SELECT id, conversation_key, question FROM runs WHERE user_id = 'bob' ORDER BY started_at")
    assert [question for _id, _key, question in turns] == ["Can I carry days over?", "Into which year?"]
    assert len({key for _id, key, _question in turns}) == 1  # one thread: the follow-up had the first turn
    assert all(owner_pid(cwd, run_id) == server.proc.pid for run_id, _key, _question in turns)


def test_an_action_left_open_by_ask_is_confirmed_once_by_decide_in_the_server(served, model):
    server, env, cwd = served
    model.script(tool_calls(("create_it_ticket", TICKET), content="Shall I raise it?"), text("IT-1001 is open."))
    since = len(server.log_lines())

    asked = policypal(["ask", "my VPN says NG-809, please open a ticket"], env, cwd)  # no terminal: left open
    found = re.search(r"`policypal decide (\S+) confirm`", asked.stdout)
    assert asked.returncode == 0 and found is not None, asked.stdout + asked.stderr
    decided = policypal(["decide", found.group(1), "confirm"], env, cwd)
    again = policypal(["decide", found.group(1), "confirm"], env, cwd)

    assert decided.returncode == 0, decided.stderr
    assert "Ticket IT-1001 created." in decided.stdout and "IT-1001 is open." in decided.stdout
    assert again.returncode == 1 and "created" not in again.stdout
    assert stored(cwd, "SELECT count(*) FROM tickets") == [(1,)]
    lookup, decision = "a pending action's lookup", "a terminal decision"
    assert control_log(server, since) == ["a terminal message", lookup, decision, lookup, decision]
