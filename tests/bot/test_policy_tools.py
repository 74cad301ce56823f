"""The search tool as the model calls it: sections it names are matched as the index spells them."""

from __future__ import annotations

from bot.agent import ToolContext
from bot.policy_tools import reply_from_result, search_tool
from bot.types import UserRef
from retrieval import PolicyIndex
from tests.bot.helpers import ask, service
from tests.fakes.openai_server import text

CONTEXT = ToolContext(user=UserRef("U1", groups=("staff",)), run_id="run-1", conversation_key="c1")


async def test_a_section_in_another_case_is_the_same_section(sample_index: PolicyIndex) -> None:
    tool = search_tool(sample_index)

    result = await tool.handler({"query": "how many days of annual leave do I get", "section": "people"}, CONTEXT)

    assert result["results"] and "note" not in result
    assert all(r["cite"].startswith(("Leave", "Returning", "Remote", "Performance")) for r in result["results"])


async def test_a_section_the_index_does_not_have_searches_everything_and_says_so(sample_index: PolicyIndex) -> None:
    tool = search_tool(sample_index)

    result = await tool.handler({"query": "what does VPN error NG-412 mean", "section": "Networking"}, CONTEXT)

    assert result["results"][0]["cite"].startswith("Remote Access and VPN Standard")
    assert result["note"] == (
        "No section 'Networking' in the policy index: its sections are Facilities, Finance, IT, People, "
        "Security. Searched every section instead."
    )


async def test_nothing_found_says_so(sample_index: PolicyIndex) -> None:
    result = await search_tool(sample_index).handler({"query": "best lasagna recipe in town"}, CONTEXT)

    assert result == {"results": [], "note": "Nothing relevant found in the policy documents."}


async def test_the_model_is_offered_the_indexs_own_sections(tmp_path, fake_openai, sample_index) -> None:
    fake_openai.script(text("Twenty-five days."))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        await ask(svc, "how many days of annual leave do I get")
    (search,) = [t for t in fake_openai.requests[0].tools if t["function"]["name"] == "search_policies"]
    section = search["function"]["parameters"]["properties"]["section"]
    assert section["enum"] == ["Facilities", "Finance", "IT", "People", "Security"]


async def test_an_index_without_sections_offers_no_section_filter(tmp_path, fake_openai) -> None:
    class NoSections:
        async def asearch(self, query: str, k: int = 5, filter: object = None) -> list[object]:
            return []

        def sections(self, groups: object = None) -> list[str]:
            return []

    fake_openai.script(text("It is not in the policy."))
    async with service(tmp_path, fake_openai, NoSections()) as svc:
        await ask(svc, "how many days of annual leave do I get")
    (search,) = [t for t in fake_openai.requests[0].tools if t["function"]["name"] == "search_policies"]
    assert set(search["function"]["parameters"]["properties"]) == {"query"}


# -- the reply written from a decided write's result when no model call is left --


def test_a_ticket_result_is_told_as_the_ticket_tool_tells_it():
    created = {"status": "created", "ticket_id": "IT-1001", "url": "https://it.example/IT-1001"}
    assert reply_from_result("create_it_ticket", "confirm", created) == (
        "Done: I raised ticket IT-1001 (https://it.example/IT-1001). The IT team will follow up."
    )
    failed = {"status": "failed", "error": "The ticket was not created: timeout.", "handoff": "Case HD-1001 is open."}
    assert reply_from_result("create_it_ticket", "confirm", failed) == (
        "Sorry, I couldn't raise the ticket (The ticket was not created: timeout). Case HD-1001 is open."
    )
    cancelled = {"status": "cancelled", "note": "cancelled by user"}
    assert reply_from_result("create_it_ticket", "cancel", cancelled) == "OK, I did not raise a ticket."


def test_another_write_gets_plain_words():
    cancelled = reply_from_result("reset_mfa", "cancel", {"status": "cancelled"})
    assert cancelled == "OK, cancelled: nothing was done."
    assert reply_from_result("reset_mfa", "confirm", {"error": "denied"}) == "That did not go through: denied."
    assert reply_from_result("reset_mfa", "confirm", {"status": "ok"}) == "Done."
