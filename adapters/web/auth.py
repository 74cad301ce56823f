"""Who the operator is, or 401: a shared secret's sign-in cookie or bearer token, or a proxy's header.

Two ways in, either or both configured:
- ``POLICYPAL_CONSOLE_SECRET``: the operator signs in once with it (a form) and gets an HttpOnly,
  SameSite=Strict cookie holding an expiry and its HMAC, never the secret; scripts may send
  ``Authorization: Bearer <secret>`` instead. The operator is named ``console``.
- ``POLICYPAL_CONSOLE_USER_HEADER``: a reverse proxy that authenticates operators (oauth2-proxy,
  an identity-aware proxy) names them in this header. The proxy must set it on every request and
  drop any copy the client sent; only then may the console trust it (docs/console.md).

Every form that changes something carries a token bound to the operator (``form_token``): another
site cannot make an operator's browser post to the console.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from aiohttp import web

from bot.config import Settings

COOKIE = "policypal_console"
SESSION_S = 12 * 3600
SECRET_OPERATOR = "console"  # the name an operator signed in with the shared secret goes by


@dataclass(frozen=True)
class Operator:
    name: str


class Gate:
    """Decides who an operator is from a request; built once from settings."""

    def __init__(self, settings: Settings) -> None:
        secret = settings.console_secret
        self._secret = secret.get_secret_value().encode() if secret is not None else None
        self._header = settings.console_user_header
        # Form tokens and cookies are signed with a key derived from the secret (stable across
        # replicas and restarts), or a random one when only the proxy header is configured.
        derived = hashlib.sha256(b"policypal-console:" + self._secret).digest() if self._secret else None
        self._key = derived or secrets.token_bytes(32)

    @property
    def signs_in(self) -> bool:
        """Whether the sign-in form applies (a shared secret is configured)."""
        return self._secret is not None

    def operator(self, request: web.Request) -> Operator | None:
        """The operator making this request, or None."""
        if self._header:
            name = request.headers.get(self._header, "").strip()
            if name:
                return Operator(name)
        if self._secret is None:
            return None
        bearer = request.headers.get("Authorization", "")
        if bearer.startswith("Bearer ") and self.secret_matches(bearer.removeprefix("Bearer ").strip()):
            return Operator(SECRET_OPERATOR)
        if self._session_valid(request.cookies.get(COOKIE, "")):
            return Operator(SECRET_OPERATOR)
        return None

    def secret_matches(self, offered: str) -> bool:
        return self._secret is not None and hmac.compare_digest(offered.encode(), self._secret)

    def session_cookie(self, now: float | None = None) -> str:
        """A cookie value good for ``SESSION_S``: the expiry and its signature."""
        expires = int((now if now is not None else time.time()) + SESSION_S)
        return f"{expires}.{self._sign(str(expires))}"

    def form_token(self, operator: Operator) -> str:
        """The token a state-changing form must return, bound to this operator."""
        return self._sign(f"form:{operator.name}")

    def form_token_valid(self, operator: Operator, offered: str) -> bool:
        return _same(offered, self.form_token(operator))

    def _session_valid(self, value: str) -> bool:
        expires, _, signature = value.partition(".")
        if not (expires.isascii() and expires.isdigit()) or not _same(signature, self._sign(expires)):
            return False
        return int(expires) > time.time()

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()


def _same(offered: str, expected: str) -> bool:
    """Constant-time equality on bytes: ``compare_digest`` raises TypeError on non-ASCII str (a 500)."""
    return hmac.compare_digest(offered.encode(), expected.encode())
