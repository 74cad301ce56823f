"""Microsoft Teams on botbuilder: a CloudAdapter at /api/messages in the shared aiohttp app.

This is the only module that imports the Bot Framework SDK. It authenticates each request
(``CloudAdapter`` + ``ConfigurationBotFrameworkAuthentication``), hands the activity to
``adapters.teams.handler.TeamsBot`` as the protocol JSON it arrived as, and gives that bot a
``BotFrameworkConnector`` to post, update and look up members through. Moving to the Microsoft 365
Agents SDK (botbuilder-python is archived) means rewriting this file only.

Authentication modes, chosen from settings at start:

* ``MicrosoftAppId`` + ``MicrosoftAppPassword`` (or a managed identity): every request needs a valid
  Bot Framework token; one without gets 401 and starts nothing.
* Neither, with ``POLICYPAL_TEAMS_ALLOW_UNAUTHENTICATED=1``: no token checks, for the Bot Framework
  Emulator and tests. Logged loudly at start.
* Neither: /api/messages answers 401 to everything.

Every activity the bot acts on is written to the inbox inside the turn, before the HTTP answer
(adapters/teams/handler.py). The SDK runs the turn inside ``adapter.process`` and would swallow an
exception there (``on_turn_error``), so a write that fails is reported out of the turn through
``_INTAKE`` and answered with a 503: Bot Framework then delivers the activity again.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from types import SimpleNamespace
from typing import Any, Literal, TypeVar

import jwt
from aiohttp import web
from azure.core.exceptions import DeserializationError  # what msrest raises (it re-exports it)
from botbuilder.core import CloudAdapterBase, InvokeResponse, TurnContext
from botbuilder.core.teams import TeamsActivityHandler
from botbuilder.integration.aiohttp import CloudAdapter, ConfigurationBotFrameworkAuthentication
from botbuilder.schema import (
    Activity,
    AdaptiveCardInvokeResponse,
    ChannelAccount,
    ConversationParameters,
    ConversationReference,
    Error,
    ErrorResponse,
)
from botframework.connector.aio import ConnectorClient
from msrest.serialization import Model
from urllib3 import Retry

from adapters.app_keys import SERVICE
from adapters.teams import cards
from adapters.teams.activity import parse_tenants, personal_reference, tenant_of_reference
from adapters.teams.connector import http_status
from adapters.teams.handler import TeamsBot, TeamsOptions
from adapters.teams.refusal import ROUTE, mount_refusal
from bot.config import Settings
from bot.delivery import RetryPolicy, Transient, with_retries
from bot.errors import ConfigError
from bot.identity import GroupMap

log = logging.getLogger(__name__)

Json = dict[str, Any]
AuthMode = Literal["credentials", "unauthenticated", "off"]
CARD_ACTION = "adaptiveCard/action"
SUBMIT_ACTION = "message/submitAction"  # the feedback loop's thumbs (channelData.feedbackLoopEnabled)

# The activity exactly as posted: the SDK's model objects drop fields Teams sends (mention text,
# conversation.tenantId), and the bot works on protocol JSON anyway.
_RAW_ACTIVITY: contextvars.ContextVar[Json | None] = contextvars.ContextVar("teams_raw_activity", default=None)


@dataclass
class _Written:
    """Whether the turn could write its activity down; the HTTP answer is a 503 when it could not."""

    ok: bool = True


_INTAKE: contextvars.ContextVar[_Written | None] = contextvars.ContextVar("teams_intake", default=None)

# The connector's own retries of throttling and overload, within the outbox's time for one attempt
# (20 s): beyond that the outbox retries the row later, from any process.
SEND_RETRY = RetryPolicy(attempts=4, first_s=0.5, max_wait_s=5.0, total_s=15.0)
# How long a roster lookup may go unanswered: the person's answer waits for it (msrest alone waits 100 s).
# Teams answers in well under a second; past this, the asker counts as a guest for the turn.
ROSTER_TIMEOUT_S = 5.0


APP_TYPES = {name.lower(): name for name in ("MultiTenant", "SingleTenant", "UserAssignedMSI")}


def auth_mode(settings: Settings) -> AuthMode:
    """Which of the three modes the settings ask for; a half-set credential pair is a config error."""
    app_id = settings.microsoft_app_id
    password = settings.microsoft_app_password.get_secret_value() if settings.microsoft_app_password else ""
    app_type = (settings.microsoft_app_type or "MultiTenant").lower()
    if app_type not in APP_TYPES:
        raise ConfigError(f"Teams: MicrosoftAppType must be one of {', '.join(APP_TYPES.values())}, "
                          f"not {settings.microsoft_app_type!r}.")
    managed = app_type == "userassignedmsi"
    if app_id and app_type != "multitenant" and not settings.microsoft_app_tenant_id:
        raise ConfigError(f"Teams: MicrosoftAppType {APP_TYPES[app_type]} needs MicrosoftAppTenantId "
                          "(the Entra tenant the bot is registered in).")
    if app_id and (password or managed):
        return "credentials"
    if app_id or password:
        raise ConfigError("Teams: set both MicrosoftAppId and MicrosoftAppPassword (or neither).")
    return "unauthenticated" if settings.teams_allow_unauthenticated else "off"


def add_teams_routes(app: web.Application, settings: Settings) -> None:
    """Mount /api/messages; without credentials it refuses everything unless explicitly unauthenticated."""
    mode = auth_mode(settings)
    if mode == "off":
        mount_refusal(app)
        return
    if mode == "unauthenticated":
        log.error(
            "TEAMS AUTHENTICATION IS OFF: %s accepts activities from anyone without a Bot Framework token. "
            "Use this only with the Bot Framework Emulator or in tests; never expose it.",
            ROUTE,
        )
    teams = TeamsEndpoint(settings)
    app[TEAMS] = teams
    app.cleanup_ctx.append(teams.context)
    app.router.add_post(ROUTE, teams.messages)
    log.info("Teams on at %s (%s)", ROUTE, mode)


class TeamsEndpoint:
    """The aiohttp handler and the SDK objects behind it; the bot is built once the service is open."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.mode = auth_mode(settings)
        self.adapter = build_adapter(settings)
        self.connector = BotFrameworkConnector(self.adapter, settings.microsoft_app_id, retry=SEND_RETRY)
        self.handler: _Handler | None = None

    async def context(self, app: web.Application) -> AsyncIterator[None]:
        """Runs after the service context (appended later), so the service is open; drains work at stop.

        Registers the inbox kinds and the outbox sender first: from here on this process does Teams
        work, its own and whatever the sweeper hands it from dead processes.
        """
        bot = TeamsBot(app[SERVICE], self.connector, options_from(self.settings))
        bot.register()
        self.handler = _Handler(bot)
        yield
        await bot.drain()

    async def messages(self, request: web.Request) -> web.StreamResponse:
        if self.handler is None:
            return web.json_response({"error": "starting"}, status=503)
        if self.mode == "credentials" and not _looks_like_bearer_jwt(request.headers.get("Authorization", "")):
            # Refused before the SDK, which would fetch Microsoft's signing keys for any token at all.
            return web.json_response({"error": "a Bot Framework token is required"}, status=401)
        raw = await _json_body(request)
        if raw is None:  # the SDK would answer a missing, unreadable or non-object body with a 500
            log.warning("teams: refused a request with 400: the body is not a JSON object")
            return web.json_response({"error": "the body must be a JSON activity"}, status=400)
        if (reason := _unreadable(raw)) is not None:  # the SDK reads it before the token, and answers 500
            log.warning("teams: refused activity %r with 400: %s", raw.get("id"), reason)
            return web.json_response({"error": "the body is not a readable activity"}, status=400)
        written = _Written()
        token, intake = _RAW_ACTIVITY.set(raw), _INTAKE.set(written)
        try:
            response = await self.adapter.process(request, self.handler)
        except InvalidToken as exc:
            log.warning("teams: refused an activity with an invalid Bot Framework token: %s", exc)
            return web.json_response({"error": "invalid Bot Framework token"}, status=401)
        finally:
            _RAW_ACTIVITY.reset(token)
            _INTAKE.reset(intake)
        if not written.ok:  # nothing ran: Bot Framework delivers it again
            return web.json_response({"error": "not written down yet; deliver again"}, status=503)
        return response or web.Response(status=HTTPStatus.OK)


