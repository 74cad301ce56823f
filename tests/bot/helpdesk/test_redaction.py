"""What keeps secrets out of transcripts, and what keeps transcripts small."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

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
    for text in (
        "I want a human",
        "can I talk to someone?",
        "helpdesk please",
        "I need a real person",
        "can I talk to a human?",
        "I want to speak to someone",
        "human please",
        "let me talk to the helpdesk",
        "I need to talk to someone",
        "Do I need to talk to someone in HR? I want a human now",  # the request after the question still counts
        "why do I have to use a bot, let me talk to a human",
        "what's the leave policy? actually just let me talk to a human",  # asked by name: always a request
        "my laptop died. I need to talk to someone",
        # a vague "someone" beside small talk or a question about the request itself is still a request
        "Hello? I need to talk to someone",
        "I need to talk to someone. Can you connect me?",
        "Can I talk to someone? Is that possible?",
        "hey are you there? pls let me speak to someone",
        "Do I need to talk to someone in HR? I need to talk to someone",
        "I need to talk to someone re. my contract?",
        # taking up the answers' own offer ("I'll pass your question on")
        "yes please pass it on",
        "ok, send it to the helpdesk",
        "please escalate this",
        "can you pass my question on to a person?",
    ):
        assert asks_for_human(text), text
    for text in (
        "what is the human resources policy?",
        "who approves travel?",
        "how do I reset my password",
        "Before I book, do I need to talk to someone in finance about travel over $500?",
        "who do I need to speak to about parental leave?",
        "Should I speak to a person in HR before I resign?",
        "does my manager need to talk to someone in payroll first?",
        "Do we have to speak to the helpdesk before buying software?",
        "who's the people partner for engineering? need to talk to someone about a thing on my team",
        "I need to talk to someone about my team. Who is the people partner for engineering?",
        "Who raises hardware tickets?\nhelpdesk",  # a word alone on a line of a longer message is no request
        "how do I send it to the helpdesk?",
        "do I send it to the helpdesk or to my manager?",
        "can I send my laptop to the service desk?",
        "the policy says to pass it on to your manager",
        "what is the escalation process for incidents?",
    ):
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


def test_a_passphrase_after_a_password_label_is_redacted_to_the_end_of_its_line_sentence_or_quote():
    redactor = Redactor()
    for said, redacted in [
        ("password: correct horse battery staple", f"password: {REDACTED}"),
        ("passphrase: correct horse battery staple. Thanks!", f"passphrase: {REDACTED} Thanks!"),
        ("my password is: it's a long one, don't ask\nnext line", f"my password is: {REDACTED}\nnext line"),
        ("password = correct horse battery staple", f"password = {REDACTED}"),
        ('curl -d "password: correct horse battery" url', f'curl -d "password: {REDACTED}" url'),
        ("DB_PASSWORD=Hunter2 ./run.sh", f"DB_PASSWORD={REDACTED} ./run.sh"),  # a shell word ends at a space
    ]:
        assert redactor.text(said) == redacted, said
    listed = "you must change your password:\n\n- **immediately** if you think someone knows it;"
    assert redactor.text(listed) == listed  # a label ending its line names no value


def test_a_plain_word_after_a_known_authorization_scheme_is_redacted():
    redactor = Redactor()
    for header, kept in [
        ("Authorization: Bearer sunshine", "Authorization: "),
        ("authorization: basic letmein", "authorization: "),
        ('"Authorization": "Token opensesame"', '"Authorization": "'),
    ]:
        assert redactor.text(header).startswith(kept + REDACTED), header
        assert "sunshine" not in redactor.text(header) and "letmein" not in redactor.text(header)
        assert "opensesame" not in redactor.text(header)
    for prose in ("Authorization: manager approval needed", "Authorization: Bearer\nsee the wiki"):
        assert redactor.text(prose) == prose


def test_a_url_password_holding_an_unencoded_at_sign_is_redacted_whole():
    redactor = Redactor()
    for said, redacted in [
        ("postgresql://user:p@ss@host/db", f"postgresql://user:{REDACTED}@host/db"),
        ("https://bob:p@ss:w0rd@example.com/x?next=a@b", f"https://bob:{REDACTED}@example.com/x?next=a@b"),
        (
            "redis://:s3c@ret@cache:6379, then ssh://git@github.com",
            f"redis://:{REDACTED}@cache:6379, then ssh://git@github.com",
        ),
    ]:
        assert redactor.text(said) == redacted, said
        assert Redactor().known(said) == redacted, said


def test_cookie_headers_lose_their_value():
    redactor = Redactor()
    for header, redacted in [
        ("Cookie: session=abc123; csrftoken=xyz", f"Cookie: {REDACTED}"),
        ("Set-Cookie: sid=31d4d96e407aad42; Path=/; Secure", f"Set-Cookie: {REDACTED}"),
        ("curl -H 'Cookie: sid=plainword' https://x", f"curl -H 'Cookie: {REDACTED}' https://x"),
        ('{"Cookie": "sid=plainword"}', f'{{"Cookie": "{REDACTED}"}}'),
    ]:
        assert redactor.text(header) == redacted, header
    for prose in ("Cookie: we use them for analytics", "the cookie policy is strict"):
        assert redactor.text(prose) == prose


def test_storage_keys_and_signatures_in_connection_strings_and_urls_are_redacted():
    redactor = Redactor()
    for said, redacted in [
        (
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=abc123+/def==;EndpointSuffix=core.windows.net",
            f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={REDACTED};EndpointSuffix=core.windows.net",
        ),
        (
            "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=abcDEF123+/=",
            f"Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={REDACTED}",
        ),
        (
            "https://acct.blob.core.windows.net/c/f?sv=2020-08-04&ss=b&sig=abcDEF%2B123%3D&se=2024",
            f"https://acct.blob.core.windows.net/c/f?sv=2020-08-04&ss=b&sig={REDACTED}&se=2024",
        ),
        (
            "https://b.s3.amazonaws.com/f?X-Amz-Date=20240101&X-Amz-Signature=0a1b2c3d4e5f",
            f"https://b.s3.amazonaws.com/f?X-Amz-Date=20240101&X-Amz-Signature={REDACTED}",
        ),
    ]:
        assert redactor.text(said) == redacted, said
    for prose in ("set AccountKey in the portal", "the sig= parameter of a SAS URL"):
        assert redactor.text(prose) == prose


def test_mapping_keys_that_name_a_secret_hide_every_string_inside_their_value():
    value = {
        "credentials": {"user": "u", "pass": "p", "retries": 3},
        "auth": ["x", "y"],
        "basic_auth": "bob:plainword",
        "Cookie": {"sid": "abc"},
        "tokens": {"input": 5, "output": 7},
        "author": "Ann",
    }
    assert Redactor().value(value) == {
        "credentials": {"user": REDACTED, "pass": REDACTED, "retries": 3},
        "auth": [REDACTED, REDACTED],
        "basic_auth": REDACTED,
        "Cookie": {"sid": REDACTED},
        "tokens": {"input": 5, "output": 7},  # counts stay
        "author": "Ann",
    }


def test_more_credential_shapes_people_paste_are_redacted():
    redactor = Redactor()
    for sample in (
        "ASIAABCDEFGHIJKLMNOP",  # AWS temporary access key id
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "xoxc-1234-5678-abcdefg",  # Slack client token
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----",
        "sk_live_abcdefghijklmnop1234",  # Stripe
        "npm_abcdefghijklmnopqrstuvwxyz0123456789",
    ):
        assert redactor.text(f"x {sample} y") == f"x {REDACTED} y", sample
    cut = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEowIBAAKCAQEAx1y2z3\nAbCdEfGhIjKlMnOp"
    assert redactor.text(f"my key:\n{cut}\nwhat now?") == f"my key:\n{REDACTED}\nwhat now?"  # pasted without its end


def test_prose_about_passwords_tokens_and_cookies_stays_as_written():
    redactor = Redactor()
    for prose in (
        "reset your password in the portal",
        "the password must be 14 characters",
        "max_tokens: 800",
        "the token budget ran out",
        "sk-abc is not a key",
        "the AKIA prefix marks an access key id",
        "Bearer bonds are old",
    ):
        assert redactor.text(prose) == prose


def test_a_policy_rule_after_a_password_label_stays_and_a_password_after_it_goes():
    redactor = Redactor()
    for rule in (
        "Password: at least 14 characters, changed every 90 days",
        "Password: must not be reused",
        "Passphrase: at least four words, never written down",
        "PIN: 4 to 6 digits, never your birthday",
        "Password: 12 characters minimum",
        "password = must not be reused",
        '{"password": "must not be reused"}',
        "Accounts\nPassword: at least 14 characters.\nToken: rotated every 90 days, never shared\n",
    ):
        assert redactor.text(rule) == rule
    for said, redacted in [
        ("Password: hunter2Xy!", f"Password: {REDACTED}"),
        ("password: S3cr3t-2024", f"password: {REDACTED}"),
        ("password: sunshine, it must never expire", f"password: {REDACTED}"),  # a password given comes first
        ("passphrase: never eat shredded wheat", f"passphrase: {REDACTED}"),  # one word of rules is chance
        ("Password: at least 14 characters, Hunter2!", f"Password: {REDACTED}"),  # a credential's shape
        ("my password is: must not be reused", f"my password is: {REDACTED}"),  # "is:" introduces a value
        ("Password: must not be reused\npassword: hunter2Xy!", f"Password: must not be reused\npassword: {REDACTED}"),
    ]:
        assert redactor.text(said) == redacted, said


async def test_a_policy_rule_in_an_answer_stays_whole_in_the_trace_and_the_thread_history(
    tmp_path, fake_openai, sample_index
):
    rule = "Password: at least 14 characters, changed every 90 days"
    fake_openai.script(
        tool_calls(("search_policies", {"query": "password rules, mine is password: hunter2Xy!"})),
        answer(f"The standard says:\n{rule}"),
    )
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "what are the password rules? mine is password: hunter2Xy!")
        row = await svc.store.runs.get(reply.run_id)
        history = await svc.store.threads.load_history(reply.conversation_key)
    assert history[-1]["content"] == f"The standard says:\n{rule}"
    assert row.trace[-1]["text"] == f"The standard says:\n{rule}"
    assert "hunter2Xy" not in json.dumps([history, row.question, row.trace])


def test_curl_cookie_options_lose_their_value_and_a_cookie_file_stays():
    redactor = Redactor()
    for said, redacted in [
        ('curl -b "session=abc123def456" https://x', f'curl -b "{REDACTED}" https://x'),
        ("curl --cookie 'sid=abc123; csrftoken=xyz' https://x", f"curl --cookie '{REDACTED}' https://x"),
        ("curl -b sid=plainword https://x", f"curl -b {REDACTED} https://x"),
        ("curl --cookie=sid=plainword https://x", f"curl --cookie={REDACTED} https://x"),
    ]:
        assert redactor.text(said) == redacted, said
    for kept in ("curl -c jar.txt -b jar.txt https://x", "curl --cookie cookies.txt https://x"):
        assert redactor.text(kept) == kept


def test_every_parameter_of_a_digest_or_signed_authorization_header_is_redacted():
    redactor = Redactor()
    digest = (
        'Digest username="bob", realm="x", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", uri="/dir/index.html", '
        'qop=auth, nc=00000001, cnonce="0a4f113b", response="6629fae49393a05397450978507c4ef1"'
    )
    for said, redacted in [
        (f"curl -H 'Authorization: {digest}' https://x", f"curl -H 'Authorization: {REDACTED}' https://x"),
        (f"Authorization: {digest}\nthen it fails", f"Authorization: {REDACTED}\nthen it fails"),
        (json.dumps({"Authorization": digest}), f'{{"Authorization": "{REDACTED}"}}'),  # escaped quotes
        (
            "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;x-amz-date, Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc9631766",
            f"Authorization: {REDACTED}",
        ),
        (
            'Authorization: OAuth oauth_consumer_key="xvz1evFS4wEEPTGEFPHBog", oauth_signature="tnnArxj06cWHq44g"',
            f"Authorization: {REDACTED}",
        ),
    ]:
        assert redactor.text(said) == redacted, said


def test_a_password_on_the_line_after_its_label_is_redacted_and_a_list_below_a_heading_is_not():
    redactor = Redactor()
    for said, redacted in [
        ("my password is:\nhunter2", f"my password is:\n{REDACTED}"),
        ("My password is:\ncorrect horse battery staple\nthanks", f"My password is:\n{REDACTED}\nthanks"),
        ("my password is:\n```\nhunter2\n```", f"my password is:\n```\n{REDACTED}\n```"),  # a code block
        ("my password is:\n> hunter2", f"my password is:\n> {REDACTED}"),  # a quote
        ("the password for wifi is:\n`Guest 2024`", f"the password for wifi is:\n`{REDACTED}`"),
        ("here is my password:\nS3cr3t-2024\nit fails", f"here is my password:\n{REDACTED}\nit fails"),
        ("API key:\n9f8e7d6c5b4a3f2e", f"API key:\n{REDACTED}"),
    ]:
        assert redactor.text(said) == redacted, said
    for heading in (
        "you must change your password:\n\n- **immediately** if you think someone knows it;",
        "Your password:\n- at least 14 characters",
        "Reset your password:\nopen the portal",
    ):
        assert redactor.text(heading) == heading


def test_curl_user_passwords_are_redacted_keeping_the_user():
    redactor = Redactor()
    for said, redacted in [
        ("curl -u bob:Hunter2Hunter2 https://x", f"curl -u bob:{REDACTED} https://x"),
        ("curl --user=bob:plainword https://x", f"curl --user=bob:{REDACTED} https://x"),
        ("curl -u 'bob:pass word' https://x", f"curl -u 'bob:{REDACTED}' https://x"),
        ("curl -x proxy:3128 -U ann:s3cret https://x", f"curl -x proxy:3128 -U ann:{REDACTED} https://x"),
    ]:
        assert redactor.text(said) == redacted, said
    for kept in ("git push -u origin main", "sudo -u bob whoami", "curl --user-agent 'a:b' https://x"):
        assert redactor.text(kept) == kept


def test_password_names_glued_to_a_prefix_lose_their_value():
    redactor = Redactor()
    for said, kept in [
        ("PGPASSWORD=Hunter2 psql -h db", "PGPASSWORD="),  # libpq
        ("env PGPASSWORD='plainword Hunter2' psql -h db", "env PGPASSWORD='"),  # a quoted one goes whole
        ("MicrosoftAppPassword=abc~DEF.ghi", "MicrosoftAppPassword="),  # the Teams bot's own setting
        ('"adminPassword": "plainword"', '"adminPassword": "'),  # an ARM template's parameter
    ]:
        assert redactor.text(said).startswith(kept + REDACTED), said
        assert "Hunter2" not in redactor.text(said) and "plainword" not in redactor.text(said)
    for prose in ("MicrosoftAppPassword is missing", "set MicrosoftAppId and MicrosoftAppPassword (or neither)"):
        assert redactor.text(prose) == prose


def test_slack_workflow_webhook_urls_are_redacted():
    redactor = Redactor()
    for url in (
        "https://hooks.slack.com/workflows/T0123ABCD/A0123ABCD/123456789012345678/abcdefghijklmnopqrstuvwx",
        "https://hooks.slack.com/triggers/T0123ABCD/1234567890123/abcdef0123456789abcdef0123456789",
    ):
        assert redactor.text(f"post to {url} please") == f"post to {REDACTED} please", url


def test_sendgrid_keys_are_redacted_and_prose_about_their_prefix_is_not():
    redactor = Redactor()
    key = "SG.aBcDeFgHiJkLmNoPqRsT_1.aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789-_abcde"
    assert redactor.text(f"SENDGRID_KEY is {key}, thanks") == f"SENDGRID_KEY is {REDACTED}, thanks"
    for prose in ("Use SG. notation for Singapore offices", "keys start with SG. and are shown once"):
        assert redactor.text(prose) == prose


def test_hugging_face_tokens_are_redacted_and_prose_about_their_prefix_is_not():
    redactor = Redactor()
    token = "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
    assert redactor.text(f"x {token} y") == f"x {REDACTED} y"
    for prose in ("the hf_ prefix marks a Hugging Face token", "call hf_hub_download with the repo id"):
        assert redactor.text(prose) == prose


def test_grafana_service_account_tokens_are_redacted_and_prose_about_their_prefix_is_not():
    redactor = Redactor()
    for token in (
        "glsa_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345_0a1b2c3d",  # 32 alphanumerics, "_", 8 hex: as Grafana issues them
        "glsa_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_0a1b2c3d4e",  # longer parts still go
    ):
        assert redactor.text(f"x {token} y") == f"x {REDACTED} y", token
    for prose in ("glsa_ tokens belong to service accounts", "see glsa_token_rotation_policy_for_service_accounts"):
        assert redactor.text(prose) == prose


def test_a_password_given_to_a_command_line_option_is_redacted_and_prompt_port_and_file_options_are_not():
    redactor = Redactor()
    for said, redacted in [
        ("mysql -u root -pHunter2 prod", f"mysql -u root -p{REDACTED} prod"),
        (
            "mysqldump -uroot -ps3cret --all-databases > all.sql",
            f"mysqldump -uroot -p{REDACTED} --all-databases > all.sql",
        ),
        ("mysql --password=Hunter2 -h db prod", f"mysql --password={REDACTED} -h db prod"),
        ("mariadb -h db -P 3306 -p'pass word' prod", f"mariadb -h db -P 3306 -p'{REDACTED}' prod"),
        ("`mysql -uapp -pplainword app`", f"`mysql -uapp -p{REDACTED} app`"),
        ("mysql -h db \\\n  -u root -pHunter2 prod", f"mysql -h db \\\n  -u root -p{REDACTED} prod"),
        ("mysql --password Hunter2 -h db prod", f"mysql --password {REDACTED} -h db prod"),
        ("mysql -u root --password 'pass word' prod", f"mysql -u root --password '{REDACTED}' prod"),
        ("sshpass -p s3cret ssh -p 2222 bob@host", f"sshpass -p {REDACTED} ssh -p 2222 bob@host"),
        ("sshpass -pHunter2 scp f host:", f"sshpass -p{REDACTED} scp f host:"),
        ("sshpass -v -p 'pass word' ssh host", f"sshpass -v -p '{REDACTED}' ssh host"),
        ("docker login -u bob -p Hunter2 reg.example.com", f"docker login -u bob -p {REDACTED} reg.example.com"),
        ("docker login -u bob -pplainword reg", f"docker login -u bob -p{REDACTED} reg"),
        ("docker login --password 'pass word' -u bob", f"docker login --password '{REDACTED}' -u bob"),
        ("docker login \\\n  -u bob \\\n  -p plainword reg", f"docker login \\\n  -u bob \\\n  -p {REDACTED} reg"),
        ("az login -u bob@contoso.example -p plainword", f"az login -u bob@contoso.example -p {REDACTED}"),
        (
            "az login --service-principal -u app-id --password s3cret --tenant t",
            f"az login --service-principal -u app-id --password {REDACTED} --tenant t",
        ),
        ("az acr login -n reg -u app -p plainword", f"az acr login -n reg -u app -p {REDACTED}"),
        ("htpasswd -b .htpasswd bob plainword", f"htpasswd -b .htpasswd bob {REDACTED}"),
        (
            "sudo htpasswd -bc -C 12 /etc/.htpasswd bob 'pass word' && ls",
            f"sudo htpasswd -bc -C 12 /etc/.htpasswd bob '{REDACTED}' && ls",
        ),
        ("htpasswd -Bbn bob plainword > auth/htpasswd", f"htpasswd -Bbn bob {REDACTED} > auth/htpasswd"),
    ]:
        assert redactor.text(said) == redacted, said
    for prose in (
        "mysql -p prompts for it",
        "mysql -h db -P 3306 -u root -p",
        "run mysql -u root -p, then type it when asked",
        "mysql -u root prod; ssh -p2222 bastion",
        "ssh -p2222 bastion",
        "mysql -u root -p prod",  # a spaced -p prompts: "prod" is the database
        "mysql -u root --password -h db prod",
        "use --password-file, not --password",
        "sshpass -f ~/.pw ssh -p 2222 host",  # ssh's -p is its port
        "`sshpass -p` shows the password in ps; use sshpass -f",
        "never run sshpass -p, use a file",
        "docker login -p",
        "docker login -u bob --password-stdin reg",
        "docker login -p is insecure, use --password-stdin",
        "don't use docker login -p or --password; use --password-stdin",
        "docker login reg && docker run -p 8080:80 nginx",  # docker run's -p is a port
        "az login -p only works with a service principal",
        "htpasswd -c .htpasswd bob",  # without -b it prompts
        "htpasswd -b is insecure",
        "htpasswd -nb puts the password in ps",
    ):
        assert redactor.text(prose) == prose


def test_an_azure_api_management_subscription_key_is_redacted_keeping_the_header_name():
    redactor = Redactor()
    key = "0123456789abcdef0123456789abcdef"
    for said, redacted in [
        (f"Ocp-Apim-Subscription-Key: {key}", f"Ocp-Apim-Subscription-Key: {REDACTED}"),
        (
            f"curl -H 'Ocp-Apim-Subscription-Key: {key}' https://x",
            f"curl -H 'Ocp-Apim-Subscription-Key: {REDACTED}' https://x",
        ),
        (f'{{"Ocp-Apim-Subscription-Key": "{key}"}}', f'{{"Ocp-Apim-Subscription-Key": "{REDACTED}"}}'),
        (
            f"https://api.example.com/v1?subscription-key={key}",
            f"https://api.example.com/v1?subscription-key={REDACTED}",
        ),
    ]:
        assert redactor.text(said) == redacted, said
    assert redactor.value({"Ocp-Apim-Subscription-Key": key}) == {"Ocp-Apim-Subscription-Key": REDACTED}
    for prose in (
        "send the key in the Ocp-Apim-Subscription-Key header",
        "Ocp-Apim-Subscription-Key: required on every call",
    ):
        assert redactor.text(prose) == prose


def test_a_pin_given_as_several_groups_of_digits_is_redacted_whole():
    redactor = Redactor()
    for said, redacted in [
        ("pin: 42 17", f"pin: {REDACTED}"),
        ("my PIN is 4217 9921", f"my PIN is {REDACTED}"),
        ("my PIN is 42 17, thanks", f"my PIN is {REDACTED}, thanks"),
        ("the door pin for B2 is 12 34 56.", f"the door pin for B2 is {REDACTED}."),
        ("my passcode is 4217 9921 now", f"my passcode is {REDACTED} now"),
        ("PIN: 4217 9921abc", f"PIN: {REDACTED}"),  # a group with letters after its digits is the PIN's too
        ("my PIN is 4217 9921abc, thanks", f"my PIN is {REDACTED}, thanks"),
    ]:
        assert redactor.text(said) == redacted, said
    for prose in (
        "pin: 4 digits minimum",
        "PIN: 4 to 6 digits, never your birthday",
        "the PIN is 4 to 6 digits",
        "my pin is 1 2 tries from locking",
        "the PIN policy: 4 digits minimum",
    ):
        assert redactor.text(prose) == prose


@pytest.mark.timeout(300)  # a guard against a hang, not a timing: it takes well under a second, was 10+ minutes
def test_a_long_dotted_paste_is_redacted_in_linear_time():
    pasted = "a." * 40_000  # each dot used to restart the scan of a name and of a URL scheme (quadratic)
    assert Redactor().text(pasted) == pasted
    assert Redactor().known(pasted) == pasted


@pytest.mark.timeout(300)  # a guard against a hang, not a timing: each takes well under a second
def test_long_pastes_of_mysql_commands_and_digit_groups_are_redacted_in_linear_time():
    for pasted in ("mysql -u root " * 20_000, "mysql \\" * 40_000, "mysql 'a " * 20_000, "docker login -u " * 20_000):
        assert Redactor().text(pasted) == pasted  # a command is read once, not again from each later "mysql"
    assert Redactor().text("pin: " + "1 " * 40_000 + "x") == f"pin: {REDACTED} x"


@pytest.mark.timeout(30)  # a guard against a hang, not a timing: it takes about a second, was minutes
def test_a_long_line_repeating_secret_labels_is_redacted_in_linear_time():
    pasted = "pin: 1 2 token = abc " * 6_000  # each label used to read the rest of its line again (quadratic)
    assert Redactor().text(pasted) == f"pin: {REDACTED} token = {REDACTED} " * 6_000
    rules = "Password: at least 14 characters " * 1_000  # every label's value still read as a rule, and kept
    assert Redactor().text(rules) == rules
