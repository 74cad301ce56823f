"""The ``policypal`` command: one subcommand per job, each a thin call into the package that owns it.

The CLI is the composition root, so it alone may reach into adapters (lazily, per command).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import getpass
import logging
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from sqlalchemy.exc import SQLAlchemyError

from adapters.cli.data_home import prepare_for_command
from bot.config import Settings, load_settings, without_secrets
from bot.errors import ConfigError
from retrieval import MAX_K

# Commands that close everything they open before returning, so the process may end without teardown.
QUICK_EXIT = frozenset({"ask", "chat", "decide", "search"})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="policypal", description="A policy assistant for Slack and Teams.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug output to stderr")
    parser.add_argument("--version", action="version", version=f"policypal {_installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    index = sub.add_parser("index", help="index policy documents (files or directories)")
    index.add_argument("paths", nargs="+", type=_path, help=".md .txt .html .pdf .docx files or directories")
    index.add_argument("--remove", action="store_true",
                       help="remove what was indexed from these paths instead (they may no longer exist)")

    search = sub.add_parser("search", help="search the policy index")
    search.add_argument("query", type=_query)
    search.add_argument("-k", type=_passage_count, default=None, help=f"number of passages (1-{MAX_K}, default 5)")
    search.add_argument("--section", default=None, help="only this section")
    search.add_argument("--json", action="store_true", help="print one JSON array for scripts")

    ask = sub.add_parser("ask", help="ask one question in the terminal")
    ask.add_argument("question")
    _user_options(ask)
    ask.add_argument("--json", action="store_true",
                     help="print the outcome as one JSON object (no prompt: a ticket is left open without --yes/--no)")
    choice = ask.add_mutually_exclusive_group()
    choice.add_argument("--yes", action="store_true", help="confirm a proposed ticket without a prompt")
    choice.add_argument("--no", action="store_true", help="cancel a proposed ticket without a prompt")

    chat = sub.add_parser("chat", help="chat in the terminal (one thread)")
    _user_options(chat)

    decide = sub.add_parser("decide", help="confirm or cancel a pending action by id")
    decide.add_argument("pending_id")
    decide.add_argument("decision", choices=["confirm", "cancel"])
    _user_options(decide)

    serve = sub.add_parser("serve", help="serve Slack and Teams, with /healthz, /readyz and /metrics")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=3000)

    config = sub.add_parser("config", help="check the configuration without starting anything")
    config.add_argument("action", choices=["check"])

    db = sub.add_parser("db", help="database schema: upgrade to this release, or show where it stands")
    db.add_argument("action", choices=["upgrade", "current"])

    package = sub.add_parser("teams-package", help="write the Teams app package (zip) an admin uploads")
    package.add_argument("--out", default="policypal-teams.zip")

    traces = sub.add_parser("traces", help="list recent runs, or show one run's steps")
    traces.add_argument("run_id", nargs="?")
    traces.add_argument("-n", type=_how_many, default=20, help="how many runs to list")
    traces.add_argument("--json", action="store_true")

    gaps = sub.add_parser("gaps", help="questions the policies did not cover (not_covered runs), with counts")
    gaps.add_argument("-n", type=_how_many, default=20, help="how many distinct questions to list")
    gaps.add_argument("--json", action="store_true")

    evaluate = sub.add_parser("eval", help="run a task file through the real service and score every run")
    evaluate.add_argument("tasks", type=_path, help="tasks, one JSON object a line (JSONL)")
    evaluate.add_argument("--json", dest="json_out", metavar="OUT", type=_path, default=None,
                          help="also write the report as JSON to OUT")
    evaluate.add_argument("--concurrency", type=_concurrency, default=4, help="tasks run at once (default 4)")
    evaluate.add_argument("--min-success", type=_fraction, default=None, metavar="R",
                          help="exit 1 when fewer than this share of tasks pass (0..1)")
    evaluate.add_argument("--compare", type=_path, default=None, metavar="OLD.json",
                          help="an earlier --json report: what got better or worse")

    handoffs = sub.add_parser("handoffs", help="helpdesk cases: list them, print one transcript, retry deliveries")
    handoffs.add_argument("case_id", nargs="?", help="a case id such as HD-1001: print its transcript")
    handoffs.add_argument("-n", type=_how_many, default=20, help="how many cases to list")
    handoffs.add_argument("--failed", action="store_true", help="only cases with a delivery that gave up, and why")
    handoffs.add_argument("--retry", action="store_true", help="retry failed deliveries (all, or CASE_ID's) now")
    handoffs.add_argument("--json", action="store_true")
    return parser


def _installed_version() -> str:
    """The version pip installed (one home: pyproject.toml); a bare source checkout says so instead."""
    try:
        return version("policypal")
    except PackageNotFoundError:
        return "(not installed: run pip install -e .)"


def _user_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user", default=None, help="user id (default: your login name)")
    parser.add_argument("--group", action="append", default=[], help="audience group (repeatable)")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr)
    try:
        settings = load_settings()
        code = _run(args, settings)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if argv is None and args.command in QUICK_EXIT:  # the `policypal` process itself; callers pass argv
        _exit_skipping_teardown(code)
    return code


def _exit_skipping_teardown(code: int) -> NoReturn:
    """End the process now: the command has closed its store and index, and freeing every module on the
    way out (onnxruntime, SQLAlchemy, ...) cost 0.3-1 s of a 4 s `policypal ask` (benchmarks/cli_timing.py).
    """
    atexit._run_exitfuncs()  # what registered for exit still runs: logging's final flush among them
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # e.g. a closed pipe: the interpreter's own exit would fail the same way, with 120
        code = code or 120
    os._exit(code)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    """The command, with a database or data directory it cannot use as one line (exit 1), not a traceback."""
    try:
        prepare_for_command(args.command, settings)  # the data home, made and named the first time
        return _dispatch(args, settings)
    except (OSError, SQLAlchemyError) as exc:  # refused connection, POLICYPAL_DATA_DIR naming a file, ...
        logging.debug("policypal %s failed", args.command, exc_info=True)
        reason = f"{type(exc).__name__}: {str(exc).strip()}".splitlines()[0]
        print(f"policypal {args.command}: {without_secrets(reason, settings)}", file=sys.stderr)
        return 1


def _path(value: str) -> str:
    """A path argument; an empty one (an unset ``$DIR``) would mean the working directory, so it is refused."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path (it would mean the current directory; write . for that)")
    return value


