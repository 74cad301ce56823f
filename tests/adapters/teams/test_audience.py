"""Teams end to end: a channel answer uses what everyone in the channel may read.

The roster comes from the fake connector (GET /v3/conversations/{id}/members); the searcher returns
the HR passage only to searches whose groups include ``hr`` (retrieval's own filtering is tested on
a real index in tests/bot/test_audiences.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.service import PRIVATE_PART_SENT
from tests.adapters.slack.test_audience import AudienceSearcher
from tests.adapters.teams.test_app import Teams, running_teams
from tests.fakes.bot_connector import ALICE
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

HR_EVERYONE = json.dumps({"alice@contoso.example": ["hr"], "bob@contoso.example": ["hr"], "aad-gwen": ["hr"]})
HR_BUT_GWEN = json.dumps({"alice@contoso.example": ["hr"], "bob@contoso.example": ["hr"]})


async def started(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, searcher: AudienceSearcher,
                  **settings: Any) -> AsyncIterator[Teams]:
    async for harness in running_teams(tmp_path, fake, searcher, monkeypatch, **settings):
        yield harness


def script(fake: FakeOpenAI, *answers: str) -> None:
    turns = []
    for answer in answers:
        turns += [tool_calls(("search_policies", {"query": "team changes"})), text(answer)]
    fake.script(*turns)


async def ask_in_channel(harness: Teams) -> str:
    status, _ = await harness.post(harness.channel.channel_message("what team changes are planned?", sender=ALICE))
    assert status in (200, 201)
    reply = await harness.reply()
    await harness.settle()
    return json.dumps(reply.json)


@pytest.mark.parametrize(
    ("groups", "searched", "says_sent_privately"),
    [
        pytest.param(HR_EVERYONE, [("all", "hr")], False, id="every-member-in-hr"),
        pytest.param(HR_BUT_GWEN, [("all",), ("all", "hr")], True, id="one-member-outside-hr"),
    ],
)
async def test_with_members_audience_a_channel_answer_uses_what_every_member_may_read(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, groups: str,
    searched: list[tuple[str, ...]], says_sent_privately: bool,
) -> None:
    searcher = AudienceSearcher()
    script(fake_openai, "They merge [Reorg Plan › Team changes].", "They merge [Reorg Plan › Team changes].")
    async for harness in started(tmp_path, fake_openai, monkeypatch, searcher, user_groups=groups,
                                 shared_audience="members"):
        said = await ask_in_channel(harness)
        roster_reads = [member for _, member in harness.channel.member_lookups if member == "*"]
    assert roster_reads == ["*"]  # read once: Alice, Bob and Gwen, the channel's readers
    assert searcher.searched_with == searched
    assert (PRIVATE_PART_SENT in said) is says_sent_privately


async def test_by_default_a_channel_answer_uses_public_documents_and_sends_the_rest_to_a_personal_chat(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = AudienceSearcher()
    script(fake_openai, "Announced on the intranet [Leave Policy › Team changes].",
           "They merge [Reorg Plan › Team changes].")
    async for harness in started(tmp_path, fake_openai, monkeypatch, searcher, user_groups=HR_EVERYONE):
        said = await ask_in_channel(harness)
        lookups = list(harness.channel.member_lookups)
    assert searcher.searched_with == [("all",), ("all", "hr")]
    assert PRIVATE_PART_SENT in said and "merge" not in said  # the HR part went to her personal chat
    assert all(member != "*" for _, member in lookups)  # the roster is only read when members decide
