"""Whether the offline model answers from what it found or says the policy does not cover the question:
the real model with the bundled embedding model, reading search results as the search tool returns them."""

from __future__ import annotations

import json

from bot.models.offline.answers import NOT_IN_POLICY
from bot.models.offline.model import OfflineModel
from bot.types import Message
from retrieval import PolicyIndex

SYSTEM: Message = {"role": "system", "content": "You are PolicyPal."}
TOOLS = [{"type": "function", "function": {"name": "search_policies", "parameters": {"type": "object"}}}]
QUESTION = "is there separate leave for my VA medical appointments?"
VETERAN_LEAVE_TEXT = (
    "Leave types › Disabled veteran leave\n\n"
    "If you are a veteran with a service-connected disability rating of 30 percent or more, you can receive "
    "up to 104 hours of disabled veteran leave to receive medical treatment related to your disability. "
    "It is a one-time benefit: you have a single, 12-month eligibility period."
)


async def answered(model: OfflineModel, search_score: float) -> str:
    """The reply to QUESTION after its searches found only the veteran leave passage, at ``search_score``."""
    user: Message = {"role": "user", "content": QUESTION}
    first = await model.complete([SYSTEM, user], TOOLS, max_tokens=800, timeout=30.0)
    passage = {"cite": "Leave types › Disabled veteran leave", "source": "leave.md", "score": search_score}
    result = {"results": [{**passage, "text": VETERAN_LEAVE_TEXT}]}
    tool_messages: list[Message] = [
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)} for call in first.tool_calls
    ]
    history = [SYSTEM, user, first.as_message(), *tool_messages]
    reply = await model.complete(history, TOOLS, max_tokens=800, timeout=30.0)
    return reply.text or ""


async def test_words_the_best_passage_says_otherwise_are_not_missing_when_it_is_on_the_point(
    sample_index: PolicyIndex,
) -> None:
    """ "separate", "VA", "appointments": each said otherwise ("veteran") or weighing little alone. Next to
    a passage on the point that is an answer; next to a weak one, all three missing at once mean the
    results are about something else."""
    model = OfflineModel(embed=sample_index.embedder.embed_dense)

    strong = await answered(model, search_score=1.0)
    weak = await answered(model, search_score=0.5)

    assert "104 hours" in strong and "[Leave types › Disabled veteran leave]" in strong
    assert weak == NOT_IN_POLICY


CHANGE_TYPES_TEXT = (
    "Change management › Change types\n\n"
    "| Change type | Approval | Lead time |\n| --- | --- | --- |\n"
    "| Standard | None beyond the pipeline checks | None |\n"
    "| Normal | Change Advisory Board (CAB) | Submit by Monday 17:00 Lisbon time for that week's CAB |\n"
    "| Emergency | Incident commander or on-call manager | None; retrospective CAB review |\n"
)


async def test_a_cutoff_asks_for_a_time_the_policy_states_in_other_words(sample_index: PolicyIndex) -> None:
    """ "What's the cutoff?" asks for a limit in time, as "what's the cap?" asks for an amount: the word
    names no topic the results must say, so the row saying "Submit by Monday 17:00" answers it. Counted
    as a subject, "cutoff" was missing from the results and the answer was "not in the policy"."""
    model = OfflineModel(embed=sample_index.embedder.embed_dense)
    question: Message = {"role": "user", "content": "whats the cutoff for submitting a normal change?"}
    first = await model.complete([SYSTEM, question], TOOLS, max_tokens=800, timeout=30.0)
    passage = {"cite": "Change management › Change types", "source": "changes.md", "score": 1.0}
    result = json.dumps({"results": [{**passage, "text": CHANGE_TYPES_TEXT}]})
    tool_messages: list[Message] = [
        {"role": "tool", "tool_call_id": call.id, "content": result} for call in first.tool_calls
    ]
    reply = await model.complete(
        [SYSTEM, question, first.as_message(), *tool_messages], TOOLS, max_tokens=800, timeout=30.0
    )

    assert "Monday 17:00" in (reply.text or ""), reply.text
