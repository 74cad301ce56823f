"""Incremental indexing: unchanged documents embed nothing, changes replace, removals stay in their root."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from retrieval import (
    Document,
    Embedder,
    IndexingStopped,
    IndexMismatchError,
    IndexMissingError,
    PolicyIndex,
    RetrievalConfig,
    SearchFilter,
)
from retrieval.backends import point_id
from tests.retrieval.conftest import LEAVE_DOC, OpenIndex, make_doc

ROOT_A = "/corpora/a"
ROOT_B = "/corpora/b"


class CountingEmbedder(Embedder):
    """The shared model, counting the passages it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.__dict__.update(inner.__dict__)
        self.embedded: list[str] = []

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        self.embedded.extend(texts)
        return super().embed_documents(texts)


class StoppingEmbedder(Embedder):
    """The shared model, one passage per batch, asking the index to stop after the first batch."""

    def __init__(self, inner: Embedder, stop) -> None:  # type: ignore[no-untyped-def]
        self.__dict__.update(inner.__dict__)
        self.batch_size = 1
        self._stop = stop

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        vectors = super().embed_documents(texts)
        self._stop()
        return vectors


def _chunks_of(index: PolicyIndex, doc_id: str) -> int:
    return index._context.stored_docs()[doc_id].points


def test_first_run_adds_every_document_with_full_payload(open_index: OpenIndex, corpus: list[Document]) -> None:
    index = open_index()

    report = index.index_documents(corpus, root=ROOT_A)

    assert sorted(report.added) == sorted(d.doc_id for d in corpus)
    assert report.replaced == report.removed == report.unchanged == []
    assert report.chunks_embedded == index.count() > len(corpus)
    hit = index.retrieve("KX-7731 certificate expired", k=1).fused[0]
    assert hit.id == point_id("vpn.md", hit.payload["position"])
    vpn = corpus[0]
    assert hit.payload["doc_id"] == "vpn.md" and hit.payload["title"] == vpn.title
    assert hit.payload["source"] == vpn.source and hit.payload["content_hash"] == vpn.content_hash
    assert hit.payload["section"] == "IT" and hit.payload["audience"] == [] and hit.payload["root"] == ROOT_A
    assert "Troubleshooting" in hit.payload["heading"] and "KX-7731" in hit.payload["text"]


def test_unchanged_documents_embed_nothing(open_index: OpenIndex, corpus: list[Document], embedder: Embedder) -> None:
    counting = CountingEmbedder(embedder)
    index = open_index()
    index.embedder = counting
    index.index_documents(corpus, root=ROOT_A)
    before = index.count()
    counting.embedded.clear()

    report = index.index_documents(corpus, root=ROOT_A)

    assert counting.embedded == []
    assert sorted(report.unchanged) == sorted(d.doc_id for d in corpus)
    assert report.added == report.replaced == report.removed == []
    assert index.count() == before


def test_a_changed_document_is_replaced_and_its_surplus_chunks_removed(
    open_index: OpenIndex, corpus: list[Document]
) -> None:
    index = open_index()
    index.index_documents(corpus, root=ROOT_A)
    assert _chunks_of(index, "leave.md") >= 2
    shorter = make_doc("leave.md", "# Annual leave\n\nEveryone gets 30 days of annual leave.", section="People")

    report = index.index_documents([shorter, *corpus[2:], corpus[0]], root=ROOT_A)

    assert report.replaced == ["leave.md"]
    assert _chunks_of(index, "leave.md") == 1
    texts = [h.payload["text"] for h in index.retrieve("carry over unused days", k=10).fused]
    assert not any("carry over" in t for t in texts)
    assert any("30 days" in t for t in texts)


def test_documents_gone_from_a_root_are_removed_but_other_roots_keep_theirs(
    open_index: OpenIndex, corpus: list[Document]
) -> None:
    index = open_index()
    index.index_documents(corpus[:2], root=ROOT_A)
    index.index_documents(corpus[2:], root=ROOT_B)

    report = index.index_documents(corpus[:1], root=ROOT_A)

    assert report.removed == ["leave.md"]
    assert set(index._context.stored_docs()) == {"vpn.md", "travel.md", "salary-bands.md"}


