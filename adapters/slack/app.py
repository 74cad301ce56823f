"""Slack: slack-bolt's AsyncApp at /slack/events on the shared aiohttp app, and Socket Mode.

Events and button clicks are written to the inbox as soon as their signature checks out, and get
their 200 (or their Socket Mode ack) only once written (adapters/slack/intake.py): nothing Slack was
told we have can be lost. The inbox then runs each one through bolt, in a task it holds, and in a
burst only after the other acks (adapters/slack/tasks.py: measured with benchmarks/slack_ack.py);
bolt's listeners (``process_before_response=True``: inline) do the work under the item's lease.
Replies are outbox rows, posted by ``adapters.slack.sender``.

Retried deliveries never run twice: the inbox is keyed by the event id, which holds across processes
and restarts (Slack has also been seen to redeliver with ``retry_attempt`` 0, so the retry headers
alone are never trusted).

Start-up fails loudly on what would otherwise look like a bot ignoring people: a half-set
configuration, a token of the wrong kind, a token Slack rejects (auth.test). Events addressed to
another app than the token's are logged as errors.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from adapters.app_keys import SERVICE
from adapters.slack.blocks import CANCEL, CONFIRM, FEEDBACK, HANDOFF, HELPFUL, NOT_HELPFUL
from adapters.slack.flows import Click, SlackBridge, Where
from adapters.slack.inbound import BotIdentity, skip_reason, thread_of
from adapters.slack.intake import (
    KIND,
    InboxSocketModeHandler,
    Intake,
    Malformed,
    inbox_key,
    incomplete,
    malformed,
    parse_body,
    retry_headers,
)
from adapters.slack.members import ChannelMembers
from adapters.slack.post import SlackPoster, SlackWriter, slack_error, slack_session, web_client
from adapters.slack.sender import SlackSender
from adapters.slack.tasks import AckFirst
from adapters.slack.users import UserDirectory
from bot.config import Settings
from bot.errors import ConfigError
from bot.identity import GroupMap
from bot.service import PolicyPal
from bot.store import InboxRecord

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
SOCKET_CONNECT_S = 30.0
DRAIN_GRACE_S = 10.0  # beyond the run deadline, for the reply to be posted


@dataclass(frozen=True)
class SlackCredentials:
    """The Slack settings, checked together: HTTP needs the signing secret, Socket Mode the app token."""

    bot_token: str
    signing_secret: str | None
    app_token: str | None
    api_url: str | None


@dataclass
class SlackRuntime:
    """Everything Slack needs while the server runs; built at start-up, closed at shutdown."""

    bolt: AsyncApp
    client: AsyncWebClient
    bridge: SlackBridge
    gate: AckFirst
    bot: BotIdentity
    session: aiohttp.ClientSession
    socket_mode: AsyncSocketModeHandler | None = None
    verifier: SignatureVerifier | None = None

    async def intake(self, body: dict[str, Any], headers: dict[str, Any]) -> bool:
        """Write a request to the inbox (its work starts after the acks); False for a redelivery."""
        key = inbox_key(body)
        assert key is not None
        return await self.bridge.service.inbox.accept(key, "slack", KIND, {"body": body, "headers": headers})

    async def work(self, item: InboxRecord) -> None:
        """An inbox item's work: its request routed by bolt to the listeners, which run it here."""
        request = AsyncBoltRequest(mode="socket_mode", body=item.payload["body"], headers=item.payload.get("headers"))
        failures: list[Exception] = []
        token = _LISTENER_FAILURES.set(failures)
        try:
            response = await self.bolt.async_dispatch(request)
        finally:
            _LISTENER_FAILURES.reset(token)
        if failures:  # the listener's own error, so the inbox can tell Slack being down from a bug
            raise failures[0]
        if response.status >= 500:  # a listener failed (logged by bolt's error handler): the inbox retries
            raise RuntimeError(f"Slack request {item.id}: bolt answered {response.status}")

    def signed_by_slack(self, body: str | bytes, headers: Mapping[str, str]) -> bool:
        """Slack's v0 signature over the body, within five minutes of now."""
        try:
            return self.verifier is not None and self.verifier.is_valid_request(body, headers)
        except ValueError:  # a timestamp that is not a number
            return False

    async def stop_receiving(self) -> None:
        """Leave Socket Mode: Slack sends new events to another connection; replies still go out over the Web API.

        The request listener goes first, so an envelope that arrives while the socket closes is
        neither acknowledged nor run: Slack redelivers it to another replica. Safe to call twice.
        """
        if self.socket_mode is None or self.socket_mode.client.closed:
            return
        self.socket_mode.client.socket_mode_request_listeners.clear()
        await self.socket_mode.close_async()  # type: ignore[no-untyped-call]  # slack_sdk leaves it unannotated
        log.info("Slack Socket Mode closed: new events go to other connections")

    async def close(self, drain_s: float) -> None:
        """Stop taking events, let running work finish (the inbox's), then release the HTTP session."""
        await self.stop_receiving()
        await self.bridge.service.inbox.drain(drain_s)
        await self.bridge.service.outbox.drain(drain_s)
        await self.session.close()


