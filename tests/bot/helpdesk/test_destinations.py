"""Handoff destinations through their real clients: webhook (HMAC), email (SMTP) and a Slack channel."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError

from adapters.slack.helpdesk import SlackChannelDestination, transcript_chunks
from bot.delivery import SIGNATURE_HEADER, Outbox, OutboxPolicy
from bot.errors import RemoteError
from bot.helpdesk import CaseDeliveries, Destination, EmailDestination, HandoffCase, Helpdesk, WebhookDestination
from bot.store import Store, utcnow
from bot.types import UserRef
from tests.databases import Database
from tests.fakes.helpdesk_servers import FakeSMTP, FakeWebhook, stall, status
from tests.fakes.slack_api import FakeSlackAPI

ALICE = UserRef("U_ALICE", "Alice", "alice@example.com")
LINK = "https://acme.slack.com/archives/C0GENERAL/p1711000000000100"
RETRY_SOON = OutboxPolicy(max_attempts=3, backoff_s=30, deliver_timeout_s=2.0)
STEP = {"kind": "tool", "name": "search_policies", "arguments": '{"query": "taxi"}', "text": "{...}", "latency_ms": 3}
CASE = HandoffCase(
    case_id="HD-1001",
    created_at=datetime(2025, 3, 4, 9, 30, tzinfo=UTC),
    reason="step_budget",
    user=ALICE,
    platform="slack",
    channel="C0GENERAL",
    thread="1711000000.000100",
    link=LINK,
    question="How do I expense a taxi <at night>?",
    transcript={"runs": [{"run_id": "run_1", "reason": "step_budget", "question": "taxi?", "trace": [STEP] * 3}]},
)


def later(seconds: float):
    return lambda: utcnow() + timedelta(seconds=seconds)


def case_outbox(store: Store, destinations: list[Destination], policy: OutboxPolicy, **kwargs: Any) -> Outbox:
    """The outbox as the wiring builds it: case rows sent through ``CaseDeliveries`` to these destinations."""
    return Outbox(store, [CaseDeliveries(store, destinations)], policy, **kwargs)


async def queued(tmp_path, destination_name: str) -> Store:
    """A store holding one case with an outbox row for ``destination_name``."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'outbox.db'}")
    await Helpdesk(store, [destination_name]).open_case(
        origin="run:r1", reason="step_budget", user=ALICE, conversation_key="slack:T:C:1", question="taxi?"
    )
    return store


# --- webhook ------------------------------------------------------------------------------------


async def test_webhook_posts_the_case_signed():
    async with FakeWebhook() as hook:
        destination = WebhookDestination(f"{hook.url}/handoffs", hook.secret)
        ref = await destination.deliver(CASE)
        await destination.aclose()
    (sent,) = hook.requests
    assert (sent.method, sent.path, ref) == ("POST", "/handoffs", "WH-1")
    assert sent.headers[SIGNATURE_HEADER.lower()].startswith("sha256=")
    body = sent.json
    assert body["type"] == "policypal.handoff"
    assert body["idempotency_key"] == sent.headers["idempotency-key"] != "HD-1001"
    assert body["case"]["case_id"] == "HD-1001" and body["case"]["link"] == LINK
    assert body["case"]["user"] == {"id": "U_ALICE", "name": "Alice", "email": "alice@example.com"}
    assert body["markdown"].startswith("# HD-1001: ran out of steps")


async def test_webhook_with_a_wrong_secret_or_a_4xx_raises_the_receivers_error():
    async with FakeWebhook() as hook:
        wrong = WebhookDestination(hook.url, "not-the-secret")
        with pytest.raises(RemoteError, match=r"\(401\): bad signature"):
            await wrong.deliver(CASE)
        hook.script(status(400, {"error": {"message": "unknown queue"}}))
        right = WebhookDestination(hook.url, hook.secret)
        with pytest.raises(RemoteError, match=r"rejected the request \(400\): unknown queue"):
            await right.deliver(CASE)
        await wrong.aclose()
        await right.aclose()


async def test_webhook_5xx_then_success_through_the_outbox(tmp_path):
    store = await queued(tmp_path, "webhook")
    async with FakeWebhook() as hook:
        hook.script(status(503, "Service Unavailable"))
        destination = WebhookDestination(hook.url, hook.secret)
        (first,) = await case_outbox(store, [destination], RETRY_SOON).run_once()
        (second,) = await case_outbox(store, [destination], RETRY_SOON, clock=later(31)).run_once()
        await destination.aclose()
    await store.close()
    assert first.status == "retrying" and "server error (503): Service Unavailable" in first.detail
    assert second.status == "delivered" and len(hook.accepted) == 1


