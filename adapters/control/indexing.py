"""`policypal index` through the server: the paths it is sent, indexed with the index it already holds.

One request at a time (a second is told to wait); searches keep being answered meanwhile. Audiences are
checked against this server's groups, which decide who can read a document.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from pathlib import Path

from adapters.control.listener import Action, Refused
from adapters.control.protocol import IndexRequest, Json, read
from bot.index import OwnedIndex
from retrieval import IndexingStopped, format_report, load_for_index

log = logging.getLogger(__name__)

def index_action(owned: OwnedIndex, known_groups: Collection[str] | None) -> Action:
    """The /index route: index (or remove) absolute paths, one request at a time."""
    busy = asyncio.Lock()

    async def index(body: Json) -> Json:
        asked = read(IndexRequest, body)
        if busy.locked():
            raise Refused(409, "the server is already indexing; try again when it is done")
        async with busy:
            try:
                return await _index_paths(owned, [Path(p) for p in asked.paths], asked.remove, known_groups)
            except Exception as exc:
                log.exception("indexing through the server failed")
                raise Refused(500, f"indexing failed in the server: {exc}") from exc

    return index


async def _index_paths(owned: OwnedIndex, paths: list[Path], remove: bool, groups: Collection[str] | None) -> Json:
    started = time.perf_counter()
    if remove:
        report, location = await owned.remove_roots(paths)
        failures = [[str(failure.path), failure.reason] for failure in report.failures]
        return {"text": format_report(report, location), "failures": failures, "ok": report.ok}
    loads, nothing = await asyncio.to_thread(load_for_index, paths, known_groups=groups)
    failures = [[str(f.path), f.reason] for load in loads for f in load.report.failures]
    if nothing:
        return {"error": nothing, "failures": failures}
    try:
        report, location = await owned.index_loads(loads)
    except IndexingStopped as exc:  # the server is shutting down: say so, it is not a failure of the files
        return {"error": str(exc), "failures": failures}
    report.seconds = time.perf_counter() - started  # reading and parsing the files included
    failures = [[str(failure.path), failure.reason] for failure in report.failures]
    return {"text": format_report(report, location), "failures": failures, "ok": report.ok}
