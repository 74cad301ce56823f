"""A channel's members, for answers built from what all of them may read: read whole, or not at all.

The real slack_sdk client against the fake Web API on loopback (conversations.members, users.info).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from adapters.slack.members import ChannelMembers
from adapters.slack.post import web_client
from adapters.slack.users import UserDirectory
from bot.audience import place_audience
from bot.identity import EVERYONE, GroupMap
from bot.types import Inbound, UserRef
from tests.fakes.slack_api import FakeSlackAPI, FakeUser

GROUPS = GroupMap({"hana@example.com": ["hr"], "hugo@example.com": ["hr", "managers"], "bob@example.com": []})


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI() as fake:
        for user_id, name in (("U_HANA", "hana"), ("U_HUGO", "hugo"), ("U_BOB", "bob")):
            fake.users[user_id] = FakeUser(user_id, name, email=f"{name}@example.com")
        yield fake


async def members_of(slack: FakeSlackAPI, channel: str, max_members: int = 50):
    async with aiohttp.ClientSession() as session:
        client = web_client(slack.token, session, slack.base_url)
        members = ChannelMembers(client, UserDirectory(client, GROUPS), bot_user_id=slack.bot_user_id,
                                 max_members=max_members)
        return await members.of(channel)


def asked_in(channel: str, members) -> Inbound:
    (asker, *_) = members
    return Inbound("slack", channel, "1.0", asker, "q", event_id="E1", shared=True, members=members)


async def test_a_channel_of_hr_people_reads_hr_documents_and_one_outsider_makes_it_public(slack) -> None:
    slack.members = {"C_HR": ["U_HANA", "U_HUGO", slack.bot_user_id], "C_ALL": ["U_HANA", "U_BOB"]}
    hr_channel = await members_of(slack, "C_HR")
    mixed = await members_of(slack, "C_ALL")
    assert hr_channel is not None and [m.id for m in hr_channel] == ["U_HANA", "U_HUGO"]  # the bot is no reader
    assert place_audience(asked_in("C_HR", hr_channel)).groups == (EVERYONE, "hr")
    assert mixed is not None and place_audience(asked_in("C_ALL", mixed)).groups == (EVERYONE,)


async def test_a_member_list_longer_than_a_page_is_read_whole(slack) -> None:
    slack.members = {"C_BIG": ["U_HANA"] + [f"U{n:04d}" for n in range(250)]}
    members = await members_of(slack, "C_BIG", max_members=300)
    assert members is not None and len(members) == 251
    assert len(slack.calls_to("conversations.members")) == 2


async def test_a_list_that_cannot_be_read_whole_fails_closed_to_public(slack) -> None:
    slack.members = {"C_BIG": [f"U{n:04d}" for n in range(60)]}
    assert await members_of(slack, "C_BIG", max_members=50) is None  # too many to look up
    assert await members_of(slack, "C_GONE") is None  # channel_not_found (or a missing scope)
    hana = UserRef("U_HANA", groups=(EVERYONE, "hr"))
    shared = Inbound("slack", "C_GONE", "1.0", hana, "q", event_id="E1", shared=True, members=None)
    assert place_audience(shared).groups == (EVERYONE,)
