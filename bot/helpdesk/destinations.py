"""Platform-neutral handoff destinations: a signed JSON webhook and email over SMTP.

Slack and Teams destinations live with their adapters (``adapters/slack/helpdesk.py``,
``adapters/teams/helpdesk.py``); ``adapters/destinations.py`` assembles all of them from
settings. A destination makes one attempt and raises on failure: retries belong to the outbox.
"""

from __future__ import annotations

import asyncio
import json
import smtplib
import ssl
import uuid
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import formatdate

from bot.delivery import Delivery, HttpPolicy, JsonHttp, error_message, json_bytes, signed_headers
from bot.helpdesk.case import HandoffCase
from bot.helpdesk.reasons import reason_label

SMTPS_PORT = 465


class WebhookDestination:
    """POSTs ``{"type": "policypal.handoff", "idempotency_key": ..., "case": ..., "markdown": ...}``, HMAC-signed.

    The ``Idempotency-Key`` is the outbox row's random key, the same on every retry of one delivery.
    Never the case id: HD-1001 comes back after a restore, from a second database or after a move to
    PostgreSQL, and a receiver deduping on it would drop a new case as a repeat.
    """

    name = "webhook"

    def __init__(self, url: str, secret: str | None = None, *, timeout_s: float = 20.0) -> None:
        self._url = url
        self._secret = secret
        self._http = JsonHttp("the helpdesk webhook", HttpPolicy(timeout_s=timeout_s, attempts=1))

    async def deliver(self, case: HandoffCase) -> str | None:
        """A one-off send outside the outbox: a fresh key, so the receiver never takes it for another case."""
        return await self._post(case, str(uuid.uuid4()))

    async def deliver_tracked(self, case: HandoffCase, delivery: Delivery) -> str | None:
        """The outbox's send: the row's stored key, so the receiver can recognise a retry."""
        return await self._post(case, delivery.key)

    async def _post(self, case: HandoffCase, key: str) -> str | None:
        body = {"type": "policypal.handoff", "idempotency_key": key, "case": case.to_json()}
        raw = json_bytes({**body, "markdown": case.to_markdown()})
        headers = {"Idempotency-Key": key, **signed_headers(self._secret, raw)}
        response = await self._http.send("POST", self._url, data=raw, headers=headers, error_text=error_message)
        body = response.body
        return str(body["id"]) if isinstance(body, dict) and body.get("id") else f"HTTP {response.status}"

    async def aclose(self) -> None:
        await self._http.aclose()


class EmailDestination:
    """One email per case: the summary and Markdown transcript in the body, the JSON attached."""

    name = "email"

    def __init__(
        self,
        host: str,
        port: int,
        *,
        sender: str,
        recipients: Sequence[str],
        user: str | None = None,
        password: str | None = None,
        starttls: bool = True,
        timeout_s: float = 20.0,
    ) -> None:
        self._host, self._port = host, port
        self._sender, self._recipients = sender, list(recipients)
        self._user, self._password = user, password
        self._starttls = starttls
        self._timeout = timeout_s

    async def deliver(self, case: HandoffCase) -> str | None:
        """A one-off send to every recipient; raises when any of them refused it."""
        message = self.message(case)
        refused = await asyncio.to_thread(self._send, message, self._recipients)
        if refused:
            raise smtplib.SMTPRecipientsRefused(refused)
        return str(message["Message-ID"])

    async def deliver_tracked(self, case: HandoffCase, delivery: Delivery) -> str | None:
        """The outbox's send: only to recipients that have not taken it yet; a refusal is a failed attempt.

        Retrying the whole email for one refused address would send it again to everyone who has it,
        so the addresses that accepted it are saved and the next attempt skips them.
        """
        done = set(json.loads(delivery.progress)) if delivery.progress else set()
        todo = [to for to in self._recipients if to not in done]
        message = self.message(case)
        if not todo:  # every recipient still configured has it (a refused one was dropped from the settings)
            return str(message["Message-ID"])
        refused = await asyncio.to_thread(self._send, message, todo)
        if refused:
            if accepted := [to for to in todo if to not in refused]:
                await delivery.save(json.dumps(sorted(done.union(accepted))))
            raise smtplib.SMTPRecipientsRefused(refused)
        return str(message["Message-ID"])

    def message(self, case: HandoffCase) -> EmailMessage:
        """The email for a case; its Message-ID is stable, so a re-delivery can be recognised."""
        message = EmailMessage()
        message["Subject"] = f"[PolicyPal] {case.case_id}: {reason_label(case.reason)} · {case.question_line(80)}"
        message["From"] = self._sender
        message["To"] = ", ".join(self._recipients)
        message["Date"] = formatdate(case.created_at.timestamp(), usegmt=True)
        message["Message-ID"] = f"<{case.case_id.lower()}.{int(case.created_at.timestamp())}@policypal>"
        if case.user.email:
            message["Reply-To"] = case.user.email  # the helpdesk answers the person who asked
        message.set_content(f"{case.summary_line()}\n\n{case.to_markdown()}")
        transcript = json.dumps(case.to_json(), indent=2, ensure_ascii=False)
        message.add_attachment(transcript, subtype="json", filename=f"{case.case_id}.json")
        return message

    def _send(self, message: EmailMessage, recipients: Sequence[str]) -> dict[str, tuple[int, bytes]]:
        """Send to ``recipients``; returns those the server refused (all refused raises)."""
        context = ssl.create_default_context()
        if self._port == SMTPS_PORT:
            client: smtplib.SMTP = smtplib.SMTP_SSL(self._host, self._port, timeout=self._timeout, context=context)
        else:
            client = smtplib.SMTP(self._host, self._port, timeout=self._timeout)
        try:
            if self._starttls and self._port != SMTPS_PORT:
                client.starttls(context=context)
            if self._user:
                client.login(self._user, self._password or "")
            refused = client.send_message(message, to_addrs=list(recipients))
        except BaseException:
            client.close()
            raise
        _quit_quietly(client)
        return refused


def _quit_quietly(client: smtplib.SMTP) -> None:
    """Say goodbye after the server took the message: a failed QUIT must not make the outbox send it again."""
    try:
        client.quit()
    except (smtplib.SMTPException, OSError):
        client.close()
