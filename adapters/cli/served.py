"""`policypal search|ask|chat|decide` while `policypal serve` holds the embedded index: the server answers.

The command runs here as it does alone (console.py prompts in this terminal, formats and prints), but
each service call is a request on the server's control socket, answered by the live bot's service,
index, database and model. With no server there (or a Qdrant server, which every process can use),
``None`` tells the caller to run the command itself.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from adapters import control
from adapters.cli.index import print_passages
from bot.config import Settings, without_secrets
from bot.delivery import DeliveryResult
from bot.service import Choice, DecisionReply, Reply
from bot.types import Inbound, UserRef
from retrieval import Passage

T = TypeVar("T")
Work = Callable[[control.ControlClient], Awaitable[int]]

HELLO_TIMEOUT_S = 10.0  # a server that cannot say hello in this long is stuck, not busy
ANSWER_TIMEOUT_S = 300.0  # far beyond a run's deadline, a ticket call and a case's delivery


async def search_served(settings: Settings, args: argparse.Namespace) -> int | None:
    """`policypal search` by the server holding the index; None when no server holds it."""

    async def search(client: control.ControlClient) -> int:
        k = args.k or settings.retrieval().top_k  # this process's default, as a search here would use
        body = {"query": args.query, "k": k, "section": args.section}
        passages = await _read(client, control.SEARCH, body, "passages", _passages)
        print_passages(passages, as_json=args.json)
        return 0

    return await _served(settings, search)


async def terminal_served(settings: Settings, args: argparse.Namespace, user_id: str) -> int | None:
    """`policypal ask|chat|decide` on the service of the server holding the index; None when there is none."""
    from adapters.cli.console import run_command  # the model's SDK and the rest: not for `search`

    async def command(client: control.ControlClient) -> int:
        return await run_command(ServedService(client), args, user_id)

    return await _served(settings, command)


async def _served(settings: Settings, work: Work) -> int | None:
    """``work`` against the server, its errors as one line each (exit 1); None when no server answers."""
    try:
        client = control.ControlClient.find(settings.retrieval())
        if client is None:
            return None
        hello = await client.call(control.HELLO, {}, timeout_s=HELLO_TIMEOUT_S)
        print(f"(answered by the running `policypal serve`, pid {hello.get('pid')}, which holds the index)",
              file=sys.stderr)  # stdout stays what the command prints alone
        return await work(client)
    except control.NoServer:
        return None  # a socket left by a killed server: the command runs here, and says who holds the index
    except control.ControlError as exc:
        print(without_secrets(str(exc), settings), file=sys.stderr)
        return 1


class ServedService:
    """The terminal's service calls (adapters/cli/terminal_service.py), each made by the running server."""

    def __init__(self, client: control.ControlClient) -> None:
        self._client = client
        self.pending = _ServedPending(client)
        self.outbox = _ServedOutbox(client)

    async def handle_message(self, inbound: Inbound) -> Reply | None:
        body = {"inbound": control.inbound_to_json(inbound)}
        return await _read(self._client, control.MESSAGE, body, "reply", _or_none(control.reply_from_json))

    async def decide(
        self, pending_id: str, actor: UserRef, decision: Choice, args_hash: str
    ) -> DecisionReply:
        body = {"pending_id": pending_id, "user": control.user_to_json(actor), "decision": decision,
                "args_hash": args_hash}
        return await _read(self._client, control.DECIDE, body, "decided", control.decided_from_json)


@dataclass(frozen=True)
class StoredCall:
    id: str
    args_hash: str


class _ServedPending:
    def __init__(self, client: control.ControlClient) -> None:
        self._client = client

    async def get(self, pending_id: str) -> StoredCall | None:
        body = {"pending_id": pending_id}
        return await _read(self._client, control.PENDING, body, "pending", _or_none(_stored_call))


class _ServedOutbox:
    def __init__(self, client: control.ControlClient) -> None:
        self._client = client

    async def run_once(self, case_number: int | None = None, *, timeout_s: float | None = None) -> list[DeliveryResult]:
        body = {"case_number": case_number, "timeout_s": timeout_s}
        return await _read(self._client, control.DELIVER, body, "results", _deliveries)


async def _read(client: control.ControlClient, route: str, body: dict[str, Any], key: str,
                decode: Callable[[Any], T]) -> T:
    """The answer's ``key``, decoded; an answer without it, or not decoding, is an unreadable answer."""
    answer = await client.call(route, body, timeout_s=ANSWER_TIMEOUT_S)
    try:
        return decode(answer[key])
    except (KeyError, control.Malformed) as exc:
        raise client.unreadable(exc) from exc


def _or_none(decode: Callable[[Any], T]) -> Callable[[Any], T | None]:
    return lambda value: None if value is None else decode(value)


def _stored_call(value: Any) -> StoredCall:
    if not isinstance(value, dict) or not isinstance(value.get("args_hash"), str):
        raise control.Malformed("a pending action without its `args_hash`")
    return StoredCall(str(value.get("id", "")), value["args_hash"])


def _passages(value: Any) -> list[Passage]:
    return [control.passage_from_json(item) for item in _listed(value)]


def _deliveries(value: Any) -> list[DeliveryResult]:
    return [control.delivery_from_json(item) for item in _listed(value)]


def _listed(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise control.Malformed("a list was expected")
    return value
