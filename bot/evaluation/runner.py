"""Run eval tasks through the real service: the configured model, index, tools and budgets, a scratch database.

Each task is a fresh thread; its turns go through ``PolicyPal.handle_message`` exactly as a message
from the terminal does. The database is a temporary SQLite file, so eval runs never mix with
production traces, knowledge gaps or helpdesk cases, and no helpdesk destination is told anything.
A proposed ticket is left pending: nothing is ever confirmed or created. The searcher is passed
through a recorder that learns which indexed file each source is, so a task can name the file it
expects cited even when citations link to an intranet URL.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.agent import Budgets, RunState, cited_in
from bot.config import Settings
from bot.errors import StateVersionError
from bot.evaluation.checks import CheckResult, Cited, Observed, ToolUse, score
from bot.evaluation.tasks import Task
from bot.index import OwnedIndex
from bot.policy_tools import TICKET_TOOL, Searcher
from bot.service import PolicyPal, Reply
from bot.types import Answer, ChatModel, Citation, Inbound, Pending
from bot.wiring import open_service
from retrieval import Passage, SearchFilter

log = logging.getLogger(__name__)

PLATFORM = "console"  # the terminal's surface: no platform to post to, the same service path
DEFAULT_CONCURRENCY = 4


@dataclass(frozen=True)
class TaskResult:
    task: Task
    runs: tuple[Observed, ...]  # one per turn; the checks judge the last
    checks: tuple[CheckResult, ...] = ()
    error: str | None = None  # the task could not run to its end (a bug, not a score)

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.runs) and all(check.passed for check in self.checks)

    @property
    def last(self) -> Observed | None:
        return self.runs[-1] if self.runs else None


@dataclass(frozen=True)
class EvalRun:
    """Every task's result with what they ran on: the report is built from this."""

    results: tuple[TaskResult, ...]
    model: str
    budgets: Budgets
    seconds: float


OnResult = Callable[[TaskResult], None]


async def run_tasks(
    settings: Settings,
    tasks: Sequence[Task],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    searcher: Searcher | None = None,
    model: ChatModel | None = None,
    on_result: OnResult | None = None,
) -> EvalRun:
    """Run ``tasks``, at most ``concurrency`` at once; results in task order, ``on_result`` as each ends.

    ``searcher`` and ``model`` replace the configured ones (tests); by default both come from settings.
    """
    owned = None
    if searcher is None:
        from retrieval import PolicyIndex

        searcher = owned = OwnedIndex(PolicyIndex.open(settings.retrieval()))
    files = FilesSeen(searcher)
    try:
        with tempfile.TemporaryDirectory(prefix="policypal-eval-") as scratch:
            service = await open_service(scratch_settings(settings, Path(scratch)), searcher=files, model=model,
                                         destinations=[])
            try:
                started = time.perf_counter()
                slots = asyncio.Semaphore(max(1, concurrency))
                work = (_in_slot(service, files, task, slots, on_result) for task in tasks)
                results = await asyncio.gather(*work)
                seconds = time.perf_counter() - started
                return EvalRun(tuple(results), service.deps.model.name, service.deps.budgets, seconds)
            finally:
                await service.close()
    finally:
        if owned is not None:
            await owned.aclose()


def scratch_settings(settings: Settings, directory: Path) -> Settings:
    """The same settings on a database of its own (the index, model and budgets stay as configured)."""
    return settings.model_copy(update={"database_url": f"sqlite+aiosqlite:///{directory / 'eval.db'}"})


