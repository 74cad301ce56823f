"""What keeps secrets out of transcripts, and what keeps transcripts small."""

from __future__ import annotations

import json
from dataclasses import replace

from adapters.slack.helpdesk import MAX_THREAD_MESSAGES, transcript_chunks
from bot.helpdesk import asks_for_human
from bot.redaction import REDACTED, Redactor, bounded
from tests.bot.helpdesk.test_destinations import CASE, STEP
from tests.bot.helpers import ask, service
from tests.fakes.openai_server import text as answer
from tests.fakes.openai_server import tool_calls


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


def test_a_password_after_is_colon_or_dash_is_redacted_and_prose_after_them_is_not():
    redactor = Redactor()
    for said, kept in [
        ("my password is: Hunter2Hunter2", "my password is: "),
        ("password - Hunter2Hunter2", "password - "),
        ("My password is hunter2hunter2", "My password is "),
        ("pwd = Hunter2Hunter2", "pwd = "),
        ("my PIN password is 1234", "my PIN password is "),
        ("my token is 9f8e7d6c5b4a", "my token is "),
        ("my password is sunshine", "my password is "),
    ]:
        assert redactor.text(said) == kept + REDACTED, said
    for prose in (
        "the password policy is strict",
        "reset your password - see the portal",
        "my password is not working",
        "the password is case-sensitive.",
        "a password-protected file",
        "the token - it expired",
        "my password is expired and the new password is too short",
        "my password is Wrong according to the portal",
    ):
        assert redactor.text(prose) == prose


def test_a_password_in_a_url_is_redacted_keeping_scheme_user_and_host():
    redactor = Redactor()
    said = "our db is postgres://admin:Pr0dPassw0rd@db.internal/prod, cache redis://:s3cret@cache:6379/0"
    assert redactor.text(said) == (
        f"our db is postgres://admin:{REDACTED}@db.internal/prod, cache redis://:{REDACTED}@cache:6379/0"
    )
    for url in ("ssh://git@github.com/acme/x", "https://intranet.example.com:8443/docs/it@home"):
        assert redactor.text(url) == url


def test_an_authorization_header_of_any_scheme_loses_its_credential():
    redactor = Redactor()
    for header, kept in [
        ("Authorization: Token abcdef0123456789abcdef", "Authorization: "),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: "),
        ("authorization=SSWS 00QCjAl4MlV-WPXM-ABCDEF", "authorization="),
        ("Proxy-Authorization: Negotiate YIIGhgYGKwYBBQUCoIIGejCCBnag", "Proxy-Authorization: "),
    ]:
        assert redactor.text(f"curl -H '{header}' x") == f"curl -H '{kept}{REDACTED}' x", header
    for prose in ("Authorization: manager approval needed", "authorization is required for travel"):
        assert redactor.text(prose) == prose


def test_gitlab_google_and_slack_webhook_credentials_are_redacted():
    redactor = Redactor()
    for sample in (
        "glpat-abcdefghijklmnopqrst",
        "AIzaSyA-abcdefghijklmnopqrstuvwxyz12345",
        "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX",
    ):
        assert redactor.text(f"x {sample} y") == f"x {REDACTED} y", sample


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


async def test_traces_keep_no_secret_a_user_pasted(tmp_path, fake_openai, sample_index):
    pasted = "vpn fails, my password: Sup3rS3cret!9 and token xoxb-1234567890-abcdefghij"
    fake_openai.script(tool_calls(("search_policies", {"query": pasted})), answer("Use the VPN guide."))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, pasted)
        row = await svc.store.runs.get(reply.run_id)
    stored = json.dumps([row.question, row.trace])
    assert "Sup3rS3cret!9" not in stored and "xoxb-1234567890" not in stored
    assert row.question.startswith("vpn fails, my password: [redacted]")


def test_environment_variable_and_json_assignments_lose_their_value():
    redactor = Redactor()
    for said, kept in [
        ("DB_PASSWORD=Hunter2Hunter2", "DB_PASSWORD="),
        ("export OPENAI_API_KEY=abcd1234efgh5678", "export OPENAI_API_KEY="),
        ("GITHUB_TOKEN: 0123abcd4567", "GITHUB_TOKEN: "),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "AWS_SECRET_ACCESS_KEY="),
        ("my .env has auth_token=plainword", "my .env has auth_token="),
    ]:
        assert redactor.text(said) == kept + REDACTED, said
    pasted = '{"user": "bob", "password": "hunter2", "api_key": "plain"}'
    assert redactor.text(pasted) == f'{{"user": "bob", "password": "{REDACTED}", "api_key": "{REDACTED}"}}'
    for prose in ("max_tokens: 800", "input_tokens=120", "the password_policy is strict"):
        assert redactor.text(prose) == prose


def test_a_password_named_for_what_it_opens_is_redacted_and_prose_about_it_is_not():
    redactor = Redactor()
    for said, kept in [
        ("the password for wifi is Guest2024", "the password for wifi is "),
        ("my password for the Okta portal is Sunshine99!", "my password for the Okta portal is "),
        ("my pin for the door is 4711", "my pin for the door is "),
    ]:
        assert redactor.text(said) == kept + REDACTED, said
    for prose in (
        "the password for the portal is expired",
        "my password for email is not working",
        "the password for wifi is on the wall",
        "the password for guests is rotated monthly",
    ):
        assert redactor.text(prose) == prose
