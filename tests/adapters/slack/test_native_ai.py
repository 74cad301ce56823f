"""Slack's AI surface end to end: the status line while the run works, the answer streamed, native thumbs,
the stop button, attached files named; and the answer arriving whole whenever a stream cannot."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from adapters.slack.blocks import FEEDBACK, HANDOFF, answer_markdown, answer_tail, markdown_message
from adapters.slack.flows import SlackBridge
from adapters.slack.inbound import BotIdentity
from adapters.slack.post import METADATA_TYPE, SlackPoster, SlackWriter, web_client
from adapters.slack.sender import SlackSender
from adapters.slack.streaming import SlackStreams, StreamedAnswer, chunks
from adapters.slack.users import UserDirectory
from bot.delivery import Address, Delivery, Post
from bot.errors import RemoteError
from bot.identity import GroupMap
from bot.types import Answer, Citation, TerminationReason
from tests.adapters.slack.test_app import ALICE, CITE, PASSAGE, SlackRig, answer, running_slack, search
from tests.bot.helpers import eventually
from tests.fakes.openai_server import FakeOpenAI, held, tool_calls
from tests.fakes.slack_api import STREAMING_OFF, FakeSlackAPI, SlackCall, dm_event, event_envelope, mention_event

pytestmark = pytest.mark.asyncio

STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")


@pytest_asyncio.fixture
async def ai_slack(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SlackRig]:
    """The app in a workspace where it is an AI app: streams and status lines work."""
    async for rig in running_slack(tmp_path, fake_openai, monkeypatch, streaming=True):
        yield rig


@pytest_asyncio.fixture
async def plain_slack(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SlackRig]:
    """A workspace where the app is no AI app: Slack refuses streams."""
    async for rig in running_slack(tmp_path, fake_openai, monkeypatch, streaming=False):
        yield rig


def timeline(slack: FakeSlackAPI) -> list[str]:
    """What the person saw happen, in order: status lines by their words, then the stream's calls."""
    seen = []
    for call in slack.calls:
        if call.method == "assistant.threads.setStatus":
            seen.append("status: " + " / ".join(call.get("loading_messages") or [call["status"]]))
        elif call.method in (*STREAM_METHODS, "chat.postMessage", "chat.update"):
            seen.append(call.method)
    return seen


def thumbs(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for b in blocks if b["type"] == "context_actions" for e in b["elements"])


async def test_an_assistant_thread_shows_what_the_run_does_then_streams_the_answer_with_thumbs(ai_slack: SlackRig):
    ai_slack.model.script(search("work abroad"), answer())
    event = dm_event(ALICE, "Can I work from abroad?", thread_ts="1690000000.000001")
    await ai_slack.send(event_envelope(event))
    (stop,) = await ai_slack.slack.wait_for("chat.stopStream")
    seen = timeline(ai_slack.slack)
    assert seen[:3] == [
        "status: Reading the policies…",
        "status: Searching the policies for “work abroad”…",
        "status: Reading what I found…",
    ]
    assert seen[3] == "chat.startStream" and seen[-1] == "chat.stopStream"
    assert set(seen[4:-1]) <= {"chat.appendStream"} and "chat.postMessage" not in seen
    (start,) = ai_slack.slack.calls_to("chat.startStream")
    assert (start["channel"], start["thread_ts"]) == ("D0ALICE", event["thread_ts"])
    streamed = ai_slack.slack.streams[start.answer["ts"]]
    assert streamed.text == f"**Yes**, for up to 4 weeks:\n- ask your manager\n- book travel [{CITE}]({PASSAGE.source})"
    assert f"<{PASSAGE.source}|{CITE}>" in SlackCall("", {"blocks": streamed.blocks}, {}).block_text
    rating = thumbs(stop.blocks)
    assert rating["type"] == "feedback_buttons" and rating["action_id"] == FEEDBACK
    assert any(e["action_id"] == HANDOFF for b in stop.blocks if b["type"] == "actions" for e in b["elements"])
    assert stop["metadata"]["event_type"] == METADATA_TYPE  # found after a crash like any post


async def test_a_long_answer_streams_in_chunks_that_add_up_to_it(ai_slack: SlackRig):
    body = "\n".join(f"- step {n}: " + "check the policy and ask your manager " * 3 for n in range(12))
    ai_slack.model.script(answer(body))
    await ai_slack.send(event_envelope(dm_event(ALICE, "How do I travel?", thread_ts="1690000000.000002")))
    await ai_slack.slack.wait_for("chat.stopStream")
    appended = ai_slack.slack.calls_to("chat.appendStream")
    assert len(appended) >= 3
    (start,) = ai_slack.slack.calls_to("chat.startStream")
    assert start["markdown_text"] + "".join(c["markdown_text"] for c in appended) == body.strip()


