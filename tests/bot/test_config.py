"""Settings as they load from the environment: what counts as unset, and what is refused, in whose name."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Settings, load_settings
from bot.errors import ConfigError


def from_env(monkeypatch: pytest.MonkeyPatch, **variables: str) -> Settings:
    """Settings read from these environment variables only (the shell's are cleared by the conftest)."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return load_settings(_env_file=None)


def refusal(monkeypatch: pytest.MonkeyPatch, **variables: str) -> str:
    with pytest.raises(ConfigError) as refused:
        from_env(monkeypatch, **variables)
    return str(refused.value)


def test_an_empty_optional_url_secret_or_path_is_unset_as_compose_passes_them(
    monkeypatch: pytest.MonkeyPatch, isolated_data_home: Path
):
    settings = from_env(
        monkeypatch,
        OPENAI_BASE_URL="",
        OPENAI_API_KEY="",
        SLACK_API_URL=" ",
        SLACK_BOT_TOKEN="",
        MicrosoftAppId="",
        POLICYPAL_QDRANT_URL="",
        POLICYPAL_QDRANT_PATH="",
        POLICYPAL_DATABASE_URL="",
        POLICYPAL_HELPDESK_WEBHOOK_URL="",
    )
    assert settings.openai_base_url is None and settings.openai_api_key is None
    assert settings.slack_api_url is None and settings.slack_bot_token is None and settings.microsoft_app_id is None
    assert settings.qdrant_url is None and settings.qdrant_path is None
    assert settings.retrieval().qdrant_path == isolated_data_home / "qdrant"
    assert settings.database_url is None and settings.helpdesk_webhook_url is None


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("POLICYPAL_MAX_CONCURRENT_RUNS", "-1"),  # serve died on the semaphore
        ("POLICYPAL_MAX_CONCURRENT_RUNS", "0"),  # every message was "busy"
        ("POLICYPAL_MAX_STEPS", "0"),  # every question gave up
        ("POLICYPAL_DEADLINE_S", "-5"),
        ("POLICYPAL_MAX_COST_USD", "0"),
        ("POLICYPAL_HELPDESK_POLL_S", "0"),
        ("POLICYPAL_SWEEP_INTERVAL_S", "0"),
        ("POLICYPAL_USER_RUNS_PER_MINUTE", "-1"),
        ("POLICYPAL_TOP_K", "51"),
        ("POLICYPAL_HELPDESK_SMTP_PORT", "70000"),
        ("POLICYPAL_TICKETS_ATTEMPTS", "0"),
    ],
)
def test_a_number_that_would_crash_or_stall_the_server_is_refused_by_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
):
    message = refusal(monkeypatch, **{variable: value})
    assert f"{variable}: Input should be" in message, message


def test_the_queue_wait_serves_a_burst_by_default_and_its_old_name_is_still_read(monkeypatch: pytest.MonkeyPatch):
    assert from_env(monkeypatch).queue_wait_s == 120.0
    assert from_env(monkeypatch, POLICYPAL_BUSY_WAIT_S="5").queue_wait_s == 5.0  # a deployment's old setting holds
    assert from_env(monkeypatch, POLICYPAL_QUEUE_WAIT_S="30").queue_wait_s == 30.0  # the new name wins over the old
    assert "POLICYPAL_QUEUE_WAIT_S: Input should be" in refusal(monkeypatch, POLICYPAL_QUEUE_WAIT_S="-1")


def test_a_sync_database_url_is_refused_naming_the_async_driver_and_hiding_the_password(
    monkeypatch: pytest.MonkeyPatch,
):
    message = refusal(monkeypatch, POLICYPAL_DATABASE_URL="sqlite:///new.db")
    assert "POLICYPAL_DATABASE_URL: sqlite:///new.db names no driver" in message, message
    assert "PolicyPal needs the async driver: sqlite+aiosqlite:///new.db" in message
    message = refusal(monkeypatch, POLICYPAL_DATABASE_URL="postgresql+psycopg2://bot:pg-s3cret-pw@db/policypal")
    assert "uses the driver psycopg2" in message and "postgresql+asyncpg://bot:***@db/policypal" in message, message
    assert "pg-s3cret-pw" not in message
    message = refusal(monkeypatch, POLICYPAL_DATABASE_URL="mysql+aiomysql://bot@db/policypal")
    assert "runs on sqlite+aiosqlite:// or postgresql+asyncpg:// only" in message, message


def test_a_url_setting_needs_http_or_https_and_a_host_and_a_good_one_is_kept_as_written(
    monkeypatch: pytest.MonkeyPatch,
):
    message = refusal(
        monkeypatch,
        POLICYPAL_HELPDESK_WEBHOOK_URL="helpdesk.example.com/hook",
        POLICYPAL_JIRA_URL="notaurl",
        OPENAI_BASE_URL="localhost:8000/v1",
        POLICYPAL_QDRANT_URL="ftp://qdrant:6333",
        SLACK_API_URL="https://",
    )
    for expected in (
        "POLICYPAL_HELPDESK_WEBHOOK_URL: needs http:// or https:// in front",
        "POLICYPAL_JIRA_URL: needs http:// or https:// in front",
        "OPENAI_BASE_URL: needs http:// or https:// in front",
        "POLICYPAL_QDRANT_URL: must be an http:// or https:// URL, not ftp://",
        "SLACK_API_URL: has no host name",
    ):
        assert expected in message, (expected, message)
    monkeypatch.delenv("POLICYPAL_QDRANT_URL")
    settings = from_env(
        monkeypatch,
        POLICYPAL_HELPDESK_WEBHOOK_URL="https://helpdesk.example.com/hook",
        POLICYPAL_JIRA_URL="https://acme.atlassian.net",
        OPENAI_BASE_URL="http://localhost:8000/v1",
        SLACK_API_URL="http://127.0.0.1:9000/api/",
    )
    assert settings.jira_url == "https://acme.atlassian.net"  # no trailing slash added to build paths on


