"""Teams' AI surface end to end: the run's progress and the answer streamed in a personal chat, the AI label
and native citations on every answer, Teams' own feedback loop stored with the run, Teams' size limit kept,
and attached files named as not read."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from adapters.teams import cards
from adapters.teams.activity import FILE_DOWNLOAD
from adapters.teams.answers import MESSAGE_BYTES, activity_bytes, answer_activities, cited_text, claim
from adapters.teams.app import SEND_RETRY
from bot.types import Answer, Citation
from retrieval import Passage
from tests.adapters.teams.test_app import (
    TICKET,
    Teams,
    answer_citing_first_passage,
    conversation_key_of,
    running_teams,
)
from tests.bot.helpers import OnePassage, eventually
from tests.fakes.bot_connector import ALICE, Recorded
from tests.fakes.openai_server import FakeOpenAI, respond, text, tool_calls

pytestmark = pytest.mark.asyncio


AI_MESSAGE = "https://schema.org/Message"


def stream_info(recorded: Recorded) -> dict[str, Any] | None:
    return next((e for e in recorded.json.get("entities") or [] if e.get("type") == "streaminfo"), None)


def label_of(recorded: Recorded) -> dict[str, Any]:
    (label,) = [e for e in recorded.json.get("entities") or [] if e.get("type") == AI_MESSAGE]
    return label


def long_answer_citing_first_passage(paragraphs: int = 6) -> Any:
    def answer(body: dict[str, Any]) -> Any:
        cite = json.loads(body["messages"][-1]["content"])["results"][0]["cite"]
        lines = [f"Point {n}: annual leave is planned with your manager well ahead. " * 3 for n in range(paragraphs)]
        return text("\n\n".join([f"You get 25 days a year [{cite}].", *lines]))

    return respond(answer)


async def test_a_personal_chat_shows_the_runs_progress_then_streams_the_answer_with_label_citations_and_thumbs(
    teams: Teams,
):
    teams.model.script(
        tool_calls(("search_policies", {"query": "annual leave days"})), long_answer_citing_first_passage()
    )
    activity = teams.channel.personal_message("How many vacation days do I get?")
    await teams.post(activity)
    final = await teams.reply()
    steps = [(r.type, (stream_info(r) or {}).get("streamType"), r.text) for r in teams.channel.recorded]
    informative = [t for kind, stream, t in steps if stream == "informative"]
    assert informative == [
        "Reading the policies…",
        "Searching the policies for “annual leave days”…",
        "Reading what I found…",
    ]
    streaming = [t for kind, stream, t in steps if stream == "streaming"]
    assert len(streaming) >= 2 and all(final.text.startswith(t) for t in streaming)
    assert [stream for _, stream, _ in steps] == ["informative"] * 3 + ["streaming"] * len(streaming) + ["final"]
    (stream,) = teams.channel.streams.values()
    assert stream.final is not None and stream.final["text"] == final.text  # one message stays in the chat
    assert final.text.startswith("You get 25 days a year [1].")
    (cited,) = label_of(final)["citation"]
    assert label_of(final)["additionalType"] == ["AIGeneratedContent"]
    appearance = cited["appearance"]
    assert appearance["url"].startswith("https://intranet.northwind.example/")
    assert 0 < len(appearance["abstract"]) <= 160 and appearance["name"]
    assert final.json["channelData"]["feedbackLoopEnabled"] is True
    assert [a["verb"] for c in final.cards for a in c["actions"]] == ["handoff"]


async def test_a_channel_answer_is_one_plain_message_with_the_label_and_citations_and_no_stream(teams: Teams):
    teams.model.script(tool_calls(("search_policies", {"query": "annual leave days"})), answer_citing_first_passage())
    await teams.post(teams.channel.channel_message("How many vacation days do I get?"))
    reply = await teams.reply()
    assert stream_info(reply) is None and teams.channel.streams == {}
    assert all(stream_info(r) is None for r in teams.channel.typing)  # the typing dots, as before
    assert reply.text == "You get 25 days a year [1]."
    assert label_of(reply)["citation"][0]["position"] == 1
    assert reply.json["channelData"]["feedbackLoopEnabled"] is True


@pytest.mark.parametrize("where", ["channel", "personal"])
async def test_a_20000_character_answer_is_split_so_no_activity_passes_teams_limit(teams: Teams, where: str):
    body = "\n\n".join(f"Paragraph {n}. " + "The policy explains leave in detail. " * 14 for n in range(38))
    assert len(body) > 20_000
    teams.model.script(text(body))
    question = "Tell me everything about leave"
    post = teams.channel.channel_message if where == "channel" else teams.channel.personal_message
    await teams.post(post(question))
    await teams.settle()
    messages = teams.channel.messages()
    if where == "personal":  # the run's progress stream is ended by the first part: none is left open
        assert (stream_info(messages[0]) or {}).get("streamType") == "final"
        assert all(s.final is not None for s in teams.channel.streams.values())
    assert len(messages) >= 2
    assert all(activity_bytes(m.json) <= 28_000 for m in messages)
    assert " ".join(m.text for m in messages).split() == body.split()  # nothing lost
    assert [bool(m.json.get("channelData", {}).get("feedbackLoopEnabled")) for m in messages][-1] is True
    assert all(not m.cards for m in messages[:-1]) and messages[-1].cards  # "Still need help?" once, at the end
    assert all(label_of(m) for m in messages)  # every part is labelled AI-generated


async def test_teams_feedback_loop_stores_the_vote_with_the_run_that_answered(teams: Teams):
    teams.model.script(tool_calls(("search_policies", {"query": "annual leave days"})), answer_citing_first_passage())
    activity = teams.channel.personal_message("How many vacation days do I get?")
    await teams.post(activity)
    reply = await teams.reply()
    await teams.delivered(conversation_key_of(activity))
    comment = "wrong number, and here is my token xoxb-1234567890-abcdefghij"
    status, _ = await teams.post(teams.channel.feedback("dislike", on=reply, comment=comment))
    assert status == 200
    (run,) = await teams.service.store.runs.of_conversation(conversation_key_of(activity), limit=1)
    stored = await teams.service.store.runs.get(run.id)
    assert (stored.feedback, stored.feedback_by) == ("not_helpful", "aad-alice")
    assert stored.feedback_comment is not None and stored.feedback_comment.startswith("wrong number")
    assert "xoxb-1234567890" not in stored.feedback_comment  # people paste secrets: redacted as in traces


async def test_a_vote_on_a_message_that_is_no_answer_is_ignored(teams: Teams):
    teams.model.script(text("Hello."))
    activity = teams.channel.personal_message("hi")
    await teams.post(activity)
    reply = await teams.reply()
    fake = Recorded("send", reply.conversation_id, None, {}, {}, "not-a-posted-id")
    status, _ = await teams.post(teams.channel.feedback("like", on=fake))
    assert status == 200
    (run,) = await teams.service.store.runs.of_conversation(conversation_key_of(activity), limit=1)
    assert (await teams.service.store.runs.get(run.id)).feedback is None


async def test_a_stream_teams_will_not_end_still_delivers_the_answer_as_a_message(teams: Teams):
    teams.model.script(
        tool_calls(("search_policies", {"query": "annual leave days"})), long_answer_citing_first_passage()
    )
    teams.channel.refuse_next(403)  # the final message: the person pressed Stop, or the stream timed out
    await teams.post(teams.channel.personal_message("How many vacation days do I get?"))
    await teams.settle()
    (answer,) = teams.channel.messages()
    assert stream_info(answer) is None and answer.text.startswith("You get 25 days a year [1].")
    assert label_of(answer)["citation"] and answer.json["channelData"]["feedbackLoopEnabled"] is True
    assert [r.type for r in teams.channel.refusals] == ["message"]


async def test_attached_files_are_named_as_not_read_before_the_answer(teams: Teams):
    teams.model.script(text("Receipts are submitted in the expenses tool."))
    attachment = {"contentType": FILE_DOWNLOAD, "name": "receipt.pdf", "content": {"downloadUrl": "https://x"}}
    await teams.post(teams.channel.personal_message("Is this receipt OK?", attachments=[attachment]))
    await eventually(lambda: len(teams.channel.messages()) == 2)
    notice, answer = teams.channel.messages()
    assert "can't read attached files" in notice.text and "receipt.pdf" in notice.text
    assert answer.text == "Receipts are submitted in the expenses tool."


async def test_a_cited_documents_classification_is_the_citations_sensitivity_label(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
):
    reorg = Passage(
        0.9,
        "reorg.md",
        "Reorg Plan",
        "Reorg Plan > Timeline",
        "https://intranet.example/reorg",
        "The new structure starts in May, team by team.",
        classification="confidential",
    )
    async for harness in running_teams(tmp_path, fake_openai, OnePassage(reorg), monkeypatch):
        harness.model.script(
            tool_calls(("search_policies", {"query": "reorg timeline"})),
            text("It starts in May [Reorg Plan › Timeline]."),
        )
        await harness.post(harness.channel.personal_message("When does the reorg start?"))
        reply = await harness.reply()
        (cited,) = label_of(reply)["citation"]
        assert reply.text == "It starts in May [1]."
        assert cited["appearance"]["usageInfo"]["name"] == "Confidential"
        assert cited["appearance"]["abstract"] == "The new structure starts in May, team by team."


# --- the answer as Teams shows it, without a server ---------------------------------------------------


async def test_a_classified_document_gives_its_citation_a_sensitivity_label():
    citation = Citation(
        "Reorg Plan",
        "Timeline",
        "https://intranet.example/reorg",
        ("managers",),
        "The new structure starts in May.",
        "confidential",
    )
    appearance = claim(1, citation)["appearance"]
    assert appearance["usageInfo"]["name"] == "Confidential"
    assert appearance["abstract"] == "The new structure starts in May."
    assert "usageInfo" not in claim(1, Citation("Leave", "Days", "https://x"))["appearance"]


async def test_cites_become_numbered_markers_and_each_part_carries_the_citations_it_marks():
    first, second = Citation("Leave", "Days", "https://x/leave"), Citation("Travel", "Flights", "https://x/travel")
    body = "Leave [Leave › Days].\n\n" + "filler words here " * 1500 + "\n\nTravel [Travel › Flights]."
    cited = cited_text(Answer(body, (first, second)))
    assert cited.text.startswith("Leave [1].") and cited.text.endswith("Travel [2].")
    parts = answer_activities(Answer(body, (first, second)), "run_1")
    assert len(parts) >= 2 and all(activity_bytes(p) <= MESSAGE_BYTES + 4_000 for p in parts)
    marks = [[c["position"] for c in p["entities"][0].get("citation", [])] for p in parts]
    assert marks[0] == [1] and marks[-1] == [2]


async def test_no_part_passes_the_limit_when_every_paragraph_cites_twenty_long_sources():
    """The citations and the card count too: text cut at the limit alone plus 20 claims passed 28 KB."""
    sources = tuple(
        Citation(f"Policy {n} " + "t" * 80, "Héading " * 10, f"https://intranet.example/{'p' * 150}/{n}",
                 abstract="é" * 300)
        for n in range(20)
    )  # fmt: skip
    cites = " ".join(f"[{c.title} › {c.heading}]" for c in sources)
    body = "\n\n".join(f"{cites} " + "Leave is planned ahead. " * 60 for _ in range(12))
    parts = answer_activities(Answer(body, sources), "run_1")
    assert len(parts) >= 2 and all(activity_bytes(p) <= MESSAGE_BYTES for p in parts)
    for part in parts:  # as sent, 20 such claims alone are 26.8 KB: each part carries the ones its markers name
        marks = {int(n) for n in re.findall(r"\[(\d+)\]", part["text"])}
        assert marks and {c["position"] for c in part["entities"][0]["citation"]} == marks
    assert " ".join(p["text"] for p in parts).split() == cited_text(Answer(body, sources)).text.split()


async def the_one_streamed_answer(teams: Teams) -> tuple[Any, Recorded]:
    """Ask in a personal chat (the outbox retrying soon) once the channel is set to misbehave; the delivered
    row, and the one message the chat shows, which must be the end of the stream the answer was written into."""
    teams.service.outbox.post_policy = replace(teams.service.outbox.post_policy, backoff_s=0.05)
    teams.model.script(
        tool_calls(("search_policies", {"query": "annual leave days"})), long_answer_citing_first_passage()
    )
    activity = teams.channel.personal_message("How many vacation days do I get?")
    await teams.post(activity)
    (row,) = await teams.delivered(conversation_key_of(activity))
    await teams.settle()
    (answer,) = teams.channel.messages()
    assert (stream_info(answer) or {}).get("streamType") == "final" and answer.text.startswith("You get 25 days")
    return row, answer


async def test_a_final_message_whose_answer_was_lost_is_not_posted_again(teams: Teams):
    """Teams took the stream's final but the connection dropped before it said so: the outbox's retry ends the
    same stream, Teams answers that it is already ended, and the answer is not posted a second time."""
    teams.channel.lose_answer_next()
    row, _answer = await the_one_streamed_answer(teams)
    assert row.attempts == 2 and [(r.status, r.streamed) for r in teams.channel.refusals] == [(403, True)]


async def test_a_final_message_refused_for_now_ends_the_same_stream_on_the_outboxs_retry(teams: Teams):
    """A busy channel refuses the final longer than one attempt retries: the outbox's next attempt ends the
    stream the answer was written into, rather than posting the answer beside it as a plain message."""
    refusals = SEND_RETRY.attempts + 1
    teams.channel.refuse_next(503, times=refusals, retry_after="0")
    row, _answer = await the_one_streamed_answer(teams)
    assert row.attempts == 2 and [r.streamed for r in teams.channel.refusals] == [True] * refusals


async def test_a_run_that_fails_for_good_ends_its_progress_stream_with_the_apology(
    teams: Teams, monkeypatch: pytest.MonkeyPatch
):
    """The run's progress line is a stream, and Teams has one stream per chat: the apology for a run that failed
    ends it (no progress line left spinning beside the apology), and the next question gets a stream of its own."""
    teams.service.inbox.max_attempts = 1  # fail for good at once

    async def broken(inbound: Any, cancel: Any = None, progress: Any = None) -> Any:
        raise RuntimeError("database down")

    with monkeypatch.context() as patched:
        patched.setattr(teams.service, "handle_message", broken)
        await teams.post(teams.channel.personal_message("How many vacation days do I get?"))
        apology = await teams.reply()
        await teams.settle()
    assert apology.text.startswith("Sorry, something went wrong")
    (stream,) = teams.channel.streams.values()
    assert stream.final is not None and stream.final["text"] == apology.text
    assert (stream_info(apology) or {}).get("streamType") == "final"

    teams.model.script(text("You get 25 days a year."))
    await teams.post(teams.channel.personal_message("And now?"))
    answer = await teams.reply(count=2)
    await teams.settle()
    assert answer.text == "You get 25 days a year."
    assert len(teams.channel.streams) == 2 and all(s.final is not None for s in teams.channel.streams.values())


@pytest.mark.parametrize("misbehaving", ["answer lost", "refused for now"])
async def test_a_ticket_card_that_ends_the_progress_stream_is_posted_once_on_the_outboxs_retry(
    teams: Teams, misbehaving: str
):
    """A card in a personal chat ends the stream the run's progress began. A final that Teams took without
    saying so, or refused for longer than one attempt retries, is not posted again beside the stream as a
    plain message (a second ticket card, or a progress line never ended): the outbox's retry ends that stream."""
    teams.service.outbox.post_policy = replace(teams.service.outbox.post_policy, backoff_s=0.05)
    if misbehaving == "answer lost":
        teams.channel.lose_answer_next()
    else:
        teams.channel.refuse_next(503, times=SEND_RETRY.attempts, retry_after="0")
    teams.model.script(tool_calls(("create_it_ticket", TICKET), content="I can raise a ticket for this."))
    activity = teams.channel.personal_message("my VPN says NG-809, please open a ticket")
    await teams.post(activity)
    (row,) = await teams.delivered(conversation_key_of(activity))
    await teams.settle()
    (posted,) = teams.channel.messages()
    (stream,) = teams.channel.streams.values()
    assert (stream_info(posted) or {}).get("streamType") == "final" and stream.final is not None
    assert posted.cards[0]["actions"][0]["verb"] == "confirm" and row.attempts == 2
    (pending,) = await teams.service.store.pending.find("open")
    assert pending.platform_message["activity_id"] == posted.id  # the card the person sees is the one clicks update


