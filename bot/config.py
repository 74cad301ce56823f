"""Settings, read once from the environment (and ``.env``) at the outermost edge and passed down.

Every value is checked as the settings load: numbers within the bounds that work, URLs with a scheme
and a host, the database on its async driver, settings that only work together set together. So
every command refuses a configuration that cannot work, naming the variable, rather than a server
that starts and then fails on each message. An empty value means unset for optional text settings
(compose's ``${VAR:-}``, a blank line in ``.env``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

from platformdirs import user_data_dir
from pydantic import (
    AfterValidator,
    AliasChoices,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from bot.errors import ConfigError
from bot.redaction import Redactor
from retrieval import BUNDLED_MODEL, MAX_K, PASSAGE_CHARS, RetrievalConfig

# The one driver per database that the async store runs on (``bot.store``).
ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg"}


def _env(name: str) -> AliasChoices:
    return AliasChoices(name, name.lower())


def _http_url(value: str) -> str:
    """An http(s) URL with a host, kept as written (no trailing slash added, unlike pydantic's URL types)."""
    if "://" not in value:
        raise ValueError("needs http:// or https:// in front, e.g. https://host.example/path")
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"must be an http:// or https:// URL, not {parts.scheme}://")
    try:
        parts.port  # noqa: B018  # parsing the port is the check
    except ValueError:
        raise ValueError("has a port that is not a number from 0 to 65535") from None
    if not parts.hostname:
        raise ValueError("has no host name, e.g. https://host.example/path")
    return value


