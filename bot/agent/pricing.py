"""Per-model prices, so the dollar budget can be checked before a call rather than after it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from bot.errors import UnknownPrice


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input_per_m: float
    output_per_m: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_m + output_tokens * self.output_per_m) / 1_000_000


# Public list prices; users extend or override with POLICYPAL_MODEL_PRICES.
KNOWN_PRICES: dict[str, Price] = {
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "gpt-5": Price(1.25, 10.00),
    "gpt-5-mini": Price(0.25, 2.00),
    "gpt-5-nano": Price(0.05, 0.40),
    "policypal-offline": Price(0.0, 0.0),
}


class PriceTable:
    def __init__(self, extra: dict[str, Price] | None = None) -> None:
        self._prices = {**KNOWN_PRICES, **(extra or {})}

    @classmethod
    def from_json(cls, text: str | None) -> PriceTable:
        """Parse ``{"model": [input_per_m, output_per_m]}``; self-hosted models can be priced at 0."""
        if not text:
            return cls()
        try:
            raw = json.loads(text)
            return cls({str(name): _price(pair) for name, pair in raw.items()})
        except (ValueError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(
                'POLICYPAL_MODEL_PRICES must be JSON like {"my-model": [0.5, 1.5]} '
                f"(USD per million input and output tokens): {exc}"
            ) from None

    def lookup(self, model: str) -> Price | None:
        """Exact name first, then the longest known prefix (dated variants like gpt-4o-mini-2024-07-18)."""
        if model in self._prices:
            return self._prices[model]
        prefixes = [name for name in self._prices if model.startswith(name + "-")]
        return self._prices[max(prefixes, key=len)] if prefixes else None

    def require(self, model: str) -> Price:
        price = self.lookup(model)
        if price is None:
            raise UnknownPrice(
                f"No price is known for model {model!r}, and a dollar cap is set. Add it with "
                f"POLICYPAL_MODEL_PRICES='{{\"{model}\": [USD_PER_1M_INPUT, USD_PER_1M_OUTPUT]}}' "
                "(use [0, 0] for a self-hosted model): the dollar cap cannot be checked without a price."
            )
        return price


def _price(pair: Any) -> Price:
    """Two finite, non-negative numbers: a NaN price makes every cost NaN, which no cap ever stops
    (``NaN > cap`` is false), and a negative one lets each call raise the run's remaining allowance."""
    if not isinstance(pair, list) or len(pair) != 2:
        raise ValueError(f"{pair!r} is not a pair [input, output]")
    values = [float(value) for value in pair if not isinstance(value, bool)]
    if len(values) != 2 or not all(math.isfinite(value) and value >= 0 for value in values):
        raise ValueError(f"{pair!r}: prices are two numbers, each 0 or more")
    return Price(values[0], values[1])
