"""Settings, read once from the environment (and ``.env``) at the outermost edge and passed down."""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from retrieval.config import BUNDLED_MODEL, RetrievalConfig


class ConfigError(Exception):
    """Configuration that cannot work; the message lists every problem found."""


def _env(name: str) -> AliasChoices:
    return AliasChoices(name, name.lower())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="POLICYPAL_", env_file=".env", extra="ignore", populate_by_name=True)

    data_dir: Path = Path("data")

    # model
    openai_api_key: SecretStr | None = Field(default=None, validation_alias=_env("OPENAI_API_KEY"))
    openai_base_url: str | None = Field(default=None, validation_alias=_env("OPENAI_BASE_URL"))
    model: str = "gpt-4o-mini"
    model_prices: str | None = None  # JSON {"model": [usd_per_1M_input, usd_per_1M_output]}
    max_output_tokens: int = 800
    max_tokens_param: Literal["auto", "max_completion_tokens", "max_tokens"] = "auto"

    # budgets (per run)
    max_steps: int = 6
    max_tokens: int = 20_000
    deadline_s: float = 20.0
    max_cost_usd: float | None = 0.05
    max_searches: int = 3
    tool_result_chars: int = 6_000
    compact_at_tokens: int = 12_000
    pending_ttl_s: int = 24 * 3600

    # retrieval
    qdrant_url: str | None = None
    qdrant_path: Path | None = None
    qdrant_api_key: SecretStr | None = None
    collection: str = "policies"
    embedding_model: str = BUNDLED_MODEL
    top_k: int = 5

    # state
    database_url: str | None = None

    # serving (policypal serve)
    user_runs_per_minute: int = 10  # per user, across every replica (0: no limit)
    max_concurrent_runs: int = 16  # per process; beyond it a polite "busy" reply
    busy_wait_s: float = 2.0  # how long a message may wait for a free run slot before that reply
    shutdown_grace_s: float = 20.0  # on SIGTERM, how long in-flight runs may take before they give up
    sweep_interval_s: float = 10.0  # heartbeat, crash recovery and expired cards, this often
    worker_stale_s: float = 30.0  # a process silent this long is dead: its runs are recovered
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    # who may see and do what
    user_groups: str | None = None  # JSON {"user id or email": ["managers", ...]}; everyone is in "all"
    guests_may_write: bool = False

    # helpdesk handoff destinations (the local store always receives every case)
    helpdesk_slack_channel: str | None = None
    helpdesk_webhook_url: str | None = None
    helpdesk_webhook_secret: SecretStr | None = None
    helpdesk_teams_service_url: str | None = None
    helpdesk_teams_conversation_id: str | None = None
    helpdesk_smtp_host: str | None = None
    helpdesk_smtp_port: int = 587
    helpdesk_smtp_user: str | None = None
    helpdesk_smtp_password: SecretStr | None = None
    helpdesk_smtp_starttls: bool = True
    helpdesk_email_from: str | None = None
    helpdesk_email_to: str | None = None  # comma-separated addresses
    helpdesk_reply_within: str = "one working day"  # told to the user with the case id
    helpdesk_transcript_result_chars: int = 1_000  # each tool result in a transcript
    helpdesk_max_attempts: int = 8  # per destination, before a delivery shows as failed
    helpdesk_retry_base_s: float = 30.0  # first retry delay; doubles up to an hour
    helpdesk_deliver_timeout_s: float = 20.0
    helpdesk_poll_s: float = 5.0  # how often the server's outbox worker looks for due deliveries

    # ticket backend
    tickets: Literal["local", "jira", "servicenow", "webhook"] = "local"
    jira_url: str | None = None
    jira_email: str | None = None
    jira_api_token: SecretStr | None = None
    jira_service_desk_id: str | None = None
    jira_request_type_id: str | None = None
    servicenow_url: str | None = None
    servicenow_user: str | None = None
    servicenow_password: SecretStr | None = None
    servicenow_token: SecretStr | None = None
    tickets_webhook_url: str | None = None
    tickets_webhook_secret: SecretStr | None = None
    tickets_timeout_s: float = 10.0  # per request to a remote ticket system
    tickets_attempts: int = 3  # tries for timeouts, 429 and 5xx before the failure reaches the user

    # Slack
    slack_bot_token: SecretStr | None = Field(default=None, validation_alias=_env("SLACK_BOT_TOKEN"))
    slack_signing_secret: SecretStr | None = Field(default=None, validation_alias=_env("SLACK_SIGNING_SECRET"))
    slack_app_token: SecretStr | None = Field(default=None, validation_alias=_env("SLACK_APP_TOKEN"))
    slack_api_url: str | None = Field(default=None, validation_alias=_env("SLACK_API_URL"))

    # Teams (Bot Framework)
    microsoft_app_id: str | None = Field(default=None, validation_alias=_env("MicrosoftAppId"))
    microsoft_app_password: SecretStr | None = Field(default=None, validation_alias=_env("MicrosoftAppPassword"))
    microsoft_app_type: str | None = Field(default=None, validation_alias=_env("MicrosoftAppType"))
    microsoft_app_tenant_id: str | None = Field(default=None, validation_alias=_env("MicrosoftAppTenantId"))
    teams_allowed_tenants: str | None = None  # comma-separated tenant ids; unset: any tenant
    teams_allow_unauthenticated: bool = False  # Bot Framework Emulator and tests only

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.data_dir / 'policypal.db'}"

    def secret_values(self) -> list[str]:
        """Every configured secret, so transcripts, logs and error messages can redact them."""
        secrets = [value.get_secret_value() for value in self.__dict__.values() if isinstance(value, SecretStr)]
        password = urlsplit(self.database_url).password if self.database_url else None
        return [*secrets, password] if password else secrets

    def retrieval(self) -> RetrievalConfig:
        return RetrievalConfig(
            qdrant_path=self.qdrant_path or self.data_dir / "qdrant",
            qdrant_url=self.qdrant_url,
            qdrant_api_key=self.qdrant_api_key.get_secret_value() if self.qdrant_api_key else None,
            collection=self.collection,
            embedding_model=self.embedding_model,
            model_cache_dir=self.data_dir / "models",
            top_k=self.top_k,
        )


def load_settings(**overrides: object) -> Settings:
    """Build settings, turning pydantic's errors into one readable ConfigError."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise ConfigError("Invalid configuration:\n  " + "\n  ".join(problems)) from None
