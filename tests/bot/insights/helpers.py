"""An embed function that shows what the grouping asked the model for."""

from __future__ import annotations

from collections.abc import Sequence

from bot.insights import Embed


class Recording:
    """An embed function that notes every call's texts before passing them on."""

    def __init__(self, embed: Embed) -> None:
        self.embed = embed
        self.calls: list[list[str]] = []

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return self.embed(texts)

    @property
    def texts(self) -> list[str]:
        return [text for call in self.calls for text in call]
