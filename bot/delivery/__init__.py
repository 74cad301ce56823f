"""Durable I/O: nothing acknowledged is lost, and every write to another system happens once.

``inbox``: every platform event written before its ack, worked on under a lease (``Lease``, read
with ``current_lease``). ``outbox``: every platform write and helpdesk delivery as a row committed
with its outcome, sent by the platform's or the helpdesk's ``Sender``, retried, and handed to a
person when it cannot be delivered. ``posts``: what a platform write says, as plain JSON.
``sweeper``: what a live process picks up from dead ones. ``http_json`` and ``retry``: JSON over
HTTP with signatures, and the one retry loop every remote call uses.
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
from bot.delivery.inbox import Inbox, Lease, current_lease
from bot.delivery.outbox import POST_POLICY, Delivery, DeliveryResult, Outbox, OutboxPolicy, Sender
from bot.delivery.posts import Address, Post, outcome_from_json, outcome_to_json, post_destination
from bot.delivery.retry import RetryPolicy, Transient, remote_transient, with_retries
from bot.delivery.sweeper import Sweeper, SweepPolicy, SweepReport

__all__ = [
    "POST_POLICY",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Address",
    "Delivery",
    "DeliveryResult",
    "HttpPolicy",
    "Inbox",
    "JsonHttp",
    "JsonResponse",
    "Lease",
    "Outbox",
    "OutboxPolicy",
    "Post",
    "RetryPolicy",
    "Sender",
    "SweepPolicy",
    "SweepReport",
    "Sweeper",
    "Transient",
    "current_lease",
    "error_message",
    "json_bytes",
    "outcome_from_json",
    "outcome_to_json",
    "post_destination",
    "remote_transient",
    "sign",
    "signed_headers",
    "verify",
    "with_retries",
]
