"""Who may post to /api/messages: Bot Framework tokens with credentials, nobody without, anyone only when told."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import types
from typing import Any

import botframework.connector.auth.jwt_token_extractor as jwt_token_extractor
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from adapters.teams import add_teams_routes, auth_mode
from bot.errors import ConfigError
from tests.adapters.teams.test_app import running_teams
from tests.bot.helpers import settings_for
from tests.fakes.openai_server import text

CREDENTIALS = {"microsoft_app_id": "00000000-0000-0000-0000-00000000a11c", "microsoft_app_password": "not-a-secret"}


async def harness(tmp_path, fake_openai, sample_index, monkeypatch, **overrides: Any):
    runner = running_teams(tmp_path, fake_openai, sample_index, monkeypatch, **overrides)
    return runner, await runner.__anext__()


async def test_with_credentials_a_request_without_a_token_gets_401_and_starts_nothing(
    tmp_path, fake_openai, sample_index, monkeypatch
):
    runner, teams = await harness(
        tmp_path, fake_openai, sample_index, monkeypatch, teams_allow_unauthenticated=False, **CREDENTIALS
    )
    try:
        for headers in (
            None,
            {"Authorization": ""},
            {"Authorization": "Bearer not-a-jwt"},
            {"Authorization": "Basic YTpi"},
        ):
            status, _ = await teams.post(teams.channel.personal_message("hello"), headers=headers)
            assert status == 401
        invoke = teams.channel.card_action("confirm", {"pending_id": "p", "args_hash": "h"}, on=_fake_card())
        assert (await teams.post(invoke))[0] == 401
        await asyncio.sleep(0.2)
        assert teams.model.requests == [] and teams.channel.recorded == []
        assert await teams.service.store.runs.recent() == []
    finally:
        await runner.aclose()


async def test_without_credentials_every_request_is_refused(tmp_path, fake_openai, sample_index, monkeypatch):
    runner, teams = await harness(tmp_path, fake_openai, sample_index, monkeypatch, teams_allow_unauthenticated=False)
    try:
        status, _ = await teams.post(teams.channel.personal_message("hello"))
        await asyncio.sleep(0.1)
        assert status == 401 and teams.model.requests == [] and teams.channel.recorded == []
    finally:
        await runner.aclose()


def test_unauthenticated_mode_is_logged_loudly(tmp_path, fake_openai, caplog):
    from aiohttp import web

    settings = settings_for(tmp_path, fake_openai, teams_allow_unauthenticated=True)
    with caplog.at_level(logging.WARNING, logger="adapters.teams.app"):
        add_teams_routes(web.Application(), settings)
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "AUTHENTICATION IS OFF" in record.getMessage()


def test_a_half_configured_app_is_a_config_error(tmp_path, fake_openai):
    settings = settings_for(tmp_path, fake_openai, microsoft_app_id="some-app-id")
    with pytest.raises(ConfigError, match="MicrosoftAppPassword"):
        auth_mode(settings)


def test_a_single_tenant_app_needs_its_tenant_and_an_unknown_app_type_is_refused(tmp_path, fake_openai):
    for app_type in ("SingleTenant", "UserAssignedMSI"):
        settings = settings_for(tmp_path, fake_openai, microsoft_app_type=app_type, **CREDENTIALS)
        with pytest.raises(ConfigError, match=f"MicrosoftAppType {app_type} needs MicrosoftAppTenantId"):
            auth_mode(settings)
    tenant = settings_for(tmp_path, fake_openai, microsoft_app_type="singletenant", microsoft_app_tenant_id="t-1",
                          **CREDENTIALS)
    assert auth_mode(tenant) == "credentials"
    with pytest.raises(ConfigError, match="MicrosoftAppType must be one of MultiTenant, SingleTenant"):
        auth_mode(settings_for(tmp_path, fake_openai, microsoft_app_type="Multi", **CREDENTIALS))


def test_the_modes(tmp_path, fake_openai):
    assert auth_mode(settings_for(tmp_path, fake_openai)) == "off"
    assert auth_mode(settings_for(tmp_path, fake_openai, teams_allow_unauthenticated=True)) == "unauthenticated"
    assert auth_mode(settings_for(tmp_path, fake_openai, **CREDENTIALS)) == "credentials"
    # credentials win: setting the Emulator flag on a registered bot does not turn checks off
    both = settings_for(tmp_path, fake_openai, teams_allow_unauthenticated=True, **CREDENTIALS)
    assert auth_mode(both) == "credentials"


def _fake_card() -> Any:
    from tests.fakes.bot_connector import Recorded

    return Recorded("send", "a:personal-29:alice", None, {}, {}, "out-1")


# --- tokens checked against signing keys served from a local RSA key ------------------------------

SIGNING_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def serve_signing_keys(monkeypatch: pytest.MonkeyPatch, failure: Exception | None = None) -> None:
    """Answer the SDK's OpenID metadata and key fetches locally with SIGNING_KEY as kid "k1"."""
    jwk = {**json.loads(RSAAlgorithm.to_jwk(SIGNING_KEY.public_key())), "kid": "k1", "endorsements": ["msteams"]}

    def get(url: str, *args: Any, **kwargs: Any) -> Any:
        if failure is not None:
            raise failure
        document = {"jwks_uri": "https://keys.invalid/jwks"} if "configuration" in url else {"keys": [jwk]}
        return types.SimpleNamespace(raise_for_status=lambda: None, json=lambda: document)

    monkeypatch.setattr(jwt_token_extractor.requests, "get", get)
    monkeypatch.setattr(jwt_token_extractor.JwtTokenExtractor, "metadataCache", {})  # the SDK caches keys globally


