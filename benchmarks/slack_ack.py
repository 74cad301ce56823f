"""Slack ack latency under a burst: N signed events sent at once to a running server.

The server runs in its own process (the app from ``build_app``, the real service on SQLite, the
real slack_sdk client); a sender process plays Slack's Events API (signed requests, sent at once on
connections opened beforehand unless ``--cold``); this process plays Slack's Web API and the model
(a scripted OpenAI-compatible server answering every run after ``--latency`` seconds). After
the burst, every event is delivered again with ``X-Slack-Retry-Num: 1`` (``--redeliver``), which
must start no run. Prints ack latency p50/p99/max, runs started, replies posted (answers, and "busy"
refusals of messages that waited the whole ``POLICYPAL_QUEUE_WAIT_S`` for a run slot), and the server's
peak memory (VmHWM). The server opens its service as ``policypal serve`` does (``serving=True``): the
per-user limit and the cap on runs at once apply, with the settings' defaults (this shell's POLICYPAL_
variables are not passed on; ``--queue-wait S`` sets ``POLICYPAL_QUEUE_WAIT_S``).

    python benchmarks/slack_ack.py [--events 200] [--latency 1.0] [--redeliver 200] [--cold] [--no-gc-freeze]
                                   [--index-during DIR] [--queue-wait S] [--postgres URL] [--at-start]

``--index-during DIR``: the server holds a real embedded index (of bot/sample_policies), and
``policypal index DIR`` runs through it (adapters/control/) while the burst arrives, so the
acks share the server process with the embedding model.

``--at-start``: the server is ``policypal serve`` itself, started on an indexed data directory, and the
burst is sent the moment /readyz first answers 200 (the sender polls it every 5 ms, with its
connections opened as soon as the port listens). Readiness does not wait for the embedding model, so
the acks share the process with the model's loading (importing fastembed, building its sessions).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from benchmarks.scratch import count_runs, scratch_database
from tests.fakes.openai_server import FakeOpenAI, delay, text
from tests.fakes.slack_api import FakeSlackAPI, dm_event, event_envelope, signed_headers

REPO = Path(__file__).resolve().parent.parent
SECRET = "benchmark-signing-secret"
INDEX_HEAD_START_S = 3.0
USERS = 20
TARGET_P99_MS = 100.0
BUSY_MARK = "answering a lot of questions right now"  # in the refusal after the queue wait (bot.runtime.busy_text)


# --- the server process -----------------------------------------------------------------------------


class NoSearch:
    """The scripted model answers without searching; the index is not what is measured."""

    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Any]:
        return []


def serve(port: int, freeze_gc: bool, real_index: bool) -> None:
    """The server under test: settings from the environment, as ``policypal serve`` reads them."""
    from aiohttp import web

    from adapters.server import build_app
    from bot.config import load_settings
    from bot.wiring import open_service

    async def make_app() -> web.Application:
        settings = load_settings()
        # serving=True, as `policypal serve` opens it: the per-user limit and the cap on runs at once apply.
        service = await open_service(settings, searcher=None if real_index else NoSearch(), serving=True)
        app = build_app(settings, service)

        async def close_service(_: web.Application) -> None:
            await service.close()

        app.on_cleanup.append(close_service)
        if freeze_gc:
            app.on_startup.append(_freeze_gc)  # after every other start-up step
        return app

    web.run_app(make_app(), host="127.0.0.1", port=port, print=None, access_log=None)


async def _freeze_gc(_: Any) -> None:
    """What ``--no-gc-freeze`` takes away: start-up's objects moved out of the collector's way.

    Without it, a full (generation 2) collection over the ~200,000 objects the imports and start-up
    leave behind runs during the burst and stops the event loop for 100-170 ms on this machine.
    """
    gc.collect()
    gc.freeze()


# --- Slack's side -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(data_dir: Path, model: FakeOpenAI, slack: FakeSlackAPI, database_url: str | None) -> dict[str, str]:
    database = {"POLICYPAL_DATABASE_URL": database_url} if database_url else {}
    return {
        **database,
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "POLICYPAL_"))},
        "OPENAI_API_KEY": "sk-benchmark-000000",
        "OPENAI_BASE_URL": model.base_url,
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack.base_url,
        "POLICYPAL_DATA_DIR": str(data_dir),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
    }


def start_server(
    port: int, env: dict[str, str], data_dir: Path, *, freeze_gc: bool, real_index: bool
) -> subprocess.Popen[bytes]:
    flags = [*([] if freeze_gc else ["--no-gc-freeze"]), *(["--real-index"] if real_index else [])]
    command = [sys.executable, __file__, "--serve", str(port), *flags]
    return subprocess.Popen(command, env=env, cwd=data_dir)


def start_policypal_serve(port: int, env: dict[str, str], data_dir: Path) -> subprocess.Popen[bytes]:
    """`policypal serve` as deployed, its log in the data directory."""
    command = [sys.executable, "-m", "adapters.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    with (data_dir / "server.log").open("ab") as log:
        return subprocess.Popen(command, env=env, cwd=data_dir, stdout=log, stderr=subprocess.STDOUT)


def policypal(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "adapters.cli", *args]
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def wait_healthy(session: aiohttp.ClientSession, url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"server exited with {server.returncode}")
        try:
            async with session.get(url + "/healthz") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("server did not become healthy within 60 s")


def signed(envelope: dict[str, Any], retry: int | None) -> tuple[bytes, dict[str, str]]:
    """Body and headers, built before the clock starts: signing is Slack's work, not the server's."""
    body = json.dumps(envelope)
    return body.encode(), signed_headers(SECRET, body, retry_num=retry)


class Connection:
    """One kept-alive HTTP/1.1 connection speaking just enough HTTP to time a request.

    The sender shares this machine's two cores with the server; aiohttp's client costs about as much
    CPU per request as the server's whole ack, so in a burst of 200 its own queueing showed up as
    ack latency. Requests here are bytes prepared before the clock starts, and a response is read by
    its Content-Length.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, url: str) -> Connection:
        host, _, port = url.removeprefix("http://").partition(":")
        return cls(*await asyncio.open_connection(host, int(port)))

    async def exchange(self, request: bytes) -> int:
        """Send one request and read its whole response; the status."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
        length = {k.strip().lower(): v.strip() for k, v in fields.items()}.get("content-length")
        if length is None:
            raise RuntimeError(f"a response without Content-Length: {lines[0]}")
        await self.reader.readexactly(int(length))
        return int(lines[0].split()[1])

    def close(self) -> None:
        self.writer.close()


def http_request(method: str, url: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    host = url.removeprefix("http://")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def timed(url: str, request: bytes, connection: Connection | None) -> float:
    """One delivery; the seconds until Slack would have its ack (connection setup counted when cold)."""
    started = time.perf_counter()
    own = connection or await Connection.open(url)
    try:
        status = await own.exchange(request)
    finally:
        if connection is None:
            own.close()
    if status != 200:
        raise RuntimeError(f"ack {status}")
    return time.perf_counter() - started


def envelopes(count: int) -> list[dict[str, Any]]:
    events = []
    for n in range(count):
        user = f"U{n % USERS:04d}"
        events.append(event_envelope(dm_event(user, f"Question {n}: can I work from abroad?", channel=f"D{user[1:]}")))
    return events


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def runs_in_database(data_dir: Path, database_url: str | None) -> int:
    if database_url:
        return await count_runs(database_url)
    with sqlite3.connect(data_dir / "policypal.db") as db:
        return int(db.execute("select count(*) from runs").fetchone()[0])


async def burst(
    url: str, requests: list[bytes], *, warm: bool, after: Callable[[], Awaitable[None]] | None = None
) -> list[float]:
    """Every request at once, as a burst from Slack would arrive; on kept-alive connections when ``warm``;
    ``after``: awaited once the connections are open, before the burst."""
    connections: list[Connection | None] = [None] * len(requests)
    if warm:  # open the connections first, so connection setup is not counted as ack time
        connections = list(await asyncio.gather(*(Connection.open(url) for _ in requests)))
        healthz = http_request("GET", url, "/healthz")
        await asyncio.gather(*(c.exchange(healthz) for c in connections if c is not None))
    if after is not None:
        await after()
    try:
        return list(await asyncio.gather(*(timed(url, r, c) for r, c in zip(requests, connections, strict=True))))
    finally:
        for connection in connections:
            if connection is not None:
                connection.close()


def event_requests(url: str, events: list[dict[str, Any]], retry: int | None) -> list[bytes]:
    """Signed deliveries, built before the clock starts: signing is Slack's work, not the server's."""
    requests = []
    for envelope in events:
        body, headers = signed(envelope, retry)
        requests.append(http_request("POST", url, "/slack/events", body, headers))
    return requests


async def wait_replies(slack: FakeSlackAPI, count: int, timeout_s: float) -> None:
    with contextlib.suppress(AssertionError):  # too few replies: the report shows how many
        await slack.wait_for("chat.postMessage", count, timeout=timeout_s)


async def send(args: argparse.Namespace) -> None:
    """The sender process: the burst, then the redeliveries; latencies as JSON on stdout."""
    url, events, warm = args.send, envelopes(args.events), not args.cold
    if args.when_ready:  # at start: no /healthz burst first, the acks are what meets the model's loading
        await until_listening(url)
        acks = await burst(url, event_requests(url, events, None), warm=warm, after=lambda: until_ready(url))
        floor = await burst(url, [http_request("GET", url, "/healthz")] * args.events, warm=warm)
    else:
        floor = await burst(url, [http_request("GET", url, "/healthz")] * args.events, warm=warm)  # on an idle server
        acks = await burst(url, event_requests(url, events, None), warm=warm)
    again = await burst(url, event_requests(url, events[: args.redeliver], 1), warm=warm) if args.redeliver else []
    print(json.dumps({"acks": acks, "redelivered": again, "healthz": floor}))


async def until_listening(url: str) -> None:
    """Poll until the port accepts connections (a server starting up)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            (await Connection.open(url)).close()
            return
        await asyncio.sleep(0.005)
    raise SystemExit("the server did not listen within 60 s")


