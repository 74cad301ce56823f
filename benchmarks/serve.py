"""`policypal serve` as a process: cold start to ready, idle memory, memory over 1,000 runs, runs per second.

The server runs exactly as deployed (``python -m adapters.cli serve``, SQLite, a small embedded index);
this process plays Slack (signed events in, the Web API out) and the model (a scripted
OpenAI-compatible server: each run searches the index once, then answers). Runs are driven closed
loop, ``--concurrency`` in flight at a time, so throughput is the server's, not a queue's. Memory is
the server's RSS from /proc: after warm-up, then every quarter of the runs; a leak shows as growth
after the caches have filled (the first quarter). Both fakes share this machine's cores.

    python benchmarks/serve.py [--runs 1000] [--concurrency 8] [--warmup 50]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.adapters.server.harness import Server, build_index, running, server_env
from tests.fakes.openai_server import FakeOpenAI, respond, text, tool_calls
from tests.fakes.slack_api import FakeSlackAPI, dm_event, event_envelope

POLL_S = 0.002


def scripted(body: dict[str, Any]) -> Any:
    """Search first, then answer from what came back: two model calls and one real search per run."""
    if body["messages"][-1]["role"] == "tool":
        return text("You may work abroad for up to four weeks a year [Remote Work Policy › Working abroad].")
    return tool_calls(("search_policies", {"query": "working abroad"}))


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


def measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    index = build_index(root / "index")
    model, slack = FakeOpenAI.start_in_thread(), FakeSlackAPI.start_in_thread()
    model.script(*[respond(scripted)] * (2 * (args.runs + args.warmup) + 10))
    env = server_env(root, index, model, slack, POLICYPAL_USER_RUNS_PER_MINUTE="0", POLICYPAL_MAX_CONCURRENT_RUNS="32")
    try:
        spawned = time.perf_counter()
        with running(env, root) as server:
            ready_s = time.perf_counter() - spawned
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
        "cold_start_to_ready_s": round(ready_s, 2),
        "idle_rss_mb": round(idle, 1),
        "rss_after_warmup_mb": round(warm, 1),
        "rss_each_quarter_mb": quarters,
        "runs": args.runs,
        "concurrency": args.concurrency,
        "runs_per_s": round(args.runs / seconds, 1),
        "model_requests": len(model.requests),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(args, Path(tmp))
    print(f"cold start to ready      {result['cold_start_to_ready_s']:.2f} s")
    print(f"idle RSS                 {result['idle_rss_mb']:.0f} MB")
    print(f"RSS after {args.warmup} warm-up runs {result['rss_after_warmup_mb']:.0f} MB")
    print(f"RSS each quarter of {args.runs} {result['rss_each_quarter_mb']} MB")
    print(f"throughput               {result['runs_per_s']:.1f} runs/s ({args.concurrency} in flight, one process)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
