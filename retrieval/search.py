"""Hybrid search: dense and BM25 rankings fused into passages, or none below the relevance floor.

Search asks the engine for the dense and the BM25 rankings in one call, fuses them by normalised
score (retrieval.fusion; Passage.score is that fused score, 0-1) and fetches the winners' payloads.
With a reranker configured (retrieval.rerank), the best ``rerank_candidates`` fused passages are
read again by the cross-encoder, which then orders them (Passage.score: its logit's sigmoid).
Fused scores are relative to the query's own candidates, so the relevance floor reads raw signals
instead: the best dense cosine and the BM25 term strength.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from retrieval.backends import Hit, visible_to
from retrieval.config import MAX_K
from retrieval.context import IndexContext
from retrieval.errors import UnknownSectionError
from retrieval.fusion import CANDIDATES, fuse
from retrieval.rerank import Reranker
from retrieval.sources import shown_source
from retrieval.types import Passage, SearchFilter

CORPUS_SIZE_TTL_S = 60.0


@dataclass(frozen=True)
class Retrieval:
    """One hybrid search before the relevance floor: the fused passages and what the floor reads."""

    fused: list[Hit]  # the top k, best first, with whole payloads
    dense: list[Hit]  # the dense retriever's own top CANDIDATES (payload: doc_id and heading)
    sparse: list[Hit]  # the BM25 retriever's own top CANDIDATES
    query_terms: int  # distinct BM25 terms in the query (stopwords dropped)
    corpus_size: int  # indexed chunks, which bounds any term's IDF

    @property
    def best_dense(self) -> float:
        return self.dense[0].score if self.dense else 0.0

    @property
    def term_strength(self) -> float:
        """Best BM25 score over the most a passage could score if every query term were unique to it.

        Near 1 when rare query terms (a policy number, an error code) all occur in one passage.
        """
        if not self.sparse or not self.query_terms or self.corpus_size < 2:
            return 0.0
        rarest_idf = math.log(1 + (self.corpus_size - 0.5) / 1.5)  # Qdrant's IDF of a term in one point
        return self.sparse[0].score / (self.query_terms * rarest_idf)


@dataclass(frozen=True)
class RelevanceFloor:
    """Below it a search returns nothing: only what is clearly unrelated to every indexed passage.

    An empty result makes the agent say the policy does not cover the question, the worst wrong
    answer when it does, so the floor leaves weak-but-related passages to the model to judge (the
    offline answerer's own relevance check, or a real model's reading). A search passes when its best
    dense cosine reaches ``min_dense`` (MiniLM puts unrelated English text below 0.3), or when the
    BM25 term strength reaches ``min_terms`` (an exact identifier the dense model misses).
    Checked with benchmarks/ranking.py on the test splits of the three labelled corpora: no
    answerable question left without a passage; a tighter, fitted floor (dense contrast to the
    corpus background) dropped 3-17% of them on corpora it was not fitted on.
    """

    min_dense: float = 0.30
    min_terms: float = 0.65

    def admits(self, retrieval: Retrieval) -> bool:
        return retrieval.best_dense >= self.min_dense or retrieval.term_strength >= self.min_terms


class Searcher:
    """The reading side of a PolicyIndex: safe from any thread, since every backend call holds the lock.

    The corpus size (for the floor) and the sections are cached for a minute, as another process
    may index meanwhile; ``forget`` drops them when this process changed the index.
    """

    def __init__(self, context: IndexContext, floor: RelevanceFloor, reranker: Reranker | None = None) -> None:
        self.floor = floor
        self.reranker = reranker
        self._context = context
        self._size_cache: tuple[float, int] | None = None
        self._sections_cache: tuple[float, list[tuple[str, tuple[str, ...]]]] | None = None

    def forget(self) -> None:
        """Drop what is cached about the corpus: this process just changed it."""
        self._size_cache = self._sections_cache = None

    def search(self, query: str, k: int | None = None, filter: SearchFilter | None = None) -> list[Passage]:
        """Top passages for a question, or [] when nothing clears the relevance floor."""
        k = self._context.cfg.top_k if k is None else k
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k must be between 1 and {MAX_K}, not {k}")
        if not query.strip():
            return []
        filter = self._known_section(filter)
        reranking = self.reranker is not None
        candidates = max(k, self._context.cfg.rerank_candidates) if reranking else k
        retrieval = self.retrieve(query, k=candidates, filter=filter)
        if not self.floor.admits(retrieval):
            return []  # the floor reads the raw signals: a reranker never revives what it removed
        hits = self._reranked(query, retrieval.fused)[:k] if reranking else retrieval.fused
        cfg = self._context.cfg
        return [passage(hit.score, hit.payload, cfg.snippet_chars, cfg.source_base_url) for hit in hits]

    def _reranked(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """The fused candidates in the cross-encoder's order, scored by its logit squashed to 0-1."""
        assert self.reranker is not None
        ordered = self.reranker.order(query, hits, lambda hit: _body(hit.payload))
        return [Hit(hit.id, 1.0 / (1.0 + math.exp(-logit)), hit.payload) for hit, logit in ordered]

    def retrieve(self, query: str, *, k: int, filter: SearchFilter | None = None) -> Retrieval:
        """The fused top k and the floor's signals, before the floor (search() applies it)."""
        context = self._context
        vectors = context.embedder.embed_query(query)
        with context.lock:
            rankings = context.backend.rankings(vectors, candidates=max(k, CANDIDATES), search_filter=filter)
            top = fuse(rankings.dense, rankings.sparse, limit=k)
            payloads = context.backend.payloads([hit.id for hit in top])
        return Retrieval(
            fused=[Hit(hit.id, hit.score, payloads[hit.id]) for hit in top if hit.id in payloads],
            dense=rankings.dense,
            sparse=rankings.sparse,
            query_terms=len(vectors.sparse_indices),
            corpus_size=self._corpus_size(),
        )

    def sections(self, groups: Sequence[str] | None = None) -> list[str]:
        """The sections of documents readers with ``groups`` may read (None: all), sorted.

        A section name is itself information ("Confidential Reorg Plan"): offered to the model, or
        listed in an error, it must come from documents the readers may see. Refreshed now and then
        (another process may index).
        """
        now = time.monotonic()
        if self._sections_cache is None or now - self._sections_cache[0] > CORPUS_SIZE_TTL_S:
            found = [(doc.section, doc.audience) for doc in self._context.stored_docs().values() if doc.section]
            self._sections_cache = (now, found)
        return sorted({section for section, audience in self._sections_cache[1] if visible_to(audience, groups)})

    def _known_section(self, filter: SearchFilter | None) -> SearchFilter | None:
        """The filter with its section spelled as the index spells it ("it" finds "IT"), or an error."""
        if filter is None or not filter.section:
            return filter
        known = self.sections(filter.groups)
        if filter.section in known:
            return filter
        same = [section for section in known if section.casefold() == filter.section.casefold()]
        if not same:
            raise UnknownSectionError(filter.section, known)
        return replace(filter, section=same[0])

    def _corpus_size(self) -> int:
        """Chunk count for the floor's IDF bound, refreshed now and then (another process may index)."""
        now = time.monotonic()
        if self._size_cache is None or now - self._size_cache[0] > CORPUS_SIZE_TTL_S:
            with self._context.lock:
                self._size_cache = (now, self._context.backend.count())
        return self._size_cache[1]


