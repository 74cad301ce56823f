"""Optional cross-encoder reranking: a second, closer reading of the few passages fusion ranked best.

A cross-encoder reads the question and a passage together, so it judges relevance better than two
vectors made apart, at the cost of one model pass per passage: it re-scores a handful of candidates,
never the index. Off unless RetrievalConfig.rerank_model names one of fastembed's cross-encoders; that
model is downloaded from the Hugging Face hub on first use, or read from rerank_model_dir with no
network at all. fastembed is imported only when a Reranker is built, so importing retrieval never loads it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from retrieval.config import RetrievalConfig
from retrieval.errors import RerankError

if TYPE_CHECKING:
    from fastembed.rerank.cross_encoder import TextCrossEncoder

T = TypeVar("T")
# fastembed reads these beside the ONNX file (config.json is optional since fastembed 0.9).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# Passages per ONNX run: above rerank_candidates' bound (MAX_K), so one search is one run.
BATCH_SIZE = 64


@dataclass(frozen=True)
class CrossEncoderModel:
    """A fastembed cross-encoder: its canonical name and the files a local model directory must hold."""

    name: str
    files: tuple[str, ...]


def cross_encoder_model(model_name: str) -> CrossEncoderModel:
    """Look a name up in fastembed's list (case-insensitively, as fastembed does), or say where to find one."""
    from fastembed.rerank.cross_encoder import TextCrossEncoder

    supported = TextCrossEncoder.list_supported_models()
    for description in supported:
        if description["model"].lower() == model_name.lower():
            extra = tuple(description.get("additional_files") or ())
            return CrossEncoderModel(description["model"], (description["model_file"], *extra, *TOKENIZER_FILES))
    names = ", ".join(sorted(str(d["model"]) for d in supported))
    raise RerankError(
        f"Unknown reranker model {model_name!r}: POLICYPAL_RERANK_MODEL must name a fastembed cross-encoder, "
        "as listed by fastembed.rerank.cross_encoder.TextCrossEncoder.list_supported_models() "
        f"(this fastembed has {names}), or be unset to search without reranking."
    )


class Reranker:
    """One cross-encoder, loaded on first use and safe to share between threads.

    The name is checked when the Reranker is built, so a misspelt model fails at start, not on the
    first question; the model itself (tens to hundreds of MB) loads only when first needed.
    """

    def __init__(
        self, model_name: str, cache_dir: Path, *, model_dir: Path | None = None, batch_size: int = BATCH_SIZE
    ) -> None:
        model = cross_encoder_model(model_name)
        self.model_name = model.name
        self.model_dir = model_dir
        self.batch_size = batch_size
        self._files = model.files
        self._cache_dir = cache_dir
        self._lock = threading.Lock()
        self._encoder: TextCrossEncoder | None = None

    @classmethod
    def from_config(cls, cfg: RetrievalConfig) -> Reranker | None:
        """The configured reranker, or None when reranking is off (then fastembed is not imported)."""
        if cfg.rerank_model is None:
            return None
        return cls(cfg.rerank_model, cfg.model_cache_dir, model_dir=cfg.rerank_model_dir)

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        """One score per text, in input order; higher is more relevant (raw logits, unbounded, any sign)."""
        if not texts:
            return []  # no model load for a search that found nothing
        scores = [float(score) for score in self._model().rerank(query, list(texts), batch_size=self.batch_size)]
        if len(scores) != len(texts):
            raise RerankError(f"The reranker {self.model_name!r} scored {len(scores)} of {len(texts)} passages.")
        return scores

    def order(self, query: str, items: Sequence[T], text_of: Callable[[T], str]) -> list[tuple[T, float]]:
        """Items with their scores, most relevant first; equal scores keep the order they came in."""
        scores = self.rerank(query, [text_of(item) for item in items])
        return sorted(zip(items, scores, strict=True), key=lambda pair: -pair[1])

    def load(self) -> Reranker:
        """Load the model now (a server does this at start, not on its first question)."""
        self._model()
        return self

    def _model(self) -> TextCrossEncoder:
        with self._lock:  # two first questions at once load the model once
            if self._encoder is None:
                self._encoder = self._load()
            return self._encoder

    def _load(self) -> TextCrossEncoder:
        from fastembed.rerank.cross_encoder import TextCrossEncoder

        # As for the embedding model: ONNX's arena would keep the largest batch shape ever seen.
        options: dict[str, Any] = {"enable_cpu_mem_arena": False}
        if self.model_dir is not None:
            missing = [name for name in self._files if not (self.model_dir / name).is_file()]
            if missing:
                raise RerankError(
                    f"POLICYPAL_RERANK_MODEL_DIR={self.model_dir} lacks {', '.join(missing)} of the reranker "
                    f"{self.model_name!r}: it needs {', '.join(self._files)} (a copy of the model's Hugging Face "
                    "repository has them)."
                )
            options["specific_model_path"] = str(self.model_dir)
        try:
            return TextCrossEncoder(self.model_name, cache_dir=str(self._cache_dir / "fastembed"), **options)
        except Exception as exc:  # a hub, network or ONNX failure surfaces as many exception types
            if self.model_dir is not None:
                raise RerankError(
                    f"Could not load the reranker {self.model_name!r} from {self.model_dir} ({exc}). "
                    "Point POLICYPAL_RERANK_MODEL_DIR at a complete copy of that model, or unset it to download it."
                ) from exc
            raise RerankError(
                f"Could not load the reranker {self.model_name!r}: it is downloaded from the Hugging Face hub on "
                f"first use, and that failed ({exc}). Allow network access once, set POLICYPAL_RERANK_MODEL_DIR "
                "to a directory holding its files, or unset POLICYPAL_RERANK_MODEL to search without reranking."
            ) from exc
