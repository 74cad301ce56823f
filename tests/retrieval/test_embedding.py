"""The bundled model loads offline from hash-checked files; dense, sparse and token counts behave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import retrieval.embedding as embedding
from retrieval import Embedder, EmbeddingError, RetrievalConfig
from retrieval.embedding import BUNDLED_FILES, bundled_model_dir, load_tokenizer

REPO = Path(__file__).resolve().parents[2]
# Any attempt to open a socket fails loudly, so "it loaded" proves "it loaded offline".
NO_NETWORK = """
import socket
def _refuse(*args, **kwargs):
    raise OSError("network access attempted")
socket.socket.connect = _refuse
socket.create_connection = _refuse
"""


def _run_offline(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POLICYPAL_", "HF_", "FASTEMBED_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), PYTHONPATH=str(REPO))
    code = NO_NETWORK + textwrap.dedent(script)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def test_bundled_model_files_are_verified_and_gathered_in_one_dir(tmp_path: Path) -> None:
    model_dir = bundled_model_dir(tmp_path)

    assert model_dir == tmp_path / "all-MiniLM-L6-v2"
    assert sorted(p.name for p in model_dir.iterdir()) == ["model.onnx", "tokenizer.json", "tokenizer_config.json"]
    assert json.loads((model_dir / "tokenizer_config.json").read_text()) == {
        "model_max_length": 256,
        "do_lower_case": True,
    }
    assert embedding._sha256(model_dir / "model.onnx") == BUNDLED_FILES[0].sha256


def test_a_corrupted_cached_copy_is_replaced(tmp_path: Path) -> None:
    model_dir = bundled_model_dir(tmp_path)
    (model_dir / "tokenizer.json").write_text("{}")

    bundled_model_dir(tmp_path)

    assert embedding._sha256(model_dir / "tokenizer.json") == BUNDLED_FILES[1].sha256


def test_a_package_file_with_the_wrong_hash_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = replace(BUNDLED_FILES[1], sha256="0" * 64)
    monkeypatch.setattr(embedding, "BUNDLED_FILES", (wrong,))

    with pytest.raises(EmbeddingError, match=r"does not match the expected model file.*reinstall policypal"):
        bundled_model_dir(tmp_path)
    assert not (tmp_path / "all-MiniLM-L6-v2" / "tokenizer.json").exists()


def test_a_missing_model_package_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = replace(BUNDLED_FILES[0], package="policypal_no_such_package")
    monkeypatch.setattr(embedding, "BUNDLED_FILES", (missing,))

    with pytest.raises(EmbeddingError, match=r"policypal_no_such_package.*not installed"):
        bundled_model_dir(tmp_path)


def test_bundled_model_loads_and_embeds_with_no_network(tmp_path: Path) -> None:
    result = _run_offline(
        f"""
        from pathlib import Path
        from retrieval import Embedder
        e = Embedder("sentence-transformers/all-MiniLM-L6-v2", Path({str(tmp_path / "models")!r}))
        v = e.embed_query("Can I work from abroad?")
        print(len(v.dense), len(v.sparse_indices) > 0)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["384", "True"]


def test_a_hub_model_that_cannot_be_fetched_gives_a_clear_error(tmp_path: Path) -> None:
    result = _run_offline(
        f"""
        from pathlib import Path
        from retrieval import Embedder, EmbeddingError
        try:
            Embedder("BAAI/bge-small-en-v1.5", Path({str(tmp_path / "models")!r})).load()
        except EmbeddingError as exc:
            print(exc)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "Could not load the embedding model 'BAAI/bge-small-en-v1.5'" in result.stdout
    assert "unset POLICYPAL_EMBEDDING_MODEL" in result.stdout


def test_an_unknown_model_name_is_refused_before_loading(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="Unknown embedding model 'acme/not-a-model'"):
        Embedder("acme/not-a-model", tmp_path)


def test_dense_vectors_are_normalised_and_semantic(embedder: Embedder) -> None:
    leave, vacation, vpn = embedder.embed_documents(
        [
            "How many days of annual leave do I get?",
            "Employees receive 25 vacation days a year.",
            "Reinstall the VPN certificate when the client reports an error.",
        ]
    )
    dense = [np.array(v.dense) for v in (leave, vacation, vpn)]

    assert [len(d) for d in dense] == [384, 384, 384]
    assert all(abs(np.linalg.norm(d) - 1.0) < 1e-3 for d in dense)
    assert dense[0] @ dense[1] > dense[0] @ dense[2] + 0.2


def test_bm25_keeps_exact_codes_and_drops_stopwords(embedder: Embedder) -> None:
    code = embedder.embed_query("KX-7731")
    stop = embedder.embed_query("what is the")
    passage = embedder.embed_documents(["Error KX-7731 means the certificate expired."])[0]

    assert len(code.sparse_indices) == 2  # "kx" and "7731"
    assert set(code.sparse_indices) <= set(passage.sparse_indices)
    assert stop.sparse_indices == []


def test_token_counter_is_exact_and_never_truncates(embedder: Embedder, tmp_path: Path) -> None:
    model_tokenizer = load_tokenizer(bundled_model_dir(tmp_path))  # truncates at 256, adds [CLS]/[SEP]
    text = "Reimbursement of home-office equipment is capped at €400 per employee."

    assert embedder.count_tokens(text) == len(model_tokenizer.encode(text).ids) - 2
    assert embedder.count_tokens("word " * 1000) == 1000
    assert embedder.max_input_tokens == 254


def test_batched_embedding_matches_one_by_one_in_the_order_given(tmp_path: Path) -> None:
    # Texts of very different lengths, so sorting by length reorders them across several batches of 3.
    texts = [
        "Annual leave " * 60,
        "VPN",
        "Expenses over €400 need a manager's approval before purchase.",
        "Security incidents are reported to the on-call engineer within one hour. " * 8,
        "Parental leave is 20 weeks.",
        "Remote work from abroad is allowed for up to 30 days a year " * 3,
        "Badge",
    ]
    embedder = Embedder.from_config(RetrievalConfig(model_cache_dir=tmp_path, embed_batch_size=3))

    batched = embedder.embed_documents(texts)
    one_by_one = [embedder.embed_documents([text])[0] for text in texts]

    assert len(batched) == len(texts)
    for together, alone in zip(batched, one_by_one, strict=True):
        assert np.max(np.abs(np.array(together.dense) - np.array(alone.dense))) < 1e-4
        assert together.sparse_indices == alone.sparse_indices
        assert together.sparse_values == pytest.approx(alone.sparse_values)


def test_a_batch_size_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="batch size must be at least 1, not 0"):
        Embedder(RetrievalConfig().embedding_model, tmp_path, batch_size=0)
