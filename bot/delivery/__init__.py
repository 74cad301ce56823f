"""Getting things to other systems reliably: JSON over HTTP with signatures, one retry policy, notices.

``http_json`` talks to ticket systems and helpdesk webhooks; ``retry`` is the one retry loop every
remote call uses (platforms included); ``notify`` posts in a conversation after its request ended
(crash recovery, expired cards), through the notifier each platform registers.
"""

from bot.delivery.http_json import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    HttpPolicy,
    JsonHttp,
    JsonResponse,
    error_message,
    json_bytes,
    sign,
    signed_headers,
    verify,
)
from bot.delivery.notify import Notice, Notifier, Notifiers
from bot.delivery.retry import RetryPolicy, Transient, remote_transient, with_retries

__all__ = [
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "HttpPolicy",
    "JsonHttp",
    "JsonResponse",
    "Notice",
    "Notifier",
    "Notifiers",
    "RetryPolicy",
    "Transient",
    "error_message",
    "json_bytes",
    "remote_transient",
    "sign",
    "signed_headers",
    "verify",
    "with_retries",
]
