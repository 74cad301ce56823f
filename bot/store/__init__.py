"""Everything that must survive a restart, in SQLite (embedded) or PostgreSQL (shared by replicas).

``Store`` is the one object a process opens; its repositories (``store.inbox``, ``store.outbox``,
``store.threads``, ``store.runs``, ``store.workers``, ``store.pending``, ``store.tickets``,
``store.cases``, ``store.rates``, ``store.joins``, ``store.stops``, ``store.reports``) hand out the
plain records below, never ORM rows.
``bot.store.migrate`` (Alembic, loaded only when a database is opened or upgraded) brings a
database to this release.
"""

from bot.store.columns import UtcDateTime, utc_midnight, utcnow
from bot.store.engine import SchemaPolicy, prepare_sqlite_file
from bot.store.inbox import NewItem
from bot.store.outbox import NewPost
from bot.store.records import (
    DeliveryRecord,
    DeliveryState,
    HandoffRecord,
    InboxRecord,
    KnowledgeGap,
    PendingRecord,
    PendingState,
    Place,
    Rating,
    RunRow,
    RunStatus,
)
from bot.store.reports import (
    GAP_REASONS,
    NOT_HELPFUL,
    CaseSummary,
    CitedSources,
    GapRun,
    Overview,
    Ratings,
    RunFilter,
    RunSummary,
    Spread,
)
from bot.store.stops import StopMark
from bot.store.store import Store

__all__ = [
    "GAP_REASONS",
    "NOT_HELPFUL",
    "CaseSummary",
    "CitedSources",
    "DeliveryRecord",
    "DeliveryState",
    "GapRun",
    "HandoffRecord",
    "InboxRecord",
    "KnowledgeGap",
    "NewItem",
    "NewPost",
    "Overview",
    "PendingRecord",
    "PendingState",
    "Place",
    "Rating",
    "Ratings",
    "RunFilter",
    "RunRow",
    "RunStatus",
    "RunSummary",
    "SchemaPolicy",
    "Spread",
    "StopMark",
    "Store",
    "UtcDateTime",
    "prepare_sqlite_file",
    "utc_midnight",
    "utcnow",
]
