"""JSON over HTTP for ticket backends and helpdesk webhooks: timeouts, retries, HMAC signatures, and
errors worded so the model (and a person) can explain them.

Exceptions::

    RemoteError              a remote API call failed; ``kind`` says how, ``retryable`` whether to try again
      kind="auth"            401/403: credentials wrong or not allowed
      kind="validation"      other 4xx: the API rejected what we sent (its own message is quoted),
                             or a 3xx to a POST: it never reached the endpoint (the URL is not the final one)
      kind="rate_limited"    429                                  (retryable)
      kind="unavailable"     5xx, or the host could not be reached (retryable)
      kind="timeout"         no answer within the timeout         (retryable)
      kind="protocol"        a 2xx whose body is not what the API documents
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.delivery.retry import RetryPolicy
from bot.errors import RemoteError

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-PolicyPal-Signature"
TIMESTAMP_HEADER = "X-PolicyPal-Timestamp"
MAX_RETRY_AFTER_S = 5.0  # honour Retry-After only this far: a confirm click is waiting
FOLLOWS_REDIRECTS = frozenset({"GET", "HEAD"})  # a redirected POST comes back as a GET without its body


@dataclass(frozen=True)
class HttpPolicy:
    """Per-request timeout and how many attempts a call gets (with doubling backoff between them)."""

    timeout_s: float = 10.0
    attempts: int = 3
    backoff_s: float = 0.5

    def retry(self) -> RetryPolicy:
        """The retry policy of a call: bounded by attempts, waits capped (a confirm click is waiting)."""
        return RetryPolicy(
            attempts=self.attempts, first_s=self.backoff_s, max_wait_s=MAX_RETRY_AFTER_S, total_s=math.inf, jitter=0.0
        )


@dataclass(frozen=True)
class JsonResponse:
    status: int
    body: Any


ErrorText = Callable[[Any], str | None]  # pulls the API's own error message out of an error body


class JsonHttp:
    """One remote service: a lazily opened aiohttp session and its wording for errors."""

    def __init__(
        self, service: str, policy: HttpPolicy | None = None, *, headers: Mapping[str, str] | None = None
    ) -> None:
        self.service = service
        self.policy = policy or HttpPolicy()
        self._headers = dict(headers or {})
        self._session: aiohttp.ClientSession | None = None

    async def send(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        data: bytes | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        error_text: ErrorText | None = None,
    ) -> JsonResponse:
        """One attempt; a non-2xx answer or a transport failure raises RemoteError.

        ``body`` is encoded as JSON; ``data`` is sent as given (JSON already encoded, e.g. to sign it).
        """
        import aiohttp  # here, not at the top: a process that calls no remote service never loads it

        if data is None and body is not None:
            data = json_bytes(body)
        sent = {"Accept": "application/json", **self._headers, **(headers or {})}
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        follow = method.upper() in FOLLOWS_REDIRECTS
        try:
            request = self._client().request(
                method, url, data=data, params=params, headers=sent, allow_redirects=follow
            )
            async with request as response:
                raw = await response.read()
                return self._answer(response, raw, error_text)
        except TimeoutError:
            raise RemoteError(
                f"{self.service} did not answer within {self.policy.timeout_s:g} s", kind="timeout"
            ) from None
        except aiohttp.ClientError as exc:
            raise RemoteError(f"could not reach {self.service}: {exc}", kind="unavailable") from None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.policy.timeout_s))
        return self._session

    def _answer(self, response: aiohttp.ClientResponse, raw: bytes, error_text: ErrorText | None) -> JsonResponse:
        body = _decode(raw)
        if response.status < 300:
            return JsonResponse(response.status, body)
        if 300 <= response.status < 400:
            raise _redirect_error(self.service, response)
        detail = (error_text(body) if error_text and body is not None else None) or _plain(raw)
        raise _status_error(self.service, response.status, detail, _retry_after(response))


def json_bytes(body: Any) -> bytes:
    """The exact bytes sent for a JSON body (what a signature covers)."""
    return json.dumps(body, ensure_ascii=False).encode()


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` over ``timestamp.body``: receivers check it and reject old timestamps (replays)."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def signed_headers(secret: str | None, body: bytes, now: float | None = None) -> dict[str, str]:
    """The signature headers for a body; none without a secret."""
    if not secret:
        return {}
    timestamp = str(int(now if now is not None else time.time()))
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: sign(secret, timestamp, body)}


def verify(secret: str, timestamp: str, body: bytes, signature: str, *, tolerance_s: float = 300) -> bool:
    """A receiver's check (documented in docs/helpdesk.md): right signature and a recent timestamp."""
    try:
        fresh = abs(time.time() - int(timestamp)) <= tolerance_s
    except ValueError:
        return False
    return fresh and hmac.compare_digest(sign(secret, timestamp, body), signature)


def _status_error(service: str, status: int, detail: str, retry_after: float | None) -> RemoteError:
    if status in (401, 403):
        return RemoteError(f"{service} refused our credentials ({status}): {detail}", kind="auth", status=status)
    if status == 429:
        return RemoteError(
            f"{service} is rate limiting us (429)", kind="rate_limited", status=429, retry_after=retry_after
        )
    if status >= 500:
        message = f"{service} had a server error ({status}): {detail}"
        return RemoteError(message, kind="unavailable", status=status, retry_after=retry_after)
    return RemoteError(f"{service} rejected the request ({status}): {detail}", kind="validation", status=status)


def _redirect_error(service: str, response: aiohttp.ClientResponse) -> RemoteError:
    """A redirect we did not follow: the body was not delivered, and following would turn it into a GET."""
    where = response.headers.get("Location") or "an unnamed location"
    message = f"{service} redirected the request ({response.status}) to {where}; configure the final URL"
    return RemoteError(message, kind="validation", status=response.status)


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _plain(raw: bytes, limit: int = 300) -> str:
    text = " ".join(raw.decode("utf-8", "replace").split())
    return (text[:limit] + "…" if len(text) > limit else text) or "no details"


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    try:
        return float(response.headers["Retry-After"])
    except (KeyError, ValueError):
        return None


def error_message(body: Any) -> str | None:
    """A JSON error body's ``{"error": ...}`` or ``{"message": ...}``, whichever it sent (webhooks)."""
    if isinstance(body, dict):
        error = body.get("error") or body.get("message")
        return str(error.get("message", error)) if isinstance(error, dict) else (str(error) if error else None)
    return None
