"""Teams personal chats: what only the asker may read, and notes the thread could not take, go to their 1:1 chat.

End to end, the bot opens the chat through the fake connector (``POST /v3/conversations``, answered
``a:personal-<Teams id>`` as Teams does) and posts there; the searcher returns the HR passage only to
searches that may read ``hr`` (tests/adapters/teams/test_audience.py). The sender's own choices (which
Teams id, the kept chat) are checked with a stub connector.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.teams import TeamsSender
from adapters.teams.activity import address_of, conversation_key
from bot.delivery import Post, post_destination
from bot.errors import RemoteError
from bot.replies import PRIVATE_PART
from bot.service import PRIVATE_PART_ASK, PRIVATE_PART_SENT
from bot.store import NewPost
from bot.types import UserRef
from tests.adapters.slack.test_audience import AudienceSearcher
from tests.adapters.teams.test_app import Teams, running_teams
from tests.adapters.teams.test_sender import CHANNEL_SIDE, Attempts, Connector, Refused, Service, row
from tests.fakes.bot_connector import ALICE, BOB, BOT_ID, CHANNEL, TENANT, Recorded
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

ALICE_CHAT = f"a:personal-{ALICE['id']}"
HR_ALICE = json.dumps({"alice@contoso.example": ["hr"]})
PUBLIC_ANSWER = "Announced on the intranet [Leave Policy › Team changes]."
HR_ANSWER = "They merge [Reorg Plan › Team changes]."
INTRO = "About your question in the channel, from documents not everyone there may read:"


async def started(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, **settings: Any
                  ) -> AsyncIterator[Teams]:
    values = {"user_groups": HR_ALICE, **settings}
    async for harness in running_teams(tmp_path, fake, AudienceSearcher(), monkeypatch, **values):
        yield harness


def script(fake: FakeOpenAI, *answers: str) -> None:
    turns = []
    for answer in answers:
        turns += [tool_calls(("search_policies", {"query": "team changes"})), text(answer)]
    fake.script(*turns)


async def ask_in_channel(harness: Teams, sender: dict[str, Any]) -> Recorded:
    """The thread's answer to ``sender``'s question, once everything the question led to has been sent."""
    activity = harness.channel.channel_message("what team changes are planned?", sender=sender)
    status, _ = await harness.post(activity)
    assert status in (200, 201)
    reply = await harness.reply(conversation_id=activity["conversation"]["id"])
    await harness.settle()
    await harness.delivered(conversation_key(activity, UserRef("")))  # every row, the direct one too
    return reply


async def test_the_restricted_part_goes_to_the_askers_personal_chat_opened_through_the_connector(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(fake_openai, PUBLIC_ANSWER, HR_ANSWER)
    async for harness in started(tmp_path, fake_openai, monkeypatch):
        thread = await ask_in_channel(harness, ALICE)
        personal = harness.channel.messages(ALICE_CHAT)
        created = list(harness.channel.created)
    assert thread.conversation_id.startswith(f"{CHANNEL};messageid=")
    assert PRIVATE_PART_SENT in thread.text and "merge" not in thread.text
    (body,) = created
    assert body["isGroup"] is False and body["members"] == [{"id": ALICE["id"]}]  # her Teams id, not her AAD id
    assert body["bot"]["id"] == BOT_ID
    assert body["tenantID"] == TENANT and body["channelData"] == {"tenant": {"id": TENANT}}
    (said,) = personal
    assert said.text.startswith(INTRO) and "They merge" in said.text
    assert said.json["recipient"]["id"] == ALICE["id"] and said.json["from"]["id"] == BOT_ID


async def test_an_outsiders_thread_reply_has_no_private_part_and_opens_no_personal_chat(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(fake_openai, PUBLIC_ANSWER)  # one run: Bob may read nothing the channel may not
    async for harness in started(tmp_path, fake_openai, monkeypatch):
        thread = await ask_in_channel(harness, BOB)
        messages = harness.channel.messages()
        created = list(harness.channel.created)
    assert "intranet" in thread.text
    assert PRIVATE_PART_SENT not in thread.text and PRIVATE_PART_ASK not in thread.text
    assert created == [] and messages == [thread]


async def test_when_the_app_is_not_installed_for_the_asker_the_thread_is_told_and_nothing_restricted_leaks(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(fake_openai, PUBLIC_ANSWER, HR_ANSWER)
    async for harness in started(tmp_path, fake_openai, monkeypatch):
        harness.channel.not_installed.add(ALICE["id"])  # Teams answers the create with 403
        thread = await ask_in_channel(harness, ALICE)
        messages = harness.channel.messages()
    told = [m for m in messages if m is not thread]
    assert PRIVATE_PART_SENT in thread.text
    (notice,) = told
    assert notice.conversation_id == thread.conversation_id  # in the thread, where she asked
    assert "Alice Example: I couldn't send you the rest" in notice.text and "Apps, then PolicyPal" in notice.text
    assert all("merge" not in m.text for m in messages)


async def test_a_reply_the_thread_refuses_is_followed_up_in_the_askers_personal_chat(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply and the notice about its case are refused for good (403): the note goes to her personal chat."""
    script(fake_openai, PUBLIC_ANSWER)
    async for harness in started(tmp_path, fake_openai, monkeypatch, user_groups="{}"):
        harness.channel.refuse_next(403, times=2)
        activity = harness.channel.channel_message("what team changes are planned?", sender=ALICE)
        await harness.post(activity)
        said = await harness.reply(conversation_id=ALICE_CHAT)
        await harness.settle()
        rows = await harness.service.store.outbox.of_conversation(conversation_key(activity, UserRef("")))
        cases = await harness.service.store.cases.recent()
    posts = [Post.from_json(r.payload or {}) for r in rows]
    assert [(p.kind, r.state) for p, r in zip(posts, rows, strict=True)] == [
        ("reply", "failed"), ("notice", "failed"), ("direct", "delivered"),
    ]  # fmt: skip
    case_id = posts[2].case_id
    assert len(cases) == 1 and case_id and case_id in said.text
    assert said.text.startswith("I couldn't post my reply in the channel.")


