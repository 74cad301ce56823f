"""Pure Teams mapping: activities -> Inbound and thread, outcomes -> Markdown and Adaptive Card JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest

from adapters.teams import cards
from adapters.teams.activity import (
    addressed_to_bot,
    channel_and_thread,
    deep_link,
    question_text,
    reference_of,
    to_inbound,
    user_of,
)
from bot.cards import CardView
from bot.identity import GroupMap
from bot.types import Answer, Citation, GaveUp, PendingAction, TerminationReason, UserRef
from tests.fakes.bot_connector import ALICE, BOT_ID, CHANNEL, TENANT, FakeBotConnector

CHANNEL_SIDE = FakeBotConnector()
EXPIRES = datetime(2030, 1, 2, 3, 4, tzinfo=UTC)


def action(**arguments) -> PendingAction:
    arguments = arguments or {"category": "hardware", "summary": "Laptop screen cracked", "urgency": "normal"}
    return PendingAction("p-1", "create_it_ticket", arguments, "h" * 32, "aad-alice", "Shall I?", EXPIRES)


# --- activities -----------------------------------------------------------------------------------


def test_a_channel_reply_belongs_to_its_root_thread():
    activity = CHANNEL_SIDE.channel_message("hello", root="1700000")
    assert channel_and_thread(activity) == (CHANNEL, "1700000")
    assert reference_of(activity)["conversation"]["id"] == f"{CHANNEL};messageid=1700000"


def test_a_channel_post_without_the_marker_is_rooted_at_itself():
    activity = CHANNEL_SIDE.channel_message("hello")
    activity["conversation"]["id"] = CHANNEL
    assert channel_and_thread(activity) == (CHANNEL, activity["id"])


def test_a_chat_is_its_own_thread():
    activity = CHANNEL_SIDE.personal_message("hi")
    conversation = activity["conversation"]["id"]
    assert channel_and_thread(activity) == (conversation, conversation)
    assert reference_of(activity)["conversation"]["id"] == conversation


BOT = "<at>PolicyPal</at>"
RND = "<at>R&amp;D Bot</at>"  # a name with "&", as Teams writes it into the text


@pytest.mark.parametrize(
    ("name", "mention_text", "text", "question"),
    [
        ("PolicyPal", BOT, f"{BOT} ask <at>Bob</at> about laptops", "ask Bob about laptops"),
        ("PolicyPal", BOT, f"Hi {BOT}, what's the VPN policy?", "Hi, what's the VPN policy?"),
        ("PolicyPal", BOT, f"{BOT} what is X", "what is X"),
        ("PolicyPal", BOT, f"{BOT}, what is X?", "what is X?"),
        ("PolicyPal", BOT, f"What is X, {BOT}?", "What is X?"),
        ("PolicyPal", BOT, f"Thanks {BOT}!", "Thanks!"),
        ("PolicyPal", BOT, f"ask <at>Bob</at>, then {BOT}: is it ok?", "ask Bob, then: is it ok?"),
        ("PolicyPal", None, f"{BOT} what is X", "what is X"),  # an entity with the bot's name only
        ("R&D Bot", RND, f"{RND} who approves travel?", "who approves travel?"),
        ("R&D Bot", "<at>R&D Bot</at>", f"{RND} who approves travel?", "who approves travel?"),
        ("R&D Bot", RND, "Hi <at>R&amp;D&nbsp;Bot</at>, who approves travel?", "Hi, who approves travel?"),
        ("PolicyPal", BOT, f"{BOT} ask <at>R&amp;D Team</at> and <at>Bob</at>", "ask R&D Team and Bob"),
    ],
)
def test_only_the_bots_mention_is_removed_however_escaped_and_the_text_around_it_reads_as_typed(
    name: str, mention_text: str | None, text: str, question: str
):
    activity = CHANNEL_SIDE.channel_message("x")
    bot = {"type": "mention", "mentioned": {"id": BOT_ID, "name": name}}
    if mention_text is not None:
        bot["text"] = mention_text
    activity["text"] = text
    activity["entities"] = [bot, {"type": "mention", "mentioned": {"id": "29:bob"}, "text": "<at>Bob</at>"}]
    assert question_text(activity) == question


def test_teams_html_and_entities_never_reach_the_question():
    """Teams sends the text as HTML: ``&nbsp;`` after a mention, paragraphs, entities for what people typed."""
    activity = CHANNEL_SIDE.channel_message("x")
    activity["text"] = ("<p><at>PolicyPal</at>&nbsp;Can I expense a <b>taxi</b> &amp; a hotel?</p>"
                        "<p>Costs&nbsp;&lt; 50&nbsp;EUR<br>ask&nbsp;<at>Bob</at> about re<i>imburse</i>ment</p>")
    activity["entities"].append({"type": "mention", "mentioned": {"id": "29:bob"}, "text": "<at>Bob</at>"})
    assert question_text(activity) == "Can I expense a taxi & a hotel? Costs < 50 EUR ask Bob about reimbursement"


def test_text_that_only_looks_like_markup_is_kept():
    activity = CHANNEL_SIDE.personal_message("is 3<5 and a <-> b, see <url> in a&b")
    assert question_text(activity) == "is 3<5 and a <-> b, see <url> in a&b"


def test_group_chats_need_a_mention_of_this_bot():
    activity = CHANNEL_SIDE.activity({"id": "19:g@thread.v2", "conversationType": "groupChat"}, ALICE, text="hi")
    assert not addressed_to_bot(activity)
    activity["entities"] = [{"type": "mention", "mentioned": {"id": "28:other-bot"}, "text": "<at>Other</at>"}]
    assert not addressed_to_bot(activity)
    activity["entities"].append({"type": "mention", "mentioned": {"id": BOT_ID}, "text": "<at>PolicyPal</at>"})
    assert addressed_to_bot(activity)


def test_identity_comes_from_the_activity_and_the_roster():
    groups = GroupMap({"alice@contoso.example": ["managers"], "aad-bob": ["it"]})
    activity = CHANNEL_SIDE.personal_message("hi")
    member = {"email": "alice@contoso.example", "userRole": "guest"}
    user = user_of(activity, groups, member)
    assert user == UserRef("aad-alice", "Alice Example", "alice@contoso.example", ("all", "managers"), is_guest=True)
    assert user_of(activity, groups).groups == ("all",)


def test_inbound_carries_tenant_channel_thread_and_event_id():
    activity = CHANNEL_SIDE.channel_message("Can I expense a taxi?", root="1700000")
    inbound = to_inbound(activity, UserRef("aad-alice"))
    assert (inbound.platform, inbound.tenant, inbound.channel, inbound.thread) == ("teams", TENANT, CHANNEL, "1700000")
    assert inbound.text == "Can I expense a taxi?" and inbound.event_id.startswith(activity["id"] + "@")
    assert inbound.conversation_key == f"teams:{TENANT}:{CHANNEL}:1700000"


def test_the_event_id_is_the_activity_id_within_its_conversation():
    """Activity ids are unique only within a conversation (channel ids are epoch milliseconds)."""
    here = CHANNEL_SIDE.personal_message("hi")
    there = {**here, "conversation": {**here["conversation"], "id": "a:" + "x" * 300}}
    again = json.loads(json.dumps(here))  # a redelivery: the same activity, parsed again
    ids = [to_inbound(activity, UserRef("aad-alice")).event_id for activity in (here, again, there)]
    assert ids[0] == ids[1] != ids[2]
    assert len(f"teams:{ids[2]}") <= 255  # the store's limit, however long the conversation id


def test_deep_links_open_the_message_in_teams():
    channel = CHANNEL_SIDE.channel_message("x", root="1700000")
    channel["channelData"]["team"]["aadGroupId"] = "group-guid"
    url = urlsplit(deep_link(channel))
    assert url.path == f"/l/message/19%3Ageneral%40thread.tacv2/{channel['id']}"
    assert parse_qs(url.query) == {"tenantId": [TENANT], "parentMessageId": ["1700000"], "groupId": ["group-guid"]}
    chat = urlsplit(deep_link(CHANNEL_SIDE.personal_message("x")))
    assert json.loads(parse_qs(chat.query)["context"][0]) == {"contextType": "chat"}


# --- replies --------------------------------------------------------------------------------------


def test_cited_policies_are_links_when_they_have_a_url():
    answer = Answer(
        "Yes [Expenses › Taxis].",
        (
            Citation("Expenses", "Taxis", "https://intranet.example/expenses"),
            Citation("Leave", "Vacation", "examples/policies/leave.md"),
        ),
    )
    text = cards.answer_markdown(answer)
    assert text.startswith("Yes [Expenses › Taxis].\n\n**Sources**\n\n")
    assert "- [Expenses › Taxis](https://intranet.example/expenses)" in text
    assert "- Leave › Vacation (examples/policies/leave.md)" in text


def test_an_answer_is_markdown_with_a_feedback_card():
    activity = cards.reply_activity(Answer("Hi"), "run_1")
    assert activity["textFormat"] == "markdown" and activity["text"] == "Hi"
    (attachment,) = activity["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    data = [button["data"] for button in attachment["content"]["actions"]]
    assert data == [
        {"run_id": "run_1", "value": "helpful"},
        {"run_id": "run_1", "value": "not_helpful"},
        {"run_id": "run_1"},
    ]


def test_a_reply_that_opened_a_case_has_nothing_to_rate():
    answer = Answer("Sure. I've passed this to the helpdesk.")
    assert cards.reply_activity(answer, "HD-1001", from_a_run=False) == cards.message(answer.text)


def test_a_notice_names_its_case_once_and_a_recovered_runs_give_up_has_its_reference():
    assert cards.notice_activity("Passed on.", case_id="HD-7")["text"] == "Passed on. (case **HD-7**)"
    assert cards.notice_activity("Case HD-7 is open.", case_id="HD-7")["text"] == "Case HD-7 is open."
    recovered = cards.notice_activity("I was restarted.", run_id="run_1", case_id="HD-8")
    assert "`run_1`" in recovered["text"] and "HD-8" in recovered["text"] and "attachments" not in recovered


def test_a_give_up_shows_the_reference_and_the_case_or_a_way_to_the_helpdesk():
    with_case = cards.gave_up_activity("run_9", GaveUp(TerminationReason.DEADLINE, case_id="HD-3"))
    assert "`run_9`" in with_case["text"] and "HD-3" in with_case["text"] and "attachments" not in with_case
    without = cards.gave_up_activity("run_9", GaveUp(TerminationReason.DEADLINE))
    assert without["attachments"][0]["content"]["actions"][0]["verb"] == "handoff"


# --- the ticket card ------------------------------------------------------------------------------


def test_the_pending_card_shows_the_frozen_arguments_literally_never_as_markdown():
    summary = "**Approved by IT** [click to verify](https://evil.example/login)"
    card = cards.pending_card(action(category="access", summary=summary, urgency="high"), "Alice Example")
    shown = [b for b in card["body"] if summary in json.dumps(b, ensure_ascii=False)]
    assert [block["type"] for block in shown] == ["RichTextBlock"]  # TextRuns: Teams renders no Markdown there
    assert shown[0]["inlines"][-1] == {"type": "TextRun", "text": summary}
    assert "FactSet" not in json.dumps(card)


def test_the_requesters_name_and_a_refused_clicks_notice_are_shown_as_typed_never_as_markdown():
    """A display name is typed by a person: in a TextBlock, Teams would render it as Markdown (a link, bold)."""
    name = "**IT Service Desk** [verify here](https://evil.example/login)"
    card = cards.pending_card(action(), name)
    notice = cards.notice_card(f"Only {name} can confirm this.")
    for built in (card, notice):
        markdown_read = [b for b in built["body"] if b["type"] == "TextBlock"]
        assert "evil.example" not in json.dumps(markdown_read)
    shown = [run["text"] for b in card["body"] if b["type"] == "RichTextBlock" for run in b["inlines"]]
    assert f"Only {name} can confirm · expires 2030-01-02 03:04 UTC" in shown
    assert notice["body"][0]["inlines"] == [{"type": "TextRun", "text": f"Only {name} can confirm this."}]


def test_the_pending_card_buttons_carry_ids_and_never_the_arguments():
    pending = action(category="hardware", summary="Laptop screen cracked", urgency="normal", details="Dropped it")
    card = cards.pending_card(pending, "Alice Example")
    assert card["version"] == "1.5"
    assert list(cards.card_fields(card).items()) == [
        ("Category", "hardware"),
        ("Summary", "Laptop screen cracked"),
        ("Urgency", "normal"),
        ("Details", "Dropped it"),
    ]
    buttons = json.dumps(card["actions"])
    assert "Laptop screen cracked" not in buttons and "Dropped it" not in buttons
    assert "Only Alice Example can confirm · expires 2030-01-02 03:04 UTC" in json.dumps(card, ensure_ascii=False)


def view(state: str, **fields) -> CardView:
    pending = action()
    decided = {"decider": "aad-alice", "decided_at": EXPIRES} if state != "open" else {}
    return CardView(pending.id, pending.args_hash, pending.tool, pending.text, pending.arguments, pending.requester,
                    state, EXPIRES, **{**decided, **fields})


def names(user_id: str) -> str:
    return {"aad-alice": "Alice"}.get(user_id, user_id)


def state_text(card: dict) -> str:
    (line,) = [b for b in card["body"] if b["type"] == "RichTextBlock" and not cards.card_fields({"body": [b]})][-1:]
    return "".join(run["text"] for run in line["inlines"])


def test_the_decided_card_has_no_buttons_and_says_what_happened_in_the_cores_words():
    done = cards.card_view(view("done", result={"ticket_id": "IT-1001"}), names)
    assert "actions" not in done and cards.card_fields(done) == cards.card_fields(cards.pending_card(action()))
    assert state_text(done) == "✅ Confirmed by Alice at 2030-01-02 03:04 UTC. Ticket IT-1001 created."
    (ticket,) = [run for run in done["body"][-1]["inlines"] if run.get("weight") == "Bolder"]
    assert ticket["text"] == "IT-1001"  # the id in bold, as a TextRun of its own
    assert state_text(cards.card_view(view("cancelled"), names)).endswith("Cancelled by Alice at 2030-01-02 03:04 "
                                                                          "UTC. Nothing was created.")
    assert "expired at 2030-01-02 03:04 UTC" in state_text(cards.card_view(view("expired"), names))
    failed = view("failed", result={"error": "boom"}, case_id="HD-1002")
    assert "but it failed: boom. Helpdesk case HD-1002 will follow up." in state_text(cards.card_view(failed, names))
    working = cards.card_view(view("working", choice="confirm"), names)
    assert "actions" not in working and "Alice clicked Confirm at 2030-01-02 03:04 UTC. Working on it…" in (
        state_text(working)
    )


def test_an_open_card_as_it_stands_is_the_card_with_its_buttons():
    assert cards.card_view(view("open"), names) == cards.pending_card(action(), "Alice")
    refused = cards.card_view(view("open"), names, notice="Only Alice can confirm this.")
    assert refused["actions"] == cards.pending_card(action(), "Alice")["actions"]
    assert "Only Alice can confirm this." in json.dumps(refused)


def test_the_state_sentence_never_formats_itself_as_markdown():
    """A ticket system's error can echo what the model wrote: in a TextBlock it would be read as Markdown."""
    error = "**Approved by IT** [click to verify](https://evil.example/login)"
    card = cards.card_view(view("failed", result={"error": error}), names)
    text_blocks = [b for b in card["body"] if b["type"] == "TextBlock"]
    assert "evil.example" not in json.dumps(text_blocks)
    assert error in state_text(card)