async def test_a_channel_thread_streams_to_the_asker_and_shows_the_status_there(ai_slack: SlackRig):
    ai_slack.model.script(answer())
    event = mention_event(ALICE, "<@UBOT> can I work abroad?", channel="C0GENERAL")
    await ai_slack.send(event_envelope(event))
    (start,) = await ai_slack.slack.wait_for("chat.startStream")
    assert (start["channel"], start["thread_ts"]) == ("C0GENERAL", event["ts"])
    assert (start["recipient_user_id"], start["recipient_team_id"]) == (ALICE, "T0TEAM")  # needed outside a DM
    (status,) = ai_slack.slack.calls_to("assistant.threads.setStatus")
    assert (status["channel_id"], status["thread_ts"]) == ("C0GENERAL", event["ts"])
    await ai_slack.slack.wait_for("chat.stopStream")


async def test_a_stream_that_breaks_off_is_replaced_by_the_whole_answer_in_the_same_message(ai_slack: SlackRig):
    ai_slack.slack.fail("chat.stopStream", "message_not_in_streaming_state")  # Slack ended it (python-slack-sdk #1859)
    ai_slack.model.script(answer())
    await ai_slack.send(event_envelope(dm_event(ALICE, "Can I work abroad?", thread_ts="1690000000.000003")))
    (update,) = await ai_slack.slack.wait_for("chat.update")
    (start,) = ai_slack.slack.calls_to("chat.startStream")
    assert update["ts"] == start.answer["ts"]
    assert update.blocks[0]["type"] == "markdown" and "book travel" in update.blocks[0]["text"]
    assert thumbs(update.blocks)["action_id"] == FEEDBACK
    assert ai_slack.slack.calls_to("chat.postMessage") == []  # one message, never two


async def test_where_slack_does_not_stream_the_answer_is_posted_and_streaming_is_not_tried_again(
    plain_slack: SlackRig,
):
    slack = plain_slack
    slack.model.script(answer(), answer())
    await slack.send(event_envelope(dm_event(ALICE, "first", thread_ts="1690000000.000004")))
    await slack.replies(1)
    await slack.send(event_envelope(dm_event(ALICE, "second", thread_ts="1690000000.000005")))
    (first, second) = await slack.replies(2)
    assert first.blocks[0]["type"] == "markdown" and second.blocks[0]["type"] == "markdown"
    (refused,) = slack.slack.calls_to("chat.startStream")
    assert refused.answer.get("error") == STREAMING_OFF


async def test_a_status_line_slack_refuses_costs_the_run_nothing_and_is_not_tried_again(ai_slack: SlackRig):
    ai_slack.slack.fail("assistant.threads.setStatus", "not_allowed")  # not an AI-app thread
    ai_slack.model.script(search(), answer())
    await ai_slack.send(event_envelope(dm_event(ALICE, "Can I work abroad?")))
    await ai_slack.slack.wait_for("chat.stopStream")
    assert len(ai_slack.slack.calls_to("assistant.threads.setStatus")) == 1


async def test_a_proposed_ticket_is_announced_on_the_status_line_before_its_card(ai_slack: SlackRig):
    ticket = {"category": "network_vpn", "summary": "VPN drops every hour", "urgency": "normal"}
    ai_slack.model.script(tool_calls(("create_it_ticket", ticket)))
    await ai_slack.send(event_envelope(dm_event(ALICE, "My VPN keeps dropping", thread_ts="1690000000.000006")))
    await ai_slack.replies(1)
    assert timeline(ai_slack.slack) == [
        "status: Reading the policies…",
        "status: Preparing a ticket for you to confirm…",
        "chat.postMessage",  # the card, with its Confirm and Cancel: posted, not streamed
    ]


async def test_the_native_thumbs_store_feedback_with_the_run(ai_slack: SlackRig):
    ai_slack.model.script(answer())
    event = dm_event(ALICE, "Can I work abroad?", thread_ts="1690000000.000007")
    await ai_slack.send(event_envelope(event))
    (stop,) = await ai_slack.slack.wait_for("chat.stopStream")
    value = thumbs(stop.blocks)["positive_button"]["value"]
    run_id = value.partition(":")[2]
    await ai_slack.click(ALICE, FEEDBACK, value, channel="D0ALICE", thread_ts=event["thread_ts"])
    await ai_slack.slack.wait_for("chat.postEphemeral")
    run = await ai_slack.service.store.runs.get(run_id)
    assert (run.feedback, run.feedback_by) == ("helpful", ALICE)


