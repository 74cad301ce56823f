"""Knowledge gaps in the console: grouped by meaning with the bundled model, what the search found, the CSV."""

from __future__ import annotations

import asyncio
import csv
import io
import re

import pytest

from adapters.web.gaps import Grouper, warm_up
from bot.policy_tools import cite_for
from bot.store import utcnow
from retrieval import PolicyIndex
from tests.adapters.web import scenario
from tests.adapters.web.scenario import ALICE, Finds
from tests.adapters.web.test_pages import _row

pytestmark = pytest.mark.asyncio
WAIT_S = 60.0  # a bound on a hang only, never a measured duration
PETS = ("can I bring my dog to the office?", "are pets allowed at work", "Is it OK to bring a dog into the office")


class FindsWithModel(Finds):
    """The scenario's searcher, with the sample index's embedding model (what the console groups with)."""

    def __init__(self, index: PolicyIndex) -> None:
        self.embedder = index.embedder


async def grouped(console, path: str = "/console/gaps") -> tuple[int, str]:
    """The page once its grouping by meaning is ready (the model embeds new wordings in the background)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            status, page = await console.get(path)
            if 'id="preparing"' not in page:
                return status, page
            await asyncio.sleep(0.05)


def groups(page: str) -> list[tuple[str, int]]:
    found = re.findall(r'<article class="gap">\s*<h3>(.*?) <small>(\d+) runs?', page, re.S)
    return [(label, int(n)) for label, n in found]


async def test_gaps_group_paraphrases_count_reasons_and_export_csv(start_console, fake_openai, sample_index):
    console = await start_console(FindsWithModel(sample_index))
    svc = console.service
    for question in PETS:
        await scenario.not_covered(svc, fake_openai, question)
    for _ in range(2):
        await scenario.not_covered(svc, fake_openai, "Wedding leave?")
    unhelpful = await scenario.answered(svc, fake_openai)
    assert await svc.feedback(unhelpful.run_id, "not_helpful", ALICE.id)
    await scenario.answered(svc, fake_openai)  # answered and not rated: no gap
    status, page = await grouped(console)
    assert status == 200, page
    assert groups(page) == [(PETS[-1], 3), ("Wedding leave?", 2), ("do I need a receipt for a taxi?", 1)]
    assert "not_covered 3" in page and "not_helpful 1" in page
    assert "gym membership" in page  # what the example run searched for
    sources = page.split("Cited in “not helpful” answers", 1)[1]
    assert "Expenses Policy" in sources and re.search(r'class="num">1<', sources)
    status, body = await console.get("/console/gaps.csv")
    assert status == 200 and body.startswith("\ufeff")
    rows = list(csv.DictReader(io.StringIO(body.removeprefix("\ufeff"))))
    assert {(r["group"], r["question"], r["count"]) for r in rows} >= {
        (PETS[-1], q, "1") for q in PETS
    }  # labelled by the latest of equals
    assert len(rows) == 5


async def test_without_an_embedding_model_only_the_same_wording_groups(start_console, fake_openai):
    console = await start_console(Finds())
    for question in (*PETS[:2], "are pets allowed at work?"):
        await scenario.not_covered(console.service, fake_openai, question)
    _, page = await console.get("/console/gaps")
    assert sorted(groups(page)) == sorted([("are pets allowed at work?", 2), (PETS[0], 1)])  # the latest wording labels


async def test_a_restricted_example_run_does_not_show_what_its_search_found(start_console, fake_openai):
    console = await start_console(Finds())
    fake_openai.script(scenario.tool_calls(scenario.search("reorg budget")), scenario.text(scenario.NOT_IN_POLICY))
    await scenario.ask(console.service, "is the reorg budget cut?", scenario.DANA)
    _, page = await console.get("/console/gaps")
    assert groups(page) == [("is the reorg budget cut?", 1)]
    assert "The example's searches are restricted." in page and "reorg budget</small>" not in page


async def test_a_secret_in_an_example_runs_search_is_redacted_on_the_gaps_page(start_console):
    console = await start_console(Finds())
    leaked = "sk-test-abcdef123456"  # the configured OpenAI key, in a trace stored raw (as before it was configured)
    search = {"kind": "tool", "name": "search_policies", "arguments": f'{{"query": "key {leaked}"}}', "text": ""}
    row = _row("gap01", utcnow(), trace=[search])
    await console.service.store.runs.record({**row, "reason": "not_covered", "question": "is my key valid?"})
    status, page = await console.get("/console/gaps")
    assert status == 200 and groups(page) == [("is my key valid?", 1)] and "What the search found" in page
    assert leaked not in page


async def test_a_new_gap_or_rating_shows_on_the_next_load(start_console, fake_openai):
    console = await start_console(Finds())
    await scenario.not_covered(console.service, fake_openai, "Wedding leave?")
    _, before = await console.get("/console/gaps")
    await scenario.not_covered(console.service, fake_openai, "Wedding leave?")
    _, after = await console.get("/console/gaps")
    rated = await scenario.answered(console.service, fake_openai)
    assert await console.service.feedback(rated.run_id, "not_helpful", ALICE.id)
    _, rated_page = await console.get("/console/gaps")
    assert groups(before) == [("Wedding leave?", 1)] and groups(after) == [("Wedding leave?", 2)]
    assert groups(rated_page) == [("Wedding leave?", 2), ("do I need a receipt for a taxi?", 1)]


async def test_the_gaps_are_grouped_ahead_of_the_first_visit(start_console, fake_openai, sample_index):
    console = await start_console(FindsWithModel(sample_index))
    for question in PETS:
        await scenario.not_covered(console.service, fake_openai, question)
    grouper = Grouper()
    await warm_up(console.service, grouper, after_s=0)
    assert grouper.cache is not None and len(grouper.cache) == 3 and grouper.last is not None
    assert [(g.label, g.count) for g in grouper.last[2]] == [(PETS[-1], 3)]


async def test_the_first_visit_answers_at_once_by_exact_wording_while_the_model_reads(
    start_console, fake_openai, sample_index
):
    console = await start_console(FindsWithModel(sample_index))
    for question in PETS:
        await scenario.not_covered(console.service, fake_openai, question)
    status, first = await console.get("/console/gaps")
    assert status == 200 and 'id="preparing"' in first and '<meta http-equiv="refresh" content="5">' in first
    assert sorted(groups(first)) == sorted((q, 1) for q in PETS)
    _, ready = await grouped(console)
    assert groups(ready) == [(PETS[-1], 3)] and "refresh" not in ready


class BrokenModel:
    def embed_dense(self, texts: object) -> list[list[float]]:
        raise RuntimeError("the model file is unreadable")


class FindsWithBrokenModel(Finds):
    embedder = BrokenModel()


async def test_a_failed_grouping_by_meaning_is_said_on_the_page_not_reloaded_forever(start_console, fake_openai):
    console = await start_console(FindsWithBrokenModel())
    for question in PETS[:2]:
        await scenario.not_covered(console.service, fake_openai, question)
    async with asyncio.timeout(WAIT_S):
        while True:
            _, page = await console.get("/console/gaps")
            if 'id="grouping-failed"' in page:
                break
            await asyncio.sleep(0.05)
    assert "RuntimeError: the model file is unreadable" in page and "refresh" not in page
    assert sorted(groups(page)) == sorted((q, 1) for q in PETS[:2])  # still every question, by exact wording


def cited(page: str) -> list[tuple[str, str, int]]:
    """The table of documents cited in answers rated not helpful: (title, file, answers)."""
    table = page.split("Cited in “not helpful” answers", 1)[1]
    found = re.findall(r'<tr><td>(.*?)<br><small>(.*?)</small></td><td class="num">(\d+)</td></tr>', table, re.S)
    return [(title, source, int(n)) for title, source, n in found]


async def test_documents_cited_by_restricted_runs_show_only_to_operators_who_may_read_them(start_console, fake_openai):
    console = await start_console(Finds())
    svc = console.service
    public = await scenario.answered(svc, fake_openai)  # Alice: a run built for everyone
    reorg = await scenario.restricted(svc, fake_openai)  # Dana (hr) in a DM: cites the HR-only reorg plan
    fake_openai.script(
        scenario.tool_calls(scenario.search("taxi receipts")),
        scenario.text(f"Yes, keep it [{cite_for(scenario.RECEIPTS)}]."),
    )
    receipts = await scenario.ask(svc, "and for a train ticket?", scenario.DANA)  # restricted run, public document
    for reply, user in ((public, ALICE), (reorg, scenario.DANA), (receipts, scenario.DANA)):
        assert await svc.feedback(reply.run_id, "not_helpful", user.id)

    status, page = await console.get("/console/gaps")
    assert status == 200, page
    assert cited(page) == [("Expenses Policy", "expenses.md", 1)]  # the public run's answer only
    assert "Reorg Plan" not in page and "reorg.md" not in page
    assert 'id="restricted-sources"' in page and "2 answers built for restricted groups" in page

    allowed = await start_console(Finds(), console_restricted_operators="console")  # the same database
    status, page = await allowed.get("/console/gaps")
    assert status == 200, page
    assert cited(page) == [("Expenses Policy", "expenses.md", 2), ("Reorg Plan", "reorg.md", 1)]
    assert 'id="restricted-sources"' not in page
