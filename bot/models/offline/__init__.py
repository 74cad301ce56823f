"""The offline model: a deterministic stand-in for an LLM, so PolicyPal answers with no API key.

It plans from the message list alone (small talk, the parts of a question to search with the context
each needs, an IT problem to ticket, both for a problem report that also asks), then answers each
part with quoted, cited sentences, list items or whole table rows from the tool results and nothing
it did not read: scored by words and, with the index's embedding model, by meaning; "not in the
policy" when nothing answers; never text that addresses assistants. Compaction is an extractive
summary of the conversation's own text.
"""

from bot.models.offline.model import COMPACTION_PREFIX, NAME, OfflineModel, estimate_usage

__all__ = ["COMPACTION_PREFIX", "NAME", "OfflineModel", "estimate_usage"]