async def test_the_stop_button_cancels_the_run_and_hands_it_to_the_helpdesk(ai_slack: SlackRig):
    release = asyncio.Event()
    ai_slack.model.script(held(release, answer()))
    thread = "1690000000.000008"
    await ai_slack.send(event_envelope(dm_event(ALICE, "Can I work abroad?", thread_ts=thread)))
    await eventually(lambda: len(ai_slack.model.requests) == 1)  # the run is waiting on the model
    stopped = {
        "type": "agent_session_stopped",
        "channel": "D0ALICE",
        "thread_ts": thread,
        "user": ALICE,
        "streaming_message_ts": [],
        "event_ts": "1690000001.000001",
    }
    await ai_slack.send(event_envelope(stopped))
    (reply,) = await ai_slack.replies(1)
    release.set()
    assert "helpdesk" in reply.block_text.lower() and "HD-" in reply.block_text
    runs = await ai_slack.service.store.runs.of_conversation(f"slack:T0TEAM:D0ALICE:{thread}", limit=1)
    assert runs[-1].reason == TerminationReason.CANCELLED.value
    assert ai_slack.slack.calls_to("chat.startStream") == []  # a give-up is posted, with its case


async def test_attached_files_are_named_as_not_read_before_the_answer(ai_slack: SlackRig):
    ai_slack.model.script(answer())
    event = dm_event(
        ALICE,
        "Is this receipt OK?",
        subtype="file_share",
        thread_ts="1690000000.000009",
        files=[{"id": "F1", "name": "receipt.pdf"}],
    )
    await ai_slack.send(event_envelope(event))
    (notice,) = await ai_slack.replies(1)
    assert "can't read attached files" in notice.block_text and "receipt.pdf" in notice.block_text
    await ai_slack.slack.wait_for("chat.stopStream")
    assert timeline(ai_slack.slack).index("chat.postMessage") < timeline(ai_slack.slack).index("chat.startStream")


async def test_a_file_without_a_question_is_named_and_starts_no_run(ai_slack: SlackRig):
    event = dm_event(ALICE, "", subtype="file_share", files=[{"id": "F2", "name": "scan.png"}])
    await ai_slack.send(event_envelope(event))
    (notice,) = await ai_slack.replies(1)
    assert "scan.png" in notice.block_text and "Type your question" in notice.block_text
    await asyncio.sleep(0.1)
    assert ai_slack.model.requests == [] and len(ai_slack.slack.calls_to("chat.postMessage")) == 1


# --- the stream as the outbox delivers it --------------------------------------------------------------


def streamed(text: str) -> StreamedAnswer:
    answer_ = Answer(text, (Citation("Travel", "Flights", "https://x.example/t"),))
    tail = answer_tail(answer_, "run_1")
    whole = markdown_message(answer_, tail)
    assert whole is not None
    return StreamedAnswer(answer_markdown(answer_), tail, whole)


async def writer_for(slack: FakeSlackAPI, session: aiohttp.ClientSession) -> SlackWriter:
    return SlackWriter(web_client(slack.token, session, slack.base_url), BotIdentity("UBOT", "BBOT", "T0TEAM"))


async def test_a_retry_after_the_stream_began_finishes_that_message_instead_of_starting_another():
    saved: list[str] = []

    async def save(progress: str) -> None:
        saved.append(progress)

    async with FakeSlackAPI(streaming=True) as slack, aiohttp.ClientSession() as session:
        streams = SlackStreams(await writer_for(slack, session), pace_s=0)
        row = SimpleNamespace(id=7, last_error=None)
        first = Delivery(7, "k", None, save)
        slack.fail("chat.appendStream", "internal_error")  # and the fallback update fails too: the attempt fails
        slack.fail("chat.update", "internal_error")
        with pytest.raises(RemoteError):
            await streams.deliver(row, first, ("D0ALICE", "1.0", ALICE), streamed("Yes [Travel › Flights] " * 40))
        assert [json.loads(p) for p in saved] == [{"stream": slack.calls_to("chat.startStream")[0].answer["ts"]}]
        retry = Delivery(7, "k", saved[-1], save, uncertain=True)
        ts = await streams.deliver(row, retry, ("D0ALICE", "1.0", ALICE), streamed("Yes [Travel › Flights] " * 40))
        assert len(slack.calls_to("chat.startStream")) == 1  # the same message, finished by chat.update
        assert slack.delivered("chat.update")[-1]["ts"] == ts


async def test_chunks_cut_at_lines_or_spaces_and_join_back_to_the_text():
    text = "A line.\n" + "word " * 200 + "\n| a | b |\n"
    pieces = chunks(text, 100)
    assert "".join(pieces) == text and all(len(p) <= 100 for p in pieces)
    assert chunks("short") == ["short"] and chunks("") == []


