"""What keeps secrets out of transcripts, and what keeps transcripts small."""

from __future__ import annotations

from dataclasses import replace

from adapters.slack_helpdesk import MAX_THREAD_MESSAGES, transcript_chunks
from bot.handoff import asks_for_human
from bot.redaction import REDACTED, Redactor, bounded
from tests.bot.test_handoff_destinations import CASE, STEP


def test_configured_secret_values_are_redacted_wherever_they_appear():
    redactor = Redactor(["corp-smtp-pass-99", None, "abc"])  # too short to redact safely: ignored
    assert redactor.text("login with corp-smtp-pass-99 now, abc") == f"login with {REDACTED} now, abc"


def test_credential_shapes_are_redacted_without_configuration():
    redactor = Redactor()
    samples = [
        "sk-proj-AbCdEfGhIjKlMnOpQrSt",
        "xoxb-123456789-abcdefghij",
        "xapp-1-A0APP-123-abcdef",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "AKIAABCDEFGHIJKLMNOP",
        "Bearer abc.def.ghi-jkl_mno",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
    ]
    for sample in samples:
        assert redactor.text(f"x {sample} y") == f"x {REDACTED} y", sample
    assert redactor.text("password: hunter2!") == f"password: {REDACTED}"
    assert redactor.text("my password is hunter2!") == f"my password is {REDACTED}"
    assert redactor.text("the password reset policy") == "the password reset policy"


def test_mapping_keys_that_name_a_secret_lose_their_value_but_counts_stay():
    value = {"api_key": "plain", "Authorization": "x", "input_tokens": 12, "nested": [{"client_secret": "s"}]}
    assert Redactor().value(value) == {
        "api_key": REDACTED,
        "Authorization": REDACTED,
        "input_tokens": 12,
        "nested": [{"client_secret": REDACTED}],
    }


def test_bounded_text_says_how_much_was_cut():
    assert bounded("abcdef", 10) == "abcdef"
    assert bounded("a" * 30, 10) == "a" * 10 + "…[truncated: 20 more characters]"


def test_a_very_long_transcript_is_capped_in_slack_with_a_pointer_to_the_full_one():
    long_case = replace(CASE, transcript={"runs": [{"trace": [STEP] * 5_000}]})
    chunks = transcript_chunks(long_case)
    assert len(chunks) == MAX_THREAD_MESSAGES
    assert all(len(c) <= 4_000 for c in chunks)
    assert chunks[-1].endswith("the whole transcript is `policypal handoffs HD-1001`)")


def test_requests_for_a_person_are_recognised_and_policy_questions_are_not():
    for text in ("I want a human", "can I talk to someone?", "helpdesk please", "I need a real person"):
        assert asks_for_human(text), text
    for text in ("what is the human resources policy?", "who approves travel?", "how do I reset my password"):
        assert not asks_for_human(text), text