async def until_ready(url: str) -> None:
    """Poll /readyz every 5 ms until it says 200."""
    connection, request = await Connection.open(url), http_request("GET", url, "/readyz")
    try:
        deadline = time.monotonic() + 60
        while await connection.exchange(request) != 200:
            if time.monotonic() > deadline:
                raise SystemExit("the server was not ready within 60 s")
            await asyncio.sleep(0.005)
    finally:
        connection.close()


def run_sender(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Slack's side in its own process, so the fakes' threads here never slow the sender down."""
    command = [
        sys.executable,
        __file__,
        "--send",
        url,
        "--events",
        str(args.events),
        "--redeliver",
        str(args.redeliver),
    ]
    command += [*(["--cold"] if args.cold else []), *(["--when-ready"] if args.at_start else [])]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    data: dict[str, list[float]] = json.loads(result.stdout)
    return data


async def run(args: argparse.Namespace) -> int:
    if not args.postgres:
        return await run_on(args, None)
    async with scratch_database(args.postgres) as url:
        return await run_on(args, url)


async def run_on(args: argparse.Namespace, database_url: str | None) -> int:
    model = FakeOpenAI.start_in_thread()
    model.script(*(delay(args.latency, text("Yes, for up to four weeks a year.")) for _ in range(args.events)))
    slack = FakeSlackAPI.start_in_thread()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir, port = Path(tmp), free_port()
        url = f"http://127.0.0.1:{port}"
        env, indexing = server_env(data_dir, model, slack, database_url), None
        if args.queue_wait is not None:
            env["POLICYPAL_QUEUE_WAIT_S"] = str(args.queue_wait)
        if args.index_during or args.at_start:
            built = policypal(["index", str(REPO / "bot" / "sample_policies")], env, data_dir)
            if built.wait() != 0:
                raise SystemExit(f"indexing the sample policies failed:\n{built.stderr.read() if built.stderr else ''}")
        real_index = bool(args.index_during)
        if args.at_start:
            server = start_policypal_serve(port, env, data_dir)
        else:
            server = start_server(port, env, data_dir, freeze_gc=args.gc_freeze, real_index=real_index)
        try:
            if not args.at_start:
                async with aiohttp.ClientSession() as session:
                    await wait_healthy(session, url, server)
                (warm_up,) = event_requests(url, [{"type": "url_verification", "challenge": "warm"}], None)
                await timed(url, warm_up, None)
            if args.index_during:
                indexing = (time.monotonic(), policypal(["index", str(args.index_during)], env, data_dir))
                await asyncio.sleep(INDEX_HEAD_START_S)  # the embedding model is busy by the time the burst comes
            started = time.monotonic()
            sent = await asyncio.to_thread(run_sender, url, args)
            await wait_replies(slack, args.events, timeout_s=60 + args.latency * 2)
            done_s = time.monotonic() - started
            await asyncio.sleep(0.5)  # a redelivery that wrongly started a run would reply by now
            report(args, sent, model, slack, peak_rss_mb(server.pid), done_s)
            if indexing is not None:
                began, process = indexing
                busy_during_burst = process.poll() is None
                code = await asyncio.to_thread(process.wait)
                err = process.stderr.read() if process.stderr else ""
                print(f"indexing during burst:   {args.index_during} through the server, exit {code}, "
                      f"{time.monotonic() - began:.0f} s, still embedding when the burst was done: "
                      f"{'yes' if busy_during_burst else 'no'}")
                if code != 0:
                    print(err, file=sys.stderr)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=60)
            runs = await runs_in_database(data_dir, database_url)
            print(f"runs in the database:    {runs}")
            model.stop()
            slack.stop()
    ok = runs == args.events and len(slack.calls_to("chat.postMessage")) == args.events  # every one answered
    return 0 if ok and percentile(sent["acks"], 0.99) * 1000 < TARGET_P99_MS else 1


def report(
    args: argparse.Namespace,
    sent: dict[str, list[float]],
    model: FakeOpenAI,
    slack: FakeSlackAPI,
    peak_mb: float,
    total_s: float,
) -> None:
    ms, redelivered = [a * 1000 for a in sent["acks"]], sent["redelivered"]
    connections = "new connections" if args.cold else "connections opened beforehand"
    print(f"events sent at once:     {args.events} on {connections} (+{len(redelivered)} redeliveries, Retry-Num 1)")
    p50, p99, mean = percentile(ms, 0.5), percentile(ms, 0.99), statistics.fmean(ms)
    print(f"ack latency:             p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(ms):.1f} ms, mean {mean:.1f} ms")
    print(f"                         (target: p99 under {TARGET_P99_MS:.0f} ms)")
    floor = [a * 1000 for a in sent["healthz"]]
    print(f"same burst to /healthz:  p50 {percentile(floor, 0.5):.1f} ms, p99 {percentile(floor, 0.99):.1f} ms "
          "(idle server, no Slack work: the HTTP stack's share)")  # fmt: skip
    if redelivered:
        rms = [a * 1000 for a in redelivered]
        print(f"redelivery ack latency:  p50 {percentile(rms, 0.5):.1f} ms, p99 {percentile(rms, 0.99):.1f} ms")
    print(f"runs started:            {len(model.requests)} (model requests; scripted latency {args.latency:.1f} s)")
    posted = slack.calls_to("chat.postMessage")
    busy = [call for call in posted if BUSY_MARK in f"{call.get('text') or ''} {call.block_text}"]
    print(f"replies posted:          {len(posted)}: {len(posted) - len(busy)} answered, {len(busy)} told busy")
    print(f"all replies in:          {total_s:.1f} s after the first event")
    print(f"server peak memory:      {peak_mb:.0f} MB (VmHWM)")
    print(f"gc.freeze() at start-up: {'yes' if args.gc_freeze else 'no'}")
    if args.at_start:
        print("server:                  policypal serve, burst sent when /readyz first said 200 (model loading)")
    print(f"queue wait:              {'default' if args.queue_wait is None else f'{args.queue_wait:g} s'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--postgres", metavar="URL", default=None,
                        help="run the server on PostgreSQL (a scratch database is made beside URL's and dropped)")
    parser.add_argument("--latency", type=float, default=1.0, help="scripted model latency per run, seconds")
    parser.add_argument("--redeliver", type=int, default=200, help="events delivered a second time as retries")
    parser.add_argument("--cold", action="store_true", help="count TCP connection setup in the ack time")
    parser.add_argument(
        "--no-gc-freeze",
        dest="gc_freeze",
        action="store_false",
        help="skip the gc.freeze() that `policypal serve` does after start-up (to see what it buys)",
    )
    parser.add_argument("--index-during", type=Path, metavar="DIR",
                        help="index DIR through the server (real embedded index) while the burst arrives")
    parser.add_argument("--queue-wait", type=float, metavar="S", default=None,
                        help="POLICYPAL_QUEUE_WAIT_S for the server (default: the setting's default)")
    parser.add_argument("--at-start", action="store_true",
                        help="policypal serve itself, the burst sent the moment /readyz first says 200")
    parser.add_argument("--real-index", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--when-ready", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--send", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.gc_freeze, args.real_index)
        return 0
    if args.send:
        asyncio.run(send(args))
        return 0
    # SIGTERM (a timeout, Ctrl-C in a wrapper) still runs the cleanup that stops the server process.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
