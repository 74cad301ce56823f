"""Gap questions grouped by wording with the bundled model: rewordings meet, different gaps stay apart,
spellings merge without the model, totals add up, and the same questions always give the same groups."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt
import pytest

from bot.insights import SIMILAR_WORDING, Embed, EmbeddingCache, GapGroup, GapQuestion, group_gaps, wording_key
from tests.bot.insights.helpers import Recording
from tests.bot.insights.questions import EVERY_QUESTION, WEEK

MONDAY = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
PETS = ("can I bring my dog to the office?", "are pets allowed at work", "Is it OK to bring a dog into the office")
UNRELATED = ("parking at HQ", "gym membership reimbursement", "wedding leave")


def ask(
    text: str,
    count: int = 1,
    *,
    askers: int | None = None,
    days: int = 0,
    reasons: tuple[str, ...] | None = None,
    run_ids: tuple[str, ...] = (),
) -> GapQuestion:
    """A gap question last asked ``days`` after Monday morning."""
    return GapQuestion(
        text=text,
        count=count,
        askers=count if askers is None else askers,
        last_asked=MONDAY + timedelta(days=days),
        reasons=("not_covered",) * count if reasons is None else reasons,
        run_ids=run_ids,
    )


def texts(groups: Sequence[GapGroup]) -> list[list[str]]:
    return [[q.text for q in group.questions] for group in groups]


def no_model(texts: Sequence[str]) -> list[list[float]]:
    raise AssertionError(f"the model was asked for {list(texts)}")


def cosines(embed: Embed, questions: Sequence[str]) -> npt.NDArray[np.float64]:
    vectors = np.asarray(embed([wording_key(q) for q in questions]), dtype=np.float64)
    similarity: npt.NDArray[np.float64] = vectors @ vectors.T
    return similarity


def topic_pairs(questions: Sequence[tuple[str, str]], embed: Embed) -> tuple[list[float], list[float]]:
    """Cosines of every pair of (topic, question): (same topic, different topics)."""
    similarity = cosines(embed, [q for _topic, q in questions])
    same: list[float] = []
    different: list[float] = []
    for (i, (a, _)), (j, (b, _)) in itertools.combinations(enumerate(questions), 2):
        (same if a == b else different).append(float(similarity[i, j]))
    return same, different


def test_the_bundled_models_vectors_are_unit_length(embed: Embed) -> None:
    norms = np.linalg.norm(np.asarray(embed(list(PETS + UNRELATED))), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-6)


def test_rewordings_of_one_question_form_one_group(embed: Embed) -> None:
    groups = group_gaps([ask(PETS[0], 3), ask(PETS[1], 2), ask(PETS[2])], embed)
    assert texts(groups) == [list(PETS)]


def test_unrelated_questions_stay_apart(embed: Embed) -> None:
    groups = group_gaps([ask(text) for text in UNRELATED], embed)
    assert sorted(g.label for g in groups) == sorted(UNRELATED)


def test_no_two_questions_on_different_topics_reach_the_threshold(embed: Embed) -> None:
    """The measurement behind SIMILAR_WORDING: every cross-topic pair below it, most rewordings above."""
    same, different = topic_pairs(EVERY_QUESTION, embed)
    reached = sum(s >= SIMILAR_WORDING for s in same) / len(same)
    topics = len({topic for topic, _q in EVERY_QUESTION})
    print(
        f"\n{len(EVERY_QUESTION)} questions, {topics} topics: same-topic min {min(same):.3f}, "
        f"cross-topic max {max(different):.3f}; {reached:.0%} of {len(same)} same-topic pairs reach {SIMILAR_WORDING}"
    )
    assert max(different) < SIMILAR_WORDING
    assert reached >= 0.5


def test_a_weeks_gaps_group_without_mixing_topics(embed: Embed) -> None:
    """Each topic's first wording is asked most; rewordings join it or stand alone, never another topic."""
    topic_of = {q: topic for topic, q in WEEK}
    week = [ask(q, count, days=count) for (_topic, q), count in zip(WEEK, itertools.cycle((5, 3, 2)))]
    groups = group_gaps(week, embed)
    same, different = topic_pairs(WEEK, embed)
    print(
        f"\n{len(week)} questions, {len(set(topic_of.values()))} topics: same-topic min {min(same):.3f}, "
        f"cross-topic max {max(different):.3f}; {len(groups)} groups:"
    )
    for group in groups:
        print(f"  {group.count:>2} {[q.text for q in group.questions]}")
    assert all(len({topic_of[q.text] for q in g.questions}) == 1 for g in groups)
    assert list(PETS) in texts(groups)
    assert len(groups) < len(week)


