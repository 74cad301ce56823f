"""Similarity by meaning for the offline model, from the embedding model retrieval already loaded.

Word overlap cannot tell that "new starters" are people with "less than 2 years" of service, or that
"WFH" is working from home; the bundled sentence embedding can. The model is handed in (``Embed``:
texts to vectors), so the offline model downloads nothing and loads nothing of its own; without one
it scores by words alone.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]

BATCH = 16  # texts per call: the embedder's own batch size, which bounds ONNX memory
CACHE_SIZE = 4096  # vectors kept: a passage is re-read on every turn of its run and by later questions


class Meaning:
    """Cosine similarity between a query and candidate texts, each text embedded once and cached."""

    def __init__(self, embed: Embed, *, cache_size: int = CACHE_SIZE) -> None:
        self._embed = embed
        self._cache: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()  # answers may be composed in several threads at once

    def similarities(self, query: str, texts: Sequence[str]) -> list[float]:
        """Cosine of each text to the query, in -1..1 (about 0.1 unrelated, 0.5+ on the same point)."""
        vectors = self._vectors([query, *texts])
        first = vectors[query]
        return [_cosine(first, vectors[text]) for text in texts]

    def _vectors(self, texts: Sequence[str]) -> dict[str, tuple[float, ...]]:
        with self._lock:
            known = {text: self._cache[text] for text in texts if text in self._cache}
        missing = list(dict.fromkeys(text for text in texts if text not in known))
        for start in range(0, len(missing), BATCH):
            batch = missing[start : start + BATCH]
            known.update(zip(batch, (_unit(vector) for vector in self._embed(batch)), strict=True))
        with self._lock:
            for text in missing:
                self._cache[text] = known[text]
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return known


def _unit(vector: Sequence[float]) -> tuple[float, ...]:
    norm = math.sqrt(sum(value * value for value in vector)) or 1.0
    return tuple(value / norm for value in vector)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))