def _query(value: str) -> str:
    """A search query; a blank one (an unset ``$Q``) has nothing to search for, which is not "no passage"."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty query")
    return value


def _how_many(value: str) -> int:
    """A list length: SQLite reads a negative LIMIT as no limit at all."""
    return _whole_number(value, most=None)


def _concurrency(value: str) -> int:
    return _whole_number(value, most=64)


def _fraction(value: str) -> float:
    """A share such as a success rate: 0 to 1 (0.9, not 90)."""
    try:
        share = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1 (0.9 for 90 %)")
    return share


def _passage_count(value: str) -> int:
    return _whole_number(value, most=MAX_K)


def _whole_number(value: str, *, most: int | None) -> int:
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if most is not None and not 1 <= count <= most:
        raise argparse.ArgumentTypeError(f"must be between 1 and {most}")
    if count < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return count


def _index(settings: Settings, paths: list[str], *, remove: bool = False) -> int:
    """Index (or remove) here, or through `policypal serve` when it holds the embedded index."""
    from adapters.cli.index import run_index, run_remove
    from adapters.control import forward_index
    from bot.identity import known_groups

    cfg = settings.retrieval()
    forwarded = forward_index(cfg, paths, remove=remove)  # the server checks audiences against its own groups
    if forwarded is None and remove:
        return run_remove(cfg, paths)
    if forwarded is None:
        return run_index(cfg, paths, known_groups=known_groups(settings.user_groups))
    for path, reason in forwarded.failures:
        print(f"failed: {path}: {reason}", file=sys.stderr)
    if forwarded.error:
        print(forwarded.error, file=sys.stderr)
        return 1
    done = "removed" if remove else "indexed"
    print(f"({done} by the running `policypal serve`, which holds the index)", file=sys.stderr)
    sys.stdout.write(forwarded.text)
    return 0 if forwarded.ok else 1


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "index":
        return _index(settings, args.paths, remove=args.remove)
    if args.command == "search":
        return _search(args, settings)
    if args.command == "serve":
        from adapters.server import run_server

        return run_server(settings, args.host, args.port)
    if args.command == "config":
        from adapters.cli.admin import config_check

        return asyncio.run(config_check(settings))
    if args.command == "db":
        from adapters.cli.admin import db_command

        return asyncio.run(db_command(settings, args.action))
    if args.command == "teams-package":
        from adapters.teams import write_package

        return write_package(settings, args.out)
    if args.command == "traces":
        from adapters.cli.traces import show_traces

        return asyncio.run(show_traces(settings, args.run_id, limit=args.n, as_json=args.json))
    if args.command == "handoffs":
        return _handoffs(args, settings)
    if args.command == "gaps":
        from adapters.cli.gaps import show_gaps

        return asyncio.run(show_gaps(settings, limit=args.n, as_json=args.json))
    if args.command == "eval":
        return _eval(args, settings)
    return asyncio.run(_terminal(args, settings))


def _search(args: argparse.Namespace, settings: Settings) -> int:
    """Search here, or through `policypal serve` when it holds the embedded index."""
    from adapters.cli.index import run_search
    from adapters.cli.served import search_served

    served = asyncio.run(search_served(settings, args))
    if served is not None:
        return served
    return run_search(settings.retrieval(), args.query, k=args.k, section=args.section, as_json=args.json)


async def _terminal(args: argparse.Namespace, settings: Settings) -> int:
    """`ask`, `chat`, `decide` on the service of `policypal serve` when it holds the embedded index, else here."""
    from adapters.cli.console import run_terminal
    from adapters.cli.served import terminal_served

    served = await terminal_served(settings, args, _user_id(args))
    return served if served is not None else await run_terminal(settings, args, _user_id(args))


def _handoffs(args: argparse.Namespace, settings: Settings) -> int:
    from adapters.cli.handoffs import show_handoffs
    from adapters.destinations import destinations

    report = show_handoffs(
        settings,
        args.case_id,
        limit=args.n,
        failed=args.failed,
        retry=args.retry,
        as_json=args.json,
        destinations=destinations,
    )
    return asyncio.run(report)


def _eval(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from adapters.cli.eval import EvalOptions, run_eval

    options = EvalOptions(
        tasks=Path(args.tasks),
        json_out=Path(args.json_out) if args.json_out else None,
        concurrency=args.concurrency,
        min_success=args.min_success,
        compare=Path(args.compare) if args.compare else None,
    )
    return asyncio.run(run_eval(settings, options))


def _user_id(args: argparse.Namespace) -> str:
    return args.user or getpass.getuser()