# --- a vote the database does not take ----------------------------------------------------------------


@pytest.fixture
async def teams_quick_to_give_up(
    tmp_path: Path, fake_openai: FakeOpenAI, sample_index: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Teams]:
    """The Teams app with SQLite waiting 0.2 s for a write lock, not 5 s, so a held lock fails a write fast."""
    monkeypatch.setattr("bot.store.engine.SQLITE_BUSY_TIMEOUT_MS", 200)
    async for harness in running_teams(tmp_path, fake_openai, sample_index, monkeypatch):
        yield harness


async def answered(teams: Teams) -> tuple[Recorded, str]:
    """A personal chat's answer, delivered, and the id of the run that wrote it."""
    teams.model.script(text("You get 25 days a year."))
    activity = teams.channel.personal_message("How many vacation days do I get?")
    await teams.post(activity)
    reply = await teams.reply()
    await teams.delivered(conversation_key_of(activity))
    (run,) = await teams.service.store.runs.of_conversation(conversation_key_of(activity), limit=1)
    return reply, run.id


def teams_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("adapters.teams") and r.levelno >= logging.ERROR]


async def test_a_vote_the_database_will_not_write_is_answered_500_and_logged_with_its_run(
    teams_quick_to_give_up: Teams, caplog: pytest.LogCaptureFixture
):
    """Another process holds SQLite's write lock: the run is found (reads go on) but the vote is not saved."""
    teams = teams_quick_to_give_up
    reply, run_id = await answered(teams)
    holder = sqlite3.connect(teams.settings.data_dir / "policypal.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock, held as a long transaction elsewhere would
        with caplog.at_level(logging.ERROR, logger="adapters.teams"):
            vote = teams.channel.feedback("dislike", on=reply, comment="wrong, my token is xoxb-1234567890-abcdefghij")
            status, body = await teams.post(vote)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert status == 500  # not 501 "not implemented", and not a 200 that pretends it was saved
    assert body["error"]["code"] == "FeedbackNotSaved" and body["error"]["message"]
    (error,) = teams_errors(caplog)
    assert run_id in error.getMessage() and reply.id in error.getMessage()
    assert "xoxb-1234567890" not in caplog.text
    assert (await teams.service.store.runs.get(run_id)).feedback is None


async def test_a_vote_while_the_database_is_gone_is_answered_500_and_logged(
    teams: Teams, caplog: pytest.LogCaptureFixture
):
    """The database file removed under the app: even the answer the vote is on cannot be looked up."""
    reply, _ = await answered(teams)
    for path in teams.settings.data_dir.glob("policypal.db*"):
        path.unlink()
    await teams.service.store.close()  # its connections held the old file open; new ones find no tables
    with caplog.at_level(logging.ERROR, logger="adapters.teams"):
        status, body = await teams.post(teams.channel.feedback("like", on=reply))
    assert status == 500 and body["error"]["code"] == "FeedbackNotSaved"
    (error,) = teams_errors(caplog)
    assert reply.id in error.getMessage()


async def test_a_feedback_button_the_database_will_not_write_tells_the_clicker_who_can_click_again(
    teams_quick_to_give_up: Teams, caplog: pytest.LogCaptureFixture
):
    """Helpful on an answer's card (cards posted before Teams' own thumbs have the buttons), clicked while another
    process holds SQLite's write lock. Teams never delivers an ``adaptiveCard/action`` again: a 503 left the
    clicker with nothing, and the log said it would come again."""
    teams = teams_quick_to_give_up
    reply, run_id = await answered(teams)
    helpful = next(a["data"] for a in cards.feedback_card(run_id)["actions"] if a["data"].get("value") == "helpful")
    click = teams.channel.card_action(cards.FEEDBACK, helpful, on=reply)
    holder = sqlite3.connect(teams.settings.data_dir / "policypal.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with caplog.at_level(logging.ERROR, logger="adapters.teams"):
            status, body = await teams.post(click)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert status == 200, body  # the invoke is answered with what Teams shows the clicker; the card stays
    assert body == {"statusCode": 200, "type": cards.MESSAGE_CONTENT_TYPE, "value": cards.FEEDBACK_NOT_SAVED_TEXT}
    (error,) = teams_errors(caplog)  # one line, naming the run and the message it is on
    assert run_id in error.getMessage() and reply.id in error.getMessage()
    assert (await teams.service.store.runs.get(run_id)).feedback is None

    status, body = await teams.post({**click, "id": "in-again"})  # its buttons are still there: clicked again
    assert status == 200 and body == cards.invoke_card(cards.feedback_card(run_id, "Thanks for the feedback."))
    stored = await teams.service.store.runs.get(run_id)
    assert (stored.feedback, stored.feedback_by) == ("helpful", ALICE["aadObjectId"])