async def question_run(teams: Any) -> str:
    for _ in range(100):
        if runs := await teams.service.store.runs.recent():
            return runs[0].question
        await asyncio.sleep(0.05)
    raise AssertionError("no run started")


def bot_token(service_url: str, key: Any = SIGNING_KEY, kid: str | None = "k1", **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": "https://api.botframework.com", "aud": CREDENTIALS["microsoft_app_id"], "serviceurl": service_url,
            "exp": now + 600, "nbf": now - 10, **claims}
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid} if kid else None)


async def test_an_invalid_token_gets_401_with_one_warning_and_starts_nothing(
    tmp_path, fake_openai, sample_index, monkeypatch, caplog
):
    serve_signing_keys(monkeypatch)
    runner, teams = await harness(
        tmp_path, fake_openai, sample_index, monkeypatch, teams_allow_unauthenticated=False, **CREDENTIALS
    )
    url = teams.channel.service_url
    invalid = {
        "expired": bot_token(url, exp=int(time.time()) - 3600),
        "signed by another key": bot_token(url, key=OTHER_KEY),
        "unknown kid": bot_token(url, kid="nope"),
        "no kid": bot_token(url, kid=None),
    }
    try:
        with caplog.at_level(logging.WARNING, logger="adapters.teams.app"):
            for name, token in invalid.items():
                status, _ = await teams.post(teams.channel.personal_message(name), {"Authorization": f"Bearer {token}"})
                assert status == 401, name
        warnings = [r for r in caplog.records if r.name == "adapters.teams.app" and r.levelno == logging.WARNING]
        assert len(warnings) == len(invalid) and not any(r.exc_info for r in caplog.records)
        await asyncio.sleep(0.2)
        assert await teams.service.store.runs.recent() == [] and teams.channel.recorded == []
        teams.model.script(text("Valid."))  # the same keys let a good token in
        good = {"Authorization": f"Bearer {bot_token(url)}"}
        status, _ = await teams.post(teams.channel.personal_message("hi"), good)
        assert status == 201 and await question_run(teams) == "hi"  # the reply needs Microsoft's token service
        serve_signing_keys(monkeypatch, failure=RuntimeError("key endpoint down"))  # not a token problem
        status, _ = await teams.post(teams.channel.personal_message("later"), good)
        assert status == 500
    finally:
        await runner.aclose()


async def test_a_good_token_for_another_bot_gets_401_and_a_warning_saying_why(
    tmp_path, fake_openai, sample_index, monkeypatch, caplog
):
    """Another app id (a wrong MicrosoftAppId), issuer or service URL: CloudAdapter answered a bare 401, logged
    nowhere, so a misconfigured bot just went quiet."""
    serve_signing_keys(monkeypatch)
    runner, teams = await harness(
        tmp_path, fake_openai, sample_index, monkeypatch, teams_allow_unauthenticated=False, **CREDENTIALS
    )
    url = teams.channel.service_url
    not_ours = {
        "Invalid AppId": bot_token(url, aud="11111111-0000-0000-0000-000000000000"),
        "No valid identity": bot_token(url, iss="https://issuer.invalid"),
        "service_url claim": bot_token(url, serviceurl="https://smba.invalid/"),
    }
    try:
        with caplog.at_level(logging.WARNING, logger="adapters.teams.app"):
            for reason, token in not_ours.items():
                caplog.clear()
                status, body = await teams.post(teams.channel.personal_message(reason),
                                                {"Authorization": f"Bearer {token}"})
                (warning,) = [r.getMessage() for r in caplog.records if r.name == "adapters.teams.app"]
                assert (status, body) == (401, {"error": "invalid Bot Framework token"}), reason
                assert reason in warning and token not in warning
        await asyncio.sleep(0.2)
        assert await teams.service.store.runs.recent() == [] and teams.channel.recorded == []
    finally:
        await runner.aclose()