SLACK: web.AppKey[SlackRuntime] = web.AppKey("slack", SlackRuntime)
# What a listener raised while an inbox item was dispatched through bolt (which answers 500 and logs).
_LISTENER_FAILURES: contextvars.ContextVar[list[Exception] | None] = contextvars.ContextVar(
    "policypal_slack_listener_failures", default=None
)


# --- configuration ----------------------------------------------------------------------------------


def slack_credentials(settings: Settings) -> SlackCredentials | None:
    """The Slack configuration, None when Slack is off; ConfigError naming every problem when half-set."""
    token, secret, app_token = (_secret(settings, name) for name in ("bot_token", "signing_secret", "app_token"))
    if not (token or secret or app_token):
        return None
    problems = []
    if not token:
        problems.append("SLACK_BOT_TOKEN is not set, but SLACK_SIGNING_SECRET or SLACK_APP_TOKEN is")
    elif not token.startswith("xoxb-"):
        problems.append(f"SLACK_BOT_TOKEN must be a bot token (xoxb-...), not {_token_kind(token)}")
    if token and not (secret or app_token):
        problems.append(
            "SLACK_BOT_TOKEN is set but neither SLACK_SIGNING_SECRET (HTTP) nor SLACK_APP_TOKEN (Socket Mode) is"
        )
    if app_token and not app_token.startswith("xapp-"):
        problems.append(f"SLACK_APP_TOKEN must be an app-level token (xapp-...), not {_token_kind(app_token)}")
    if problems:
        raise ConfigError("Slack is misconfigured:\n  " + "\n  ".join(problems))
    assert token is not None
    return SlackCredentials(token, secret, app_token, settings.slack_api_url)


def _secret(settings: Settings, name: str) -> str | None:
    value = getattr(settings, f"slack_{name}")
    return (value.get_secret_value().strip() or None) if value is not None else None


def _token_kind(token: str) -> str:
    kinds = {"xoxp-": "a user token (xoxp-)", "xapp-": "an app-level token (xapp-)", "xoxb-": "a bot token"}
    return next((kind for prefix, kind in kinds.items() if token.startswith(prefix)), "an unrecognised token")


def _group_map(settings: Settings) -> GroupMap:
    try:
        return GroupMap.from_json(settings.user_groups)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


# --- the aiohttp side -------------------------------------------------------------------------------


def add_slack_routes(app: web.Application, settings: Settings) -> None:
    """Mount Slack on the server when configured; raise ConfigError at build time when half-configured."""
    credentials = slack_credentials(settings)
    if credentials is None:
        log.info("Slack is off: SLACK_BOT_TOKEN is not set")
        return
    groups = _group_map(settings)
    if credentials.signing_secret:
        app.router.add_post(EVENTS_PATH, slack_events)
    members_cap = settings.shared_audience_max_members if settings.shared_audience == "members" else None
    app.cleanup_ctx.append(_lifecycle(credentials, groups, settings.deadline_s + DRAIN_GRACE_S, members_cap))
    app.on_shutdown.append(_stop_receiving)
    modes = {f"HTTP at {EVENTS_PATH}": credentials.signing_secret, "Socket Mode": credentials.app_token}
    log.info("Slack is on: %s", " and ".join(mode for mode, on in modes.items() if on))


async def slack_events(request: web.Request) -> web.Response:
    """Verify, write down, then answer: events and clicks get their 200 once they are in the inbox.

    Slack needs nothing but a 200 for ``event_callback`` and ``block_actions``, so the signature is
    checked here (slack_sdk's SignatureVerifier, as bolt does) and the request written to the inbox;
    bolt routes it afterwards, once no other request is being acknowledged (``AckFirst``). A request
    that cannot be written gets a 503, so Slack delivers it again. Anything else (url_verification,
    ssl_check) is answered by bolt inline.
    """
    runtime = request.app[SLACK]
    with runtime.gate.acknowledging():
        return await _acknowledge(runtime, request)