def test_an_smtp_user_without_its_password_is_refused(monkeypatch: pytest.MonkeyPatch):
    message = refusal(monkeypatch, POLICYPAL_HELPDESK_SMTP_HOST="smtp.example.com", POLICYPAL_HELPDESK_SMTP_USER="bot")
    assert "POLICYPAL_HELPDESK_SMTP_USER is set but POLICYPAL_HELPDESK_SMTP_PASSWORD is not" in message, message


def test_an_empty_name_or_path_with_a_default_is_that_default(
    monkeypatch: pytest.MonkeyPatch, isolated_data_home: Path
):
    """``POLICYPAL_DATA_DIR=""`` (compose's ``${VAR:-}``) put the database and index in the working directory."""
    settings = from_env(
        monkeypatch, POLICYPAL_DATA_DIR="", POLICYPAL_MODEL=" ", POLICYPAL_COLLECTION="", POLICYPAL_EMBEDDING_MODEL=""
    )
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.data_dir == isolated_data_home and settings.resolved_database_url == defaults.resolved_database_url
    assert (settings.model, settings.collection) == ("gpt-4o-mini", "policies")
    assert settings.embedding_model == defaults.embedding_model


def test_a_database_url_with_a_port_that_is_not_a_number_says_what_it_is(monkeypatch: pytest.MonkeyPatch):
    message = refusal(monkeypatch, POLICYPAL_DATABASE_URL="postgresql+asyncpg://bot:pw@db:54x2/policypal")
    assert "POLICYPAL_DATABASE_URL: is not a database URL; use sqlite+aiosqlite:///" in message, message
    assert "invalid literal" not in message


def test_the_source_base_url_reaches_retrieval_and_must_be_a_web_address(monkeypatch: pytest.MonkeyPatch):
    """Citations of indexed files link under it (retrieval.sources); a typo must not make every link wrong."""
    message = refusal(monkeypatch, POLICYPAL_SOURCE_BASE_URL="git.example/handbook")
    assert "POLICYPAL_SOURCE_BASE_URL: needs http:// or https:// in front" in message, message
    assert from_env(monkeypatch, POLICYPAL_SOURCE_BASE_URL="").retrieval().source_base_url is None
    settings = from_env(monkeypatch, POLICYPAL_SOURCE_BASE_URL="https://git.example/handbook/blob/main")
    assert settings.retrieval().source_base_url == "https://git.example/handbook/blob/main"


def test_a_worker_stale_time_within_two_sweep_intervals_is_refused(monkeypatch: pytest.MonkeyPatch):
    """The heartbeat is written once a sweep interval: with POLICYPAL_SWEEP_INTERVAL_S=60 and the default
    30 s stale time, every live replica looked dead between its beats and had its work taken over."""
    message = refusal(monkeypatch, POLICYPAL_SWEEP_INTERVAL_S="60")
    assert "POLICYPAL_WORKER_STALE_S (30 s) must be at least twice POLICYPAL_SWEEP_INTERVAL_S (60 s)" in message
    settings = from_env(monkeypatch, POLICYPAL_SWEEP_INTERVAL_S="60", POLICYPAL_WORKER_STALE_S="120")
    assert (settings.sweep_interval_s, settings.worker_stale_s) == (60.0, 120.0)


@pytest.mark.parametrize(
    ("variables", "missing"),
    [
        ({"POLICYPAL_HELPDESK_EMAIL_TO": "it@example.com", "POLICYPAL_HELPDESK_EMAIL_FROM": "bot@example.com"},
         "POLICYPAL_HELPDESK_SMTP_HOST"),
        ({"POLICYPAL_HELPDESK_WEBHOOK_SECRET": "whsec-123456"}, "POLICYPAL_HELPDESK_WEBHOOK_URL"),
    ],
)
def test_a_helpdesk_destination_without_its_address_is_refused_not_silently_off(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], missing: str
):
    """Recipients without an SMTP host (or a signing secret without its URL) passed every check, and every
    case then stayed in the local store: nobody was emailed, nothing said why."""
    message = refusal(monkeypatch, **variables)
    assert f"{missing} is not" in message, message


def test_a_card_lifetime_of_zero_is_refused(monkeypatch: pytest.MonkeyPatch):
    """POLICYPAL_PENDING_TTL_S=0 expired every Confirm/Cancel card as it was posted: no ticket could be raised."""
    refused = refusal(monkeypatch, POLICYPAL_PENDING_TTL_S="0")
    assert "POLICYPAL_PENDING_TTL_S: Input should be greater than 0" in refused
    assert from_env(monkeypatch, POLICYPAL_PENDING_TTL_S="60").pending_ttl_s == 60
