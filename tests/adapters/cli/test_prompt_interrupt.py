"""Ctrl-C and Ctrl-D at `Confirm? [y/N]`: the terminal returns at once and the action stays open, said so.

Issue 19: Ctrl-C at the prompt hung until Enter (asyncio.run's SIGINT handler only cancels the main task,
which a blocking input() never lets run), then exited 130 without a word about the card left open.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapters.cli.console import chat
from adapters.cli.prompting import read_line
from bot.config import Settings
from bot.service import PolicyPal
from bot.store import Store
from bot.wiring import SAMPLE_POLICIES, open_service
from retrieval import PolicyIndex
from tests.bot.helpers import ALICE
from tests.conftest import built_index

STOLEN = "My laptop was stolen from my car this morning"  # the offline model proposes a ticket for it
PENDING_ID = re.compile(r"Left open: action (\w+) is still pending; decide it later with `policypal decide \1 ")
WAIT_S = 120.0  # generous: the machine is shared; the prompt normally shows within seconds

pytestmark = pytest.mark.timeout(300)  # the pty test starts two real processes on a busy machine


@pytest.mark.parametrize(("key", "exit_code"), [("Ctrl-C", 130), ("Ctrl-D", 0)])
def test_ctrl_c_or_d_at_the_prompt_returns_at_once_and_leaves_the_action_open(
    tmp_path: Path, key: str, exit_code: int
) -> None:
    data = _data_dir_with_a_small_index(tmp_path)
    env = _clean_env(data)
    main, terminal = pty.openpty()  # the asker's terminal: `ask` prompts only on one
    asking = subprocess.Popen(
        [sys.executable, "-m", "adapters.cli", "ask", STOLEN],
        stdin=terminal, stdout=terminal, stderr=terminal, cwd=tmp_path, env=env, start_new_session=True,
    )
    os.close(terminal)
    try:
        shown = _read_until(main, "Confirm? [y/N]", asking)
        if key == "Ctrl-C":
            asking.send_signal(signal.SIGINT)  # what the terminal sends for Ctrl-C
        else:
            os.write(main, b"\x04")  # end of input, as the terminal reads Ctrl-D at a line's start
        code = asking.wait(timeout=WAIT_S)  # before the fix, after Ctrl-C: waits for an Enter that never comes
    finally:
        if asking.poll() is None:
            asking.kill()
            asking.wait()
    shown += _read_rest(main)
    os.close(main)

    found = PENDING_ID.search(shown)
    assert code == exit_code, shown
    assert found is not None, shown
    pending_id = found.group(1)
    assert f"└ pending {pending_id}" in shown and "Traceback" not in shown
    assert asyncio.run(_state(data, pending_id)) == "open"  # neither confirmed nor cancelled

    decided = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "decide", pending_id, "cancel"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=WAIT_S,
    )
    assert decided.returncode == 0, decided.stderr
    assert "Cancelled: no ticket was raised." in decided.stdout
    assert asyncio.run(_state(data, pending_id)) == "cancelled"


def test_ask_json_on_a_terminal_prints_only_the_object_and_leaves_the_ticket_open(tmp_path: Path) -> None:
    """`policypal ask --json "..." | jq` printed `Confirm? [y/N] ` into the pipe (not JSON), so the asker
    saw no prompt and no card while the command waited for a line; a typed-ahead `y` then raised the ticket."""
    data = _data_dir_with_a_small_index(tmp_path)
    main, terminal = pty.openpty()  # stdin is the asker's terminal, stdout a pipe to a JSON reader
    os.write(main, b"y\n")  # typed ahead: before the fix the hidden prompt read it and confirmed
    asking = subprocess.Popen(
        [sys.executable, "-m", "adapters.cli", "ask", STOLEN, "--json"],
        stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=_clean_env(data),
        start_new_session=True,
    )
    os.close(terminal)
    try:
        out, err = asking.communicate(timeout=WAIT_S)
    finally:
        if asking.poll() is None:
            asking.kill()
            asking.wait()
        os.close(main)

    assert asking.returncode == 0, err
    outcome = json.loads(out)  # the whole of stdout is the one object
    assert outcome["reason"] == "pending_confirmation" and outcome["pending"]["state"] == "open"
    assert "decision" not in outcome
    assert asyncio.run(_state(data, outcome["pending"]["id"])) == "open"


async def test_ctrl_c_at_the_chat_prompt_leaves_the_action_open_and_exits_130(tmp_path, sample_index):
    lines = iter([STOLEN])

    def read(prompt: str) -> str:
        if prompt.startswith("Confirm?"):
            raise KeyboardInterrupt  # what Ctrl-C raises inside the read (adapters.cli.prompting)
        return next(lines)

    service, out = await _service(tmp_path, sample_index), io.StringIO()
    try:
        code = await chat(service, ALICE, read=read, out=out)
        pending_id = _left_open_id(out.getvalue())
        record = await service.pending.get(pending_id)
        tickets = await service.store.tickets.count()
    finally:
        await service.close()
    assert code == 130
    assert record is not None and record.state == "open" and tickets == 0


async def test_end_of_input_at_the_chat_prompt_says_the_action_is_left_open(tmp_path, sample_index):
    """`echo 'My laptop was stolen' | policypal chat` ended without a word about the card it showed."""
    lines = iter([STOLEN])

    def read(prompt: str) -> str:
        line = next(lines, None)
        if line is None:
            raise EOFError
        return line

    service, out = await _service(tmp_path, sample_index), io.StringIO()
    try:
        code = await chat(service, ALICE, read=read, out=out)
        record = await service.pending.get(_left_open_id(out.getvalue()))
    finally:
        await service.close()
    assert code == 0 and record is not None and record.state == "open"


def test_ctrl_c_inside_asyncio_run_interrupts_a_blocking_read() -> None:
    """Under asyncio.run() SIGINT only cancels the main task; read_line makes it interrupt the read itself."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # so asyncio.run installs its own
    events: list[str] = []

    def read(prompt: str) -> str:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C while the read blocks
        events.append("read went on after Ctrl-C")
        return "y"

    async def prompt() -> None:
        try:
            read_line(read, "Confirm? [y/N] ")
        except KeyboardInterrupt:
            events.append("interrupted in the read")
        await asyncio.sleep(0)  # the loop runs again: no cancellation was left pending for it
        events.append("went on")

    try:
        asyncio.run(prompt())
    except KeyboardInterrupt:  # the bug: the Ctrl-C surfaced after the read, cancelling what came next
        events.append("cancelled after the read")
    assert events == ["interrupted in the read", "went on"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored after asyncio.run


def _data_dir_with_a_small_index(tmp_path: Path) -> Path:
    """A data directory already indexed (two sample policies), so `ask` skips its first-run indexing."""
    policies = tmp_path / "policies"
    policies.mkdir()
    for name in ("security-incident-reporting.md", "equipment.md"):
        shutil.copy(SAMPLE_POLICIES / name, policies / name)
    data = tmp_path / "data"
    built_index(data, policies).close()
    return data


def _clean_env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POLICYPAL_", "OPENAI_"))}
    env.update(POLICYPAL_DATA_DIR=str(data), HF_HUB_OFFLINE="1")
    return env


def _read_until(fd: int, wanted: str, process: subprocess.Popen[bytes]) -> str:
    """What the terminal showed up to ``wanted``; fails if the process ends or nothing comes in WAIT_S."""
    shown, deadline = "", time.monotonic() + WAIT_S
    while wanted not in shown:
        assert process.poll() is None, f"exited {process.returncode} before {wanted!r}:\n{shown}"
        assert time.monotonic() < deadline, f"no {wanted!r} in {WAIT_S:.0f} s:\n{shown}"
        if select.select([fd], [], [], 1.0)[0]:
            try:
                shown += os.read(fd, 4096).decode(errors="replace").replace("\r\n", "\n")
            except OSError:  # EIO: the process closed the terminal; poll() says how it ended
                time.sleep(0.1)
    return shown


def _read_rest(fd: int) -> str:
    """The rest of what the terminal showed, after the process ended (EIO: no writer is left)."""
    chunks = []
    while select.select([fd], [], [], 1.0)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk.decode(errors="replace"))
    return "".join(chunks).replace("\r\n", "\n")


async def _state(data: Path, pending_id: str) -> str | None:
    store = await Store.open(Settings(_env_file=None, data_dir=data).resolved_database_url)  # type: ignore[call-arg]
    try:
        record = await store.pending.get(pending_id)
    finally:
        await store.close()
    return record.state if record else None


async def _service(tmp_path: Path, searcher: PolicyIndex) -> PolicyPal:
    return await open_service(Settings(_env_file=None, data_dir=tmp_path), searcher=searcher)  # type: ignore[call-arg]


def _left_open_id(text: str) -> str:
    found = PENDING_ID.search(text)
    assert found is not None, text
    return found.group(1)