def test_scaled_vectors_group_as_unit_ones(embed: Embed) -> None:
    """Another model's vectors need not be unit length: the grouping normalises them itself."""

    def scaled(batch: Sequence[str]) -> list[list[float]]:
        return [[x * (7 * i + 3) for x in v] for i, v in enumerate(embed(batch))]

    questions = [ask(text, n) for n, text in enumerate(PETS + UNRELATED, 1)]
    assert texts(group_gaps(questions, scaled)) == texts(group_gaps(questions, embed))


def test_spellings_of_one_question_merge_without_the_model(embed: Embed) -> None:
    spellings = [ask("Can I bring my dog?", 3), ask("can i bring my  dog"), ask("CAN I BRING MY DOG ?!")]
    (group,) = group_gaps(spellings, no_model)
    assert group.count == 5
    assert group.label == "Can I bring my dog?"

    recording = Recording(embed)
    groups = group_gaps([*spellings, ask("Wedding leave."), ask("wedding leave")], recording)
    assert recording.calls == [["can i bring my dog", "wedding leave"]]
    assert [len(g.questions) for g in groups] == [3, 2]


def test_without_a_model_only_spellings_of_one_question_group() -> None:
    groups = group_gaps([ask("Wedding leave?", 2), ask("wedding leave"), ask("marriage leave")], None)
    assert texts(groups) == [["Wedding leave?", "wedding leave"], ["marriage leave"]]


def test_a_groups_totals_add_up() -> None:
    questions = [
        ask(
            "Wedding leave?",
            3,
            askers=2,
            days=1,
            reasons=("not_covered", "step_budget", "not_covered"),
            run_ids=("r6", "r5", "r4"),
        ),
        ask(
            "wedding leave",
            2,
            askers=2,
            days=4,
            reasons=("not_covered", "not_helpful", "deadline"),
            run_ids=("r9", "r8"),
        ),
        ask("WEDDING LEAVE!", 1, askers=1, days=2, reasons=("not_helpful",), run_ids=("r7", "r6")),
    ]
    (group,) = group_gaps(questions, no_model)
    assert (group.count, group.askers, group.last_asked) == (6, 5, MONDAY + timedelta(days=4))
    assert group.reasons == (("not_covered", 3), ("not_helpful", 2), ("deadline", 1), ("step_budget", 1))
    assert group.run_ids == ("r9", "r8", "r7", "r6", "r5")  # the most recently asked questions' runs first
    assert [q.text for q in group.questions] == ["Wedding leave?", "wedding leave", "WEDDING LEAVE!"]


def test_the_label_is_the_most_asked_wording_and_on_a_tie_the_most_recent() -> None:
    (group,) = group_gaps([ask("Wedding leave?", 2, days=1), ask("wedding leave", 2, days=3)], no_model)
    assert group.label == "wedding leave"
    (group,) = group_gaps([ask("Wedding leave?", 3, days=1), ask("wedding leave", 2, days=3)], no_model)
    assert group.label == "Wedding leave?"


