"""Query-string values, checked: a bad filter is a 400 that names it, never a 500 or a silent default."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from aiohttp import web

from bot.store import utc_midnight

MAX_DAYS = 366
DEFAULT_DAYS = 30
MAX_NUMBER = 2**31 - 1  # case numbers are 32-bit INTEGER columns; larger ones overflow the driver


def days(request: web.Request, default: int = DEFAULT_DAYS) -> int:
    """``?days=N``: the report's window, 1 to a year."""
    raw = request.query.get("days", "").strip()
    if not raw:
        return default
    if not _ascii_digits(raw) or not 1 <= int(raw) <= MAX_DAYS:
        raise web.HTTPBadRequest(text=f"days must be a whole number from 1 to {MAX_DAYS}, not {raw!r}")
    return int(raw)


def number(raw: str, name: str) -> int:
    """A positive whole number (a case number) as typed: ASCII digits within the database's range."""
    if not _ascii_digits(raw) or not 0 < int(raw) <= MAX_NUMBER:
        raise web.HTTPBadRequest(text=f"{name} must be a case number, not {raw[:40]!r}")
    return int(raw)


def _ascii_digits(raw: str) -> bool:
    """``str.isdigit`` also accepts "²" and other digits ``int`` refuses: only 0-9 here."""
    return raw.isascii() and raw.isdigit()


def window(request: web.Request, default_days: int = DEFAULT_DAYS) -> tuple[datetime, datetime, date, date]:
    """The last ``days`` UTC days, today included: (since, until, first day, last day)."""
    return window_of(days(request, default_days))


def window_of(n: int) -> tuple[datetime, datetime, date, date]:
    """The last ``n`` UTC days, today included: (since, until, first day, last day)."""
    last = datetime.now(UTC).date()
    first = last - timedelta(days=n - 1)
    return utc_midnight(first), utc_midnight(last + timedelta(days=1)), first, last


def day(request: web.Request, name: str) -> date | None:
    """``?since=YYYY-MM-DD`` and friends; empty: none. The last representable day is refused: a
    filter takes the day after it as its end."""
    raw = request.query.get(name, "").strip()
    if not raw:
        return None
    try:
        parsed = date.fromisoformat(raw)
    except ValueError:
        parsed = date.max
    if parsed == date.max:
        raise web.HTTPBadRequest(text=f"{name} must be a date like 2026-12-01, not {raw[:40]!r}")
    return parsed


def choice(request: web.Request, name: str, allowed: set[str] | frozenset[str]) -> str | None:
    raw = request.query.get(name, "").strip()
    if not raw:
        return None
    if raw not in allowed:
        raise web.HTTPBadRequest(text=f"{name} must be one of {', '.join(sorted(allowed))}, not {raw!r}")
    return raw


def text(request: web.Request, name: str, limit: int = 255) -> str | None:
    raw = request.query.get(name, "").strip()
    if len(raw) > limit:
        raise web.HTTPBadRequest(text=f"{name} is longer than {limit} characters")
    return raw or None
