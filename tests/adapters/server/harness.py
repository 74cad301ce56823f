"""`policypal serve` as a real process under test: a clean environment, HTTP probes, and a guaranteed stop.

Tests talk to it as Slack would (signed events and clicks over loopback HTTP) and watch what it
posts through the fake Slack Web API; the model is the fake OpenAI server in a thread of the test
process. Every process started here is killed in ``close`` whatever the test did.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval import RetrievalConfig
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlackAPI, SlackCall, block_actions, form_body, signed_headers

REPO = Path(__file__).resolve().parents[3]
SECRET = "server-test-signing-secret-0042"
API_KEY = "sk-servertest-0123456789abcdef"
READY_TIMEOUT_S = 40.0

POLICIES = {
    "remote-work.md": """---
title: Remote Work Policy
section: HR
---
# Remote Work Policy

## Working abroad
Employees may work from another country for up to four weeks a year with their manager's approval.
Tell IT before you travel so your VPN access keeps working.
""",
    "vpn.md": """---
title: VPN Guide
section: IT
---
# VPN Guide

## Error NG-412
NG-412 means your VPN certificate has expired. Reconnect once on the office network to renew it.
""",
}


def build_index(root: Path) -> Path:
    """A two-document index with the bundled model, closed again so a server process can open it."""
    from retrieval import PolicyIndex

    docs = root / "policies"
    docs.mkdir(parents=True)
    for name, body in POLICIES.items():
        (docs / name).write_text(body)
    cfg = RetrievalConfig(qdrant_path=root / "qdrant", model_cache_dir=root / "models")
    with PolicyIndex.open(cfg, create=True) as index:
        report = index.index_paths([docs])
        assert report.ok and index.count() > 0, report
    return root / "qdrant"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(
    data_dir: Path, index: Path, model: FakeOpenAI, slack: FakeSlackAPI | None = None, **extra: str
) -> dict[str, str]:
    """Only what the server needs: nothing from the developer's shell reaches it."""
    copy = data_dir / "qdrant"
    if index.exists() and not copy.exists():
        shutil.copytree(index, copy)  # the embedded index is one process per path
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(data_dir),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "POLICYPAL_DATA_DIR": str(data_dir),
        "OPENAI_API_KEY": API_KEY,
        "OPENAI_BASE_URL": model.base_url,
        "POLICYPAL_MODEL": "gpt-4o-mini",
        "POLICYPAL_SWEEP_INTERVAL_S": "1",
    }
    if slack is not None:
        env |= {"SLACK_BOT_TOKEN": slack.token, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.base_url}
    return env | extra


@dataclass
class Server:
    """One server process and how to reach it."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def post(self, path: str, body: str, headers: dict[str, str]) -> int:
        request = urllib.request.Request(self.url + path, data=body.encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    def send_event(self, envelope: dict[str, Any], retry_num: int | None = None) -> int:
        body = json.dumps(envelope)
        return self.post("/slack/events", body, signed_headers(SECRET, body, retry_num=retry_num))

    def click(self, user: str, action_id: str, value: str, **where: Any) -> int:
        body = form_body(block_actions(user, action_id, value, **where))
        headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
        return self.post("/slack/events", body, headers)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if self.get("/readyz")[0] == 200:
                    return
            except OSError:
                pass  # not listening yet
            time.sleep(0.1)
        raise AssertionError(f"server not ready within {timeout_s} s:\n{self.logs()}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        """Send ``sig`` and wait for the exit code."""
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout_s)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_lines(self) -> list[dict[str, Any]]:
        """The JSON log lines (anything else the process printed is skipped)."""
        lines = []
        for line in self.logs().splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
        return lines


def policypal(
    args: list[str], env: dict[str, str], cwd: Path, timeout_s: float = 60.0, *, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run one CLI command to completion; ``stdin``: the lines typed into it (a pipe, not a terminal)."""
    command = [sys.executable, "-m", "adapters.cli", *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False,
                          input=stdin)


@contextmanager
def running(
    env: dict[str, str], cwd: Path, name: str = "server", *, ready: bool = True, python: str = sys.executable
) -> Iterator[Server]:
    """Start `policypal serve`, wait for /readyz, and kill it afterwards whatever happened.

    ``python``: the interpreter to serve with (benchmarks/serve.py times a production install's)."""
    with running_all([env], cwd, [name], ready=ready, python=python) as (server,):
        yield server


@contextmanager
def running_all(
    envs: list[dict[str, str]], cwd: Path, names: list[str], *, ready: bool = True, python: str = sys.executable
) -> Iterator[list[Server]]:
    """Several servers started at once (their start-ups overlap), all killed afterwards."""
    servers: list[Server] = []
    try:
        servers = [_spawn(env, cwd, name, python) for env, name in zip(envs, names, strict=True)]
        for server in servers if ready else []:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            if server.proc.poll() is None:
                server.proc.kill()
            server.proc.wait(timeout=10)


def _spawn(env: dict[str, str], cwd: Path, name: str, python: str = sys.executable) -> Server:
    port = free_port()
    log_path = cwd / f"{name}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [python, "-m", "adapters.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return Server(proc, port, log_path)


def wait_calls(
    slack: FakeSlackAPI,
    method: str,
    count: int = 1,
    where: Callable[[SlackCall], bool] | None = None,
    timeout_s: float = 15.0,
) -> list[SlackCall]:
    """Wait until ``count`` matching Web API calls arrived (the server posts after its ack)."""
    deadline = time.monotonic() + timeout_s
    while len(found := slack.calls_to(method, where)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(found)} of {count} {method} calls within {timeout_s} s: {found}")
        time.sleep(0.05)
    return found


def wait_until(condition: Callable[[], object], timeout_s: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        time.sleep(0.05)


def metric(text: str, name: str, **labels: str) -> float | None:
    """One sample's value from Prometheus text (labels in any order); None when absent."""
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        metric_name, _, label_text = sample.partition("{")
        if metric_name == name and _labels(label_text.rstrip("}")) == labels:
            return float(value)
    return None


def _labels(text: str) -> dict[str, str]:
    pairs = [pair.split("=", 1) for pair in text.split(",") if pair]
    return {key: value.strip('"') for key, value in pairs}
