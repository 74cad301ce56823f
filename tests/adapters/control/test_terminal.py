"""`policypal search|ask|chat|decide` while `policypal serve` holds the embedded index: the server answers.

The server holds the index's lock all along, so a CLI that opened the index itself would fail with
"in use by another process": every answer here came through the control socket, from the server's
own service (its runs are in its store). The CLI prints what it prints alone (console.py formats).
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import shutil
import socket
import sys
import threading
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from adapters import control
from adapters.app_keys import READINESS
from adapters.control import socket_path
from bot.store import Store
from retrieval import MAX_K, IndexInUseError, PolicyIndex
from tests.adapters.control.conftest import Served, cli
from tests.bot.helpers import settings_for
from tests.fakes.openai_server import Turn, text, tool_calls

pytestmark = pytest.mark.asyncio

QUESTION = "How many unused days can I carry over?"
ANSWER = "You may carry over up to five unused days [Leave › Carrying over]."
FOLLOW_UP = "Into which year?"
TICKET = {"category": "network_vpn", "summary": "NorthGate VPN fails with NG-809", "urgency": "high"}
PROBLEM = "my VPN says NG-809, please open a ticket"
SERVED = "answered by the running `policypal serve`"


def searched(answer: str = ANSWER) -> list[Turn]:
    return [tool_calls(("search_policies", {"query": "carry over unused days"})), text(answer)]


def proposal() -> Turn:
    return tool_calls(("create_it_ticket", TICKET), content="I can raise a ticket for this. Please confirm.")


class Terminal(io.StringIO):
    """Lines typed on a terminal: `ask` prompts only when stdin is one."""

    def isatty(self) -> bool:
        return True


class HeldTerminal(Terminal):
    """A terminal whose person types only once ``release`` is set; ``reading`` is set when asked."""

    def __init__(self, typed: str) -> None:
        super().__init__(typed)
        self.reading, self.release = threading.Event(), threading.Event()

    def readline(self, *args: Any) -> str:
        self.reading.set()
        self.release.wait(30)  # a hang guard only
        return super().readline(*args)


def assert_held_by_the_server(served: Served) -> None:
    """Neither this CLI nor any other process could have opened the index: the server holds its lock."""
    with pytest.raises(IndexInUseError):
        PolicyIndex.open(served.settings.retrieval())


async def test_search_is_answered_by_the_server_and_prints_what_a_search_here_prints(copied_server, capsys):
    code = await cli(copied_server.settings, "search", "carry over unused days", "-k", "2")
    served_out, served_err = capsys.readouterr()
    json_code = await cli(copied_server.settings, "search", "carry over unused days", "--json")
    served_json = capsys.readouterr().out
    assert_held_by_the_server(copied_server)
    await copied_server.stop()  # the index is free again: the same searches, in the CLI's own process
    assert await cli(copied_server.settings, "search", "carry over unused days", "-k", "2") == 0
    local_out, local_err = capsys.readouterr()
    assert await cli(copied_server.settings, "search", "carry over unused days", "--json") == 0

    assert (code, json_code) == (0, 0)
    assert SERVED in served_err and SERVED not in local_err
    assert "1. Leave > Carrying over" in served_out and served_out == local_out
    assert json.loads(served_json)[0]["doc_id"] == "leave.md" and served_json == capsys.readouterr().out


async def test_ask_is_a_run_of_the_servers_service_for_the_given_user_and_groups(copied_server, fake_openai, capsys):
    fake_openai.script(*searched())

    code = await cli(copied_server.settings, "ask", "--user", "alice", "--group", "hr", "--group", "it", QUESTION)

    out, err = capsys.readouterr()
    assert code == 0, err
    assert SERVED in err
    assert out.startswith(ANSWER) and "Sources:\n  - Leave › Carrying over (" in out
    (run,) = await copied_server.service.store.runs.recent()  # in the server's store, made by its service
    assert (run.platform, run.user_id, run.question, run.reason) == ("console", "alice", QUESTION, "answered")
    assert {"hr", "it"} <= set(run.audience or [])  # the groups given to the CLI reached the run
    assert_held_by_the_server(copied_server)


async def test_a_proposed_ticket_is_confirmed_at_this_terminals_prompt_and_created_once(
    copied_server, fake_openai, capsys, monkeypatch
):
    fake_openai.script(proposal(), text("Done: ticket IT-1001 is open."))
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))

    code = await cli(copied_server.settings, "ask", PROBLEM)

    out, err = capsys.readouterr()
    assert code == 0, err
    card, prompt, rest = out.partition("Confirm? [y/N] ")  # input() writes its prompt to stdout
    assert prompt and "create_it_ticket: needs your confirmation" in card and "category  network_vpn" in card
    assert "Ticket IT-1001 created." in rest and "Done: ticket IT-1001 is open." in rest
    assert await copied_server.service.store.tickets.count() == 1
    reasons = [run.reason for run in await copied_server.service.store.runs.recent()]
    assert reasons == ["answered", "pending_confirmation"]  # the continued run, then the proposing one


async def test_chat_keeps_one_thread_in_the_server_so_the_follow_up_sees_the_first_turn(
    copied_server, fake_openai, capsys, monkeypatch
):
    fake_openai.script(*searched(), *searched("Into the next year only [Leave › Carrying over]."))
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{QUESTION}\n{FOLLOW_UP}\n\n"))

    code = await cli(copied_server.settings, "chat")

    out, err = capsys.readouterr()
    assert code == 0, err
    assert SERVED in err and out.count("Sources:") == 2 and "Into the next year only" in out
    runs = await copied_server.service.store.runs.recent()
    assert [run.question for run in runs] == [FOLLOW_UP, QUESTION] and len({r.conversation_key for r in runs}) == 1
    follow_up = json.dumps(fake_openai.requests[2].messages)  # the second turn's first model call
    assert QUESTION in follow_up and "up to five unused days" in follow_up


async def test_decide_confirms_an_action_left_open_and_deciding_again_makes_no_second_ticket(
    copied_server, fake_openai, capsys
):
    fake_openai.script(proposal(), text("Done: ticket IT-1001 is open."))
    assert await cli(copied_server.settings, "ask", PROBLEM) == 0  # no terminal to ask on: the action is left open
    found = re.search(r"`policypal decide (\S+) confirm`", capsys.readouterr().out)
    assert found is not None
    pending_id = found.group(1)

    first = await cli(copied_server.settings, "decide", pending_id, "confirm")
    decided, err = capsys.readouterr()
    again = await cli(copied_server.settings, "decide", pending_id, "confirm")
    twice = capsys.readouterr().out
    unknown = await cli(copied_server.settings, "decide", "no-such-action", "cancel")

    assert first == 0 and SERVED in err
    assert "Ticket IT-1001 created." in decided and "Done: ticket IT-1001 is open." in decided
    assert again == 1 and "IT-1001 created" not in twice and twice.strip()
    assert unknown == 1 and capsys.readouterr().out == "No pending action no-such-action.\n"
    assert await copied_server.service.store.tickets.count() == 1


async def test_the_server_stopping_at_the_prompt_is_said_plainly_and_nothing_is_created(
    copied_server, fake_openai, capsys, monkeypatch
):
    fake_openai.script(proposal())
    terminal = HeldTerminal("y\n")
    monkeypatch.setattr(sys, "stdin", terminal)
    asking = asyncio.create_task(cli(copied_server.settings, "ask", PROBLEM))
    assert await asyncio.to_thread(terminal.reading.wait, 30)  # the card is shown and the person is asked

    await copied_server.stop()
    terminal.release.set()  # "y", to a server that is gone
    code = await asking

    out, err = capsys.readouterr()
    assert code == 1 and "create_it_ticket: needs your confirmation" in out
    assert "went away before it answered" in err and "Traceback" not in err
    store = await Store.open(copied_server.settings.resolved_database_url)
    try:
        assert await store.tickets.count() == 0
    finally:
        await store.close()


async def test_a_server_dying_mid_request_is_reported_not_waited_for(tmp_path, fake_openai, capsys):
    settings = settings_for(tmp_path, fake_openai)
    path = socket_path(settings.retrieval())
    path.parent.mkdir(parents=True)
    routes: list[str] = []

    async def dies_on_the_question(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        routes.append(head.split(b" ")[1].decode())
        if routes[-1] == control.HELLO:
            body = b'{"pid": 4242}'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            await writer.drain()
        writer.close()  # the question is never answered: as the socket of a killed process closes

    fake = await asyncio.start_unix_server(dies_on_the_question, path=str(path))
    path.chmod(0o600)  # ours, as the server makes it
    try:
        code = await cli(settings, "ask", QUESTION)
    finally:
        fake.close()
        await fake.wait_closed()
    err = capsys.readouterr().err
    assert code == 1 and routes == [control.HELLO, control.MESSAGE]
    assert "pid 4242" in err and "went away before it answered" in err and "Traceback" not in err


async def test_bad_terminal_requests_get_a_clear_error_and_start_no_run(copied_server):
    user = {"id": "alice", "name": "Alice", "groups": []}
    inbound = {"platform": "console", "channel": "terminal", "thread": "t1", "text": "hi", "event_id": "e1",
               "user": user}
    bad = [
        (control.MESSAGE, {"inbound": {**inbound, "platform": "slack"}}, "`inbound.platform` should be 'console'"),
        (control.MESSAGE, {"inbound": "hi"}, "`inbound` must be a JSON object"),
        (control.MESSAGE, {"inbound": {**inbound, "user": {**user, "groups": "hr"}}},
         "`inbound.user.groups` should be a valid list"),
        (control.MESSAGE, {"inbound": {**inbound, "event_id": " "}}, "`inbound.event_id` must be a non-empty string"),
        (control.DECIDE, {"pending_id": "p1", "user": user, "decision": "maybe", "args_hash": "h"},
         "`decision` should be 'confirm' or 'cancel'"),
        (control.SEARCH, {"query": "leave", "k": 0}, "`k` should be greater than or equal to 1"),
        (control.SEARCH, {"query": "leave", "k": MAX_K + 1}, f"`k` should be less than or equal to {MAX_K}"),
        (control.SEARCH, {"query": "leave", "k": True}, "`k` should be a valid integer"),  # JSON true is no count
        (control.SEARCH, {"query": " ", "k": 3}, "`query` must be a non-empty string"),
        (control.DELIVER, {"case_number": 1, "timeout_s": 3600}, "`timeout_s` should be less than or equal to 60"),
        (control.PENDING, [1, 2], "the request is not a JSON object"),
    ]
    connector = aiohttp.UnixConnector(path=str(socket_path(copied_server.settings.retrieval())))
    async with aiohttp.ClientSession(connector=connector) as session:
        for route, body, message in bad:
            async with session.post(f"http://localhost{route}", json=body) as response:
                assert (response.status, (await response.json())["error"]) == (400, message), route
    assert await copied_server.service.store.runs.recent() == []


async def test_a_draining_server_refuses_new_terminal_requests_with_a_sentence(copied_server, capsys):
    copied_server.runner.app[READINESS].draining = True  # what SIGTERM sets before runs in flight are drained

    code = await cli(copied_server.settings, "ask", QUESTION)

    assert code == 1 and "the server is shutting down" in capsys.readouterr().err
    assert await copied_server.service.store.runs.recent() == []


async def test_with_a_qdrant_server_the_cli_never_uses_the_socket(copied_server):
    cfg = replace(copied_server.settings.retrieval(), qdrant_url="http://127.0.0.1:6333")

    assert socket_path(cfg).exists() and control.ControlClient.find(cfg) is None


async def test_with_only_a_socket_left_by_a_killed_server_search_and_ask_run_here(
    tmp_path, fake_openai, leave_index, capsys
):
    settings = settings_for(tmp_path, fake_openai)
    shutil.copytree(leave_index, settings.retrieval().qdrant_path)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(socket_path(settings.retrieval())))  # bound, never listening, never unlinked: as SIGKILL leaves it
    stale.close()
    socket_path(settings.retrieval()).chmod(0o600)
    capsys.readouterr()
    fake_openai.script(*searched())

    searched_here = await cli(settings, "search", "carry over unused days")
    search_out, search_err = capsys.readouterr()
    asked_here = await cli(settings, "ask", QUESTION)
    ask_out, ask_err = capsys.readouterr()

    assert (searched_here, asked_here) == (0, 0), ask_err
    assert "1. Leave > Carrying over" in search_out and ask_out.startswith(ANSWER)
    assert SERVED not in search_err + ask_err