def _async_database_url(value: str) -> str:
    """A SQLAlchemy URL naming the async driver; the message suggests the corrected URL, password hidden."""
    try:
        url = make_url(value)
    except (ArgumentError, ValueError):  # a port that is not a number is a ValueError ("invalid literal for int()")
        raise ValueError(
            "is not a database URL; use sqlite+aiosqlite:///path/to/policypal.db or "
            "postgresql+asyncpg://user:password@host:5432/policypal"
        ) from None
    where = url.render_as_string(hide_password=True)
    wanted = ASYNC_DRIVERS.get(url.get_backend_name())
    if wanted is None:
        raise ValueError(f"{where}: PolicyPal runs on sqlite+aiosqlite:// or postgresql+asyncpg:// only")
    if url.drivername != wanted:
        driver = url.drivername.partition("+")[2]
        uses = f"uses the driver {driver}" if driver else "names no driver, so SQLAlchemy would pick a synchronous one"
        fixed = url.set(drivername=wanted).render_as_string(hide_password=True)
        raise ValueError(f"{where} {uses}; PolicyPal needs the async driver: {fixed}")
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]
DatabaseUrl = Annotated[str, AfterValidator(_async_database_url)]
_TEXT_TYPES = (str, SecretStr, Path)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="POLICYPAL_", env_file=".env", extra="ignore", populate_by_name=True)

    # One per-user home whatever the working directory (~/.local/share/policypal on Linux), so every
    # command finds the same index and database; the container sets POLICYPAL_DATA_DIR=/data.
    data_dir: Path = Field(default_factory=lambda: Path(user_data_dir("policypal")))

    # model
    openai_api_key: SecretStr | None = Field(default=None, validation_alias=_env("OPENAI_API_KEY"))
    openai_base_url: HttpUrl | None = Field(default=None, validation_alias=_env("OPENAI_BASE_URL"))
    model: str = "gpt-4o-mini"
    model_prices: str | None = None  # JSON {"model": [usd_per_1M_input, usd_per_1M_output]}
    max_output_tokens: PositiveInt = 800
    max_tokens_param: Literal["auto", "max_completion_tokens", "max_tokens"] = "auto"

    # budgets (per run)
    max_steps: PositiveInt = 6
    max_tokens: PositiveInt = 20_000
    deadline_s: PositiveFloat = 20.0
    max_cost_usd: PositiveFloat | None = 0.05
    max_searches: PositiveInt = 3
    tool_result_chars: PositiveInt = 6_000
    compact_at_tokens: PositiveInt = 12_000
    pending_ttl_s: PositiveInt = 24 * 3600  # 0 would expire every card as it is posted

    # retrieval
    qdrant_url: HttpUrl | None = None
    qdrant_path: Path | None = None
    qdrant_api_key: SecretStr | None = None
    collection: str = "policies"
    embedding_model: str = BUNDLED_MODEL
    top_k: int = Field(5, ge=1, le=MAX_K)
    passage_chars: int = Field(PASSAGE_CHARS, ge=200)  # of each passage given to the model; cut between rows
    # Optional cross-encoder reranking: a fastembed cross-encoder name (unset: off), downloaded on first use
    # unless rerank_model_dir holds its files; it re-scores the best rerank_candidates fused passages.
    rerank_model: str | None = None
    rerank_model_dir: Path | None = None
    rerank_candidates: int = Field(20, ge=1, le=MAX_K)
    source_base_url: HttpUrl | None = None  # citations of files link here + their path in the indexed folder

    # state
    database_url: DatabaseUrl | None = None

    # serving (policypal serve)
    user_runs_per_minute: NonNegativeInt = 10  # per user, across every replica (0: no limit)
    max_concurrent_runs: PositiveInt = 16  # per process; beyond it a message waits its turn, first come first served
    # How long a message may wait for a run slot before a polite "busy" reply; long enough that a burst of a
    # few hundred messages is served. POLICYPAL_BUSY_WAIT_S is its old name (default 2), still read.
    queue_wait_s: NonNegativeFloat = Field(
        120.0,
        validation_alias=AliasChoices(*_env("POLICYPAL_QUEUE_WAIT_S").choices, *_env("POLICYPAL_BUSY_WAIT_S").choices),
    )
    shutdown_grace_s: NonNegativeFloat = 20.0  # on SIGTERM, how long in-flight runs may take before they give up
    sweep_interval_s: PositiveFloat = 10.0  # heartbeat, crash recovery and expired cards, this often
    worker_stale_s: PositiveFloat = 30.0  # a process silent this long is dead: its runs are recovered
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    # who may see and do what
    user_groups: str | None = None  # JSON {"user id or email": ["managers", ...]}; everyone is in "all"
    # A reply in a channel, thread or group chat: from public documents ("public"), or from what every
    # member may read ("members": the member list and POLICYPAL_USER_GROUPS; public when it cannot be read).
    shared_audience: Literal["public", "members"] = "public"
    shared_audience_max_members: PositiveInt = 200  # a larger place reads public documents only
    guests_may_write: bool = False

    # helpdesk handoff destinations (the local store always receives every case)
    helpdesk_slack_channel: str | None = None
    helpdesk_webhook_url: HttpUrl | None = None
    helpdesk_webhook_secret: SecretStr | None = None
    helpdesk_teams_service_url: HttpUrl | None = None
    helpdesk_teams_conversation_id: str | None = None
    helpdesk_smtp_host: str | None = None
    helpdesk_smtp_port: int = Field(587, ge=1, le=65535)
    helpdesk_smtp_user: str | None = None
    helpdesk_smtp_password: SecretStr | None = None
    helpdesk_smtp_starttls: bool = True
    helpdesk_email_from: str | None = None
    helpdesk_email_to: str | None = None  # comma-separated addresses
    helpdesk_reply_within: str = "one working day"  # told to the user with the case id
    helpdesk_transcript_result_chars: PositiveInt = 1_000  # each tool result in a transcript
    helpdesk_max_attempts: PositiveInt = 8  # per destination, before a delivery shows as failed
    helpdesk_retry_base_s: PositiveFloat = 30.0  # first retry delay; doubles up to an hour
    helpdesk_deliver_timeout_s: PositiveFloat = 20.0
    helpdesk_poll_s: PositiveFloat = 5.0  # how often the server's outbox worker looks for due deliveries

    # ticket backend
    tickets: Literal["local", "jira", "servicenow", "webhook"] = "local"
    jira_url: HttpUrl | None = None
    jira_email: str | None = None
    jira_api_token: SecretStr | None = None
    jira_service_desk_id: str | None = None
    jira_request_type_id: str | None = None
    servicenow_url: HttpUrl | None = None
    servicenow_user: str | None = None
    servicenow_password: SecretStr | None = None
    servicenow_token: SecretStr | None = None
    tickets_webhook_url: HttpUrl | None = None
    tickets_webhook_secret: SecretStr | None = None
    tickets_timeout_s: PositiveFloat = 10.0  # per request to a remote ticket system
    tickets_attempts: PositiveInt = 3  # tries for timeouts, 429 and 5xx before the failure reaches the user

    # Slack
    slack_bot_token: SecretStr | None = Field(default=None, validation_alias=_env("SLACK_BOT_TOKEN"))
    slack_signing_secret: SecretStr | None = Field(default=None, validation_alias=_env("SLACK_SIGNING_SECRET"))
    slack_app_token: SecretStr | None = Field(default=None, validation_alias=_env("SLACK_APP_TOKEN"))
    slack_api_url: HttpUrl | None = Field(default=None, validation_alias=_env("SLACK_API_URL"))

    # Teams (Bot Framework)
    microsoft_app_id: str | None = Field(default=None, validation_alias=_env("MicrosoftAppId"))
    microsoft_app_password: SecretStr | None = Field(default=None, validation_alias=_env("MicrosoftAppPassword"))
    microsoft_app_type: str | None = Field(default=None, validation_alias=_env("MicrosoftAppType"))
    microsoft_app_tenant_id: str | None = Field(default=None, validation_alias=_env("MicrosoftAppTenantId"))
    teams_allowed_tenants: str | None = None  # comma-separated tenant ids; unset: any tenant
    teams_allow_unauthenticated: bool = False  # Bot Framework Emulator and tests only

    # The operators' web console (adapters/web): off unless one of the first two is set
    console_secret: SecretStr | None = Field(default=None, min_length=16)  # operators sign in with it
    console_user_header: str | None = None  # a reverse proxy's authenticated-user header, e.g. X-Forwarded-User
    # Operators (names from the header; "console" for the secret's sign-in; "*" anyone) who may read the
    # traces and transcripts of runs built for restricted groups (hr, managers...). Unset: nobody.
    console_restricted_operators: str | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any, info: ValidationInfo) -> Any:
        """An empty optional URL, secret, name or path is unset: ``OPENAI_BASE_URL=""`` must not be a URL."""
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, str) and not value.strip() and field is not None and _optional_text(field):
            return None
        return value

    @model_validator(mode="before")
    @classmethod
    def _blank_is_default(cls, data: Any) -> Any:
        """An empty name or path with a default is that default: ``POLICYPAL_DATA_DIR=""`` is not the cwd."""
        if not isinstance(data, dict):
            return data
        return {key: value for key, value in data.items() if not (_blank(value) and _defaulted_text(key))}

    @model_validator(mode="after")
    def _smtp_login_complete(self) -> Settings:
        """An SMTP user without its password would log in with an empty one at every delivery."""
        if bool(self.helpdesk_smtp_user) != (self.helpdesk_smtp_password is not None):
            have, missing = ("USER", "PASSWORD") if self.helpdesk_smtp_user else ("PASSWORD", "USER")
            raise ValueError(
                f"POLICYPAL_HELPDESK_SMTP_{have} is set but POLICYPAL_HELPDESK_SMTP_{missing} is not: "
                "set both to log in to the SMTP server, or neither to send without logging in"
            )
        return self

    @model_validator(mode="after")
    def _helpdesk_destination_has_its_address(self) -> Settings:
        """A destination is on only with its address (SMTP host, webhook URL): its other settings alone leave
        it off without a word, and every case stays in the local store where nobody is told of it."""
        needs: dict[str, tuple[object, dict[str, object]]] = {
            "POLICYPAL_HELPDESK_SMTP_HOST": (self.helpdesk_smtp_host, {
                "POLICYPAL_HELPDESK_EMAIL_TO": self.helpdesk_email_to,
                "POLICYPAL_HELPDESK_EMAIL_FROM": self.helpdesk_email_from,
                "POLICYPAL_HELPDESK_SMTP_USER": self.helpdesk_smtp_user,
            }),
            "POLICYPAL_HELPDESK_WEBHOOK_URL": (self.helpdesk_webhook_url, {
                "POLICYPAL_HELPDESK_WEBHOOK_SECRET": self.helpdesk_webhook_secret,
            }),
        }
        for address, (value, others) in needs.items():
            given = [name for name, other in others.items() if other is not None]
            if value is None and given:
                raise ValueError(
                    f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} set but {address} is not: "
                    f"set {address} to deliver cases there, or unset the rest"
                )
        return self

    @model_validator(mode="after")
    def _rerank_dir_names_its_model(self) -> Settings:
        """A model directory alone says nothing: the name tells fastembed which files it holds and how to read them."""
        if self.rerank_model_dir is not None and self.rerank_model is None:
            raise ValueError(
                "POLICYPAL_RERANK_MODEL_DIR is set but POLICYPAL_RERANK_MODEL is not: set the name of the "
                "cross-encoder whose files the directory holds, or unset both to search without reranking"
            )
        return self

    @model_validator(mode="after")
    def _stale_outlasts_heartbeats(self) -> Settings:
        """A live process beats once a sweep interval: a stale time within two intervals makes it look dead
        between beats (or after one late beat), and other replicas take over and fence off its work."""
        if self.worker_stale_s < 2 * self.sweep_interval_s:
            raise ValueError(
                f"POLICYPAL_WORKER_STALE_S ({self.worker_stale_s:g} s) must be at least twice "
                f"POLICYPAL_SWEEP_INTERVAL_S ({self.sweep_interval_s:g} s), the heartbeat's interval, or live "
                "replicas are taken for dead; three times (the defaults: 30 s and 10 s) leaves room for late beats"
            )
        return self

    @property
    def console_enabled(self) -> bool:
        return self.console_secret is not None or self.console_user_header is not None

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
            snippet_chars=self.passage_chars,
            rerank_model=self.rerank_model,
            rerank_model_dir=self.rerank_model_dir,
            rerank_candidates=self.rerank_candidates,
            source_base_url=self.source_base_url,
        )


