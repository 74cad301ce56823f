"""The server's end of the control socket: owner-only from its first moment, gone when the server stops.

Connecting to a Unix socket needs write permission on it, so mode 0600 lets only the server's own user
in, and nothing is exposed on the network. Each route is an action on a JSON object that answers a JSON
object; what the action refuses becomes a status and a sentence, never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

from aiohttp import web

from adapters.control.protocol import Json, Malformed

log = logging.getLogger(__name__)

Action = Callable[[Json], Awaitable[Json]]
MAX_SOCKET_PATH = 100  # AF_UNIX paths are limited to about 108 bytes
COMMANDS = "`policypal index`, `search`, `ask`, `chat` and `decide`"


class Refused(Exception):
    """An action that cannot be done now or this way: ``status`` and the sentence the CLI prints."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@contextlib.asynccontextmanager
async def serving(path: Path, routes: Mapping[str, Action]) -> AsyncIterator[None]:
    """Serve the socket for the duration of the block (the server's lifetime)."""
    runner = await _start(path, routes)
    try:
        yield
    finally:
        if runner is not None:
            await runner.cleanup()
            _remove(path)


async def _start(path: Path, routes: Mapping[str, Action]) -> web.AppRunner | None:
    if len(str(path)) > MAX_SOCKET_PATH:
        log.warning("control socket path %s is too long for a Unix socket; %s cannot reach this server and "
                    "will say the index is in use", path, COMMANDS)
        return None
    app = web.Application()
    for route, action in routes.items():
        app.router.add_post(route, _handler(route, action))
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
        log.warning("cannot listen on %s (%s); %s will say the index is in use", path, exc, COMMANDS)
        await runner.cleanup()
        return None
    log.info("%s reach this server through %s", COMMANDS, path)
    return runner


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _owner_only(path: Path) -> None:
    """0600: connecting to a Unix socket needs write permission, so only this user can send requests."""
    path.chmod(0o600)


def _handler(route: str, action: Action) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the request is not JSON")
        if not isinstance(body, dict):
            return error(400, "the request is not a JSON object")
        try:
            return web.json_response(await action(body))
        except Malformed as exc:
            return error(400, str(exc))
        except Refused as exc:
            return error(exc.status, str(exc))
        except Exception as exc:
            log.exception("%s through the control socket failed", route)
            return error(500, f"{route.strip('/')} failed in the server: {exc}")

    return handle


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
