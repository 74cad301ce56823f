"""`policypal index` while `policypal serve` holds the embedded index: the CLI hands the paths to the server.

The embedded index (qdrant-edge) is one process per path, so a second process cannot write to it. The
server listens on a Unix socket beside the index (mode 0600: only its own user can connect, and
nothing is exposed on the network) and indexes the paths it is sent with the index it already holds,
one request at a time; searches keep being answered meanwhile. The CLI tries the socket first and
falls back to indexing itself when no server answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import os
import socket
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from retrieval import RetrievalConfig, real_path

log = logging.getLogger(__name__)

Json = dict[str, Any]
IndexPaths = Callable[[list[Path], bool], Awaitable[Json]]  # (paths, remove instead of index)
ROUTE = "/index"
MAX_SOCKET_PATH = 100  # AF_UNIX paths are limited to about 108 bytes
CONNECT_TIMEOUT_S = 5.0


def socket_path(cfg: RetrievalConfig) -> Path:
    """Beside the embedded index's lock file, so the CLI finds the server that holds that index."""
    return cfg.qdrant_path / f".{cfg.collection}.sock"


# --- the server side ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def serving(path: Path, index_paths: IndexPaths) -> AsyncIterator[None]:
    """Serve the socket for the duration of the block (the server's lifetime)."""
    runner = await _start(path, index_paths)
    try:
        yield
    finally:
        if runner is not None:
            await runner.cleanup()
            _remove(path)


async def _start(path: Path, index_paths: IndexPaths) -> web.AppRunner | None:
    if len(str(path)) > MAX_SOCKET_PATH:
        log.warning("index socket path %s is too long for a Unix socket; `policypal index` cannot reach "
                    "this server and will say the index is in use", path)
        return None
    app = web.Application()
    app.router.add_post(ROUTE, _handler(index_paths, asyncio.Lock()))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        _remove(path)  # left by a server that was killed; we hold the index lock, so it is not live
        previous = os.umask(0o077)  # born owner-only: no moment in which another user could connect
        try:
            await web.UnixSite(runner, str(path)).start()
        finally:
            os.umask(previous)
        _owner_only(path)
    except OSError as exc:  # e.g. a file system without sockets: serving matters more than this
        log.warning("cannot listen on %s (%s); `policypal index` will say the index is in use", path, exc)
        await runner.cleanup()
        return None
    log.info("policypal index reaches this server through %s", path)
    return runner


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _owner_only(path: Path) -> None:
    """0600: connecting to a Unix socket needs write permission, so only this user can ask for indexing."""
    path.chmod(0o600)


def _handler(index_paths: IndexPaths, busy: asyncio.Lock) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the request is not JSON")
        paths = body.get("paths") if isinstance(body, dict) else None
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and os.path.isabs(p) for p in paths):
            return _error(400, "send {\"paths\": [absolute paths], \"remove\": false}")
        remove = body.get("remove", False)
        if not isinstance(remove, bool):
            return _error(400, "`remove` must be true or false")
        if busy.locked():
            return _error(409, "the server is already indexing; try again when it is done")
        async with busy:
            try:
                return web.json_response(await index_paths([Path(p) for p in paths], remove))
            except Exception as exc:
                log.exception("indexing through the server failed")
                return _error(500, f"indexing failed in the server: {exc}")

    return handle


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


# --- the CLI side ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Forwarded:
    """What the server answered: its formatted report, the files it could not read, or an error."""

    text: str = ""
    failures: Sequence[tuple[str, str]] = ()
    ok: bool = False
    error: str | None = None


def forward_index(cfg: RetrievalConfig, paths: Sequence[str | Path], *, remove: bool = False) -> Forwarded | None:
    """Ask the server holding the embedded index to index (or remove) these paths; None when no server answers."""
    path = socket_path(cfg)
    if cfg.qdrant_url or not path.exists():
        return None
    if problem := _untrusted(path):  # someone else's socket would receive our paths and could lie back
        return Forwarded(error=f"Refusing the index socket {path}: {problem}. Remove it if no `policypal serve` "
                               "of yours is running, and keep POLICYPAL_DATA_DIR private to its user.")
    connection = _UnixConnection(path)
    try:
        body = json.dumps({"paths": [real_path(p) for p in paths], "remove": remove})
        connection.request("POST", ROUTE, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read() or b"{}")
    except OSError:
        return None  # a socket left by a killed server (or not ours): indexing here says who holds the index
    except (ValueError, http.client.HTTPException) as exc:
        return Forwarded(error=f"The server holding the index at {cfg.qdrant_path} gave an unreadable answer ({exc}).")
    finally:
        connection.close()
    failures = [(str(p), str(reason)) for p, reason in answer.get("failures", [])]
    if response.status != 200 or answer.get("error"):
        error = str(answer.get("error") or f"the server answered {response.status}")
        return Forwarded(failures=failures, error=error)
    return Forwarded(text=str(answer.get("text", "")), failures=failures, ok=bool(answer.get("ok")))


def _untrusted(path: Path) -> str | None:
    """Why a socket is not the one our own server made (owner-only, ours), or None when it is."""
    info = os.lstat(path)
    if not stat.S_ISSOCK(info.st_mode):
        return "it is not a socket"
    if info.st_uid != os.getuid():
        return f"it belongs to user id {info.st_uid}, not to you"
    if info.st_mode & 0o077:
        return f"others may use it (mode {stat.S_IMODE(info.st_mode):o})"
    return None


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over the server's Unix socket: a short connect timeout, then as long as indexing takes."""

    def __init__(self, path: Path) -> None:
        super().__init__("localhost")
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        sock.connect(str(self._path))
        sock.settimeout(None)
        self.sock = sock