async def test_a_direct_row_for_teams_is_delivered_not_refused(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    async for harness in started(tmp_path, fake_openai, monkeypatch):
        activity = harness.channel.channel_message("(a question)", sender=ALICE)
        key = conversation_key(activity, UserRef(""))
        post = Post("direct", address_of(activity, UserRef(ALICE["aadObjectId"], ALICE["name"])),
                    text="Your reply is in case HD-1001.", case_id="HD-1001", reason="Teams refused post 1: HTTP 403")
        assert await harness.service.outcomes.commit(posts=[NewPost(post_destination("teams"), post.to_json(), key)])
        said = await harness.reply(conversation_id=ALICE_CHAT)
        (delivered,) = await harness.delivered(key)
    assert "HD-1001" in said.text and delivered.external_ref == said.id


# --- the sender, with a stub connector -------------------------------------------------------------


def direct(text: str = "hello", *, sender: dict[str, Any] = ALICE, user: str = "aad-alice",
           reason: str | None = PRIVATE_PART) -> tuple[Post, str]:
    activity = CHANNEL_SIDE.channel_message("a question", root="1700000", sender=sender)
    address = address_of(activity, UserRef(user, "Alice Example"))
    return Post("direct", address, text=text, reason=reason), conversation_key(activity, UserRef(""))


async def test_the_personal_chat_is_opened_once_per_person_and_kept() -> None:
    connector = Connector()
    sender = TeamsSender(connector, Service())  # type: ignore[arg-type]
    for text_ in ("first", "second"):
        post, key = direct(text_)
        await sender.send(row(post, key), Attempts().next())
    assert [user for _, user in connector.opened] == [ALICE["id"]]
    assert [(chat["conversation"]["id"], INTRO in a["text"]) for chat, a in connector.sent] == [
        (ALICE_CHAT, True), (ALICE_CHAT, True),
    ]  # fmt: skip


async def test_a_person_who_is_not_the_references_sender_is_found_on_the_roster_by_aad_id() -> None:
    connector = Connector(roster={"aad-alice": {"id": ALICE["id"], "aadObjectId": "aad-alice"}})
    post, key = direct(sender=BOB)  # the stored reference is Bob's message; the post is for Alice
    await TeamsSender(connector, Service()).send(row(post, key), Attempts().next())  # type: ignore[arg-type]
    assert [user for _, user in connector.opened] == [ALICE["id"]]


async def test_a_kept_chat_that_is_refused_is_opened_anew_on_the_next_attempt() -> None:
    connector = Connector()
    sender = TeamsSender(connector, Service())  # type: ignore[arg-type]
    post, key = direct()
    await sender.send(row(post, key), Attempts().next())
    connector.failures.append(Refused(403))  # the app was removed from her personal chats, then added again
    with pytest.raises(RemoteError) as raised:
        await sender.send(row(post, key), Attempts().next())
    assert raised.value.retryable  # the outbox tries again, and does not hand it to a person yet
    await sender.send(row(post, key), Attempts().next())
    assert len(connector.opened) == 2 and len(connector.sent) == 2


async def test_a_note_about_a_lost_reply_that_cannot_reach_the_personal_chat_is_given_up() -> None:
    connector = Connector(Refused(403))  # the create is refused: not installed for her
    post, key = direct("Your reply is in case HD-1001.", reason="Teams refused post 1: HTTP 403")
    with pytest.raises(RemoteError) as raised:
        await TeamsSender(connector, Service()).send(row(post, key), Attempts().next())  # type: ignore[arg-type]
    assert connector.failures == []  # opening the chat was tried, and refused
    assert not raised.value.retryable and connector.sent == []  # the thread is out of reach: nothing posted there
