"""The ``policypal`` command: one subcommand per job, each a thin call into the package that owns it."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from bot.config import ConfigError, load_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="policypal", description="A policy assistant for Slack and Teams.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug output to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    index = sub.add_parser("index", help="index policy documents (files or directories)")
    index.add_argument("paths", nargs="+", help=".md .txt .html .pdf .docx files or directories")

    search = sub.add_parser("search", help="search the policy index")
    search.add_argument("query")
    search.add_argument("-k", type=int, default=None, help="number of passages (default 5)")
    search.add_argument("--section", default=None, help="only this section")
    search.add_argument("--json", action="store_true", help="print one JSON array for scripts")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.command == "index":
        from retrieval.commands import run_index

        return run_index(settings.retrieval(), args.paths)
    if args.command == "search":
        from retrieval.commands import run_search

        return run_search(settings.retrieval(), args.query, k=args.k, section=args.section, as_json=args.json)
    return 2


if __name__ == "__main__":
    sys.exit(main())
