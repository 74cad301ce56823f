"""Opening a backend: the embedded index is one process's at a time, and an unreachable server says so."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from retrieval import Embedder, IndexInUseError, PolicyIndex, PolicyIndexError, RetrievalConfig
from retrieval.backends import EdgeBackend


def test_the_embedded_index_is_locked_while_open(cfg: RetrievalConfig, embedder: Embedder) -> None:
    in_use = r"in use by another process \(e.g. `policypal serve`\)"
    with PolicyIndex.open(cfg, create=True, embedder=embedder), pytest.raises(IndexInUseError, match=in_use):
        EdgeBackend.open(cfg.qdrant_path, cfg.collection, create=False)
    EdgeBackend.open(cfg.qdrant_path, cfg.collection, create=False).close()  # released on close


def test_a_second_process_gets_a_clear_in_use_error(cfg: RetrievalConfig, embedder: Embedder) -> None:
    script = (
        "from pathlib import Path\n"
        "from retrieval import IndexInUseError\n"
        "from retrieval.backends import EdgeBackend\n"
        "try:\n"
        f"    EdgeBackend.open(Path({str(cfg.qdrant_path)!r}), 'policies', create=True)\n"
        "except IndexInUseError as exc:\n"
        "    print('refused:', exc)\n"
    )
    with PolicyIndex.open(cfg, create=True, embedder=embedder):
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"refused: The index at {cfg.qdrant_path} is in use by another process")


def test_an_unreachable_qdrant_server_is_a_clear_error(cfg: RetrievalConfig, embedder: Embedder) -> None:
    server = replace(cfg, qdrant_url="http://127.0.0.1:9")  # the discard port: nothing listens

    with pytest.raises(PolicyIndexError, match=r"Cannot reach the Qdrant server at http://127.0.0.1:9"):
        PolicyIndex.open(server, embedder=embedder)