TEAMS: web.AppKey[TeamsEndpoint] = web.AppKey("teams", TeamsEndpoint)


def options_from(settings: Settings) -> TeamsOptions:
    return TeamsOptions(
        allowed_tenants=parse_tenants(settings.teams_allowed_tenants),
        groups=GroupMap.from_json(settings.user_groups),
        members_cap=settings.shared_audience_max_members if settings.shared_audience == "members" else None,
    )


def build_adapter(settings: Settings) -> CloudAdapter:
    """A CloudAdapter with the app's credentials (empty ones: authentication disabled)."""
    password = settings.microsoft_app_password.get_secret_value() if settings.microsoft_app_password else ""
    config = SimpleNamespace(
        APP_ID=settings.microsoft_app_id or "",
        APP_PASSWORD=password,
        APP_TYPE=settings.microsoft_app_type or "MultiTenant",
        APP_TENANTID=settings.microsoft_app_tenant_id or "",
    )
    adapter = CloudAdapter(_Authentication(config))
    adapter.on_turn_error = _on_turn_error
    return adapter


class InvalidToken(Exception):
    """A Bot Framework token that failed validation: expired, badly signed, or naming an unknown key."""


class _Authentication(ConfigurationBotFrameworkAuthentication):
    """The SDK's request authentication, with its token-validation failures made one recognisable error.

    botframework lets PyJWT's errors through, and an IndexError / KeyError for a token whose ``kid``
    is unknown or missing; unconverted, aiohttp answers them with a 500 and a traceback. A well-signed
    token that is not for this bot (another app id, issuer or service URL) is a PermissionError, which
    CloudAdapter turns into a bare 401 that logs nothing: a wrong MicrosoftAppId looked like silence.
    """

    async def authenticate_request(self, activity: Activity, auth_header: str) -> Any:
        try:
            return await super().authenticate_request(activity, auth_header)
        except (jwt.PyJWTError, IndexError, KeyError, PermissionError) as exc:
            raise InvalidToken(f"{type(exc).__name__}: {exc}") from exc


