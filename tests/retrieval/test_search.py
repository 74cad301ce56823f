"""Hybrid search: exact terms, filters, the relevance floor, bounded snippets, and use off the event loop."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from retrieval import (
    Document,
    Embedder,
    PolicyIndex,
    RelevanceFloor,
    Retrieval,
    RetrievalConfig,
    SearchFilter,
    UnknownSectionError,
)
from retrieval.backends import Hit
from tests.retrieval.conftest import OpenIndex, make_doc, sample_corpus

# Many passages about errors and certificates, one of which names the code: BM25 must find it.
DISTRACTORS = [
    make_doc(
        f"it-{n}.md",
        f"# IT note {n}\n\n## Certificates\n\nCertificate errors on the {system} usually mean the device "
        "certificate expired. Reinstall it from the self-service portal and restart the client.",
    )
    for n, system in enumerate(["VPN", "wifi", "mail client", "printer", "build server", "wiki"])
]
# A code in a passage about something else: the dense model ranks it low for a certificate question.
PRINTER = replace(make_doc(
    "printers.md", "# Printers\n\n## Status codes\n\nIf the panel shows ZQ-5518, the toner drawer is open: close it.\n"
), classification="internal")  # its front matter's label travels with its passages


@pytest.fixture(scope="module", params=["edge", "qdrant-client"])
def index(request: pytest.FixtureRequest, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[PolicyIndex]:
    """One read-only index per backend for the whole module: these tests only search."""
    data = tmp_path_factory.mktemp("search")
    cfg = RetrievalConfig(qdrant_path=data / "qdrant", model_cache_dir=data / "models")
    backend = None
    if request.param == "qdrant-client":
        from qdrant_client import QdrantClient

        from retrieval.backends import QdrantBackend

        backend = QdrantBackend(QdrantClient(location=":memory:"), cfg.collection)
    with PolicyIndex.open(cfg, create=True, embedder=embedder, backend=backend) as index:
        index.index_documents([*sample_corpus(), *DISTRACTORS, PRINTER], root="/policies")
        yield index


def _doc_ids(passages: list) -> list[str]:  # type: ignore[type-arg]
    return [p.doc_id for p in passages]


def test_an_exact_error_code_is_found_first(index: PolicyIndex) -> None:
    result = index.retrieve("KX-7731", k=5)

    assert result.sparse[0].payload["doc_id"] == "vpn.md"
    assert _doc_ids(index.search("KX-7731"))[0] == "vpn.md"


def test_an_exact_code_the_dense_model_misses_is_still_returned(index: PolicyIndex) -> None:
    question = "certificate error ZQ-5518 on my laptop"
    dense_only = [hit.payload["doc_id"] for hit in index.retrieve(question, k=5).dense[:5]]

    assert "printers.md" not in dense_only
    assert "printers.md" in _doc_ids(index.search(question, k=5))


def test_paraphrased_questions_find_the_right_policy(index: PolicyIndex) -> None:
    assert _doc_ids(index.search("how many vacation days do I get per year?"))[0] == "leave.md"
    assert _doc_ids(index.search("can I fly business class to a conference?"))[0] == "travel.md"


def test_a_question_the_policies_do_not_cover_returns_nothing(index: PolicyIndex) -> None:
    assert index.search("what is the lasagna recipe in the cafeteria?") == []
    assert index.search("   ") == []


def test_the_floor_removes_only_what_is_clearly_unrelated() -> None:
    floor = RelevanceFloor(min_dense=0.3, min_terms=0.7)

    def retrieval(dense: list[float], sparse: float | None, terms: int = 2, size: int = 1000) -> Retrieval:
        return Retrieval([], [Hit(str(i), s, {}) for i, s in enumerate(dense)],
                         [Hit("s", sparse, {})] if sparse is not None else [], terms, size)

    assert floor.admits(retrieval([0.31, *[0.30] * 20], None))  # weak but related: the model judges it
    assert not floor.admits(retrieval([0.25, *[0.10] * 20], None))
    rare_terms = 2 * math.log(1 + 999.5 / 1.5)  # two query terms, each in exactly one passage
    assert retrieval([0.2], rare_terms).term_strength == pytest.approx(1.0)
    assert floor.admits(retrieval([0.2], 0.8 * rare_terms))
    assert not floor.admits(retrieval([0.2], 0.5 * rare_terms))
    assert not floor.admits(Retrieval([], [], [], 0, 0))


@pytest.mark.parametrize(
    ("groups", "visible"),
    [
        (None, True),  # no audience filtering (admin, CLI)
        (("managers",), True),
        (("engineering", "hr"), True),
        (("engineering",), False),
        ((), False),
    ],
)
def test_audience_restricts_who_sees_a_document(
    index: PolicyIndex, groups: tuple[str, ...] | None, visible: bool
) -> None:
    scope = SearchFilter(groups=groups)
    passages = index.search("salary bands for engineering levels", k=10, filter=scope)

    assert ("salary-bands.md" in _doc_ids(passages)) is visible
    # untagged (vpn.md) and "all" (leave.md) documents stay visible to everyone
    assert "vpn.md" in _doc_ids(index.search("KX-7731", filter=scope))
    assert "leave.md" in _doc_ids(index.search("annual leave allowance", filter=scope))


def test_a_documents_classification_comes_with_its_passages(index: PolicyIndex) -> None:
    (first, *_) = index.search("ZQ-5518 on the printer panel")
    assert (first.doc_id, first.classification) == ("printers.md", "internal")
    assert all(p.classification is None for p in index.search("KX-7731") if p.doc_id != "printers.md")


def test_section_filter_keeps_one_section(index: PolicyIndex) -> None:
    passages = index.search("annual leave and salary bands", k=10, filter=SearchFilter(section="People"))

    assert passages and {p.section for p in passages} == {"People"}


def test_a_section_filter_ignores_case(index: PolicyIndex) -> None:
    passages = index.search("annual leave and salary bands", k=10, filter=SearchFilter(section="people"))

    assert passages and {p.section for p in passages} == {"People"}


def test_an_unknown_section_is_an_error_naming_the_sections_not_an_empty_result(index: PolicyIndex) -> None:
    with pytest.raises(UnknownSectionError) as error:
        index.search("annual leave", filter=SearchFilter(section="Legal"))

    assert error.value.known == tuple(index.sections()) and "People" in error.value.known
    assert str(error.value).startswith("No section 'Legal' in the policy index: its sections are ")


def test_passages_carry_citation_fields_and_a_bounded_snippet(open_index: OpenIndex, corpus: list[Document]) -> None:
    index = open_index(snippet_chars=80)
    index.index_documents(corpus, root="/policies")

    passage = index.search("KX-7731 certificate expired")[0]

    assert passage.title == "Vpn" and passage.source == "vpn.md" and passage.section == "IT"  # inside its root
    assert "Troubleshooting" in passage.heading
    assert 0 < len(passage.text) <= 80 and passage.text.endswith("…")
    assert not passage.text.startswith(passage.title)  # the heading line is not repeated in the text


def test_k_limits_the_number_of_passages(index: PolicyIndex) -> None:
    assert len(index.search("certificate expired reinstall", k=3)) == 3


@pytest.mark.parametrize("k", [0, -1, 51])
def test_k_out_of_range_is_refused_not_reinterpreted(index: PolicyIndex, k: int) -> None:
    with pytest.raises(ValueError, match="k must be between 1 and 50"):
        index.search("certificate expired reinstall", k=k)


def test_an_index_of_one_passage_still_answers_a_question_it_covers(open_index: OpenIndex) -> None:
    index = open_index()
    text = "# Bikes\n\nThe cycle-to-work scheme lends you up to 1,500 EUR for a bicycle, repaid from salary.\n"
    index.index_documents([make_doc("bikes.md", text)], root="/policies")
    assert index.count() == 1

    assert [p.doc_id for p in index.search("how much can I borrow for a bike through cycle to work")] == ["bikes.md"]
    assert index.search("what is the dress code at the office") == []


async def test_asearch_runs_off_the_event_loop(index: PolicyIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []
    original = index.search

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(threading.get_ident())
        return original(*args, **kwargs)

    monkeypatch.setattr(index, "search", spy)
    results = await asyncio.gather(*(index.asearch("KX-7731", k=2) for _ in range(4)))

    assert all(_doc_ids(r)[0] == "vpn.md" for r in results)
    assert seen and loop_thread not in seen


def test_concurrent_searches_from_threads_agree(index: PolicyIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    questions = ["KX-7731", "how many vacation days", "business class flights", "hotel rate"] * 4
    expected = [_doc_ids(index.search(q)) for q in questions]
    monkeypatch.setattr(index.embedder, "_queries", {})  # the threads run the model, not the test memo

    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda q: _doc_ids(index.search(q)), questions))

    assert got == expected