async def test_webhook_redirected_to_a_sign_in_page_is_a_failed_attempt_not_a_delivery(tmp_path):
    store = await queued(tmp_path, "webhook")
    async with FakeWebhook() as hook:
        hook.script(status(302, "", Location="/sso/login"))  # a proxy in front of the receiver
        destination = WebhookDestination(f"{hook.url}/handoffs", hook.secret)
        outbox = case_outbox(store, [destination], RETRY_SOON)
        (result,) = await outbox.run_once()
        later_runs = await case_outbox(store, [destination], RETRY_SOON, clock=later(31)).run_once()
        (row,) = await store.outbox.deliveries([1])
        await destination.aclose()
    await store.close()
    # Not delivered, and no retry can change a URL: failed at once, for `policypal handoffs --failed`.
    assert result.status == "failed" and "redirected the request (302) to /sso/login" in result.detail
    assert later_runs == [] and (row.state, row.attempts, row.delivered_at) == ("failed", 1, None)
    assert [(r.method, r.path) for r in hook.requests] == [("POST", "/handoffs")]  # no GET passed off as sent


async def test_webhook_retries_in_another_process_send_the_key_stored_with_the_case(database: Database):
    first_process = await database.open()
    await Helpdesk(first_process, ["webhook"]).open_case(
        origin="run:r1", reason="step_budget", user=ALICE, conversation_key="slack:T:C:1", question="taxi?"
    )
    async with FakeWebhook() as hook:
        hook.script(status(503, "Service Unavailable"))
        destination = WebhookDestination(hook.url, hook.secret)
        (first,) = await case_outbox(first_process, [destination], RETRY_SOON).run_once()
        restarted = await database.open()
        (second,) = await case_outbox(restarted, [destination], RETRY_SOON, clock=later(31)).run_once()
        await destination.aclose()
    (row,) = await restarted.outbox.deliveries([1])
    assert (first.status, second.status) == ("retrying", "delivered")
    assert [sent.headers["idempotency-key"] for sent in hook.requests] == [row.idempotency_key] * 2
    assert uuid.UUID(row.idempotency_key) and row.idempotency_key != "HD-1001"


async def test_webhook_cases_of_two_databases_that_share_a_case_id_are_both_kept(tmp_path):
    # a restore from backup, staging and prod on one receiver, a move to PostgreSQL: HD-1001 again
    async with FakeWebhook() as hook:
        for install, user in (("prod", ALICE), ("restored", UserRef("U_BOB", "Bob"))):
            store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / install}.db")
            case = await Helpdesk(store, ["webhook"]).open_case(
                origin="run:r1", reason="step_budget", user=user, conversation_key="slack:T:C:1", question="?"
            )
            destination = WebhookDestination(hook.url, hook.secret)
            (result,) = await case_outbox(store, [destination], RETRY_SOON).run_once()
            await destination.aclose()
            await store.close()
            assert (case.case_id, result.status) == ("HD-1001", "delivered")
    kept = sorted(body["case"]["user"]["id"] for body in hook.accepted.values())
    assert kept == ["U_ALICE", "U_BOB"]  # the receiver deduped on Idempotency-Key and dropped neither


async def test_webhook_timeout_is_a_failed_attempt(tmp_path):
    store = await queued(tmp_path, "webhook")
    async with FakeWebhook() as hook:
        hook.script(stall(2))
        destination = WebhookDestination(hook.url, hook.secret, timeout_s=0.2)
        (result,) = await case_outbox(store, [destination], RETRY_SOON).run_once()
        await destination.aclose()
    await store.close()
    assert result.status == "retrying" and "did not answer within 0.2 s" in result.detail


# --- email ------------------------------------------------------------------------------------


def mailer(smtp: FakeSMTP, timeout_s: float = 5.0) -> EmailDestination:
    return EmailDestination(
        "127.0.0.1",
        smtp.port,
        sender="policypal@example.com",
        recipients=["helpdesk@example.com", "it@example.com"],
        starttls=False,
        timeout_s=timeout_s,
    )


