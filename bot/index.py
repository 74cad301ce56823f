"""The policy index as the service holds it: searched off the event loop, closed with the service.

Only an index the service opened itself is wrapped (the embedded one holds a lock for its process);
``policypal index`` during ``policypal serve`` reaches it through ``index_loads`` and ``remove_roots``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from retrieval import IndexReport, Passage, PolicyIndex, RootLoad, SearchFilter


class OwnedIndex:
    """A PolicyIndex the service opened itself, so the service also closes it (releasing its lock)."""

    def __init__(self, index: PolicyIndex) -> None:
        self._index = index

    async def asearch(self, query: str, k: int = 5, filter: SearchFilter | None = None) -> list[Passage]:
        return await self._index.asearch(query, k, filter)

    def sections(self, groups: Sequence[str] | None = None) -> list[str]:
        return self._index.sections(groups)

    @property
    def embedder(self) -> object:
        """The index's embedding model, which the offline model shares to score sentences by meaning."""
        return getattr(self._index, "embedder", None)

    async def ping(self) -> int:
        """Chunks in the index: one cheap call that proves the index (or the Qdrant server) answers."""
        return int(await asyncio.to_thread(self._index.count))

    async def index_loads(self, loads: Sequence[RootLoad]) -> tuple[IndexReport, str]:
        """Index loaded documents with the index this process holds (`policypal index` during `serve`)."""
        report = await asyncio.to_thread(self._index.index_loads, list(loads))
        return report, self._index.location

    def stop_writes(self) -> None:
        """Shutting down: indexing in progress stops at its next batch (what it wrote is kept)."""
        self._index.stop_writes()

    async def remove_roots(self, paths: Sequence[Path]) -> tuple[IndexReport, str]:
        """Remove what was indexed from these paths (`policypal index --remove` during `serve`)."""
        report = await asyncio.to_thread(self._index.remove_roots, list(paths))
        return report, self._index.location

    async def aclose(self) -> None:
        self._index.close()