def test_a_file_that_failed_to_load_keeps_its_indexed_chunks(open_index: OpenIndex, corpus: list[Document]) -> None:
    index = open_index()
    index.index_documents(corpus[:2], root=ROOT_A)

    report = index.index_documents(corpus[:1], root=ROOT_A, protected=frozenset({"leave.md"}))

    assert report.removed == []
    assert "leave.md" in index._context.stored_docs()


def test_a_document_id_owned_by_another_existing_root_is_a_failure(
    open_index: OpenIndex, corpus: list[Document], tmp_path: Path
) -> None:
    index = open_index()
    index.index_documents(corpus[:1], root=str(tmp_path))  # a root that exists on disk

    report = index.index_documents([replace(corpus[0], text=LEAVE_DOC)], root=ROOT_B)

    assert [f.reason for f in report.failures] == [
        f"document id 'vpn.md' is already indexed from {tmp_path}; give one of the two files a front matter "
        "`id`, or index them from one root"
    ]
    assert index._context.stored_docs()["vpn.md"].root == str(tmp_path)


def test_a_document_whose_root_disappeared_moves_to_the_new_root(open_index: OpenIndex, corpus: list[Document]) -> None:
    index = open_index()
    index.index_documents(corpus[:1], root="/no/longer/there")

    report = index.index_documents(corpus[:1], root=ROOT_B)

    assert report.replaced == ["vpn.md"] and not report.failures
    assert index._context.stored_docs()["vpn.md"].root == ROOT_B


def test_an_interrupted_run_is_repaired_on_the_next(open_index: OpenIndex, corpus: list[Document]) -> None:
    index = open_index()
    index.index_documents(corpus, root=ROOT_A)
    index._context.backend.delete_chunks("vpn.md", from_position=1)  # as if the run died mid-document

    report = index.index_documents(corpus, root=ROOT_A)

    assert report.replaced == ["vpn.md"]
    assert index._context.stored_docs()["vpn.md"].complete


def test_indexing_asked_to_stop_ends_between_batches_and_the_next_run_finishes_it(
    open_index: OpenIndex, corpus: list[Document]
) -> None:
    # A server shutting down asks a running `policypal index` to stop; the replacement it cut short
    # holds as many points as before, some of the old version: it must not pass for current.
    index = open_index()
    index.index_documents(corpus, root=ROOT_A)
    edited = make_doc("leave.md", LEAVE_DOC.replace("31 March", "30 April"), section="People", audience=("all",))
    documents = [corpus[0], edited, *corpus[2:]]
    index.embedder = StoppingEmbedder(index.embedder, index.stop_writes)

    with pytest.raises(IndexingStopped, match="run `policypal index` again"):
        index.index_documents(documents, root=ROOT_A)
    assert not index._context.stored_docs()["leave.md"].complete

    index = open_index()
    report = index.index_documents(documents, root=ROOT_A)
    assert report.replaced == ["leave.md"]
    texts = [hit.payload["text"] for hit in index.retrieve("when do carried over days expire", k=10).fused]
    assert any("30 April" in t for t in texts) and not any("31 March" in t for t in texts)


class StoppingLater(Embedder):
    """The shared model, one passage per batch, asking the index to stop after ``batches`` batches."""

    def __init__(self, inner: Embedder, stop, batches: int) -> None:  # type: ignore[no-untyped-def]
        self.__dict__.update(inner.__dict__)
        self.batch_size = 1
        self._stop, self._left = stop, batches

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        vectors = super().embed_documents(texts)
        self._left -= 1
        if self._left <= 0:
            self._stop()
        return vectors


def test_a_rerun_after_an_interrupted_run_embeds_only_the_passages_it_did_not_write(
    open_index: OpenIndex, corpus: list[Document], embedder: Embedder
) -> None:
    # The stop message says what was written is kept, but the next run embedded every passage of a
    # document cut short again: Ctrl-C at 90% of a large folder cost the whole run.
    index = open_index()
    index.embedder = StoppingLater(index.embedder, index.stop_writes, batches=6)
    with pytest.raises(IndexingStopped):
        index.index_documents(corpus, root=ROOT_A)
    written = index.count()
    stored = index._context.stored_docs()
    assert any(0 < doc.points < doc.chunk_count for doc in stored.values())  # a document cut short

    index = open_index()
    counting = CountingEmbedder(embedder)
    index.embedder = counting
    report = index.index_documents(corpus, root=ROOT_A)

    assert len(counting.embedded) == report.chunks_embedded == index.count() - written
    assert all(doc.complete for doc in index._context.stored_docs().values())
    assert index.index_documents(corpus, root=ROOT_A).chunks_embedded == 0
    texts = [hit.payload["text"] for hit in index.retrieve("when do carried over days expire", k=10).fused]
    assert any("31 March" in t for t in texts)