def passage(score: float, payload: dict[str, Any], snippet_chars: int, source_base_url: str | None = None) -> Passage:
    """A stored point as the agent and the CLI see it, its text cut to snippet_chars, its source as readers see it."""
    return Passage(
        score=score,
        doc_id=str(payload.get("doc_id", "")),
        title=str(payload.get("title", "")),
        heading=str(payload.get("heading", "")),
        source=shown_source(payload, source_base_url),
        text=snippet(_body(payload), snippet_chars),
        section=payload.get("section"),
        audience=tuple(str(group) for group in payload.get("audience") or ()),
        classification=payload.get("classification") or None,
    )


def snippet(text: str, limit: int) -> str:
    """Text cut to at most limit characters after its last whole table row, list item or sentence.

    Half a row reads as complete and wrong ("NG-809: Tunnel…"), so a cut falls between rows, items and
    sentences; a table is never left with its header alone. Only when the first of them is itself
    longer than the limit is it cut at a word, since an empty passage would read as "nothing found".
    """
    if len(text) <= limit:
        return text
    room = limit - len(_CUT_MARK)
    cut = max((end for end in _unit_ends(text) if end <= room), default=0)
    if cut:
        return text[:cut].rstrip() + _CUT_MARK
    cut_text = text[: limit - 1]
    space = cut_text.rfind(" ")
    if space > limit * 0.6:
        cut_text = cut_text[:space]
    return cut_text.rstrip() + "…"


_CUT_MARK = "\n…"
_LIST_ITEM = re.compile(r"^(?:[-*+•]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z0-9\"“(*])")


def _unit_ends(text: str) -> Iterator[int]:
    """Offsets where a table data row, a list item (with its continuation lines), a paragraph, or a
    sentence inside a paragraph ends: the places a cut leaves only whole units."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    sentence_ends = [match.end() for match in _SENTENCE_END.finditer(text)]
    in_item = False
    for index, line in enumerate(lines):
        stripped, following = line.strip(), lines[index + 1].strip() if index + 1 < len(lines) else ""
        if stripped.startswith("|"):
            if not _is_rule(stripped) and not _is_rule(following):  # a data row, not the header
                yield starts[index + 1]
            continue
        if not stripped or stripped.startswith("#"):  # a heading alone is not worth a cut
            in_item = False
            continue
        in_item = in_item or bool(_LIST_ITEM.match(stripped))
        if not in_item:
            yield from (end for end in sentence_ends if starts[index] < end <= starts[index + 1])
        if not following or following.startswith(("|", "#")) or _LIST_ITEM.match(following):
            in_item = False
            yield starts[index + 1]


def _is_rule(line: str) -> bool:
    return bool(line) and set(line) <= set("|-: ")


def _body(payload: dict[str, Any]) -> str:
    """Chunk text without its leading heading-path line (the passage carries the heading itself)."""
    text = str(payload.get("text", ""))
    head, _blank, body = text.partition("\n\n")
    path = [str(part) for part in payload.get("heading_path") or []]
    is_heading = bool(path) and (head == " > ".join(path) or path[-1].startswith(head))
    return body.strip() if body and is_heading else text.strip()
