"""Question embeddings kept in the process, so reloading the gaps page embeds only wordings it has not seen.

The least recently used go first beyond ``max_entries``. One lock is held while embedding, so calls from
several threads (``asyncio.to_thread``) embed each text once: a second reload waits for the first.
Nothing here must survive a restart.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from bot.insights.gaps import Embed


class EmbeddingCache:
    """An ``Embed`` that remembers: only texts it has not seen reach the wrapped one, in one call."""

    def __init__(self, embed: Embed, max_entries: int = 10_000) -> None:
        if max_entries < 1:
            raise ValueError(f"An embedding cache holds at least one entry, not {max_entries}.")
        self.max_entries = max_entries
        self._embed = embed
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for ``texts`` in order, embedding the missing ones in one call."""
        with self._lock:
            known = {text: self._vectors[text] for text in texts if text in self._vectors}
            missing = [text for text in dict.fromkeys(texts) if text not in known]
            if missing:
                known.update(zip(missing, self._embed_all(missing), strict=True))
            for text in dict.fromkeys(texts):
                self._remember(text, known[text])
            return [known[text] for text in texts]

    def missing(self, texts: Iterable[str]) -> list[str]:
        """The texts not embedded yet, without waiting for an embedding in progress (a page asks this to
        know whether grouping would wait for the model)."""
        return [text for text in dict.fromkeys(texts) if text not in self._vectors]

    def __len__(self) -> int:
        return len(self._vectors)

    def _embed_all(self, texts: list[str]) -> list[list[float]]:
        vectors = self._embed(texts)
        if len(vectors) != len(texts):
            raise ValueError(f"embed returned {len(vectors)} vectors for {len(texts)} texts")
        return vectors

    def _remember(self, text: str, vector: list[float]) -> None:
        self._vectors[text] = vector
        self._vectors.move_to_end(text)
        while len(self._vectors) > self.max_entries:
            self._vectors.popitem(last=False)
