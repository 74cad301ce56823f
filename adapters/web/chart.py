"""Runs per day by ending as a stacked bar chart's geometry; the template draws it as inline SVG.

No chart library and no JavaScript: the overview reads the same with scripts off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta

WIDTH, HEIGHT, LEFT, BOTTOM = 720, 220, 36, 24
# One colour per ending, answered green, the honest "not covered" amber, give-ups red, the rest grey.
COLOURS = {
    "answered": "#2e7d32",
    "not_covered": "#f9a825",
    "pending_confirmation": "#1565c0",
    "step_budget": "#c62828",
    "token_budget": "#d84315",
    "deadline": "#ad1457",
    "cost_budget": "#6a1b9a",
    "no_progress": "#e53935",
    "policy_denied": "#5d4037",
    "model_error": "#455a64",
    "cancelled": "#9e9e9e",
    "internal_error": "#212121",
}
OTHER = "#bdbdbd"
LABEL_EVERY = 7  # days between the dates written under the bars


@dataclass(frozen=True)
class Segment:
    y: float
    height: float
    reason: str
    runs: int
    colour: str


@dataclass(frozen=True)
class Bar:
    day: date
    x: float
    width: float
    total: int
    segments: tuple[Segment, ...]
    label: str = ""  # "start": the day is written from the bar's left; "end": up to its right; "": none


@dataclass(frozen=True)
class Chart:
    bars: tuple[Bar, ...]
    peak: int
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom: int = BOTTOM

    @property
    def legend(self) -> list[tuple[str, str]]:
        seen = dict.fromkeys(s.reason for bar in self.bars for s in bar.segments)
        return [(reason, colour_of(reason)) for reason in seen]


def colour_of(reason: str) -> str:
    return COLOURS.get(reason, OTHER)


def runs_per_day(by_day: Mapping[date, Mapping[str, int]], first: date, last: date) -> Chart:
    """Bars for every day from ``first`` to ``last`` (days without runs included), stacked in ``COLOURS`` order."""
    days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
    peak = max((sum(by_day.get(d, {}).values()) for d in days), default=0) or 1
    plot_h = HEIGHT - BOTTOM - 8
    slot = (WIDTH - LEFT) / max(len(days), 1)
    order = {reason: n for n, reason in enumerate(COLOURS)}
    bars = []
    labels = _labels(len(days))
    for n, day in enumerate(days):
        counts = by_day.get(day, {})
        y = float(HEIGHT - BOTTOM)
        segments = []
        for reason in sorted(counts, key=lambda r: (order.get(r, len(order)), r)):
            h = plot_h * counts[reason] / peak
            y -= h
            segments.append(Segment(round(y, 1), round(h, 1), reason, counts[reason], colour_of(reason)))
        x = LEFT + n * slot + slot * 0.1
        bar = Bar(day, round(x, 1), round(slot * 0.8, 1), sum(counts.values()), tuple(segments), labels.get(n, ""))
        bars.append(bar)
    return Chart(tuple(bars), peak)


def _labels(days: int) -> dict[int, str]:
    """Every 7th day from the first, and the last day written up to its bar's right edge (so it stays in
    the chart); a weekly label less than 3 days before the last gives way to it."""
    labels = dict.fromkeys(range(0, days, LABEL_EVERY), "start")
    last = days - 1
    if last > 0:
        weekly = max(n for n in labels if n != last) if len(labels) > 1 or last not in labels else None
        if weekly is not None and weekly != 0 and last - weekly < 3:
            del labels[weekly]
        labels[last] = "end"
    return labels
