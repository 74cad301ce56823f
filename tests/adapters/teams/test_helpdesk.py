"""The Teams helpdesk destination posts a case card to a channel through the real connector client."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import timedelta
from urllib.parse import unquote

import pytest
from aiohttp import web
from msrest.exceptions import HttpOperationError

from adapters.teams import TeamsChannelDestination, cards, teams_destination
from adapters.teams.answers import activity_bytes
from bot.config import Settings
from bot.delivery import Outbox, OutboxPolicy
from bot.errors import ConfigError
from bot.helpdesk import CaseDeliveries, HandoffCase, Helpdesk
from bot.store import Store, utcnow
from bot.types import UserRef
from tests.fakes.bot_connector import MESSAGE_BYTES, FakeBotConnector

HELPDESK_CHANNEL = "19:helpdesk@thread.tacv2"
RETRY_SOON = OutboxPolicy(max_attempts=3, backoff_s=30, deliver_timeout_s=5.0)


CASE = HandoffCase(
    case_id="HD-42",
    created_at=utcnow(),
    reason="step_budget",
    user=UserRef("aad-alice", "Alice Example", "alice@contoso.example"),
    platform="teams",
    channel="19:general@thread.tacv2",
    thread="1700001",
    link="https://teams.microsoft.com/l/message/19%3Ageneral%40thread.tacv2/1700001",
    question="My VPN fails with NG-809\nafter the update, what now?",
)


def settings_for(channel: FakeBotConnector, **overrides) -> Settings:
    values = {
        "helpdesk_teams_service_url": channel.service_url,
        "helpdesk_teams_conversation_id": HELPDESK_CHANNEL,
        "teams_allow_unauthenticated": True,
        **overrides,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


async def test_a_case_is_posted_to_the_helpdesk_channel_as_a_card():
    async with FakeBotConnector() as channel:
        destination = TeamsChannelDestination(settings_for(channel))
        posted_id = await destination.deliver(CASE)

    posted, transcript = channel.messages()
    assert transcript.conversation_id == f"{HELPDESK_CHANNEL};messageid={posted.id}"  # in the card's thread
    assert destination.name == "teams"
    assert posted.kind == "send" and posted.conversation_id == HELPDESK_CHANNEL and posted_id == posted.id
    (card,) = posted.cards
    assert card["version"] == "1.5"
    facts = {f["title"]: f["value"] for f in card["body"][3]["facts"]}
    assert facts["Case"] == "HD-42" and cards.card_fields(card) == {"User": "Alice Example (alice@contoso.example)"}
    assert plain_text(card["body"][1]) == "My VPN fails with NG-809 after the update, what now?"
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open the conversation", "url": CASE.link}]


async def test_the_real_handoff_case_renders_with_its_one_line_question_and_reason_label():
    from bot.helpdesk import reason_label

    case = CASE
    async with FakeBotConnector() as channel:
        await teams_destination(settings_for(channel)).deliver(case)
    card = channel.messages()[0].cards[0]
    assert plain_text(card["body"][1]) == case.question_line()
    assert {"title": "Reason", "value": reason_label("step_budget")} in card["body"][3]["facts"]


async def test_the_users_question_and_name_never_format_themselves_in_the_helpdesk_card():
    """A TextBlock or a FactSet is Markdown in Teams: a typed link would reach the helpdesk disguised."""
    link = "[Approved by IT, click to verify](https://evil.example)"
    case = replace(CASE, question=f"**Urgent** {link}", user=UserRef("aad-mallory", link))
    async with FakeBotConnector() as channel:
        await TeamsChannelDestination(settings_for(channel)).deliver(case)
    (card,) = channel.messages()[0].cards
    markdown_read = [b for b in card["body"] if b["type"] == "TextBlock"] + [
        f for b in card["body"] if b["type"] == "FactSet" for f in b["facts"]
    ]
    assert "evil.example" not in json.dumps(markdown_read) and "Urgent" not in json.dumps(markdown_read)
    assert plain_text(card["body"][1]) == f"**Urgent** {link}"  # shown literally, as typed
    assert cards.card_fields(card) == {"User": link}


def plain_text(block: dict) -> str:
    """The literal text of a RichTextBlock of TextRuns."""
    assert block["type"] == "RichTextBlock" and all(run["type"] == "TextRun" for run in block["inlines"])
    return "".join(run["text"] for run in block["inlines"])


async def test_a_long_transcript_in_a_language_of_wide_characters_still_reaches_the_helpdesk_thread():
    """Bounded in characters, 20,000 characters of Japanese were 60 KB: Teams refused the transcript (413);
    bounded in UTF-8 bytes, it was still twice the limit on the wire, where msrest escapes each one (``\\uXXXX``)."""
    said = "年次有給休暇は入社日から数えて二十五日です🌴。「詳細」は人事部へ📨。\n" * 20
    runs = [{"run_id": f"r{n}", "reason": "answered", "question": "休暇は何日ですか？",
             "trace": [{"kind": "model", "name": "gpt-4o-mini", "text": said}]} for n in range(1, 31)]
    case = replace(CASE, transcript={"runs": runs})
    async with FakeBotConnector() as channel:
        posted_id = await TeamsChannelDestination(settings_for(channel)).deliver(case)

    assert channel.violations == []
    (transcript,) = channel.messages(f"{HELPDESK_CHANNEL};messageid={posted_id}")
    assert len(transcript.raw) <= MESSAGE_BYTES and activity_bytes(transcript.json) == len(transcript.raw)
    assert transcript.text.startswith("# HD-42") and "休暇は何日ですか？" in transcript.text
    assert "transcript truncated" in transcript.text and "policypal handoffs HD-42" in transcript.text


async def test_a_refused_post_raises():
    async with FakeBotConnector(fail_status=403) as channel:
        with pytest.raises(HttpOperationError):
            await TeamsChannelDestination(settings_for(channel)).deliver(CASE)


def test_the_channel_must_be_configured():
    with pytest.raises(ConfigError, match="HELPDESK_TEAMS_CONVERSATION_ID"):
        TeamsChannelDestination(Settings(_env_file=None, teams_allow_unauthenticated=True))  # type: ignore[call-arg]


async def test_without_teams_credentials_the_destination_cannot_be_built():
    async with FakeBotConnector() as channel:
        with pytest.raises(ConfigError, match="MicrosoftAppId"):
            TeamsChannelDestination(settings_for(channel, teams_allow_unauthenticated=False))


# --- retries through the outbox: the card once, the transcript until it lands -------------------


@dataclass
class ThreadRefusingConnector(FakeBotConnector):
    """Teams answering 500 to the first ``refusals`` posts in a reply chain (the transcript).

    500, not 503: the connector itself retries throttling and overload; this is a failure for the outbox.
    """

    refusals: int = 0

    async def _send(self, request: web.Request) -> web.Response:
        if ";messageid=" in unquote(request.match_info["conversation"]) and self.refusals:
            self.refusals -= 1
            return web.json_response({"error": {"code": "InternalServerError", "message": "broken"}}, status=500)
        return await super()._send(request)


def later(seconds: float):  # a clock that has moved on, for backoff without sleeping
    return lambda: utcnow() + timedelta(seconds=seconds)


async def queued_case(tmp_path) -> str:
    """A database file holding one case with an outbox row for the Teams destination."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'outbox.db'}"
    store = await Store.open(url)
    await Helpdesk(store, ["teams"]).open_case(
        origin="run:r1", reason="step_budget", user=CASE.user, conversation_key="teams:T:19:x", question="MFA?"
    )
    await store.close()
    return url