async def _acknowledge(runtime: SlackRuntime, request: web.Request) -> web.Response:
    """The signature first (over the raw bytes), then the body: a signed body we cannot read gets a 400.

    A well-formed event with nothing to answer (no channel or ts) gets its 200 and a log line, and no
    run: a 4xx would only make Slack deliver it again, and count against the app's event delivery.
    """
    raw = await request.read()
    if not runtime.signed_by_slack(raw, request.headers):
        log.warning(
            "rejected a request to %s: bad or stale signature. If this repeats, SLACK_SIGNING_SECRET does "
            "not match the Slack app sending the events.",
            EVENTS_PATH,
        )
        return web.Response(status=401, text="invalid request signature")
    try:
        body = parse_body(raw, request.headers.get("Content-Type", "").partition(";")[0].strip() or None)
        reason = malformed(body)
    except Malformed as exc:
        reason = str(exc)
    if reason is not None:
        log.warning("refused a signed request to %s with 400: %s", EVENTS_PATH, reason)
        return web.Response(status=400, text=f"malformed Slack request: {reason}")
    if (reason := incomplete(body)) is not None:
        log.warning("Slack request %s is malformed (%s); acknowledged, nothing runs", inbox_key(body), reason)
        return web.Response(status=200)
    if inbox_key(body) is not None:
        try:
            await runtime.intake(body, retry_headers(request.headers))
        except Exception:
            log.exception("a Slack request could not be written down; answering 503 so Slack delivers it again")
            return web.Response(status=503, text="not written down yet; deliver again")
        return web.Response(status=200)
    return await to_aiohttp_response(await runtime.bolt.async_dispatch(await to_bolt_request(request)))


async def _stop_receiving(app: web.Application) -> None:
    """Shutdown has begun: before the drain, so no event this replica takes from here is cut short.

    Cleanup (``_lifecycle``) comes only after the drain; a socket left open until then keeps
    acknowledging events and starting runs that the drain then cancels.
    """
    if SLACK in app:
        await app[SLACK].stop_receiving()