async def test_email_carries_the_summary_transcript_and_json_and_answers_go_to_the_user():
    with FakeSMTP() as smtp:
        ref = await mailer(smtp).deliver(CASE)
        (message,) = smtp.wait_for(1)
    assert smtp.envelopes == [("policypal@example.com", ["helpdesk@example.com", "it@example.com"])]
    assert message["Subject"] == "[PolicyPal] HD-1001: ran out of steps · How do I expense a taxi <at night>?"
    assert message["Reply-To"] == "alice@example.com"
    assert message["Message-ID"] == ref == f"<hd-1001.{int(CASE.created_at.timestamp())}@policypal>"
    body, attachment = [part for part in message.walk() if not part.is_multipart()]
    text = body.get_payload(decode=True).decode()
    assert text.startswith(CASE.summary_line()) and "# HD-1001: ran out of steps" in text
    assert attachment.get_filename() == "HD-1001.json"
    assert json.loads(attachment.get_payload(decode=True))["case_id"] == "HD-1001"


async def test_email_temporary_failure_then_success_through_the_outbox(tmp_path):
    store = await queued(tmp_path, "email")
    with FakeSMTP() as smtp:
        smtp.fail_next = 1
        destination = mailer(smtp)
        (first,) = await case_outbox(store, [destination], RETRY_SOON).run_once()
        (second,) = await case_outbox(store, [destination], RETRY_SOON, clock=later(31)).run_once()
    await store.close()
    assert first.status == "retrying" and "451" in first.detail and "temporarily unavailable" in first.detail
    assert second.status == "delivered" and len(smtp.messages) == 1


async def test_email_to_a_server_that_stalls_times_out(tmp_path):
    store = await queued(tmp_path, "email")
    with FakeSMTP() as smtp:
        smtp.stall_s = 2
        (result,) = await case_outbox(store, [mailer(smtp, timeout_s=0.3)], RETRY_SOON).run_once()
    await store.close()
    assert result.status == "retrying" and "timed out" in result.detail


async def test_email_the_server_took_is_delivered_even_when_its_goodbye_fails(tmp_path):
    store = await queued(tmp_path, "email")
    with FakeSMTP() as smtp:
        smtp.quit_reply = "421 4.3.2 Service shutting down"  # after 250 for the message itself
        destination = mailer(smtp)
        (first,) = await case_outbox(store, [destination], RETRY_SOON).run_once()
        later_runs = await case_outbox(store, [destination], RETRY_SOON, clock=later(31)).run_once()
    await store.close()
    assert first.status == "delivered" and later_runs == []
    assert len(smtp.messages) == 1


async def test_email_a_refused_recipient_is_retried_alone_and_never_reported_delivered(tmp_path):
    store = await queued(tmp_path, "email")
    with FakeSMTP() as smtp:
        smtp.refuse["it@example.com"] = "450 4.2.1 Mailbox busy, try later"
        destination = mailer(smtp)
        (first,) = await case_outbox(store, [destination], RETRY_SOON).run_once()
        smtp.refuse.clear()
        (second,) = await case_outbox(store, [destination], RETRY_SOON, clock=later(31)).run_once()
    await store.close()
    assert first.status == "retrying" and "it@example.com" in first.detail and "Mailbox busy" in first.detail
    assert second.status == "delivered"
    assert [to for _, to in smtp.envelopes] == [["helpdesk@example.com"], ["it@example.com"]]  # nobody twice


async def test_email_whose_remaining_recipient_was_dropped_from_the_settings_is_delivered(tmp_path):
    # The usual fix for an address the server refuses for good is to remove it; everyone still
    # configured has the email, so the retry has nobody to send to: that is delivered, not a failure.
    store = await queued(tmp_path, "email")
    with FakeSMTP() as smtp:
        smtp.refuse["it@example.com"] = "550 5.1.1 No such user"
        (first,) = await case_outbox(store, [mailer(smtp)], RETRY_SOON).run_once()
        corrected = EmailDestination(
            "127.0.0.1", smtp.port, sender="policypal@example.com", recipients=["helpdesk@example.com"], starttls=False
        )
        (second,) = await case_outbox(store, [corrected], RETRY_SOON, clock=later(31)).run_once()
    await store.close()
    assert first.status == "retrying" and second.status == "delivered", second.detail
    assert [to for _, to in smtp.envelopes] == [["helpdesk@example.com"]]  # nobody twice, nothing empty


# --- Slack channel ------------------------------------------------------------------------------


def fail_the_second_post(destination: SlackChannelDestination) -> None:
    """Slack answers the destination's second chat.postMessage (the first transcript part) with an error."""
    real_post, calls = destination._client.chat_postMessage, []

    async def post(**kwargs):
        calls.append(kwargs)
        if len(calls) == 2:
            raise SlackApiError("boom", {"ok": False, "error": "internal_error"})
        return await real_post(**kwargs)

    destination._client.chat_postMessage = post  # type: ignore[method-assign]


