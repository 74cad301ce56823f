"""The CLI's end of the control socket: find the server holding the embedded index, and ask it.

A socket is used only when it is one our own server made (a socket, ours, owner-only); anyone else's
could receive our paths and questions and lie back. Until the server first answers, a socket nobody
listens on means there is no server (one was killed): the command then runs in this process. After
that, losing the server is an error said plainly: the command was half done by it.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from adapters.control.protocol import INDEX, Json, socket_path
from retrieval import RetrievalConfig, real_path

CONNECT_TIMEOUT_S = 5.0


class NoServer(Exception):
    """No server listens on the socket (it was killed, or it is shutting down): do the work here."""


class ControlError(Exception):
    """The server refused, went away, or cannot be trusted; the text says which, for the person.

    ``answer``: what the server sent along with its refusal (files it could not read, for instance).
    """

    def __init__(self, message: str, answer: Json | None = None) -> None:
        super().__init__(message)
        self.answer = answer or {}


@dataclass
class ControlClient:
    """Requests to the server holding the embedded index at ``index``, over its socket at ``path``."""

    path: Path
    index: Path
    answered: bool = False  # the server answered once: from then on, a refused connection means it went away

    @classmethod
    def find(cls, cfg: RetrievalConfig) -> ControlClient | None:
        """The socket of the server holding this index; None when there is none (or a Qdrant server is used)."""
        path = socket_path(cfg)
        if cfg.qdrant_url or not path.exists():
            return None  # a Qdrant server takes every process: nothing to hand over
        if problem := _untrusted(path):
            raise ControlError(f"Refusing the control socket {path}: {problem}. Remove it if no `policypal serve` "
                               "of yours is running, and keep POLICYPAL_DATA_DIR private to its user.")
        return cls(path, cfg.qdrant_path)

    async def call(self, route: str, body: Json, *, timeout_s: float | None = None) -> Json:
        """POST ``body`` to ``route`` and return the answer; ``timeout_s`` bounds the wait for it (None: none)."""
        import aiohttp  # only once a server's socket is found: a command run alone never loads it

        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=timeout_s)
        connector = aiohttp.UnixConnector(path=str(self.path))
        try:
            async with (
                aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
                session.post(f"http://localhost{route}", json=body) as response,
            ):
                status, raw = response.status, await response.read()
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            if self.answered:
                raise self._gone(exc) from exc
            raise NoServer(str(exc)) from exc
        except aiohttp.ServerTimeoutError as exc:
            raise ControlError(f"The `policypal serve` holding the index at {self.index} gave no answer within "
                               f"{timeout_s} s; it may still finish (`policypal traces` lists its runs).") from exc
        except aiohttp.ClientResponseError as exc:  # not HTTP at all
            raise self.unreadable(exc) from exc
        except (aiohttp.ClientError, OSError) as exc:  # disconnected, reset, the body cut short
            raise self._gone(exc) from exc
        self.answered = True
        return self._answer(route, status, raw)

    def _answer(self, route: str, status: int, raw: bytes) -> Json:
        try:
            answer = json.loads(raw or b"{}")
        except ValueError as exc:
            if status == 404:
                raise ControlError(f"The `policypal serve` holding the index at {self.index} does not take {route} "
                                   "requests (an older release): restart it with this one.") from exc
            raise self.unreadable(exc) from exc
        if not isinstance(answer, dict):
            raise self.unreadable(ValueError(f"a JSON {type(answer).__name__}, not an object"))
        if status != 200:
            raise ControlError(str(answer.get("error") or f"the server answered {status}"), answer)
        return answer

    def unreadable(self, exc: Exception) -> ControlError:
        return ControlError(f"The server holding the index at {self.index} gave an unreadable answer ({exc}).")

    def _gone(self, exc: Exception) -> ControlError:
        reason = str(exc) or type(exc).__name__
        return ControlError(f"The `policypal serve` holding the index at {self.index} went away before it answered "
                            f"({reason}). What it finished is kept (`policypal traces` lists its runs); "
                            "run the command again.")


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


# --- `policypal index` ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Forwarded:
    """What the server answered: its formatted report, the files it could not read, or an error."""

    text: str = ""
    failures: Sequence[tuple[str, str]] = ()
    ok: bool = False
    error: str | None = None


def forward_index(cfg: RetrievalConfig, paths: Sequence[str | Path], *, remove: bool = False) -> Forwarded | None:
    """Ask the server holding the embedded index to index (or remove) these paths; None when no server answers."""
    return asyncio.run(_forward_index(cfg, [real_path(p) for p in paths], remove))


async def _forward_index(cfg: RetrievalConfig, paths: list[str], remove: bool) -> Forwarded | None:
    try:
        client = ControlClient.find(cfg)
        if client is None:
            return None
        answer = await client.call(INDEX, {"paths": paths, "remove": remove})  # indexing a folder takes minutes
    except NoServer:
        return None  # a socket left by a killed server: indexing here says who holds the index
    except ControlError as exc:
        return Forwarded(failures=_failures(exc.answer), error=str(exc))
    if answer.get("error"):
        return Forwarded(failures=_failures(answer), error=str(answer["error"]))
    return Forwarded(text=str(answer.get("text", "")), failures=_failures(answer), ok=bool(answer.get("ok")))


def _failures(answer: Json) -> list[tuple[str, str]]:
    return [(str(path), str(reason)) for path, reason in answer.get("failures", [])]
