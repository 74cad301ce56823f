"""Slack end to end: signed requests to the running aiohttp app, Web API calls read from a fake Slack.

The ``slack`` fixture (``SlackRig``) is shared with test_slack_cards.py: the real app from
``build_app`` on a loopback port, the real service on the scripted model, and the real slack_sdk
client pointed by ``SLACK_API_URL`` at ``FakeSlackAPI``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

from adapters.server import build_app
from adapters.slack.app import EVENTS_PATH, SlackCredentials, start_slack
from adapters.slack.blocks import FEEDBACK, HANDOFF, NOT_HELPFUL
from bot.errors import ConfigError
from bot.helpdesk import HandoffCase
from bot.identity import GroupMap
from bot.runtime import Admission, RunSlots, UserRateLimit
from bot.service import PolicyPal
from bot.wiring import open_service
from retrieval import Passage
from tests.adapters.slack.test_manifest import web_api_methods
from tests.bot.helpers import OnePassage, eventually, settings_for
from tests.fakes.openai_server import FakeOpenAI, delay, held, text, tool_calls
from tests.fakes.slack_api import (
    FakeSlackAPI,
    SlackCall,
    block_actions,
    dm_event,
    event_envelope,
    form_body,
    mention_event,
    signed_headers,
)

pytestmark = pytest.mark.asyncio

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
ALICE, BOB, GUEST = "U_ALICE", "U_BOB", "U_GUEST"
PARTNER = "U_PARTNER"  # another company's employee in a Slack Connect channel
CITE = "Remote Work Policy › Working abroad"
PASSAGE = Passage(
    score=0.9,
    doc_id="remote-work",
    title="Remote Work Policy",
    heading="Remote Work Policy > Working abroad",
    source="https://intranet.example.com/policies/remote-work",
    text="Employees may work from abroad for up to four weeks a year with their manager's approval.",
)


@dataclass
class SlackRig:
    """The app under test, Slack's two sides (events in, Web API out) and the service behind it."""

    url: str
    slack: FakeSlackAPI
    model: FakeOpenAI
    service: PolicyPal
    session: aiohttp.ClientSession
    app: web.Application

    async def send(
        self,
        envelope: dict[str, Any],
        *,
        secret: str = SECRET,
        timestamp: int | None = None,
        retry_num: int | None = None,
    ) -> tuple[int, str, float]:
        """Post an event as Slack does; status, body and how long the ack took."""
        body = json.dumps(envelope)
        headers = signed_headers(secret, body, timestamp=timestamp, retry_num=retry_num)
        return await self._post(body, headers)

    async def click(self, user: str, action_id: str, value: str, **where: Any) -> tuple[int, str, float]:
        body = form_body(block_actions(user, action_id, value, **where))
        return await self._post(body, signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded"))

    async def _post(self, body: str, headers: dict[str, str]) -> tuple[int, str, float]:
        started = time.perf_counter()
        async with self.session.post(self.url + EVENTS_PATH, data=body.encode(), headers=headers) as response:
            return response.status, await response.text(), time.perf_counter() - started

    async def replies(self, count: int = 1, **match: Any) -> list[SlackCall]:
        """Messages the bot posted, in order, optionally only those with given params."""
        return await self.slack.wait_for(
            "chat.postMessage", count, where=lambda c: all(c.get(k) == v for k, v in match.items())
        )



async def running_slack(
    tmp_path: Path,
    model: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    searcher: Any = None,
    *,
    streaming: bool = False,
    **overrides: Any,
) -> AsyncIterator[SlackRig]:
    """Fake Slack, service and app started; everything closed afterwards, the fake checked for problems.

    ``streaming``: the workspace streams (an AI app); without it answers fall back to chat.postMessage.
    """
    async with FakeSlackAPI(streaming=streaming) as slack:
        slack.add_user(ALICE, "alice", "alice@example.com")
        slack.add_user(BOB, "bob", "bob@example.com")
        slack.add_user(GUEST, "gus", "gus@partner.example", guest=True)
        slack.add_user(PARTNER, "pat", "pat@vendor.example", team_id="T0VENDOR")
        values = {
            "slack_bot_token": slack.token,
            "slack_signing_secret": SECRET,
            "slack_api_url": slack.base_url,
            **overrides,
        }
        settings = settings_for(tmp_path, model, **values)
        service = await open_service(settings, searcher=searcher or OnePassage(PASSAGE))
        app = build_app(settings, service)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                yield SlackRig(str(server.make_url("")).rstrip("/"), slack, model, service, session, app)
        finally:
            await server.close()
            await service.close()
        assert not slack.problems, slack.problems
        assert slack.methods <= web_api_methods(), "a Web API call the manifest test does not know about"


@pytest_asyncio.fixture
async def slack(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SlackRig]:
    async for rig in running_slack(tmp_path, fake_openai, monkeypatch):
        yield rig


def answer(body: str = f"**Yes**, for up to 4 weeks:\n- ask your manager\n- book travel [{CITE}]") -> Any:
    return text(body)


def search(query: str = "work abroad") -> Any:
    return tool_calls(("search_policies", {"query": query}))


# --- the endpoint -----------------------------------------------------------------------------------


async def test_url_verification_answers_the_challenge(slack: SlackRig):
    status, body, _ = await slack.send({"type": "url_verification", "token": "x", "challenge": "c-123"})
    assert status == 200
    assert json.loads(body) == {"challenge": "c-123"}


async def test_a_bad_signature_and_a_stale_timestamp_get_401_and_start_nothing(slack: SlackRig):
    event = event_envelope(dm_event(ALICE, "hello"))
    assert (await slack.send(event, secret="not-the-secret"))[0] == 401
    assert (await slack.send(event, timestamp=int(time.time()) - 10 * 60))[0] == 401
    await asyncio.sleep(0.2)
    assert slack.model.requests == []
    assert slack.slack.calls_to("chat.postMessage") == []


# --- conversations ----------------------------------------------------------------------------------


async def test_a_dm_is_acked_at_once_and_answered_in_its_thread_with_citations_and_buttons(slack: SlackRig):
    model_may_answer = asyncio.Event()
    slack.model.script(search(), held(model_may_answer, answer()))
    event = dm_event(ALICE, "Can I work from abroad?")
    status, _, _ = await slack.send(event_envelope(event))
    slack.model.mark("acked")
    model_may_answer.set()  # the run can end only now: an ack that waited for it would come 10 s later, after it
    assert status == 200
    assert "reply 2" not in slack.model.events_until("acked")  # the ack did not wait for the run
    (reply,) = await slack.replies()
    assert (reply["channel"], reply["thread_ts"]) == ("D0ALICE", event["ts"])
    markdown = reply.blocks[0]
    assert markdown == {"type": "markdown", "text": f"**Yes**, for up to 4 weeks:\n- ask your manager\n"
                                                    f"- book travel [{CITE}]({PASSAGE.source})"}
    assert f"<{PASSAGE.source}|{CITE}>" in reply.block_text
    buttons = [e for b in reply.blocks if b["type"] in ("actions", "context_actions") for e in b["elements"]]
    assert [b["action_id"] for b in buttons] == [FEEDBACK, HANDOFF]
    assert slack.model.requests[0].messages[-1] == {"role": "user", "content": "Can I work from abroad?"}
    assert slack.slack.calls_to("users.info")[0]["user"] == ALICE
    slack.model.assert_script_consumed()


async def test_a_mention_starts_a_thread_and_a_later_mention_in_it_continues_with_its_history(slack: SlackRig):
    slack.model.script(text("Up to four weeks."), text("Yes, the same applies to contractors' managers."))
    first = mention_event(ALICE, "<@UBOT> how long can I work abroad?")
    await slack.send(event_envelope(first))
    (reply,) = await slack.replies()
    assert (reply["channel"], reply["thread_ts"]) == ("C0GENERAL", first["ts"])
    follow_up = mention_event(BOB, "<@UBOT|policypal> and for my team?", thread_ts=first["ts"])
    await slack.send(event_envelope(follow_up))
    replies = await slack.replies(2)
    assert replies[1]["thread_ts"] == first["ts"]
    messages = slack.model.requests[1].messages
    assert [m["content"] for m in messages if m["role"] in ("user", "assistant")][-3:] == [
        "how long can I work abroad?",
        "Up to four weeks.",
        "and for my team?",
    ]


async def test_a_retried_event_runs_once_even_when_redelivered_as_attempt_zero(slack: SlackRig):
    slack.model.script(delay(0.3, answer()))
    envelope = event_envelope(dm_event(ALICE, "Can I work from abroad?"))
    assert (await slack.send(envelope))[0] == 200
    assert (await slack.send(envelope, retry_num=1))[0] == 200
    assert (await slack.send({**envelope, "retry_attempt": 0}))[0] == 200
    await slack.replies(1)
    await asyncio.sleep(0.3)
    assert len(slack.model.requests) == 1
    assert len(slack.slack.calls_to("chat.postMessage")) == 1


async def test_bots_edits_deletions_and_unmentioned_channel_messages_start_nothing(slack: SlackRig):
    ignored = [
        dm_event(ALICE, "from a bot", bot_id="B0OTHER", subtype="bot_message"),
        dm_event("UBOT", "my own reply"),
        dm_event(ALICE, "edited", subtype="message_changed"),
        dm_event(ALICE, "", subtype="message_deleted"),
        {**dm_event(ALICE, "no mention in a channel", channel="C0GENERAL"), "channel_type": "channel"},
        mention_event(ALICE, "<@UBOT> bot mention", bot_id="B0OTHER"),
    ]
    for event in ignored:
        assert (await slack.send(event_envelope(event)))[0] == 200
    await asyncio.sleep(0.3)
    assert slack.model.requests == []
    assert slack.slack.calls_to("chat.postMessage") == []


async def test_a_bare_mention_gets_a_hint_and_no_run(slack: SlackRig):
    await slack.send(event_envelope(mention_event(ALICE, "<@UBOT>")))
    (reply,) = await slack.replies()
    assert "Ask me about a company policy" in reply.block_text
    assert slack.model.requests == []


async def test_a_redelivered_bare_mention_gets_one_hint(slack: SlackRig):
    envelope = event_envelope(mention_event(ALICE, "<@UBOT>"))
    await slack.send(envelope)
    await slack.replies()
    await slack.send(envelope, retry_num=1)
    await slack.send({**envelope, "retry_attempt": 0})  # Slack's redelivery without retry headers
    await asyncio.sleep(0.3)
    assert len(slack.slack.calls_to("chat.postMessage")) == 1


async def test_assistant_threads_get_suggested_prompts_and_a_status_while_the_run_works(slack: SlackRig):
    slack.model.script(answer())
    started = {
        "type": "assistant_thread_started",
        "assistant_thread": {"user_id": ALICE, "channel_id": "D0ALICE", "thread_ts": "1700000000.000001"},
    }
    await slack.send(event_envelope(started))
    (prompts,) = await slack.slack.wait_for("assistant.threads.setSuggestedPrompts")
    assert prompts["thread_ts"] == "1700000000.000001" and len(prompts["prompts"]) >= 2
    await slack.send(event_envelope(dm_event(ALICE, "Can I work abroad?", thread_ts="1700000000.000001")))
    await slack.replies()
    methods = [c.method for c in slack.slack.calls if c.method.startswith(("assistant.threads.setS", "chat.post"))]
    assert methods[-2:] == ["assistant.threads.setStatus", "chat.postMessage"]
    assert slack.slack.calls_to("assistant.threads.setStatus")[0]["status"]


# --- who the user is --------------------------------------------------------------------------------


async def ticket_refused(slack: SlackRig, event: dict[str, Any]) -> tuple[SlackCall, Any]:
    """The model asks for a ticket on ``event``; the reply (in its thread, no card) and the run, refused."""
    ticket = {"category": "hardware", "summary": "Laptop screen broken", "urgency": "normal"}
    slack.model.script(tool_calls(("create_it_ticket", ticket)))
    await slack.send(event_envelope(event))
    (reply,) = await slack.replies()
    assert reply["thread_ts"] == event["ts"]
    assert await slack.service.store.tickets.count() == 0
    assert "Confirm" not in reply.block_text
    (run,) = await slack.service.store.runs.recent()
    assert run.reason == "policy_denied"  # users.info said guest, so the write tool was refused
    return reply, run


async def test_a_guest_may_not_raise_a_ticket_and_the_give_up_names_the_helpdesk_case(slack: SlackRig):
    reply, run = await ticket_refused(slack, dm_event(GUEST, "my screen broke, open a ticket", channel="D0GUS"))
    reference = next(e["text"] for b in reply.blocks if b["type"] == "context" for e in b["elements"])
    assert "Helpdesk case" in reference and run.id in reference


async def test_someone_from_another_organisation_may_not_raise_a_ticket(slack: SlackRig):
    """In a Slack Connect channel the vendor's people are no guests of ours in Slack's eyes (not restricted),
    but they are not employees either: the ticket tool is refused them as it is to guests."""
    await ticket_refused(slack, mention_event(PARTNER, "<@UBOT> my screen broke, open a ticket", channel="C0SHARED"))


async def test_when_slack_cannot_say_who_someone_is_they_are_treated_as_a_guest(slack: SlackRig):
    slack.slack.fail("users.info", "missing_scope")
    slack.model.script(tool_calls(("create_it_ticket", {"category": "other", "summary": "help me", "urgency": "low"})))
    await slack.send(event_envelope(dm_event(ALICE, "open a ticket")))
    await slack.replies()
    (run,) = await slack.service.store.runs.recent()
    assert run.reason == "policy_denied"
    assert await slack.service.store.tickets.count() == 0


async def test_users_info_is_cached_across_messages(slack: SlackRig):
    slack.model.script(text("one"), text("two"))
    await slack.send(event_envelope(dm_event(ALICE, "first")))
    await slack.send(event_envelope(dm_event(ALICE, "second")))
    await slack.replies(2)
    assert len(slack.slack.calls_to("users.info")) == 1


# --- buttons on answers -----------------------------------------------------------------------------


async def test_feedback_is_stored_with_the_run_and_thanked_privately(slack: SlackRig):
    slack.model.script(answer())
    event = dm_event(ALICE, "Can I work abroad?")
    await slack.send(event_envelope(event))
    (reply,) = await slack.replies()
    run_id = next(e["value"] for b in reply.blocks if b["type"] == "actions" for e in b["elements"])
    await slack.click(ALICE, NOT_HELPFUL, run_id, channel="D0ALICE", thread_ts=event["ts"])
    (thanks,) = await slack.slack.wait_for("chat.postEphemeral")
    run = await slack.service.store.runs.get(run_id)
    assert (run.feedback, run.feedback_by) == ("not_helpful", ALICE)
    assert (thanks["user"], thanks["thread_ts"]) == (ALICE, event["ts"])


async def test_two_people_rating_an_answer_in_a_channel_keep_a_rating_each(slack: SlackRig):
    slack.model.script(answer())
    event = mention_event(ALICE, "<@UBOT> Can I work abroad?")
    await slack.send(event_envelope(event))
    (reply,) = await slack.replies()
    thumbs = next(e for b in reply.blocks if b["type"] == "context_actions" for e in b["elements"])
    up, down = thumbs["positive_button"]["value"], thumbs["negative_button"]["value"]
    run_id = up.partition(":")[2]
    await slack.click(ALICE, FEEDBACK, up, channel="C0GENERAL", thread_ts=event["ts"])
    await slack.slack.wait_for("chat.postEphemeral")
    await slack.click(BOB, FEEDBACK, down, channel="C0GENERAL", thread_ts=event["ts"])  # a bystander
    await slack.slack.wait_for("chat.postEphemeral", 2)
    run = await slack.service.store.runs.get(run_id)
    assert (run.feedback, run.feedback_by) == ("helpful", ALICE)  # the asker's, not the last click's
    ratings = await slack.service.store.runs.ratings(run_id)
    assert sorted((r.user_id, r.rating) for r in ratings) == [(ALICE, "helpful"), (BOB, "not_helpful")]


async def test_still_need_help_hands_the_thread_to_the_helpdesk(slack: SlackRig):
    slack.model.script(answer())
    event = dm_event(ALICE, "Can I work abroad?")
    await slack.send(event_envelope(event))
    (reply,) = await slack.replies()
    run_id = next(e["value"] for b in reply.blocks if b["type"] == "actions" for e in b["elements"])
    await slack.click(ALICE, HANDOFF, run_id, channel="D0ALICE", thread_ts=event["ts"])
    handoff = (await slack.replies(2))[1]
    assert handoff["thread_ts"] == event["ts"]
    (case,) = await slack.service.store.cases.recent()
    assert (case.user_id, case.user_email, case.run_id) == (ALICE, "alice@example.com", run_id)
    assert case.link and case.link.startswith("https://acme.slack.com/archives/D0ALICE/")
    assert f"Helpdesk case *{HandoffCase.from_record(case).case_id}*" in handoff.block_text


def buttons_of(reply: SlackCall) -> list[str]:
    return [e["action_id"] for b in reply.blocks if b["type"] == "actions" for e in b["elements"]]


async def test_a_typed_request_for_a_person_names_the_case_and_offers_no_buttons(slack: SlackRig):
    """No run behind the reply: its id is the case id, so feedback or handoff buttons could only fail."""
    await slack.send(event_envelope(dm_event(ALICE, "I want to talk to a human")))
    (reply,) = await slack.replies()
    (case,) = await slack.service.store.cases.recent()
    assert HandoffCase.from_record(case).case_id in reply.block_text
    assert buttons_of(reply) == [] and slack.model.requests == []


async def test_a_rate_limited_refusal_offers_no_buttons(slack: SlackRig):
    slack.service.admission = Admission(UserRateLimit(slack.service.store, 1), RunSlots(4))
    slack.model.script(answer())
    await slack.send(event_envelope(dm_event(ALICE, "Can I work abroad?")))
    await slack.replies()
    await slack.send(event_envelope(dm_event(ALICE, "And for how long?")))
    refusal = (await slack.replies(2))[1]
    assert "Please wait a moment" in refusal.block_text and buttons_of(refusal) == []


# --- Slack API errors -------------------------------------------------------------------------------


async def test_a_rate_limited_reply_is_retried_after_retry_after(slack: SlackRig):
    slack.model.script(answer())
    slack.slack.rate_limit("chat.postMessage", retry_after=0)
    await slack.send(event_envelope(dm_event(ALICE, "Can I work abroad?")))
    attempts = await slack.slack.wait_for("chat.postMessage", 2)
    assert attempts[0].blocks == attempts[1].blocks  # the same message, sent again after the 429


async def test_channel_not_found_is_logged_and_the_user_is_told_by_dm(
    slack: SlackRig, caplog: pytest.LogCaptureFixture
):
    slack.model.script(answer())
    slack.slack.fail("chat.postMessage", "channel_not_found", times=2)  # the reply, then the note in its place
    with caplog.at_level(logging.ERROR, logger="adapters.slack.post"):
        await slack.send(event_envelope(mention_event(ALICE, "<@UBOT> can I work abroad?", channel="C0PRIVATE")))
        note = (await slack.replies(1, channel=ALICE))[0]
    assert "<#C0PRIVATE>" in note["text"] and "/invite" in note["text"]
    assert any("C0PRIVATE" in r.getMessage() and "channel_not_found" in r.getMessage() for r in caplog.records)


async def test_work_that_keeps_failing_is_tried_again_then_the_person_gets_a_reference(
    slack: SlackRig, monkeypatch: pytest.MonkeyPatch
):
    attempts: list[str] = []

    async def broken(inbound: Any, *args: Any, **kwargs: Any) -> None:
        attempts.append(inbound.event_id)
        raise RuntimeError("database on fire")

    monkeypatch.setattr(slack.service, "handle_message", broken)
    await slack.send(event_envelope(dm_event(ALICE, "anything")))
    inbox = slack.service.inbox
    for tried in (1, 2):  # the sweeper's pass hands an unanswered item out again
        await eventually(lambda n=tried: len(attempts) == n and len(inbox) == 0)
        assert slack.slack.calls_to("chat.postMessage") == []  # nobody told yet: it is being retried
        assert await inbox.recover(set()) != []
    (reply,) = await slack.replies()
    assert len(attempts) == 3 and len(set(attempts)) == 1  # the same event, three times, never more
    assert "Something went wrong on my side" in reply.block_text and "slack:Ev" in reply.block_text
    assert await inbox.recover(set()) == []  # failed for good: not handed out again
    async with slack.session.get(slack.url + "/healthz") as response:
        assert response.status == 200


async def test_an_event_for_another_app_is_reported_and_not_answered(slack: SlackRig, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.ERROR, logger="adapters.slack.app"):
        await slack.send(event_envelope(dm_event(ALICE, "hello"), app_id="A0OTHER"))
        await asyncio.sleep(0.2)
    assert any("A0OTHER" in r.getMessage() for r in caplog.records)
    assert slack.model.requests == []


async def test_shutdown_waits_for_a_run_in_flight_and_its_reply_is_posted(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
):
    fake_openai.script(delay(0.5, answer()))
    harness = running_slack(tmp_path, fake_openai, monkeypatch)
    rig = await anext(harness)
    await rig.send(event_envelope(dm_event(ALICE, "Can I work abroad?")))
    assert rig.slack.calls_to("chat.postMessage") == []
    await harness.aclose()  # closes the server at once, with the run in flight
    assert len(rig.slack.calls_to("chat.postMessage")) == 1


# --- configuration ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"slack_bot_token": "xoxb-1"}, "neither SLACK_SIGNING_SECRET"),
        ({"slack_signing_secret": SECRET}, "SLACK_BOT_TOKEN is not set"),
        ({"slack_bot_token": "xapp-1-A", "slack_signing_secret": SECRET}, "an app-level token (xapp-)"),
        ({"slack_bot_token": "xoxb-1", "slack_app_token": "xoxb-2"}, "SLACK_APP_TOKEN must be an app-level token"),
        ({"slack_bot_token": "xoxb-1", "slack_signing_secret": SECRET, "user_groups": "[1]"}, "POLICYPAL_USER_GROUPS"),
    ],
)
async def test_a_half_configured_slack_fails_loudly_at_build(tmp_path, fake_openai, monkeypatch, values, expected):
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        build_app(settings_for(tmp_path, fake_openai, **values))