async def _on_turn_error(turn_context: TurnContext, error: Exception) -> None:
    # The bot answers invokes and acknowledges messages itself; an error here is a bug: log it, and
    # tell the user rather than leave them with silence.
    log.error("teams: unhandled error in turn %s", turn_context.activity.id, exc_info=error)
    if turn_context.activity.type == "message":
        await turn_context.send_activity("Sorry, something went wrong on my side. Please try again.")


def _looks_like_bearer_jwt(header: str) -> bool:
    scheme, _, token = header.partition(" ")
    return scheme == "Bearer" and token.count(".") == 2 and all(token.split("."))


async def _json_body(request: web.Request) -> Json | None:
    if "application/json" not in request.headers.get("Content-Type", ""):
        return None
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _unreadable(raw: Json) -> str | None:
    """Why the SDK cannot read this activity (a part of the wrong type, e.g. ``"from": 5``), or None."""
    try:
        Activity().deserialize(raw)
    except DeserializationError as exc:
        return str(exc)
    return None


class _Handler(TeamsActivityHandler):
    """Routes messages, card clicks and its own install to the bot; the stock handler does the rest."""

    def __init__(self, bot: TeamsBot) -> None:
        self.bot = bot

    async def on_message_activity(self, turn_context: TurnContext) -> None:
        await _written_down(self.bot.on_message(_activity_json(turn_context)))

    async def on_conversation_update_activity(self, turn_context: TurnContext) -> None:
        """Members added go to the bot as they came; other updates (removals, renames) need nothing.

        Not the SDK's Teams dispatch: it looks up every added member but the bot on the roster inside the
        request, and one lookup refused (someone not found, the connector busy) failed the turn after its
        acknowledgement, so the install's welcome was lost for good and a team's new members cost a call each.
        """
        if turn_context.activity.members_added:
            await _written_down(self.bot.on_members_added(_activity_json(turn_context)))

    async def on_invoke_activity(self, turn_context: TurnContext) -> InvokeResponse | None:
        if turn_context.activity.name == SUBMIT_ACTION:  # Teams' feedback loop: stored, then a plain 200
            if await self.bot.on_feedback_loop(_activity_json(turn_context)) == "not_saved":
                return InvokeResponse(status=HTTPStatus.INTERNAL_SERVER_ERROR, body=_vote_not_saved())
            return InvokeResponse(status=HTTPStatus.OK)
        if turn_context.activity.name != CARD_ACTION:
            return await super().on_invoke_activity(turn_context)
        body = await _written_down(self.bot.on_card_action(_activity_json(turn_context)))
        if body is None:  # answered 503 by ``messages``
            return InvokeResponse(status=HTTPStatus.SERVICE_UNAVAILABLE)
        return InvokeResponse(status=HTTPStatus.OK, body=_invoke_body(body))


