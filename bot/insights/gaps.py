"""Knowledge gaps grouped by wording: the questions the policies could not answer, one group per way of asking.

One pass over the questions, most asked first: a question joins the group whose first question its
wording is most similar to (cosine of the embedding model's vectors), when that similarity reaches
``SIMILAR_WORDING``; otherwise it starts a group. Questions that differ only in case, spacing or trailing
punctuation share a wording key and group without the model. The same questions always give the same groups.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt

Embed = Callable[[Sequence[str]], list[list[float]]]  # texts -> dense vectors, in order

# Measured with the bundled MiniLM on 62 employee questions in 16 topics (tests/bot/insights/questions.py;
# test_gaps.py prints the figures): no two questions on different topics reach 0.60 (the closest, 0.590,
# share "allowance"), and 55% of same-topic pairs do; at 0.55 it is 63% with one cross-topic pair, at 0.50
# 73% with six. Grouped, the 62 make 34 groups, none mixing topics; at 0.575 and 0.50 some do. A group that
# mixes two gaps hides one under the other's label, while a gap split in two still shows, so no mixing wins.
SIMILAR_WORDING = 0.60
EXAMPLE_RUNS = 5  # example run ids a group keeps
_ROWS_PER_BLOCK = 512  # similarities computed this many questions at a time: memory stays 512 x n floats
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class GapQuestion:
    """One wording of a question that showed a gap, with the runs that asked it.

    ``reasons``: why each run counts as a gap, one entry per run and reason, repeats included: a run that
    ended not_covered and was rated not helpful gives ("not_covered", "not_helpful").
    """

    text: str
    count: int  # runs that asked it
    askers: int  # distinct people who asked it
    last_asked: datetime
    reasons: tuple[str, ...]
    run_ids: tuple[str, ...] = ()  # a few example runs, newest first


@dataclass(frozen=True)
class GapGroup:
    """Questions worded alike and their totals: one gap as a policy owner reads it.

    ``askers`` is the sum over the questions, so one person who asked in two wordings counts twice: an
    upper bound on the people. ``run_ids`` come from the most recently asked questions first.
    """

    label: str  # the most-asked question (ties: the most recently asked)
    questions: tuple[GapQuestion, ...]  # most asked first
    count: int  # runs
    askers: int
    last_asked: datetime
    reasons: tuple[tuple[str, int], ...]  # (reason, entries), most common first
    run_ids: tuple[str, ...]  # at most EXAMPLE_RUNS


def group_gaps(
    questions: Iterable[GapQuestion], embed: Embed | None, *, threshold: float = SIMILAR_WORDING
) -> list[GapGroup]:
    """Questions grouped by wording, the gap with most runs first (ties: the most recently asked).

    ``embed`` is called at most once, with one text per wording key (see ``wording_key``), and not at all
    when there are fewer than two; wrap it in an ``EmbeddingCache`` to embed each wording once per process.
    Without one (no model in this process) only questions with the same wording key group.
    """
    by_key: dict[str, list[GapQuestion]] = {}
    for question in most_asked_first(questions):
        by_key.setdefault(wording_key(question.text), []).append(question)
    keys = list(by_key)
    clusters = _clusters(keys, embed, threshold)
    groups = [_group([q for k in cluster for q in by_key[keys[k]]]) for cluster in clusters]
    by_label = sorted(groups, key=lambda g: g.label)
    return sorted(by_label, key=lambda g: (g.count, g.last_asked), reverse=True)


def wording_key(text: str) -> str:
    """The text as the grouping compares it: case folded, spaces collapsed, trailing punctuation gone."""
    key = _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    while key and (unicodedata.category(key[-1]).startswith("P") or key[-1].isspace()):
        key = key[:-1]
    return key


def most_asked_first(questions: Iterable[GapQuestion]) -> list[GapQuestion]:
    """Most runs first, then the most recently asked, then by text: one order for any input order."""
    by_text = sorted(questions, key=lambda q: q.text)
    return sorted(by_text, key=lambda q: (q.count, q.last_asked), reverse=True)


def reason_counts(reasons: Iterable[str]) -> tuple[tuple[str, int], ...]:
    """(reason, entries), most common first, then by name."""
    return tuple(sorted(Counter(reasons).items(), key=lambda item: (-item[1], item[0])))


def _clusters(texts: Sequence[str], embed: Embed | None, threshold: float) -> list[list[int]]:
    """Indices of ``texts`` in groups: each joins the group whose first text is most similar, if enough."""
    if len(texts) < 2 or embed is None:
        return [[i] for i in range(len(texts))]
    vectors = _unit_rows(embed(texts), len(texts))
    anchors = np.empty(len(texts), dtype=np.intp)  # each group's first text; the first len(groups) are set
    groups: list[list[int]] = []
    for start in range(0, len(texts), _ROWS_PER_BLOCK):
        similarities = vectors[start : start + _ROWS_PER_BLOCK] @ vectors.T
        for i, row in enumerate(similarities, start):
            best = _best_group(row[anchors[: len(groups)]], threshold)
            if best is None:
                anchors[len(groups)] = i
                groups.append([i])
            else:
                groups[best].append(i)
    return groups


def _best_group(similarities: npt.NDArray[np.float32], threshold: float) -> int | None:
    """The most similar group (the earlier on a tie), or None when none reaches the threshold."""
    if not len(similarities):
        return None
    best = int(np.argmax(similarities))
    return best if similarities[best] >= threshold else None


def _unit_rows(vectors: list[list[float]], expected: int) -> npt.NDArray[np.float32]:
    """Vectors as unit-length rows (the bundled model's already are; another model's may not be)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != expected:
        raise ValueError(f"embed returned {len(vectors)} vectors (shape {matrix.shape}) for {expected} texts")
    norms: npt.NDArray[np.float32] = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1  # a zero vector stays zero: similar to nothing
    unit: npt.NDArray[np.float32] = matrix / norms
    return unit


def _group(questions: Sequence[GapQuestion]) -> GapGroup:
    ordered = most_asked_first(questions)
    return GapGroup(
        label=ordered[0].text,
        questions=tuple(ordered),
        count=sum(q.count for q in ordered),
        askers=sum(q.askers for q in ordered),
        last_asked=max(q.last_asked for q in ordered),
        reasons=reason_counts(r for q in ordered for r in q.reasons),
        run_ids=_example_runs(ordered),
    )


def _example_runs(questions: Sequence[GapQuestion]) -> tuple[str, ...]:
    recent_first = sorted(questions, key=lambda q: q.last_asked, reverse=True)
    runs = dict.fromkeys(run for q in recent_first for run in q.run_ids)
    return tuple(runs)[:EXAMPLE_RUNS]