def test_a_stopped_run_says_how_many_passages_it_wrote_without_a_progress_bar(
    open_index: OpenIndex, corpus: list[Document]
) -> None:
    # The server indexes without progress; the disabled bar's count stayed 0: "stopped after 0 of N".
    index = open_index()
    index.embedder = StoppingEmbedder(index.embedder, index.stop_writes)

    with pytest.raises(IndexingStopped, match=r"indexing stopped after 1 of \d+ passages"):
        index.index_documents(corpus, root=ROOT_A)


def test_changing_chunk_settings_rechunks_everything(open_index: OpenIndex, corpus: list[Document]) -> None:
    open_index().index_documents(corpus, root=ROOT_A)

    report = open_index(chunk_max_tokens=64).index_documents(corpus, root=ROOT_A)

    assert sorted(report.replaced) == sorted(d.doc_id for d in corpus)


def test_a_new_chunker_version_rechunks_everything(
    open_index: OpenIndex, corpus: list[Document], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A chunker fix changes chunks without changing any document: stored chunks must not be kept.
    open_index().index_documents(corpus, root=ROOT_A)
    monkeypatch.setattr("retrieval.indexing.CHUNKER_VERSION", 999)

    report = open_index().index_documents(corpus, root=ROOT_A)

    assert sorted(report.replaced) == sorted(d.doc_id for d in corpus)


def test_a_document_with_no_text_is_reported_not_indexed(open_index: OpenIndex) -> None:
    index = open_index()

    report = index.index_documents([make_doc("blank.md", "")], root=ROOT_A)

    assert [(f.path.name, f.reason) for f in report.failures] == [("blank.md", "no text to index")]
    assert report.added == [] and index.count() == 0


def test_another_model_refuses_to_index_or_search(cfg: RetrievalConfig, embedder: Embedder) -> None:
    PolicyIndex.open(cfg, create=True, embedder=embedder).close()
    other = Embedder("BAAI/bge-small-en-v1.5", cfg.model_cache_dir)  # same 384 dims, other model

    for create in (True, False):
        with pytest.raises(IndexMismatchError, match=r"built with .*all-MiniLM-L6-v2.*selects BAAI.*Re-index"):
            PolicyIndex.open(cfg, create=create, embedder=other)


def test_searching_before_anything_is_indexed_says_to_index(cfg: RetrievalConfig, embedder: Embedder) -> None:
    with pytest.raises(IndexMissingError, match="run `policypal index"):
        PolicyIndex.open(cfg, embedder=embedder)
    assert not cfg.qdrant_path.exists()  # looking did not create anything


def test_the_index_survives_a_restart(cfg: RetrievalConfig, embedder: Embedder, corpus: list[Document]) -> None:
    with PolicyIndex.open(cfg, create=True, embedder=embedder) as index:
        index.index_documents(corpus, root=ROOT_A)
        count = index.count()

    with PolicyIndex.open(cfg, embedder=embedder) as reopened:
        assert reopened.count() == count
        assert reopened.index_documents(corpus, root=ROOT_A).chunks_embedded == 0


@pytest.mark.parametrize(
    "front_matter",
    ["\n---\naudience: [hr]\n---\n", "+++\naudience = ['hr']\n+++\n"],
    ids=["after-a-blank-line", "toml"],
)
def test_a_restricted_file_indexed_from_a_folder_is_found_only_by_its_audience(
    open_index: OpenIndex, tmp_path: Path, front_matter: str
) -> None:
    # Front matter not recognised was indexed as body text, and the document searchable by everyone.
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "bands.md").write_text(front_matter + "\n# Salary bands\n\nBand E4 pays 92,000 euros a year.\n")
    index = open_index()

    assert index.index_paths([folder]).added == ["bands.md"]

    question = "how much does salary band E4 pay"
    assert index.search(question, filter=SearchFilter(groups=("engineering",))) == []
    assert {p.doc_id for p in index.search(question, filter=SearchFilter(groups=("hr",)))} == {"bands.md"}