# --- what a person sees when something goes wrong ---------------------------------------------------------


async def test_a_file_name_with_slack_markup_is_shown_as_text_and_pings_nobody(ai_slack: SlackRig):
    files = [{"id": "F3", "name": "<!channel> budget & <@U_BOB>.xlsx"}]
    event = dm_event(ALICE, "", subtype="file_share", files=files, thread_ts="1690000000.000010")
    await ai_slack.send(event_envelope(event))
    (notice,) = await ai_slack.replies(1)
    assert "&lt;!channel&gt; budget &amp; &lt;@U_BOB&gt;.xlsx" in notice.block_text
    assert "<!channel>" not in notice.block_text + notice["text"] and "<@U_BOB>" not in notice.block_text


async def test_a_file_name_beside_a_question_is_escaped_in_the_note_before_the_answer(ai_slack: SlackRig):
    ai_slack.model.script(answer())
    files = [{"id": "F4", "name": "<!here>.pdf"}]
    event = dm_event(ALICE, "Is this OK?", subtype="file_share", files=files, thread_ts="1690000000.000011")
    await ai_slack.send(event_envelope(event))
    (notice,) = await ai_slack.replies(1)
    assert "&lt;!here&gt;.pdf" in notice.block_text and "<!here>" not in notice.block_text + notice["text"]
    await ai_slack.slack.wait_for("chat.stopStream")


async def test_a_run_that_fails_clears_the_status_line_it_set():
    class Failing:
        async def handle_message(self, inbound: Any, progress: Any = None) -> None:
            raise RuntimeError("the database went away mid-run")

    async with FakeSlackAPI(streaming=True) as slack, aiohttp.ClientSession() as session:
        slack.add_user(ALICE, "alice", "alice@example.com")
        client = web_client(slack.token, session, slack.base_url)
        bot = BotIdentity("UBOT", "BBOT", "T0TEAM")
        bridge = SlackBridge(Failing(), SlackPoster(client, bot), SlackWriter(client, bot),  # type: ignore[arg-type]
                             UserDirectory(client, GroupMap()), bot)
        event = dm_event(ALICE, "Can I work abroad?", thread_ts="1690000000.000012")
        with pytest.raises(RuntimeError):  # raised to the inbox, which runs it again
            await bridge.answer(event, event_envelope(event))
        statuses = slack.calls_to("assistant.threads.setStatus")
        assert statuses[0]["status"] and statuses[-1]["status"] == ""  # not left saying it is working
        assert {(c["channel_id"], c["thread_ts"]) for c in statuses} == {("D0ALICE", event["thread_ts"])}


async def test_a_stream_that_fails_mid_way_is_stopped_before_the_whole_answer_replaces_it():
    async with FakeSlackAPI(streaming=True) as slack, aiohttp.ClientSession() as session:
        streams = SlackStreams(await writer_for(slack, session), pace_s=0)
        slack.fail("chat.appendStream", "internal_error")

        async def save(progress: str) -> None:
            return None

        delivery = Delivery(8, "k", None, save)
        text = "Yes [Travel › Flights] " * 40
        ts = await streams.deliver(SimpleNamespace(id=8, last_error=None), delivery, ("D0ALICE", "1.0", ALICE),
                                   streamed(text))
        assert slack.streams[ts].stopped  # not left in streaming state
        (update,) = slack.delivered("chat.update")
        assert update["ts"] == ts and update.blocks[0]["text"] == streamed(text).markdown  # the final text is whole
        (stop,) = slack.delivered("chat.stopStream")
        assert stop["metadata"]["event_payload"] == {"row": 8, "part": 0}  # found after a crash like any post


async def test_a_reply_moved_to_the_dm_shows_its_text_as_text_and_pings_nobody():
    async def save(progress: str) -> None:
        return None

    async with FakeSlackAPI() as slack, aiohttp.ClientSession() as session:
        sender = SlackSender(await writer_for(slack, session), service=None)  # type: ignore[arg-type]
        text = "I can't read attached files (<!channel> a & b.pdf)."
        post = Post("direct", Address("slack", "C0GENERAL", "1.0", None, ALICE), text=text,
                    reason="Slack chat.postMessage in C0GENERAL: not_in_channel")
        row = SimpleNamespace(id=9, payload=post.to_json(), last_error=None)
        await sender.send(row, Delivery(9, "k", None, save))  # type: ignore[arg-type]
        (moved,) = slack.delivered()
        assert moved["channel"] == ALICE and "(&lt;!channel&gt; a &amp; b.pdf)" in moved.block_text
        assert "<!channel>" not in moved.block_text + moved["text"]
        assert "<#C0GENERAL>" in moved.block_text  # the adapter's own markup stays a channel link