async def test_slack_posts_a_summary_and_the_transcript_in_its_thread():
    async with FakeSlackAPI() as slack:
        destination = SlackChannelDestination.from_token(slack.token, "C0HELPDESK", base_url=slack.base_url)
        ref = await destination.deliver(CASE)
    summary, *thread = slack.calls_to("chat.postMessage")
    assert summary["channel"] == "C0HELPDESK" and summary["text"].startswith(CASE.summary_line()[:20])
    assert "<at night>" in CASE.summary_line() and "&lt;at night&gt;" in summary["text"]  # never a mention or link
    shown = summary.block_text
    assert "HD-1001 · ran out of steps" in shown and "<@U_ALICE> (alice@example.com)" in shown
    assert f"<{LINK}|open the conversation>" in shown and "&lt;at night&gt;" in shown
    assert thread and all(call["thread_ts"] == ref.split("/")[1] for call in thread)
    transcript = "".join(call["text"] for call in thread)
    assert transcript.startswith("```\n# HD-1001: ran out of steps") and "search_policies" in transcript


async def test_slack_resumes_the_thread_after_a_failure_without_a_second_summary():
    long_case = HandoffCase(**{**CASE.__dict__, "transcript": {"runs": [{"trace": [STEP] * 200}]}})
    async with FakeSlackAPI() as slack:
        destination = SlackChannelDestination.from_token(slack.token, "C0HELPDESK", base_url=slack.base_url)
        fail_the_second_post(destination)
        with pytest.raises(SlackApiError):
            await destination.deliver(long_case)
        await destination.deliver(long_case)
    summaries, *thread = slack.calls_to("chat.postMessage")
    assert "thread_ts" not in summaries.params and all("thread_ts" in call.params for call in thread)
    assert [call["text"] for call in thread] == transcript_chunks(long_case)  # each part once, in order
    assert len(thread) > 2


async def test_slack_retries_from_another_process_resume_the_thread_without_a_second_summary(tmp_path):
    store = await queued(tmp_path, "slack")
    async with FakeSlackAPI() as slack:
        crashed = SlackChannelDestination.from_token(slack.token, "C0HELPDESK", base_url=slack.base_url)
        fail_the_second_post(crashed)
        (first,) = await case_outbox(store, [crashed], RETRY_SOON).run_once()
        fresh = SlackChannelDestination.from_token(slack.token, "C0HELPDESK", base_url=slack.base_url)
        later = case_outbox(store, [fresh], RETRY_SOON, clock=lambda: utcnow() + timedelta(seconds=31))
        (second,) = await later.run_once()
    await store.close()
    summary, *thread = slack.calls_to("chat.postMessage")
    assert (first.status, second.status) == ("retrying", "delivered")
    assert "thread_ts" not in summary.params and thread and all("thread_ts" in call.params for call in thread)
    assert "".join(call["text"] for call in thread).startswith("```\n# HD-1001")


async def test_a_delivery_taken_over_mid_way_stops_and_records_nothing_over_the_new_claim(tmp_path):
    store = await queued(tmp_path, "slack")
    async with FakeSlackAPI() as slack:
        slow = SlackChannelDestination.from_token(slack.token, "C0HELPDESK", base_url=slack.base_url)
        real_post = slow._client.chat_postMessage

        async def post_then_lose_the_claim(**kwargs):  # we stalled so long that another worker took over
            response = await real_post(**kwargs)
            (row,) = await store.outbox.deliveries([1])
            later = utcnow() + timedelta(hours=1)
            assert await store.outbox.claim(row.id, "other-worker", later, later) == 2
            return response

        slow._client.chat_postMessage = post_then_lose_the_claim  # type: ignore[method-assign]
        results = await case_outbox(store, [slow], RETRY_SOON).run_once()
        (row,) = await store.outbox.deliveries([1])
    await store.close()
    assert results == []  # neither "retrying" nor "delivered": the other worker reports it
    assert (row.state, row.claimed_by, row.attempts, row.external_ref) == ("sending", "other-worker", 2, None)
    assert len(slack.calls_to("chat.postMessage")) == 1  # it stopped at the summary


async def test_slack_errors_are_raised_for_the_outbox_to_record(tmp_path):
    store = await queued(tmp_path, "slack")
    async with FakeSlackAPI() as slack:
        slack.fail("chat.postMessage", "not_in_channel")
        destination = SlackChannelDestination.from_token(slack.token, "C0HELPDESK", base_url=slack.base_url)
        (result,) = await case_outbox(store, [destination], RETRY_SOON).run_once()
    await store.close()
    assert result.status == "retrying" and "not_in_channel" in result.detail
