"""Who gets in: every console route answers 401 without an operator; the secret's sign-in and a proxy's header."""

from __future__ import annotations

import re

import aiohttp
import pytest

from adapters.web import CONSOLE_PATH, console_app
from bot.config import Settings
from tests.adapters.web.conftest import SECRET

pytestmark = pytest.mark.asyncio


def console_routes() -> list[tuple[str, str]]:
    """Every (method, path) the console serves, read from its router: a route added later is covered too."""
    app = console_app(Settings(_env_file=None, console_secret=SECRET))  # type: ignore[call-arg]
    routes = []
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource else {}
        path = info.get("path") or info.get("formatter") or info.get("prefix", "")
        path = re.sub(r"\{number[^}]*\}", "1", path)
        path = re.sub(r"\{[^}]+\}", "x", path)
        if "prefix" in info:  # the static files
            path += "/htmx.min.js"
        routes.append((route.method, CONSOLE_PATH + path))
    return sorted(set(routes))


async def test_every_console_route_answers_401_without_an_operator(start_console):
    console = await start_console()
    routes = console_routes()
    assert len(routes) >= 12 and ("GET", "/console/static/htmx.min.js") in routes
    statuses = {}
    async with aiohttp.ClientSession() as anonymous:
        for method, path in [*routes, ("GET", "/console/no-such-page")]:
            async with anonymous.request(method, console.url + path, allow_redirects=False) as response:
                statuses[(method, path)] = (response.status, response.headers.get("WWW-Authenticate"))
        # A wrong bearer token and a forged cookie are no better.
        async with anonymous.get(console.url + "/console/", headers={"Authorization": "Bearer wrong-secret"}) as r:
            statuses[("bearer", "wrong")] = (r.status, r.headers.get("WWW-Authenticate"))
        async with anonymous.get(console.url + "/console/", cookies={"policypal_console": "9999999999.forged"}) as r:
            statuses[("cookie", "forged")] = (r.status, r.headers.get("WWW-Authenticate"))
    wrong = {route: got for route, got in statuses.items() if got != (401, 'Bearer realm="policypal-console"')}
    # POST /sign-in is the way in: without the secret it is a 401 too.
    assert wrong == {}, wrong


async def test_the_console_is_not_served_unless_configured(start_console):
    console = await start_console(console_secret=None)
    async with aiohttp.ClientSession() as anonymous, anonymous.get(console.url + "/console/") as response:
        assert response.status == 404


async def test_signing_in_with_the_secret_sets_a_session_cookie_that_opens_every_page(start_console):
    console = await start_console()
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:  # unsafe: an IP host
        async with browser.post(console.url + "/console/sign-in", data={"secret": "not-it"}) as refused:
            assert refused.status == 401 and "not the console secret" in await refused.text()
        async with browser.post(console.url + "/console/sign-in", data={"secret": SECRET}, allow_redirects=False) as ok:
            assert ok.status == 303 and ok.headers["Location"] == "/console/"
            cookie = ok.cookies["policypal_console"]
            assert cookie["httponly"] and cookie["samesite"] == "Strict" and SECRET not in cookie.value
        async with browser.get(console.url + "/console/") as overview:
            assert overview.status == 200 and "Runs per day by ending" in await overview.text()


async def test_a_proxy_header_names_the_operator_and_its_absence_is_401(start_console):
    console = await start_console(console_secret=None, console_user_header="X-Forwarded-User")
    async with aiohttp.ClientSession() as http:
        async with http.get(console.url + "/console/runs", headers={"X-Forwarded-User": "dana@example.com"}) as ok:
            assert ok.status == 200 and "dana@example.com" in await ok.text()
        async with http.get(console.url + "/console/runs") as anonymous:
            assert anonymous.status == 401 and "did not name an operator" in await anonymous.text()


async def test_a_post_without_the_operators_form_token_is_refused(start_console):
    console = await start_console()
    async with console.http.post(console.url + "/console/cases/1/retry", data={}) as response:
        assert response.status == 403 and "another site" in await response.text()


async def test_non_ascii_cookies_and_form_tokens_are_refused_not_server_errors(start_console):
    console = await start_console()
    forged = "9999999999.\u00e9".encode().decode("latin-1")  # the raw UTF-8 bytes of a non-ASCII signature
    cookie = {"Cookie": f"policypal_console={forged}"}
    async with aiohttp.ClientSession() as anonymous, anonymous.get(console.url + "/console/", headers=cookie) as r:
        assert r.status == 401
    async with console.http.post(console.url + "/console/sign-out", data={"form_token": "\u00e9"}) as response:
        assert response.status == 403 and "another site" in await response.text()


async def test_behind_a_tls_terminating_proxy_the_session_cookie_is_secure(start_console):
    console = await start_console()
    async with aiohttp.ClientSession() as browser:
        for headers in ({"X-Forwarded-Proto": "https"}, {"Forwarded": 'for=10.0.0.1;proto=https;host="pp.example"'}):
            async with browser.post(
                console.url + "/console/sign-in", data={"secret": SECRET}, headers=headers, allow_redirects=False
            ) as ok:
                assert ok.status == 303 and ok.cookies["policypal_console"]["secure"], headers
        async with browser.post(console.url + "/console/sign-in", data={"secret": SECRET}, allow_redirects=False) as ok:
            assert ok.status == 303 and not ok.cookies["policypal_console"]["secure"]  # plain HTTP on loopback