async def test_a_token_slack_rejects_stops_the_server_at_start(tmp_path, fake_openai, monkeypatch):
    async with FakeSlackAPI() as fake_slack:
        settings = settings_for(
            tmp_path,
            fake_openai,
            slack_bot_token="xoxb-someone-elses",
            slack_signing_secret=SECRET,
            slack_api_url=fake_slack.base_url,
        )
        service = await open_service(settings, searcher=OnePassage(PASSAGE))
        server = TestServer(build_app(settings, service), host="127.0.0.1")
        with pytest.raises(ConfigError, match="invalid_auth"):
            await server.start_server()
        await server.close()
        await service.close()


async def test_without_slack_settings_there_is_no_slack_route(tmp_path, fake_openai, monkeypatch):
    app = build_app(settings_for(tmp_path, fake_openai))
    assert EVENTS_PATH not in {r.resource.canonical for r in app.router.routes() if r.resource}


async def test_socket_mode_is_built_with_the_app_token_and_the_configured_api_url(tmp_path, fake_openai):
    async with FakeSlackAPI() as fake_slack:
        settings = settings_for(tmp_path, fake_openai)
        service = await open_service(settings, searcher=OnePassage(PASSAGE))
        credentials = SlackCredentials(fake_slack.token, None, "xapp-1-A0APP-123-abc", fake_slack.base_url)
        runtime = await start_slack(service, credentials, GroupMap(), connect=False)
        try:
            handler = runtime.socket_mode
            assert isinstance(handler, AsyncSocketModeHandler)
            assert handler.app is runtime.bolt and handler.app_token == "xapp-1-A0APP-123-abc"
            assert handler.client.web_client.base_url == fake_slack.base_url
        finally:
            await runtime.close(1.0)
            await service.close()
        assert "apps.connections.open" not in fake_slack.methods  # constructed, never connected


async def test_an_app_token_slack_refuses_stops_the_server_at_start(tmp_path, fake_openai):
    async with FakeSlackAPI() as fake_slack:
        service = await open_service(settings_for(tmp_path, fake_openai), searcher=OnePassage(PASSAGE))
        credentials = SlackCredentials(fake_slack.token, None, "xapp-1-revoked", fake_slack.base_url)
        try:
            with pytest.raises(ConfigError, match=r"SLACK_APP_TOKEN \(apps.connections.open: invalid_auth\)"):
                await start_slack(service, credentials, GroupMap())
        finally:
            await service.close()