def _invoke_body(body: Json) -> Any:
    """The answer as a model object, not a dict: CloudAdapter serializes the body again (NOTES: botbuilder 4.17.1).

    A card answer is the SDK's own model; a message answer (text that leaves the card as it is) has a
    string value, which that model's ``{object}`` value cannot carry.
    """
    if isinstance(body["value"], dict):
        return AdaptiveCardInvokeResponse(status_code=body["statusCode"], type=body["type"], value=body["value"])
    return _MessageAnswer(status_code=body["statusCode"], type=body["type"], value=body["value"])


def _vote_not_saved() -> ErrorResponse:
    """The Bot Framework's error body, as a model (CloudAdapter cannot serialize a dict): Teams tells the voter
    it failed, where a 200 would say the vote was kept."""
    return ErrorResponse(error=Error(code="FeedbackNotSaved", message=cards.FEEDBACK_NOT_SAVED_TEXT))


class _Entity(Model):
    """An activity entity with all its fields: botbuilder's ``Entity`` model serializes ``type`` alone."""

    _attribute_map = {  # noqa: RUF012  (msrest reads it from the class)
        "additional_properties": {"key": "", "type": "{object}"},
        "type": {"key": "type", "type": "str"},
    }

    def __init__(self, *, type: str, additional_properties: Json) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # msrest leaves it unannotated
        self.type = type
        self.additional_properties = additional_properties

    @classmethod
    def of(cls, entity: Json) -> _Entity:
        return cls(type=str(entity.get("type") or ""), additional_properties={k: v for k, v in entity.items()
                                                                              if k != "type"})