def load_settings(**overrides: object) -> Settings:
    """Build settings, turning pydantic's errors into one readable ConfigError naming the variables."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [_problem(err["loc"], err["msg"]) for err in exc.errors()]
        raise ConfigError("Invalid configuration:\n  " + "\n  ".join(problems)) from None


def without_secrets(text: str, settings: Settings) -> str:
    """Text for an operator's terminal with each configured secret, and any URL's password, redacted."""
    return Redactor(settings.secret_values()).known(text)


def _blank(value: Any) -> bool:
    return isinstance(value, str) and not value.strip()


def _defaulted_text(name: str) -> bool:
    """A ``str`` or ``Path`` setting with a default (``data_dir``, ``model``, ``collection``, ...)."""
    field = Settings.model_fields.get(name)
    return field is not None and field.annotation in _TEXT_TYPES and field.default is not None


def _optional_text(field: FieldInfo) -> bool:
    """``str | None``, ``SecretStr | None``, ``Path | None`` (validated variants too), not numbers or flags."""
    options = get_args(field.annotation)
    bases = [get_args(o)[0] if get_origin(o) is Annotated else o for o in options]
    return type(None) in bases and any(base in _TEXT_TYPES for base in bases)


def _problem(loc: tuple[int | str, ...], message: str) -> str:
    # pydantic prefixes a validator's own message with "Value error, "; the variable says enough.
    message = message.removeprefix("Value error, ")
    return f"{_variable(str(loc[0]))}: {message}" if loc else message


def _variable(name: str) -> str:
    """The environment variable an operator sets for a field (pydantic reports the field's name)."""
    field = Settings.model_fields.get(name)
    if field is None:
        return name  # already the variable (OPENAI_BASE_URL), as given
    if isinstance(field.validation_alias, AliasChoices):
        return str(field.validation_alias.choices[0])
    return f"POLICYPAL_{name.upper()}"
