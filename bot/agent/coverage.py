"""Whether a final answer is the honest "that is not in the policy": a knowledge gap, not an answer.

Two signals, both needing an answer that cites nothing: every search of the run came back empty, or
the searches found passages and the model read them and said the policy does not cover the question
(the system prompt asks for the words "not in the policy"; the offline model uses them). A search that
failed says nothing about the policies, so a run with one is never counted as a gap.
"""

from __future__ import annotations

import re

NOT_IN_POLICY = "not in the policy"
_SAYS_NOT_COVERED = re.compile(
    r"\b(?:not|isn't|is not) (?:in|covered (?:by|in)|mentioned in|addressed (?:by|in)) (?:the |our |any )?"
    r"(?:company )?polic(?:y|ies)"
    r"|\bpolic(?:y|ies) (?:(?:does|do) not|don't|doesn't) (?:cover|say|mention|address)",
    re.IGNORECASE,
)


def says_not_covered(text: str) -> bool:
    """True when the answer states that the policies do not cover the question."""
    return bool(_SAYS_NOT_COVERED.search(text))


def is_not_covered(text: str, *, cited: bool, searches: int, empty: int, failed: int) -> bool:
    """The run searched (and no search failed), cites nothing, and found nothing or says it is not covered."""
    if cited or searches == 0 or failed:
        return False
    return empty == searches or says_not_covered(text)
