"""JSON-lines logs with the run's context on every line, and secrets redacted before they are written."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from bot.redaction import Redactor

_CONTEXT: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("policypal_log_context", default={})  # noqa: B039


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Attach fields (run id, conversation, platform) to every log line written inside the block."""
    token = _CONTEXT.set({**_CONTEXT.get(), **{k: v for k, v in fields.items() if v}})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, context, and the traceback if any."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self._redactor = redactor or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_CONTEXT.get(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(self._redactor.value(line), ensure_ascii=False, default=str)


# Chatty at INFO about nothing an operator acts on; bot.store.migrate logs the upgrade itself.
QUIET_LOGGERS = ("alembic.runtime.migration", "httpx", "httpx2")


def configure_json_logging(level: int = logging.INFO, redactor: Redactor | None = None) -> None:
    """Route every logger to stderr as JSON lines; for `policypal serve`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(redactor))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
