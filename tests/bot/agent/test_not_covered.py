"""`not_covered`: an answer that cites nothing after searching, and found nothing or says so.

The honest "that is not in the policy" is an answer (no helpdesk case) counted by its own reason, so
policy owners can see the gaps; a run that found something and answered from it (even uncited), never
searched, or whose search failed stays `answered`.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.agent import RunState
from bot.agent.coverage import says_not_covered
from bot.policy_tools import cite_for
from bot.types import Answer, Inbound, TerminationReason, UserRef
from retrieval import Passage
from tests.bot.helpers import ALICE, PASSAGE, ask, service
from tests.fakes.openai_server import text, tool_calls

SEARCH = "search_policies"
NOT_IN_POLICY = "That is not in the policy documents. The helpdesk can help."
RESTRICTED = Passage(0.9, "reorg.md", "Reorg Plan", "Reorg Plan > Team changes", "reorg.md",
                     "Finance and facilities merge in March.", audience=("hr",))


def search(query: str) -> tuple[str, dict[str, str]]:
    return (SEARCH, {"query": query})


class Finds:
    """Finds ``PASSAGE`` for queries naming one of ``topics`` (and readers in ``groups``, if given); else nothing."""

    def __init__(self, *topics: str, passage: Passage = PASSAGE, groups: tuple[str, ...] = ()) -> None:
        self.topics, self.passage, self.groups = topics, passage, groups

    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Passage]:
        readers = set(filter.groups or ()) if filter is not None else set()
        allowed = not self.groups or bool(readers & set(self.groups))
        return [self.passage] if allowed and any(topic in query for topic in self.topics) else []


class Broken:
    async def asearch(self, query: str, k: int = 5, filter: Any = None) -> list[Passage]:
        raise RuntimeError("index unavailable")


async def test_a_run_whose_every_search_finds_nothing_ends_not_covered_without_a_case(tmp_path, fake_openai):
    fake_openai.script(tool_calls(search("gym membership"), search("sports allowance")), text(NOT_IN_POLICY))
    async with service(tmp_path, fake_openai, Finds()) as svc:
        reply = await ask(svc, "does the company pay for my gym?")
        row = await svc.store.runs.get(reply.run_id)
        cases = await svc.store.cases.recent()
        metrics = svc.metrics.render().decode()
    assert reply.reason == TerminationReason.NOT_COVERED
    assert isinstance(reply.outcome, Answer) and reply.outcome.text == NOT_IN_POLICY  # rendered as an answer
    assert row is not None and row.reason == "not_covered"
    assert cases == []  # a knowledge gap, not a helpdesk case
    assert 'policypal_runs_total{platform="console",reason="not_covered"} 1.0' in metrics
    fake_openai.assert_script_consumed()


async def test_a_run_that_cites_what_it_found_ends_answered(tmp_path, fake_openai):
    cite = cite_for(PASSAGE)
    fake_openai.script(tool_calls(search("gym membership"), search("expense receipts")),
                       text(f"No gym policy; keep your receipts [{cite}]."))
    async with service(tmp_path, fake_openai, Finds("receipts")) as svc:
        reply = await ask(svc, "gym, and what about receipts?")
    assert reply.reason == TerminationReason.ANSWERED


async def test_a_run_that_found_a_passage_ends_answered_even_citing_nothing(tmp_path, fake_openai):
    fake_openai.script(tool_calls(search("gym membership"), search("expense receipts")), text("Keep your receipts."))
    async with service(tmp_path, fake_openai, Finds("receipts")) as svc:
        reply = await ask(svc, "gym, and what about receipts?")
    assert reply.reason == TerminationReason.ANSWERED


async def test_a_run_that_found_unrelated_passages_and_says_so_ends_not_covered(tmp_path, fake_openai):
    """Search returns the nearest passages even for parking; the model reads them and says no."""
    fake_openai.script(tool_calls(search("parking receipts")), text("Parking is not covered by our policies."))
    async with service(tmp_path, fake_openai, Finds("receipts")) as svc:
        reply = await ask(svc, "where can I park my car?")
    assert reply.reason == TerminationReason.NOT_COVERED


async def test_saying_not_in_the_policy_while_citing_a_passage_is_a_partial_answer(tmp_path, fake_openai):
    cite = cite_for(PASSAGE)
    fake_openai.script(tool_calls(search("gym receipts")),
                       text(f"The gym is not in the policy; keep your receipts [{cite}]."))
    async with service(tmp_path, fake_openai, Finds("receipts")) as svc:
        reply = await ask(svc, "gym, and what about receipts?")
    assert reply.reason == TerminationReason.ANSWERED


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("That is not in the policy documents I can search.", True),
        ("Sorry, jury duty isn't covered by the company policies.", True),
        ("The policies don't mention parking.", True),
        ("Keep your receipts for 7 years.", False),
        ("Do you mean the travel policy or the expenses policy?", False),
    ],
)
def test_the_words_that_say_not_covered(text: str, says: bool):
    assert says_not_covered(text) is says


async def test_a_run_that_never_searched_or_whose_search_failed_ends_answered(tmp_path, fake_openai):
    fake_openai.script(text("Hello! Ask me about a policy."), tool_calls(search("gym")), text(NOT_IN_POLICY))
    async with service(tmp_path, fake_openai, Broken()) as svc:
        greeted = await ask(svc, "hi", thread="t1")
        failed = await ask(svc, "does the company pay for my gym?", thread="t2")
    assert greeted.reason == TerminationReason.ANSWERED
    assert failed.reason == TerminationReason.ANSWERED  # a failed search says nothing about the policies


async def test_the_reply_after_a_confirmed_ticket_stays_answered(tmp_path, fake_openai):
    ticket = {"category": "network_vpn", "summary": "VPN drops every few minutes", "urgency": "normal"}
    fake_openai.script(
        tool_calls(search("vpn dropping")), tool_calls(("create_it_ticket", ticket)), text("Done: ticket raised.")
    )
    async with service(tmp_path, fake_openai, Finds()) as svc:
        reply = await ask(svc, "my VPN keeps dropping")
        action = reply.outcome.action  # type: ignore[union-attr]
        decided = await svc.decide(action.id, ALICE, "confirm", action.args_hash)
    assert decided.reply is not None and decided.reply.reason == TerminationReason.ANSWERED


async def test_a_shared_thread_answered_privately_for_the_asker_is_not_a_gap(tmp_path, fake_openai):
    """Nothing public answers it, but the asker's own documents do: covered, not a knowledge gap."""
    hr = UserRef("U_HR", "Hana", groups=("all", "hr"))
    fake_openai.script(
        tool_calls(search("team changes")), text(NOT_IN_POLICY),  # the thread's public answer
        tool_calls(search("team changes")), text("They merge in March [Reorg Plan › Team changes]."),  # private
    )
    async with service(tmp_path, fake_openai, Finds("team", passage=RESTRICTED, groups=("hr",))) as svc:
        inbound = Inbound("console", "general", "t1", hr, "what team changes are planned?", "ev-shared", shared=True)
        reply = await svc.handle_message(inbound)
        assert reply is not None
        row = await svc.store.runs.get(reply.run_id)
    assert reply.reason == TerminationReason.ANSWERED and row is not None and row.reason == "answered"
    fake_openai.assert_script_consumed()


def test_the_count_of_empty_searches_survives_a_saved_state():
    state = RunState("run_1", ALICE, "k", [{"role": "user", "content": "q"}], 0, searches=2, empty_searches=2)
    assert RunState.from_dict(state.to_dict()).empty_searches == 2
    saved_before = {key: value for key, value in state.to_dict().items() if key != "empty_searches"}
    assert RunState.from_dict(saved_before).empty_searches == 0
