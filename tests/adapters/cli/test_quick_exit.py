"""`policypal ask` ends its process without interpreter teardown (adapters/cli/main.py): nothing may be lost.

Run as a person runs it, a real process with stdout on a pipe (block-buffered, so an exit that skipped
the flush would print nothing), then a second process reads what the first one stored.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.wiring import SAMPLE_POLICIES
from tests.conftest import built_index

WAIT_S = 120.0  # generous: the machine is shared

pytestmark = pytest.mark.timeout(300)


def test_a_piped_ask_prints_its_whole_answer_and_its_run_is_stored(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    shutil.copy(SAMPLE_POLICIES / "equipment.md", policies / "equipment.md")
    data = tmp_path / "data"
    built_index(data, policies).close()
    dropped = ("POLICYPAL_", "OPENAI_", "PYTHONUNBUFFERED")  # unbuffered, a lost flush would go unseen
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(POLICYPAL_DATA_DIR=str(data), HF_HUB_OFFLINE="1")

    asked = _policypal(env, tmp_path, "ask", "When is my laptop replaced?", "--user", "alice", "--json")
    assert asked.returncode == 0, asked.stderr
    assert "Exception ignored" not in asked.stderr and "Traceback" not in asked.stderr
    outcome = json.loads(asked.stdout)  # the whole object: the exit flushed stdout first
    assert outcome["reason"] == "answered" and outcome["citations"]

    listed = _policypal(env, tmp_path, "traces", "--json")
    assert listed.returncode == 0, listed.stderr
    assert outcome["run_id"] in listed.stdout  # the run was committed and the store closed before the exit


def _policypal(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli", *args],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=cwd, env=env, timeout=WAIT_S,
    )