async def attempt(url: str, channel: FakeBotConnector, after_s: float = 0.0) -> str:
    """One outbox pass in a fresh process: its own store and destination, nothing carried in memory."""
    store = await Store.open(url)
    destination = TeamsChannelDestination(settings_for(channel))
    try:
        outbox = Outbox(store, [CaseDeliveries(store, [destination])], RETRY_SOON, clock=later(after_s))
        (result,) = await outbox.run_once()
    finally:
        await store.close()
    return result.status


async def test_a_transcript_refused_once_is_retried_without_a_second_card(tmp_path):
    url = await queued_case(tmp_path)
    async with ThreadRefusingConnector(refusals=1) as channel:
        first = await attempt(url, channel)
        second = await attempt(url, channel, after_s=31)  # another process: only the row remembers
    cards = channel.messages(HELPDESK_CHANNEL)
    assert (first, second) == ("retrying", "delivered")
    assert len(cards) == 1
    (transcript,) = channel.messages(f"{HELPDESK_CHANNEL};messageid={cards[0].id}")
    assert "HD-1001" in transcript.text


async def test_a_transcript_refused_every_time_leaves_one_card_and_a_manual_retry_completes_it(tmp_path):
    url = await queued_case(tmp_path)
    async with ThreadRefusingConnector(refusals=RETRY_SOON.max_attempts) as channel:
        statuses = [await attempt(url, channel, after_s=n * 3600) for n in range(RETRY_SOON.max_attempts)]
        store = await Store.open(url)
        await Outbox(store, []).retry_failed()  # `policypal handoffs --retry`
        await store.close()
        retried = await attempt(url, channel, after_s=RETRY_SOON.max_attempts * 3600)
    cards = channel.messages(HELPDESK_CHANNEL)
    assert statuses == ["retrying", "retrying", "failed"] and retried == "delivered"
    assert len(cards) == 1
    assert len(channel.messages(f"{HELPDESK_CHANNEL};messageid={cards[0].id}")) == 1
