"""`policypal serve` as a process: cold start to ready, idle memory, memory over 1,000 runs, runs per second.

The server runs exactly as deployed (``python -m adapters.cli serve``, SQLite, a small embedded index);
this process plays Slack (signed events in, the Web API out) and the model (a scripted
OpenAI-compatible server: each run searches the index once, then answers). Runs are driven closed
loop, ``--concurrency`` in flight at a time, so throughput is the server's, not a queue's. Memory is
the server's RSS from /proc: after warm-up, then every quarter of the runs; a leak shows as growth
after the caches have filled (the first quarter). Both fakes share this machine's cores.

Cold start is timed from spawning the process to the first 200 from /readyz, polled every 10 ms, for
``--starts`` servers one after another, each a new deployment's first start (its own empty data
directory); the last of them then serves the runs.

    python benchmarks/serve.py [--runs 1000] [--concurrency 8] [--warmup 50] [--starts 5] [--python PY]

``--python``: the interpreter the server runs with (default: this one). Time start-up with a production
install, as deployed: ``python3.11 -m venv /tmp/prod && /tmp/prod/bin/pip install .`` then
``--python /tmp/prod/bin/python``. A development venv holds the test tools too, and some change what the
product imports: selenium brings trio, which httpcore (under huggingface_hub, under fastembed) then
imports, adding about 0.1 s to every start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.adapters.server.harness import READY_TIMEOUT_S, Server, build_index, running, server_env
from tests.fakes.openai_server import FakeOpenAI, respond, text, tool_calls
from tests.fakes.slack_api import FakeSlackAPI, dm_event, event_envelope

POLL_S = 0.002
READY_POLL_S = 0.01  # the harness polls every 0.1 s, which would round each start up by up to that


def scripted(body: dict[str, Any]) -> Any:
    """Search first, then answer from what came back: two model calls and one real search per run."""
    if body["messages"][-1]["role"] == "tool":
        return text("You may work abroad for up to four weeks a year [Remote Work Policy › Working abroad].")
    return tool_calls(("search_policies", {"query": "working abroad"}))


def cpu_s(pid: int) -> float:
    """CPU seconds the process has used, all threads (user + system): less swayed than wall time by a busy machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Replies:
    """Counts the bot's posts as they arrive, reading only the calls not seen yet (the list keeps growing)."""

    def __init__(self, slack: FakeSlackAPI) -> None:
        self._calls = slack.calls
        self._seen = 0
        self.count = 0

    def update(self) -> int:
        new = self._calls[self._seen :]
        self._seen += len(new)
        self.count += sum(1 for call in new if call.method == "chat.postMessage")
        return self.count


def seconds_to_ready(server: Server, spawned: float) -> float:
    """From ``spawned`` to the first 200 from /readyz; the server's log if it exits or never gets there."""
    deadline = spawned + READY_TIMEOUT_S
    while time.perf_counter() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"server exited with {server.proc.returncode}:\n{server.logs()}")
        try:
            if server.get("/readyz")[0] == 200:
                return time.perf_counter() - spawned
        except OSError:
            pass  # not listening yet
        time.sleep(READY_POLL_S)
    raise RuntimeError(f"server not ready within {READY_TIMEOUT_S} s:\n{server.logs()}")


def drive(server: Server, replies: Replies, runs: int, concurrency: int) -> float:
    """Send ``runs`` questions, at most ``concurrency`` unanswered at once; seconds until the last reply."""
    started, sent, first = time.perf_counter(), 0, replies.update()
    while replies.update() - first < runs:
        while sent < runs and sent - (replies.count - first) < concurrency:
            number = first + sent
            user = f"U{number % 500:04d}"  # many people: the per-user limit is not what is measured
            event = dm_event(user, f"Can I work abroad? ({number})", channel=f"D{user}")
            assert server.send_event(event_envelope(event)) == 200
            sent += 1
        time.sleep(POLL_S)
    return time.perf_counter() - started


@contextmanager
def started(
    data: Path, env_for: Callable[[Path], dict[str, str]], starts: list[tuple[float, float]], python: str
) -> Iterator[Server]:
    """A server on a new, empty data directory (a deployment's first start); its (wall, CPU) seconds to ready
    go to ``starts``."""
    data.mkdir()
    env = env_for(data)
    spawned = time.perf_counter()
    with running(env, data, ready=False, python=python) as server:
        starts.append((seconds_to_ready(server, spawned), cpu_s(server.proc.pid)))
        yield server


def measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    index = build_index(root / "index")
    model, slack = FakeOpenAI.start_in_thread(), FakeSlackAPI.start_in_thread()
    model.script(*[respond(scripted)] * (2 * (args.runs + args.warmup) + 10))

    def env_for(data: Path) -> dict[str, str]:
        limits = {"POLICYPAL_USER_RUNS_PER_MINUTE": "0", "POLICYPAL_MAX_CONCURRENT_RUNS": "32"}
        return server_env(data, index, model, slack, **limits)

    starts: list[tuple[float, float]] = []
    try:
        for number in range(args.starts - 1):
            with started(root / f"start-{number}", env_for, starts, args.python):
                pass
        with started(root / "serving", env_for, starts, args.python) as server:
            time.sleep(2)
            idle = rss_mb(server.proc.pid)
            replies = Replies(slack)
            drive(server, replies, args.warmup, args.concurrency)
            warm = rss_mb(server.proc.pid)
            quarters, seconds = [], 0.0
            for _ in range(4):
                seconds += drive(server, replies, args.runs // 4, args.concurrency)
                quarters.append(round(rss_mb(server.proc.pid), 1))
    finally:
        model.stop()
        slack.stop()
    return {
        "cold_start_to_ready_s": round(statistics.median(wall for wall, _ in starts), 2),
        "cold_starts_s": [round(wall, 2) for wall, _ in starts],
        "cpu_to_ready_s": [round(cpu, 2) for _, cpu in starts],
        "idle_rss_mb": round(idle, 1),
        "rss_after_warmup_mb": round(warm, 1),
        "rss_each_quarter_mb": quarters,
        "runs": args.runs,
        "concurrency": args.concurrency,
        "runs_per_s": round(args.runs / seconds, 1),
        "model_requests": len(model.requests),
        "python": args.python,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--starts", type=int, default=5, help="cold starts to time (at least 1)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to serve with (a production install)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(args, Path(tmp))
    starts, cpu = result["cold_starts_s"], result["cpu_to_ready_s"]
    print(
        f"cold start to ready      {min(starts):.2f} / {result['cold_start_to_ready_s']:.2f} / {max(starts):.2f} s "
        f"(min / median / max of {len(starts)})"
    )
    print(f"CPU used to ready        {min(cpu):.2f} / {statistics.median(cpu):.2f} / {max(cpu):.2f} s (all threads)")
    print(f"idle RSS                 {result['idle_rss_mb']:.0f} MB")
    print(f"RSS after {args.warmup} warm-up runs {result['rss_after_warmup_mb']:.0f} MB")
    print(f"RSS each quarter of {args.runs} {result['rss_each_quarter_mb']} MB")
    print(f"throughput               {result['runs_per_s']:.1f} runs/s ({args.concurrency} in flight, one process)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