def _lifecycle(
    credentials: SlackCredentials, groups: GroupMap, drain_s: float, members_cap: int | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def context(app: web.Application) -> AsyncIterator[None]:
        runtime = await start_slack(app[SERVICE], credentials, groups, members_cap=members_cap)
        app[SLACK] = runtime
        try:
            yield
        finally:
            await runtime.close(drain_s)

    return context


async def start_slack(
    service: PolicyPal,
    credentials: SlackCredentials,
    groups: GroupMap,
    *,
    connect: bool = True,
    members_cap: int | None = None,
) -> SlackRuntime:
    """Verify the token, build the bolt app and its listeners, and connect Socket Mode if configured.

    ``members_cap``: answer in channels from what every member may read (channels with up to that
    many members); None: from public documents.
    """
    session = slack_session()
    try:
        client = web_client(credentials.bot_token, session, credentials.api_url)
        bot = await verify_token(client)
    except BaseException:
        await session.close()
        raise
    runtime = _runtime(service, credentials, groups, client, bot, session, members_cap)
    if connect and runtime.socket_mode is not None:
        try:
            await connect_socket_mode(runtime.socket_mode, client)
        except BaseException:
            await runtime.close(0)
            raise
    return runtime


def _runtime(
    service: PolicyPal,
    credentials: SlackCredentials,
    groups: GroupMap,
    client: AsyncWebClient,
    bot: BotIdentity,
    session: aiohttp.ClientSession,
    members_cap: int | None,
) -> SlackRuntime:
    writer, users = SlackWriter(client, bot), UserDirectory(client, groups, home=bot)
    members = None
    if members_cap is not None:
        members = ChannelMembers(
            client,
            users,
            bot_user_id=bot.user_id,
            max_members=members_cap,
            joins=service.store.joins,
            workspace=bot.team_id,
        )
    bridge = SlackBridge(service, SlackPoster(client, bot), writer, users, bot, members)
    gate = AckFirst()
    bolt = build_bolt_app(credentials, web_client(None, session, credentials.api_url), bot)
    register_listeners(bolt, bridge)
    verifier = SignatureVerifier(credentials.signing_secret) if credentials.signing_secret else None
    runtime = SlackRuntime(bolt, client, bridge, gate, bot, session, None, verifier)
    runtime.socket_mode = socket_mode_handler(bolt, credentials, client, runtime.intake)
    # Each item's work starts after the acks of a burst; replies go out through the outbox.
    service.inbox.register(KIND, runtime.work, on_failure=_tell_failure(bridge), admit=gate.then)
    service.outbox.register(SlackSender(writer, service))
    return runtime


def _tell_failure(bridge: SlackBridge) -> Callable[[InboxRecord, str], Awaitable[None]]:
    async def failed(item: InboxRecord, error: str) -> None:
        body = item.payload.get("body") or {}
        event = body.get("event") or {}
        if event.get("type") == "member_joined_channel":  # a join that could not be recorded: nobody asked
            log.error("the join in %s could not be recorded (%s)", event.get("channel"), error)
        elif event.get("channel") and event.get("user"):
            await bridge.failed(Where(str(event["channel"]), thread_of(event), str(event["user"])), item.id)
        elif body.get("type") == "block_actions" and body.get("actions"):
            click = Click.from_payload(body, body["actions"][0])
            await bridge.failed(click.where, item.id)

    return failed


async def connect_socket_mode(handler: AsyncSocketModeHandler, client: AsyncWebClient) -> None:
    """Open the Socket Mode connection; an app token Slack refuses stops the server, loudly.

    slack_sdk's connect retries any failure forever, quietly, so the token is tried once first.
    """
    try:
        await client.apps_connections_open(app_token=handler.app_token)
    except SlackApiError as exc:
        raise ConfigError(f"Slack rejected SLACK_APP_TOKEN (apps.connections.open: {slack_error(exc)})") from None
    try:
        await asyncio.wait_for(handler.connect_async(), SOCKET_CONNECT_S)  # type: ignore[no-untyped-call]
    except TimeoutError:
        raise ConfigError(f"No Socket Mode connection to Slack within {SOCKET_CONNECT_S:.0f} s") from None
    log.info("Slack Socket Mode connected")


async def verify_token(client: AsyncWebClient) -> BotIdentity:
    """auth.test (and bots.info for the app id): a rejected token stops the server, loudly."""
    try:
        auth = await client.auth_test()
    except SlackApiError as exc:
        raise ConfigError(f"Slack rejected SLACK_BOT_TOKEN at start-up (auth.test: {slack_error(exc)})") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise ConfigError(f"Could not reach the Slack Web API at {client.base_url}: {exc}") from None
    if not auth.get("bot_id"):
        raise ConfigError("SLACK_BOT_TOKEN is not a bot token: auth.test returned no bot_id")
    bot = BotIdentity(
        user_id=str(auth["user_id"]),
        bot_id=str(auth["bot_id"]),
        team_id=str(auth.get("team_id") or ""),
        team=str(auth.get("team") or ""),
        url=str(auth.get("url") or ""),
        name=str(auth.get("user") or ""),
        app_id=await _app_id(client, str(auth["bot_id"])),
        enterprise_id=auth.get("enterprise_id") or None,
    )
    log.info(
        "Slack: signed in as @%s (%s) in %s (%s), app %s", bot.name, bot.user_id, bot.team, bot.team_id, bot.app_id
    )
    return bot


async def _app_id(client: AsyncWebClient, bot_id: str) -> str | None:
    try:
        response = await client.bots_info(bot=bot_id)
    except Exception as exc:
        log.warning("bots.info failed (%s): events for another app will not be detected", slack_error(exc))
        return None
    return (response.get("bot") or {}).get("app_id")


# --- bolt -------------------------------------------------------------------------------------------


def build_bolt_app(credentials: SlackCredentials, client: AsyncWebClient, bot: BotIdentity) -> AsyncApp:
    """The bolt app: bolt verifies signatures; authorization reuses the start-up auth.test."""
    authorized = AuthorizeResult(
        enterprise_id=bot.enterprise_id,
        team_id=bot.team_id,
        team=bot.team,
        url=bot.url,
        bot_user_id=bot.user_id,
        bot_id=bot.bot_id,
        bot_token=credentials.bot_token,
    )

    async def authorize() -> AuthorizeResult:
        return authorized  # one workspace, one token, checked at start: no auth.test per request

    return AsyncApp(
        name="policypal",
        logger=_bolt_logger(),
        client=client,
        signing_secret=credentials.signing_secret or "",
        authorize=authorize,
        process_before_response=True,
    )


class _EnvTokenNotice(logging.Filter):
    """Bolt reads SLACK_BOT_TOKEN from the environment by itself, then warns that the client given wins.

    It does, by design (the client carries our base URL, session and retry handlers), so the warning
    would only alarm whoever reads the log.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "`token` will be unused" not in record.getMessage()


def _bolt_logger() -> logging.Logger:
    logger = logging.getLogger("adapters.slack.bolt")
    if not any(isinstance(f, _EnvTokenNotice) for f in logger.filters):
        logger.addFilter(_EnvTokenNotice())
    return logger


def socket_mode_handler(
    bolt: AsyncApp, credentials: SlackCredentials, client: AsyncWebClient, intake: Intake
) -> AsyncSocketModeHandler | None:
    """Socket Mode (inbox write before the ack) when SLACK_APP_TOKEN is set; the server connects it at start."""
    if not credentials.app_token:
        return None
    return InboxSocketModeHandler(bolt, intake, app_token=credentials.app_token, web_client=client)


def register_listeners(bolt: AsyncApp, bridge: SlackBridge) -> None:
    """Each listener does its item's work inline: the request was acknowledged when it was written down."""

    async def start(job: Coroutine[Any, Any, None], where: Where, what: str) -> None:
        log.debug("slack %s in %s/%s", what, where.channel, where.thread_ts)
        try:
            await job
        except Exception as exc:
            failures = _LISTENER_FAILURES.get()
            if failures is not None:
                failures.append(exc)
            raise

    async def on_message(ack: Any, body: dict[str, Any], event: dict[str, Any], request: Any) -> None:
        await ack()
        reason = "addressed to another app" if _for_another_app(body, bridge.bot) else skip_reason(event, bridge.bot)
        if reason:
            log.debug("no run for event %s: %s", body.get("event_id"), reason)
            return
        _log_retry(request, body)
        where = Where(str(event["channel"]), thread_of(event), str(event["user"]))
        await start(bridge.answer(event, body), where, "message")

    async def on_thread_started(ack: Any, event: dict[str, Any]) -> None:
        await ack()
        await bridge.assistant_thread_started(event)

    async def ack_only(ack: Any) -> None:
        await ack()

    async def on_stopped(ack: Any, body: dict[str, Any], event: dict[str, Any]) -> None:
        await ack()
        if not _for_another_app(body, bridge.bot):
            await bridge.stop(event, str(body.get("team_id") or ""))

    async def on_member_joined(ack: Any, event: dict[str, Any]) -> None:
        await ack()
        await bridge.joined(event)  # a join not recorded raises: the inbox works on the event again

    bolt.event("message")(on_message)
    bolt.event("app_mention")(on_message)
    bolt.event("assistant_thread_started")(on_thread_started)
    bolt.event("assistant_thread_context_changed")(ack_only)
    bolt.event("agent_session_stopped")(on_stopped)
    bolt.event("member_joined_channel")(on_member_joined)  # the channel's readers changed
    _register_actions(bolt, bridge, start)
    bolt.error(_on_bolt_error)


def _register_actions(bolt: AsyncApp, bridge: SlackBridge, start: Callable[..., Awaitable[None]]) -> None:
    def on_click(make_job: Callable[[Click], Coroutine[Any, Any, None]], what: str) -> Callable[..., Any]:
        async def listener(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            if _for_another_app(body, bridge.bot):
                return
            click = Click.from_payload(body, action)
            await start(make_job(click), click.where, what)

        return listener

    bolt.action(CONFIRM)(on_click(lambda c: bridge.decide(c, "confirm"), "confirm"))
    bolt.action(CANCEL)(on_click(lambda c: bridge.decide(c, "cancel"), "cancel"))
    bolt.action(HELPFUL)(on_click(lambda c: bridge.feedback(c, "helpful"), "feedback"))
    bolt.action(NOT_HELPFUL)(on_click(lambda c: bridge.feedback(c, "not_helpful"), "feedback"))
    bolt.action(FEEDBACK)(on_click(bridge.rate, "feedback"))
    bolt.action(HANDOFF)(on_click(bridge.handoff, "handoff"))


def _for_another_app(body: dict[str, Any], bot: BotIdentity) -> bool:
    """An event for another app than the token's: the token and the signing secret do not match."""
    app_id = body.get("api_app_id")
    if bot.app_id and app_id and app_id != bot.app_id:
        log.error(
            "Slack sent an event for app %s, but SLACK_BOT_TOKEN belongs to app %s: the token and the "
            "signing secret (or app token) come from different Slack apps. Nothing was answered.",
            app_id,
            bot.app_id,
        )
        return True
    return False


def _log_retry(request: Any, body: dict[str, Any]) -> None:
    headers = getattr(request, "headers", {}) or {}
    number = (headers.get("x-slack-retry-num") or [None])[0]
    if number not in (None, "0") or body.get("retry_attempt"):  # Socket Mode's first delivery says attempt 0
        reason = (headers.get("x-slack-retry-reason") or ["?"])[0]
        log.info("Slack redelivered event %s (retry %s, %s)", body.get("event_id"), number, reason)


async def _on_bolt_error(error: Exception, body: dict[str, Any]) -> None:
    log.error("Slack request failed (%s); the inbox runs it again", type(error).__name__, exc_info=error)
