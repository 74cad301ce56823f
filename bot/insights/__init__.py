"""What operators learn from the runs: questions the policies could not answer, grouped by wording, and
their export for policy owners.
"""

from bot.insights.cache import EmbeddingCache
from bot.insights.export import CSV_COLUMNS, gaps_csv
from bot.insights.gaps import (
    EXAMPLE_RUNS,
    SIMILAR_WORDING,
    Embed,
    GapGroup,
    GapQuestion,
    group_gaps,
    most_asked_first,
    reason_counts,
    wording_key,
)

__all__ = [
    "CSV_COLUMNS",
    "EXAMPLE_RUNS",
    "SIMILAR_WORDING",
    "Embed",
    "EmbeddingCache",
    "GapGroup",
    "GapQuestion",
    "gaps_csv",
    "group_gaps",
    "most_asked_first",
    "reason_counts",
    "wording_key",
]
