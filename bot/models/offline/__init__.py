"""The offline model: a deterministic stand-in for an LLM, so PolicyPal answers with no API key.

It plans from the message list alone (small talk, the parts of a question to search, an IT problem
to ticket), then answers with quoted, cited sentences from the tool results and nothing it did not
read; compaction is an extractive summary of the conversation's own text.
"""

from bot.models.offline.model import COMPACTION_PREFIX, NAME, OfflineModel, estimate_usage

__all__ = ["COMPACTION_PREFIX", "NAME", "OfflineModel", "estimate_usage"]