class FilesSeen:
    """The searcher, passed through, remembering the indexed file of every source it returned."""

    def __init__(self, searcher: Searcher) -> None:
        self._searcher = searcher
        self.files: dict[str, str] = {}  # source -> doc id (the file, relative to its indexed root)

    async def asearch(self, query: str, k: int = 5, filter: SearchFilter | None = None) -> list[Passage]:
        passages = await self._searcher.asearch(query, k, filter)
        for passage in passages:
            self.files.setdefault(passage.source, passage.doc_id)
        return passages

    @property
    def embedder(self) -> object:
        """The searcher's embedding model, so the offline model scores by meaning as it does in service."""
        return getattr(self._searcher, "embedder", None)

    def sections(self, groups: Sequence[str] | None = None) -> list[str]:
        """The searcher's sections, so the search tool's schema is the one the service would offer."""
        sections = getattr(self._searcher, "sections", None)
        return list(sections(groups)) if callable(sections) else []

    def cited(self, citations: Sequence[Citation]) -> tuple[Cited, ...]:
        return tuple(Cited(c.title, c.heading, c.source, self.files.get(c.source, "")) for c in citations)


async def _in_slot(
    service: PolicyPal, files: FilesSeen, task: Task, slots: asyncio.Semaphore, on_result: OnResult | None
) -> TaskResult:
    async with slots:
        result = await run_task(service, task, files)
    if on_result is not None:
        on_result(result)
    return result


async def run_task(service: PolicyPal, task: Task, files: FilesSeen) -> TaskResult:
    """One task's turns in one new thread, then its checks on the last reply; a crash is the task's error."""
    thread = f"eval-{uuid.uuid4().hex[:12]}"
    runs: list[Observed] = []
    try:
        for number, text in enumerate(task.turns):
            reply = await service.handle_message(_inbound(task, text, thread, first=number == 0))
            if reply is None:
                raise RuntimeError("the service returned no reply")
            runs.append(await observe(service, reply, files))
    except Exception as exc:  # one broken task must not stop the others; the report shows it
        log.exception("eval task %s failed to run", task.id)
        return TaskResult(task, tuple(runs), error=f"{type(exc).__name__}: {exc}")
    return TaskResult(task, tuple(runs), tuple(score(task.expect, runs[-1])))


def _inbound(task: Task, text: str, thread: str, *, first: bool) -> Inbound:
    return Inbound(
        platform=PLATFORM,
        channel=f"eval-{task.place}",
        thread=thread,
        user=task.user,
        text=text,
        event_id=uuid.uuid4().hex,
        starts_thread=first,
        shared=task.place == "thread",
    )


async def observe(service: PolicyPal, reply: Reply, files: FilesSeen) -> Observed:
    """What the run behind ``reply`` did, from the reply and the stored trace."""
    row = await service.store.runs.get(reply.run_id)
    trace = row.trace if row is not None else []
    outcome = reply.outcome
    citations: tuple[Citation, ...] = ()
    ticket = None
    if isinstance(outcome, Answer):
        citations = outcome.citations
    elif isinstance(outcome, Pending):
        citations = await _pending_citations(service, outcome)
        ticket = dict(outcome.action.arguments) if outcome.action.tool == TICKET_TOOL else None
    return Observed(
        run_id=reply.run_id,
        reason=reply.reason.value,
        text=outcome.text,
        citations=files.cited(citations),
        ticket=ticket,
        calls=tool_uses(trace),
        steps=reply.steps,
        tokens=reply.tokens,
        cost_usd=reply.cost_usd,
        latency_ms=row.latency_ms if row is not None else 0.0,
    )


def tool_uses(trace: list[dict[str, Any]]) -> tuple[ToolUse, ...]:
    """Every tool call the model made, in order, refused ones included (a decision step is not one)."""
    return tuple(
        ToolUse(str(step.get("name")), str(step.get("arguments") or ""), step.get("guard"), step.get("error"))
        for step in trace
        if step.get("kind") == "tool"
    )


async def _pending_citations(service: PolicyPal, pending: Pending) -> tuple[Citation, ...]:
    """What the text beside a proposal cites, from the run state saved with it (as an answer's would be)."""
    record = await service.pending.get(pending.action.id)
    if record is None:
        return ()
    try:
        sources = RunState.from_dict(record.run_state).sources
    except (StateVersionError, KeyError, TypeError):
        return ()
    return cited_in(pending.text, sources)
