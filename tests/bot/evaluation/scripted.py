"""A scripted model for eval tests, answering by the question it is asked (tasks run concurrently, so
turns cannot be taken in order), and the searcher it runs against: the sample index, with one query
prefix that finds nothing. The tasks it answers are in tasks.jsonl beside this file."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval import Passage, PolicyIndex
from tests.fakes.openai_server import FakeOpenAI, Turn, respond, text, tool_calls

TASKS = Path(__file__).with_name("tasks.jsonl")
NOTHING = "uncovered:"  # a query with this prefix finds no passage
NOT_IN_POLICY = "That is not in the policy documents. The helpdesk can help."
Results = list[dict[str, Any]]


def search(*queries: str) -> Turn:
    return tool_calls(*(("search_policies", {"query": q}) for q in queries))


def cite_from(results: Results, source_ends: str) -> str:
    """The cite of the first passage whose source ends with ``source_ends`` (the test's own choice of document)."""
    for result in results:
        for item in result.get("results", []):
            if item["source"].endswith(source_ends):
                return str(item["cite"])
    raise AssertionError(f"no passage from {source_ends} among {json.dumps(results)[:500]}")


@dataclass(frozen=True)
class Plan:
    first: Turn  # the model's first turn for this question
    answer: Callable[[Results], str] | None = None  # its answer once the tool results are back
    requests: int = 2


PLANS: dict[str, Plan] = {
    "how long must my password be?": Plan(
        search("minimum password length characters"),
        lambda r: f"At least 14 characters [{cite_from(r, '/passwords-mfa')}].",
    ),
    "what is the minimum password length?": Plan(  # the right fact, but cited from the wrong document
        search("hotel price per night"), lambda r: f"At least 14 characters [{cite_from(r, '/expenses')}]."
    ),
    "is POL-SEC-004 about phishing?": Plan(  # a question about a policy turned into a ticket
        tool_calls(("create_it_ticket", {"category": "security_incident", "summary": "Phishing question",
                                         "urgency": "normal"})),
        requests=1,
    ),
    "does the company pay for my gym membership?": Plan(  # answered from an unrelated passage
        search("expense reimbursement"), lambda r: f"Yes, claim it as an expense [{cite_from(r, '/expenses')}]."
    ),
    "do I get a gift when I get married?": Plan(search(f"{NOTHING} wedding gift"), lambda r: NOT_IN_POLICY),
    "do I need receipts for taxis?": Plan(  # right answer, clumsy trajectory: a repeat and a made-up tool
        tool_calls(("search_policies", {"query": "taxi receipts"}), ("search_policies", {"query": "taxi receipts"}),
                   ("lookup_user", {"id": "me"})),
        lambda r: f"Yes, keep the receipt [{cite_from(r, '/expenses')}].",
    ),
    "my VPN keeps dropping, please open a ticket": Plan(
        tool_calls(("create_it_ticket", {"category": "network_vpn", "summary": "VPN keeps dropping",
                                         "urgency": "high"})),
        requests=1,
    ),
    "how many days of annual leave do I get?": Plan(
        search("annual leave days per year"), lambda r: f"You get 25 days a year [{cite_from(r, '/leave')}]."
    ),
    "and after 5 years?": Plan(
        search("annual leave after 5 years service"), lambda r: f"After 5 years, 27 days [{cite_from(r, '/leave')}]."
    ),
}


def answer(body: dict[str, Any]) -> Turn:
    """The next turn for the question this request is about."""
    messages = body["messages"]
    asked = max(n for n, m in enumerate(messages) if m["role"] == "user")
    plan = PLANS[messages[asked]["content"]]
    results = [json.loads(m["content"]) for m in messages[asked + 1 :] if m["role"] == "tool"]
    if not results or plan.answer is None:
        return plan.first
    return text(plan.answer(results))


def script(fake: FakeOpenAI, questions: Sequence[str] = tuple(PLANS)) -> None:
    """One turn for every request these questions will make, each answered by ``answer``."""
    fake.script(*(respond(answer) for q in questions for _ in range(PLANS[q].requests)))


class SampleOrNothing:
    """The session's sample index; a query starting with ``NOTHING`` finds nothing."""

    def __init__(self, index: PolicyIndex) -> None:
        self.index = index

    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Passage]:
        return [] if query.startswith(NOTHING) else await self.index.asearch(query, k, filter)

    def sections(self, groups: Sequence[str] | None = None) -> list[str]:
        return self.index.sections(groups)