class _MessageAnswer(Model):
    """An ``adaptiveCard/action`` answer whose value is a message for the clicker (the card stays as it is)."""

    _attribute_map = {  # noqa: RUF012  (msrest reads it from the class)
        "status_code": {"key": "statusCode", "type": "int"},
        "type": {"key": "type", "type": "str"},
        "value": {"key": "value", "type": "str"},
    }

    def __init__(self, *, status_code: int, type: str, value: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # msrest leaves it unannotated
        self.status_code = status_code
        self.type = type
        self.value = value


T = TypeVar("T")


async def _written_down(intake: Awaitable[T]) -> T | None:
    """Run the bot's intake of an activity; a failure to write it down is passed out of the turn, not raised.

    Raised, the SDK would hand it to ``on_turn_error`` (an apology posted, and a 201 that tells Teams
    the activity arrived); passed out, it becomes a 503 and the activity is delivered again.
    """
    try:
        return await intake
    except Exception:
        log.exception("teams: an activity could not be written down; answering 503 so it is delivered again")
        written = _INTAKE.get()
        if written is not None:
            written.ok = False
        return None


def _activity_json(turn_context: TurnContext) -> Json:
    raw = _RAW_ACTIVITY.get()
    if raw is not None and raw.get("id") == turn_context.activity.id:
        return raw
    serialized: Json = turn_context.activity.serialize()
    return serialized


@dataclass
class BotFrameworkConnector:
    """Outbound calls (post, update, member lookup, opening a personal chat) through a stored reference's
    service and bot identity, as proactive turns."""

    adapter: CloudAdapter
    app_id: str | None
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    async def send(self, reference: Json, activity: Json) -> str:
        """Post, retrying throttling and overload; a typing indicator gets one try (late, it is useless)."""

        async def post(client: ConnectorClient, outgoing: Activity) -> str:
            sent = await client.conversations.send_to_conversation(outgoing.conversation.id, outgoing)
            return str(getattr(sent, "id", "") or "")

        if activity.get("type") == "typing":
            return str(await self._call(reference, activity, post))
        return str(await self._retried(f"posting to {_conversation_id(reference)}", reference, activity, post))

    async def update(self, reference: Json, activity_id: str, activity: Json) -> None:
        """Replace a posted activity, retrying throttling and overload."""

        async def put(client: ConnectorClient, outgoing: Activity) -> None:
            outgoing.id = activity_id
            await client.conversations.update_activity(outgoing.conversation.id, activity_id, outgoing)

        what = f"updating {activity_id} in {_conversation_id(reference)}"
        await self._retried(what, reference, activity, put)

    async def member(self, reference: Json, user_id: str) -> Json | None:
        """One try: a caller that gets no roster entry goes on without it (msrest alone would retry a GET
        on 5xx and sleep out a 429's Retry-After, uncapped, holding the turn that waits for it)."""

        async def lookup(client: ConnectorClient, outgoing: Activity) -> Json:
            _for_roster(client)
            found = await client.conversations.get_conversation_member(outgoing.conversation.id, user_id)
            return dict(found.serialize(), **(found.additional_properties or {}))

        member: Json | None = await self._call(reference, {"type": "message"}, lookup)
        return member

    async def members(self, reference: Json) -> list[Json]:
        """The roster, one try (as ``member``): a caller that cannot read it answers from public documents."""

        async def roster(client: ConnectorClient, outgoing: Activity) -> list[Json]:
            _for_roster(client)
            found = await client.conversations.get_conversation_members(outgoing.conversation.id)
            return [dict(m.serialize(), **(m.additional_properties or {})) for m in found]

        entries: list[Json] = await self._call(reference, {"type": "message"}, roster)
        return entries

    async def personal(self, reference: Json, user_id: str) -> Json:
        """Create the personal chat with ``user_id`` (Teams answers with the existing one if there is one),
        retrying throttling and overload; a 403 (not installed for them) is for the caller to handle."""
        tenant = tenant_of_reference(reference)

        async def create(client: ConnectorClient, outgoing: Activity) -> Json:
            parameters = ConversationParameters(
                is_group=False,
                bot=outgoing.from_property,  # the reference's bot, as apply_conversation_reference set it
                members=[ChannelAccount(id=user_id)],
                tenant_id=tenant or None,
                channel_data={"tenant": {"id": tenant}} if tenant else None,
            )
            created = await client.conversations.create_conversation(parameters)
            return personal_reference(reference, user_id, str(created.id), created.service_url)

        chat: Json = await self._retried(f"opening a personal chat with {user_id}", reference, {"type": "message"},
                                         create)
        return chat

    async def _retried(
        self, what: str, reference: Json, activity: Json, work: Callable[[ConnectorClient, Activity], Awaitable[Any]]
    ) -> Any:
        async def once(client: ConnectorClient, outgoing: Activity) -> Any:
            _without_sdk_retries(client)
            return await work(client, outgoing)

        return await with_retries(lambda: self._call(reference, activity, once), self.retry, refused_for_now, what=what)

    async def _call(
        self, reference: Json, activity: Json, work: Callable[[ConnectorClient, Activity], Awaitable[Any]]
    ) -> Any:
        """Run ``work`` with a connector client for the reference's service URL and bot identity.

        The activity goes straight to the conversation in the reference (which carries the
        ``;messageid=`` of the thread), not through ``TurnContext.send_activity``, which would aim it
        at the continuation activity's made-up id.
        """
        ref = ConversationReference().deserialize(reference)
        outgoing = TurnContext.apply_conversation_reference(Activity().deserialize(activity), ref)
        outgoing.reply_to_id = None
        if activity.get("entities"):  # msrest's Entity keeps only ``type``: the label, citations, stream info
            outgoing.entities = [_Entity.of(entity) for entity in activity["entities"]]
        result: list[Any] = []
        failed: list[Exception] = []

        async def callback(turn_context: TurnContext) -> None:
            client = turn_context.turn_state[CloudAdapterBase.BOT_CONNECTOR_CLIENT_KEY]
            try:
                result.append(await work(client, outgoing))
            except Exception as exc:  # the adapter would hand it to on_turn_error and return normally
                failed.append(exc)

        await self.adapter.continue_conversation(ref, callback, bot_app_id=self.app_id or None)
        if failed:
            raise failed[0]
        return result[0] if result else None


def _without_sdk_retries(client: ConnectorClient) -> None:
    """Leave retrying to our policy: msrest's urllib3 retries PUTs itself and sleeps any Retry-After, uncapped."""

    def configure(session: Any, global_config: Any, local_config: Any, **kwargs: Any) -> Json:
        for adapter in session.adapters.values():  # msrest's documented per-request session hook
            adapter.max_retries = Retry(total=0, status_forcelist=(), raise_on_status=False)
        return kwargs

    client.config.session_configuration_callback = configure


def _for_roster(client: ConnectorClient) -> None:
    """One quick try: a roster the connector does not answer must not hold the turn waiting for it."""
    _without_sdk_retries(client)
    client.config.connection.timeout = ROSTER_TIMEOUT_S


def _conversation_id(reference: Json) -> str:
    return str((reference.get("conversation") or {}).get("id") or "?")


def connector_for(settings: Settings) -> BotFrameworkConnector:
    """A connector with the adapter's credentials, for senders outside a conversation (helpdesk posts)."""
    if auth_mode(settings) == "off":
        raise ConfigError("Teams: MicrosoftAppId/MicrosoftAppPassword are needed to post to a Teams channel.")
    return BotFrameworkConnector(build_adapter(settings), settings.microsoft_app_id)


TRANSIENT = frozenset({412, 429, 502, 503, 504})  # the connector's "busy": throttling and overload


def refused_for_now(exc: Exception) -> Transient | None:
    """A connector refusal worth retrying (429 with its Retry-After, 412, 5xx overload); a 400 or 403 is not."""
    status = http_status(exc)
    return Transient(retry_after_s(exc), status) if status in TRANSIENT else None


def retry_after_s(exc: BaseException) -> float | None:
    """``Retry-After`` in seconds, given as seconds or as an HTTP date; None when absent or unreadable."""
    headers: Any = getattr(getattr(exc, "response", None), "headers", None) or {}
    value = str(headers.get("Retry-After") or "").strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError):
        return None
