"""Signing in with the shared secret (a form, for browsers) and signing out."""

from __future__ import annotations

from aiohttp import web

from adapters.web.auth import COOKIE, SESSION_S
from adapters.web.keys import GATE
from adapters.web.render import page


async def form(request: web.Request) -> web.Response:
    """Already signed in: the form says so and offers the console."""
    return page(request, "sign_in.html", failed=False)


async def sign_in(request: web.Request) -> web.StreamResponse:
    gate = request.app[GATE]
    offered = str((await request.post()).get("secret", ""))
    if not gate.secret_matches(offered):
        response = page(request, "sign_in.html", status=401, failed=True)
        response.headers["WWW-Authenticate"] = 'Bearer realm="policypal-console"'
        return response
    response = _see_other(str(request.app.router["overview"].url_for()))
    response.set_cookie(
        COOKIE,
        gate.session_cookie(),
        max_age=SESSION_S,
        httponly=True,
        samesite="Strict",
        secure=over_tls(request),
        path=str(request.app.router["overview"].url_for()),
    )
    return response


async def sign_out(request: web.Request) -> web.StreamResponse:
    response = _see_other(str(request.app.router["sign_in_form"].url_for()))
    response.del_cookie(COOKIE, path=str(request.app.router["overview"].url_for()))
    return response


def over_tls(request: web.Request) -> bool:
    """Whether the browser reached us over HTTPS, here or at a TLS-terminating proxy (which then says so
    in ``X-Forwarded-Proto`` or ``Forwarded``). Trusting a client's copy only adds Secure to its own cookie."""
    if request.secure:
        return True
    proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    first = request.forwarded[0] if request.forwarded else {}
    return proto == "https" or str(first.get("proto", "")).lower() == "https"


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})
