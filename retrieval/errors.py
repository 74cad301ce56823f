"""Every exception retrieval raises, in one module, so a caller can see what to catch and why.

The tree; each line says what it means, then who catches it::

    PolicyIndexError (RuntimeError)  the index cannot serve as configured: the CLI, chat and config check print it
     +-- UnknownSectionError         no document declares the section searched: bot.policy_tools searches them all
     +-- IndexMissingError           nothing indexed there yet: index_if_missing indexes, the rest say to run it
     +-- IndexInUseError             another process holds the embedded index: index_if_missing takes it as "exists"
     +-- IndexMismatchError          built with another embedding model: printed, with how to re-index
    EmbeddingError (RuntimeError)    the model cannot be located, verified or loaded: the CLI and config check print it
     +-- RerankError                 the same for the optional reranker (POLICYPAL_RERANK_MODEL): caught with it
    ExtractError (Exception)         one file cannot become a document: the loader records a LoadFailure and goes on
     +-- NoBodyText                  a page of headings only: the loader records a note, not a failure
    IndexingStopped (Exception)      stop_writes() ended a run between batches: the server sends it to `policypal index`
"""

from __future__ import annotations

from collections.abc import Sequence


class PolicyIndexError(RuntimeError):
    """A problem with the policy index that the user can act on; the message says how."""


class UnknownSectionError(PolicyIndexError):
    """A section filter that names no section in the index: an empty result would read as "not in the policy"."""

    def __init__(self, section: str, known: Sequence[str]) -> None:
        self.section, self.known = section, tuple(known)
        listed = f"its sections are {', '.join(known)}" if known else "it has no sections"
        super().__init__(f"No section {section!r} in the policy index: {listed}.")


class IndexMissingError(PolicyIndexError):
    """Nothing has been indexed at the configured location yet."""


class IndexInUseError(PolicyIndexError):
    """Another process holds the embedded index (Qdrant's local storage is one process per path)."""


class IndexMismatchError(PolicyIndexError):
    """The index was built with another embedding model or dimension."""


class EmbeddingError(RuntimeError):
    """A model that cannot be located, verified or loaded; the message says what to do."""


class RerankError(EmbeddingError):
    """A reranker model that is unknown, incomplete on disk or cannot be downloaded; the message says what to do.

    A kind of EmbeddingError so that everything that already reports a model problem reports this one too.
    """


class ExtractError(Exception):
    """A file that cannot become a document; the message is the reason shown to the operator."""


class NoBodyText(ExtractError):
    """A page that is only a title (a stub): nothing to index, worth a note but not a failure."""


class IndexingStopped(Exception):
    """``stop_writes`` was called while indexing (the server holding the index is shutting down)."""
