"""The optional reranker: a real ONNX cross-encoder read from a directory, its errors, and off by default.

The model is built here with the onnx package: its logit for a (question, passage) pair is how often the
word "leave" appears in the passage's segment (token type 1), so the expected ranking is known exactly
and fastembed's whole path (tokenizer pairing, padding, ONNX session, output) is the one that runs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bot.config import load_settings
from bot.errors import ConfigError
from retrieval import Embedder, EmbeddingError, PolicyIndex, Reranker, RerankError, RetrievalConfig
from retrieval.embedding import bundled_model_dir
from tests.retrieval.conftest import make_doc

REPO = Path(__file__).resolve().parents[2]
SUPPORTED = "Xenova/ms-marco-MiniLM-L-6-v2"  # a fastembed name whose model_file is onnx/model.onnx
WORD = "leave"


def counting_cross_encoder(target_id: int) -> bytes:
    """An ONNX cross-encoder whose logit is the count of target_id among the passage's real tokens."""
    import onnx
    from onnx import TensorProto, helper

    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])
    constants = [
        helper.make_tensor("target", TensorProto.INT64, [], [target_id]),
        helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
    ]
    nodes = [
        helper.make_node("Equal", ["input_ids", "target"], ["is_word"]),
        helper.make_node("Cast", ["is_word"], ["word"], to=TensorProto.INT64),
        helper.make_node("Mul", ["word", "attention_mask"], ["real_word"]),  # padding never counts
        helper.make_node("Mul", ["real_word", "token_type_ids"], ["passage_word"]),  # the question never counts
        helper.make_node("Cast", ["passage_word"], ["counted"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["counted", "axes"], ["logits"], keepdims=1),
    ]
    graph = helper.make_graph(nodes, "counting-cross-encoder", inputs, [logits], initializer=constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cross-encoder directory as fastembed reads it: onnx/model.onnx and the MiniLM tokenizer."""
    from tokenizers import Tokenizer

    bundled = bundled_model_dir(tmp_path_factory.mktemp("bundled"))
    target_id = Tokenizer.from_file(str(bundled / "tokenizer.json")).token_to_id(WORD)
    assert target_id is not None
    directory = tmp_path_factory.mktemp("cross-encoder")
    (directory / "onnx").mkdir()
    (directory / "onnx" / "model.onnx").write_bytes(counting_cross_encoder(target_id))
    (directory / "tokenizer.json").write_bytes((bundled / "tokenizer.json").read_bytes())
    (directory / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512, "do_lower_case": True}))
    (directory / "config.json").write_text(json.dumps({"pad_token_id": 0}))
    return directory


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any socket connection fails loudly, so "it loaded" proves "it loaded without the hub"."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.usefixtures("no_network")
def test_a_cross_encoder_from_a_directory_scores_in_input_order_and_orders_best_first(
    model_dir: Path, tmp_path: Path
) -> None:
    reranker = Reranker(SUPPORTED.lower(), tmp_path, model_dir=model_dir)  # names match as fastembed's do
    texts = ["Annual leave is 25 days.", "Book flights in the portal.", "Leave, leave and leave.", "Leave or leave?"]

    # "leave" twice in the question counts for nothing: only the passage's segment is scored.
    scores = reranker.rerank("leave leave: how much annual leave?", texts)
    ordered = reranker.order("annual leave", texts, text_of=lambda text: text)

    assert reranker.model_name == SUPPORTED
    assert scores == [1.0, 0.0, 3.0, 2.0]
    assert ordered == [(texts[2], 3.0), (texts[3], 2.0), (texts[0], 1.0), (texts[1], 0.0)]


def test_search_with_a_reranker_orders_the_fused_passages_by_it_after_the_floor(
    model_dir: Path, embedder: Embedder, tmp_path: Path
) -> None:
    """The cross-encoder reorders what fusion found; a question the floor refuses never reaches it."""
    docs = [
        make_doc("one.md", "# Leave rules\n\n## Requests\n\nAsk your manager before you book leave."),
        make_doc("three.md", "# Leave calendar\n\n## Planning\n\nLeave plans, leave requests and leave balances."),
        make_doc("none.md", "# Time off\n\n## Holidays\n\nPublic holidays are days off for everyone."),
    ]
    cfg = RetrievalConfig(qdrant_path=tmp_path / "qdrant", model_cache_dir=tmp_path / "models",
                          rerank_model=SUPPORTED, rerank_model_dir=model_dir, rerank_candidates=3)
    with PolicyIndex.open(cfg, create=True, embedder=embedder) as index:
        index.index_documents(docs, root="/policies")
        reranker = index._searcher.reranker
        assert reranker is not None and reranker.model_dir == model_dir
        question = "how do I book time off?"
        fused = [hit.payload["doc_id"] for hit in index.retrieve(question, k=3).fused]
        found = index.search(question, k=3)
        assert [p.doc_id for p in found] == ["three.md", "one.md", "none.md"]  # "leave" 3, 1 and 0 times
        assert fused != ["three.md", "one.md", "none.md"]  # so the order is the reranker's doing
        assert found[0].score > found[1].score > found[2].score and all(0 < p.score < 1 for p in found)
        assert index.search("what is the lasagna recipe in the cafeteria?") == []
        assert reranker._encoder is not None  # the model did run (loaded lazily, at the first search)


def test_equal_scores_keep_the_order_they_came_in(model_dir: Path, tmp_path: Path) -> None:
    reranker = Reranker(SUPPORTED, tmp_path, model_dir=model_dir).load()
    hits = [("a", "no match"), ("b", "one leave"), ("c", "nothing"), ("d", "leave here")]

    ordered = reranker.order("leave", hits, text_of=lambda hit: hit[1])

    assert [hit[0] for hit, _score in ordered] == ["b", "d", "a", "c"]
    assert reranker.rerank("leave", []) == []


def test_threads_sharing_one_reranker_load_it_once_and_each_get_their_own_scores(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reranker = Reranker(SUPPORTED, tmp_path, model_dir=model_dir)
    loads: list[Reranker] = []
    load = Reranker._load

    def counted_load(self: Reranker) -> object:
        loads.append(self)
        return load(self)

    monkeypatch.setattr(Reranker, "_load", counted_load)
    texts = [" ".join([WORD] * n) for n in range(8)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda n: reranker.rerank("leave", texts[n:]), range(8)))

    assert len(loads) == 1
    assert results == [[float(n) for n in range(start, 8)] for start in range(8)]


def test_an_unknown_model_is_refused_when_built_saying_where_the_names_are(tmp_path: Path) -> None:
    with pytest.raises(RerankError) as refused:
        Reranker("acme/no-such-reranker", tmp_path)

    message = str(refused.value)
    assert "'acme/no-such-reranker'" in message and "POLICYPAL_RERANK_MODEL" in message
    assert "fastembed.rerank.cross_encoder.TextCrossEncoder.list_supported_models()" in message and SUPPORTED in message
    assert isinstance(refused.value, EmbeddingError)  # the CLI and config check already report those


def test_a_directory_missing_the_model_file_is_named_at_first_use(model_dir: Path, tmp_path: Path) -> None:
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    reranker = Reranker(SUPPORTED, tmp_path, model_dir=partial)  # nothing is read yet

    with pytest.raises(RerankError, match=r"lacks onnx/model\.onnx, tokenizer_config\.json of the reranker"):
        reranker.rerank("leave", ["annual leave"])


@pytest.mark.usefixtures("no_network")
def test_a_model_that_cannot_be_downloaded_says_it_is_downloaded_on_first_use(tmp_path: Path) -> None:
    reranker = Reranker(SUPPORTED, tmp_path / "models")  # HF_HUB_OFFLINE=1 (conftest) and no cached copy

    with pytest.raises(RerankError) as failed:
        reranker.load()

    message = str(failed.value)
    assert "downloaded from the Hugging Face hub on first use" in message
    assert "POLICYPAL_RERANK_MODEL_DIR" in message and "unset POLICYPAL_RERANK_MODEL" in message


def test_reranking_is_off_by_default_and_then_never_imports_fastembed(tmp_path: Path) -> None:
    assert RetrievalConfig().rerank_model is None
    assert Reranker.from_config(RetrievalConfig()) is None
    script = (
        "import sys\n"
        "from retrieval import Reranker, RetrievalConfig\n"
        "assert Reranker.from_config(RetrievalConfig()) is None\n"
        "print('fastembed' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLICYPAL_")}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"


def test_the_settings_reach_the_retrieval_config(monkeypatch: pytest.MonkeyPatch, model_dir: Path) -> None:
    assert load_settings(_env_file=None).retrieval().rerank_model is None
    monkeypatch.setenv("POLICYPAL_RERANK_MODEL", SUPPORTED)
    monkeypatch.setenv("POLICYPAL_RERANK_MODEL_DIR", str(model_dir))
    monkeypatch.setenv("POLICYPAL_RERANK_CANDIDATES", "12")

    cfg = load_settings(_env_file=None).retrieval()
    reranker = Reranker.from_config(cfg)

    assert (cfg.rerank_model, cfg.rerank_model_dir, cfg.rerank_candidates) == (SUPPORTED, model_dir, 12)
    assert reranker is not None and reranker.model_dir == model_dir
    assert reranker.rerank("leave", ["leave it"]) == [1.0]


@pytest.mark.parametrize(
    ("variables", "refused"),
    [
        ({"POLICYPAL_RERANK_CANDIDATES": "0"}, "POLICYPAL_RERANK_CANDIDATES"),
        ({"POLICYPAL_RERANK_CANDIDATES": "51"}, "POLICYPAL_RERANK_CANDIDATES"),
        ({"POLICYPAL_RERANK_MODEL_DIR": "/models/reranker"}, "POLICYPAL_RERANK_MODEL is not"),
    ],
)
def test_settings_that_cannot_work_are_refused(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], refused: str
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)

    with pytest.raises(ConfigError, match=refused):
        load_settings(_env_file=None)


def test_an_empty_model_name_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLICYPAL_RERANK_MODEL", "")
    monkeypatch.setenv("POLICYPAL_RERANK_MODEL_DIR", " ")

    assert load_settings(_env_file=None).retrieval().rerank_model is None