def test_groups_come_most_runs_first_then_most_recent_whatever_the_input_order(embed: Embed) -> None:
    questions = [
        ask("parking at HQ", 3, days=0),
        ask("gym membership reimbursement", 3, days=1),
        ask("wedding leave", 5, days=0),
        ask("are pets allowed at work", 1, days=2),
        ask("can I bring my dog to the office?", 1, days=2),
    ]
    results = [group_gaps(order, embed) for order in itertools.permutations(questions)]
    assert all(result == results[0] for result in results)
    assert [g.label for g in results[0]] == [
        "wedding leave",
        "gym membership reimbursement",
        "parking at HQ",
        "are pets allowed at work",
    ]  # the pets tie (count 1, same time) goes to the text first in order


def test_two_thousand_distinct_questions_group_by_their_vectors() -> None:
    """400 wordings five ways each, past the 512-row similarity blocks: every question finds its own."""
    rng = np.random.default_rng(20)
    centres = rng.normal(size=(400, 384))
    vectors = {f"question {k}/{j}": centres[k] + rng.normal(scale=0.2, size=384) for k in range(400) for j in range(5)}
    questions = [ask(text, int(n)) for text, n in zip(vectors, rng.integers(1, 4, size=len(vectors)), strict=True)]

    def lookup(batch: Sequence[str]) -> list[list[float]]:
        return [vectors[text].tolist() for text in batch]

    groups = group_gaps(questions, lookup)
    assert len(groups) == 400
    assert all(len({q.text.split("/")[0] for q in g.questions}) == 1 for g in groups)


def test_no_questions_no_groups_and_no_model() -> None:
    assert group_gaps([], no_model) == []


def test_an_embed_function_that_returns_too_few_vectors_is_refused() -> None:
    with pytest.raises(ValueError, match=r"1 vectors .* for 2 texts"):
        group_gaps([ask("parking at HQ"), ask("wedding leave")], lambda batch: [[1.0, 0.0]])


def test_the_cache_embeds_each_wording_once_across_page_loads(embed: Embed) -> None:
    recording = Recording(embed)
    cache = EmbeddingCache(recording)
    questions = [ask(text, n) for n, text in enumerate(PETS + UNRELATED, 1)]
    first = group_gaps(questions, cache)
    assert group_gaps(questions, cache) == first
    assert len(recording.calls) == 1
    group_gaps([*questions, ask("Is there a sabbatical policy?")], cache)
    assert recording.calls[1:] == [["is there a sabbatical policy"]]


def fixed_vectors(batch: Sequence[str]) -> list[list[float]]:
    """A stand-in model for the cache's own behaviour: the text's length and first letter."""
    return [[float(len(text)), float(ord(text[0]))] for text in batch]


def test_the_cache_embeds_only_missing_texts_in_one_call_and_forgets_the_least_recently_used() -> None:
    recording = Recording(fixed_vectors)
    cache = EmbeddingCache(recording, max_entries=2)
    assert cache(["a", "bb", "a"]) == [[1.0, 97.0], [2.0, 98.0], [1.0, 97.0]]
    cache(["a"])  # now "bb" is the least recently used
    cache(["ccc"])
    assert cache(["a", "bb", "ccc"]) == fixed_vectors(["a", "bb", "ccc"])  # more than it keeps: all returned
    assert recording.calls == [["a", "bb"], ["ccc"], ["bb"]]
    assert len(cache) == 2


def test_threads_reloading_at_once_embed_each_text_once() -> None:
    recording = Recording(fixed_vectors)
    cache = EmbeddingCache(recording)
    start = threading.Barrier(8)

    def reload(_: int) -> list[list[float]]:
        start.wait()
        return cache(["parking", "gym", "wedding"])

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(reload, range(8)))
    assert all(result == fixed_vectors(["parking", "gym", "wedding"]) for result in results)
    assert sorted(recording.texts) == ["gym", "parking", "wedding"]


def test_a_failed_embedding_is_not_cached() -> None:
    cache = EmbeddingCache(lambda batch: [])
    with pytest.raises(ValueError, match="0 vectors for 1 texts"):
        cache(["parking"])
    assert len(cache) == 0
