"""What a running process needs besides the answer: logs, metrics, admission, in-flight runs,
readiness, its own identity, background tasks and small caches.
"""

from bot.runtime.cache import ExpiringCache
from bot.runtime.inflight import InFlight
from bot.runtime.logs import configure_json_logging, log_context
from bot.runtime.memory import release_freed_memory
from bot.runtime.metrics import Metrics
from bot.runtime.process import THIS_PROCESS, ProcessId
from bot.runtime.ratelimit import Admission, UserRateLimit
from bot.runtime.readiness import Readiness
from bot.runtime.slots import RunSlots, SlotTurn, busy_text, queued_text
from bot.runtime.tasks import BackgroundTasks

__all__ = [
    "THIS_PROCESS",
    "Admission",
    "BackgroundTasks",
    "ExpiringCache",
    "InFlight",
    "Metrics",
    "ProcessId",
    "Readiness",
    "RunSlots",
    "SlotTurn",
    "UserRateLimit",
    "busy_text",
    "configure_json_logging",
    "log_context",
    "queued_text",
    "release_freed_memory",
]
