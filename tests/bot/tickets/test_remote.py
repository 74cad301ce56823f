"""Ticket backends through their real clients against local servers that implement the documented APIs."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from aiohttp import web

from bot.config import Settings
from bot.delivery import SIGNATURE_HEADER, HttpPolicy
from bot.errors import ConfigError, TicketError
from bot.tickets import (
    JiraServiceDesk,
    LocalTickets,
    ServiceNowIncidents,
    TicketRequest,
    WebhookTickets,
    build_ticket_backend,
)
from bot.types import UserRef
from tests.fakes.helpdesk_servers import FakeJira, FakeServiceNow, FakeWebhook, _respond, slow, stall, status

# A fake that answers gets all the time a busy machine needs; one scripted to stall or answer late (3 s) misses
# a timeout of 1 s by a margin load does not close.
ANSWERS = HttpPolicy(timeout_s=10.0, attempts=3, backoff_s=0.01)
TIMES_OUT = HttpPolicy(timeout_s=1.0, attempts=3, backoff_s=0.01)
ALICE = UserRef("U_ALICE", "Alice", "alice@example.com")


def request(key: str = "pa_0123456789abcdef") -> TicketRequest:
    return TicketRequest(
        category="network_vpn",
        summary="VPN fails with NG-809",
        urgency="high",
        details="Since this morning, on the office wifi.",
        requester=ALICE,
        idempotency_key=key,
    )


def jira_client(
    jira: FakeJira, *, request_type: str = "25", token: str | None = None, policy: HttpPolicy = ANSWERS
) -> JiraServiceDesk:
    return JiraServiceDesk(jira.url, jira.email, token or jira.token, jira.desk, request_type, policy)


# --- Jira Service Management ----------------------------------------------------------------------


async def test_jira_creates_a_customer_request_with_basic_auth_and_the_documented_body():
    async with FakeJira() as jira:
        client = jira_client(jira)
        ticket = await client.create(request())
        await client.aclose()
    (sent,) = jira.requests
    assert (sent.method, sent.path) == ("POST", "/rest/servicedeskapi/request")
    expected = base64.b64encode(f"{jira.email}:{jira.token}".encode()).decode()
    assert sent.headers["authorization"] == f"Basic {expected}"
    body = sent.json
    assert (body["serviceDeskId"], body["requestTypeId"]) == ("10", "25")
    assert body["requestFieldValues"]["summary"] == "VPN fails with NG-809"
    description = body["requestFieldValues"]["description"]
    assert "Since this morning" in description and "alice@example.com" in description
    assert "PolicyPal request id: pa_0123456789abcdef" in description
    assert ticket.id == "HELP-1"
    assert ticket.url == f"{jira.url}/servicedesk/customer/portal/1/HELP-1"


async def test_jira_validation_error_quotes_jiras_message_and_is_not_retried():
    async with FakeJira() as jira:
        client = jira_client(jira, request_type="99")
        with pytest.raises(TicketError) as caught:
            await client.create(request())
        await client.aclose()
    assert caught.value.kind == "validation"
    assert "(400): The request type you are trying to use does not exist." in str(caught.value)
    assert len(jira.requests) == 1


async def test_jira_bad_credentials_are_an_auth_error_with_jiras_plain_text():
    async with FakeJira() as jira:
        client = jira_client(jira, token="wrong-token")
        with pytest.raises(TicketError) as caught:
            await client.create(request())
        await client.aclose()
    assert caught.value.kind == "auth"
    assert "refused our credentials (401): Client must be authenticated" in str(caught.value)


async def test_jira_5xx_then_success_checks_for_the_request_then_creates_exactly_one():
    async with FakeJira() as jira:
        jira.script(status(503, {"errorMessage": "Service temporarily unavailable"}))
        client = jira_client(jira)
        ticket = await client.create(request())
        await client.aclose()
    assert [(r.method, r.path) for r in jira.requests] == [
        ("POST", "/rest/servicedeskapi/request"),
        ("GET", "/rest/api/3/search/jql"),
        ("POST", "/rest/servicedeskapi/request"),
    ]
    assert jira.requests[1].query["jql"].startswith('text ~ "pa_0123456789abcdef"')
    assert ticket.id == "HELP-1" and len(jira.created) == 1


async def test_jira_timeouts_end_in_an_unknown_outcome_after_every_attempt():
    async with FakeJira() as jira:
        jira.script(stall(3), stall(3), stall(3))
        client = jira_client(jira, policy=TIMES_OUT)
        with pytest.raises(TicketError) as caught:
            await client.create(request())
        await client.aclose()
    assert caught.value.kind == "unknown"  # it reached Jira, which never answered: the request may exist
    assert "did not answer within 1 s" in str(caught.value)
    assert len(jira.to("POST")) == 3 and jira.created == []


async def test_jira_retry_after_a_timeout_finds_the_request_instead_of_creating_a_second():
    async with FakeJira() as jira:
        jira.script(slow(3.0))  # Jira creates the request but answers after our timeout
        client = jira_client(jira, policy=TIMES_OUT)
        ticket = await client.create(request())
        await client.aclose()
    assert ticket.id == "HELP-1"
    assert len(jira.to("POST")) == 1 and len(jira.created) == 1
    assert ticket.url == f"{jira.url}/browse/HELP-1"


# --- ServiceNow --------------------------------------------------------------------------------


async def test_servicenow_creates_an_incident_with_basic_auth_and_the_table_api_fields():
    async with FakeServiceNow() as sn:
        client = ServiceNowIncidents(sn.url, user=sn.user, password=sn.password, policy=ANSWERS)
        ticket = await client.create(request())
        await client.aclose()
    (sent,) = sn.requests
    assert (sent.method, sent.path) == ("POST", "/api/now/table/incident")
    expected = base64.b64encode(f"{sn.user}:{sn.password}".encode()).decode()
    assert sent.headers["authorization"] == f"Basic {expected}"
    body = sent.json
    assert body["short_description"] == "VPN fails with NG-809"
    assert "Since this morning" in body["description"]
    assert (body["urgency"], body["category"], body["caller_id"]) == ("1", "network", "alice@example.com")
    assert body["correlation_id"] == "pa_0123456789abcdef"
    assert ticket.id == "INC0010001"
    assert ticket.url.startswith(f"{sn.url}/nav_to.do?uri=incident.do%3Fsys_id%3D")


async def test_servicenow_accepts_an_oauth_bearer_token():
    async with FakeServiceNow(token="sn-oauth-token-abcdef") as sn:
        client = ServiceNowIncidents(sn.url, token="sn-oauth-token-abcdef", policy=ANSWERS)
        ticket = await client.create(request())
        await client.aclose()
    assert sn.requests[0].headers["authorization"] == "Bearer sn-oauth-token-abcdef"
    assert ticket.id == "INC0010001"


async def test_servicenow_4xx_quotes_its_error_message_and_detail():
    body = {"error": {"message": "Operation Failed", "detail": "Invalid category"}, "status": "failure"}
    async with FakeServiceNow() as sn:
        sn.script(status(403, body))
        client = ServiceNowIncidents(sn.url, user=sn.user, password=sn.password, policy=ANSWERS)
        with pytest.raises(TicketError) as caught:
            await client.create(request())
        await client.aclose()
    assert caught.value.kind == "auth"
    assert str(caught.value) == "ServiceNow refused our credentials (403): Operation Failed: Invalid category"


async def test_servicenow_wrong_password_is_reported_as_such():
    async with FakeServiceNow() as sn:
        client = ServiceNowIncidents(sn.url, user=sn.user, password="nope", policy=ANSWERS)
        with pytest.raises(TicketError, match="User Not Authenticated: Required to provide Auth information"):
            await client.create(request())
        await client.aclose()


async def test_servicenow_5xx_then_success_creates_one_incident():
    async with FakeServiceNow() as sn:
        sn.script(status(500, {"error": {"message": "Internal error"}, "status": "failure"}))
        client = ServiceNowIncidents(sn.url, user=sn.user, password=sn.password, policy=ANSWERS)
        ticket = await client.create(request())
        await client.aclose()
    methods = [r.method for r in sn.requests]
    assert methods == ["POST", "GET", "POST"]
    assert sn.requests[1].query["sysparm_query"] == "correlation_id=pa_0123456789abcdef"
    assert ticket.id == "INC0010001" and len(sn.incidents) == 1


async def test_servicenow_timeouts_end_in_an_unknown_outcome():
    async with FakeServiceNow() as sn:
        sn.script(stall(3), stall(3), stall(3))
        client = ServiceNowIncidents(sn.url, user=sn.user, password=sn.password, policy=TIMES_OUT)
        with pytest.raises(TicketError) as caught:
            await client.create(request())
        await client.aclose()
    assert caught.value.kind == "unknown" and sn.incidents == []


async def test_servicenow_retry_after_a_timeout_finds_the_incident_by_correlation_id():
    async with FakeServiceNow() as sn:
        sn.script(slow(3.0))
        client = ServiceNowIncidents(sn.url, user=sn.user, password=sn.password, policy=TIMES_OUT)
        ticket = await client.create(request())
        await client.aclose()
    assert len(sn.to("POST")) == 1 and len(sn.incidents) == 1
    assert ticket.id == sn.incidents[0]["number"]


# --- signed webhook ----------------------------------------------------------------------------


async def test_webhook_posts_a_signed_body_with_the_idempotency_key():
    async with FakeWebhook() as hook:
        client = WebhookTickets(f"{hook.url}/tickets", hook.secret, ANSWERS)
        ticket = await client.create(request())
        await client.aclose()
    (sent,) = hook.requests
    assert (sent.method, sent.path) == ("POST", "/tickets")
    assert sent.headers["idempotency-key"] == "pa_0123456789abcdef"
    assert sent.headers[SIGNATURE_HEADER.lower()].startswith("sha256=")
    assert sent.json["summary"] == "VPN fails with NG-809"
    assert sent.json["requester"] == {"id": "U_ALICE", "name": "Alice", "email": "alice@example.com"}
    assert (ticket.id, ticket.url) == ("WH-1", f"{hook.url}/t/WH-1")


async def test_webhook_with_the_wrong_secret_is_refused():
    async with FakeWebhook() as hook:
        client = WebhookTickets(hook.url, "not-the-secret", ANSWERS)
        with pytest.raises(TicketError, match=r"refused our credentials \(401\): bad signature"):
            await client.create(request())
        await client.aclose()


async def test_webhook_4xx_quotes_the_receivers_error():
    async with FakeWebhook() as hook:
        hook.script(status(422, {"error": "summary must not mention passwords"}))
        client = WebhookTickets(hook.url, hook.secret, ANSWERS)
        with pytest.raises(TicketError, match=r"rejected the request \(422\): summary must not mention passwords"):
            await client.create(request())
        await client.aclose()


async def test_webhook_5xx_then_success():
    async with FakeWebhook() as hook:
        hook.script(status(502, "Bad Gateway"))
        client = WebhookTickets(hook.url, hook.secret, ANSWERS)
        ticket = await client.create(request())
        await client.aclose()
    assert ticket.id == "WH-1" and len(hook.requests) == 2


async def test_webhook_timeout_is_an_unknown_outcome():
    async with FakeWebhook() as hook:
        hook.script(stall(3), stall(3), stall(3))
        client = WebhookTickets(hook.url, hook.secret, TIMES_OUT)
        with pytest.raises(TicketError) as caught:
            await client.create(request())
        await client.aclose()
    assert caught.value.kind == "unknown"


async def test_a_webhook_whose_own_server_keeps_failing_is_unknown_one_nobody_reached_is_unavailable():
    async with FakeWebhook() as hook:
        hook.script(*[status(500, "Internal Server Error")] * 3)  # it got the request: it may have acted
        client = WebhookTickets(hook.url, hook.secret, ANSWERS)
        with pytest.raises(TicketError) as server_error:
            await client.create(request())
        await client.aclose()
    nobody = WebhookTickets("http://127.0.0.1:9/tickets", "s", HttpPolicy(timeout_s=0.3, attempts=1))  # discard port
    with pytest.raises(TicketError) as refused:
        await nobody.create(request())
    await nobody.aclose()
    assert server_error.value.kind == "unknown" and len(hook.requests) == 3
    assert refused.value.kind == "unavailable"  # a refused connection: the ticket certainly was not made


async def test_webhook_retry_after_a_timeout_resends_the_same_key_and_the_receiver_dedupes():
    async with FakeWebhook() as hook:
        hook.script(slow(3.0))
        client = WebhookTickets(hook.url, hook.secret, TIMES_OUT)
        ticket = await client.create(request())
        await client.aclose()
    keys = [r.headers["idempotency-key"] for r in hook.requests]
    assert keys == ["pa_0123456789abcdef"] * 2
    assert ticket.id == "WH-1" and len(hook.accepted) == 1


# --- local and configuration ------------------------------------------------------------------


async def test_local_tickets_have_readable_ids_and_one_ticket_per_key(store):
    local = LocalTickets(store)
    first = await local.create(request("key-1"))
    again = await local.create(request("key-1"))
    second = await local.create(request("key-2"))
    assert (first.id, again.id, second.id) == ("IT-1001", "IT-1001", "IT-1002")
    assert await store.tickets.count() == 2


async def test_an_incomplete_backend_configuration_is_refused_at_start(store):
    settings = Settings(_env_file=None, tickets="jira", jira_url="https://acme.atlassian.net")  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="POLICYPAL_JIRA_EMAIL, POLICYPAL_JIRA_API_TOKEN"):
        build_ticket_backend(settings, store)
    settings = Settings(_env_file=None, tickets="servicenow", servicenow_url="https://acme.service-now.com")  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="POLICYPAL_SERVICENOW_TOKEN"):
        build_ticket_backend(settings, store)
    assert isinstance(build_ticket_backend(Settings(_env_file=None), store), LocalTickets)  # type: ignore[call-arg]


# --- a 2xx the client cannot read: the system took the request, so the ticket may exist ---------


@pytest.mark.parametrize(
    "answer",
    [
        status(201, {"created": True}),  # no id at all
        status(200, "<html><body>Ticket received</body></html>"),  # not JSON
        status(201, {"id": {"nested": "WH-1"}}),  # an id that is no id
        status(201, {"id": "WH-1\n<!channel> *urgent*"}),  # an id that would break the card
        status(201, {"id": "W" * 5000}),
    ],
)
async def test_a_webhook_2xx_without_a_usable_id_is_unknown_never_not_created(answer):
    async with FakeWebhook() as hook:
        hook.script(answer)
        client = WebhookTickets(hook.url, hook.secret, ANSWERS)
        with pytest.raises(TicketError) as caught:
            await client.create(request())
        await client.aclose()
    assert caught.value.kind == "unknown"  # it answered success: the ticket may well exist
    assert len(hook.requests) == 1  # and it is not sent again


async def test_a_jira_2xx_without_an_issue_key_is_unknown():
    async with FakeJira() as jira:
        jira.script(status(201, {"requestTypeId": "25"}))
        client = jira_client(jira)
        with pytest.raises(TicketError) as caught:
            await client.create(request())
        await client.aclose()
    assert caught.value.kind == "unknown"
    assert len(jira.to("POST")) == 1


@pytest.mark.parametrize(
    "url", [42, "javascript:alert(1)", "https://x.test/t/1|<!channel>", "https://x.test/t/1> <!here", "/t/WH-1"]
)
async def test_a_webhook_ticket_link_that_is_not_a_plain_web_address_is_dropped_not_shown(url):
    async with FakeWebhook() as hook:
        hook.script(status(201, {"id": "WH-7", "url": url}))
        client = WebhookTickets(hook.url, hook.secret, ANSWERS)
        ticket = await client.create(request())
        await client.aclose()
    assert (ticket.id, ticket.url) == ("WH-7", None)


async def test_a_webhook_may_answer_a_numeric_id():
    async with FakeWebhook() as hook:
        hook.script(status(201, {"ticket_id": 4711, "url": "https://desk.example.com/t/4711"}))
        client = WebhookTickets(hook.url, hook.secret, ANSWERS)
        ticket = await client.create(request())
        await client.aclose()
    assert (ticket.id, ticket.url) == ("4711", "https://desk.example.com/t/4711")


class JiraWhoseSearchFails(FakeJira):
    """Jira that creates requests but answers the idempotency search with ``answer``."""

    def __init__(self, code: int, answer: Any) -> None:
        super().__init__()
        self.answer = (code, answer)

    async def _search(self, request: web.Request) -> web.Response:
        await self.record(request)
        return _respond(*self.answer)


@pytest.mark.parametrize(
    ("code", "answer"),
    [(200, {"issues": [{"id": "10001"}]}), (200, {"issues": "none"}), (500, {"errorMessages": ["search down"]})],
)
async def test_jira_after_a_timeout_does_not_create_again_when_it_cannot_check(code, answer):
    async with JiraWhoseSearchFails(code, answer) as jira:
        jira.script(slow(3.0))  # the request is created; the answer comes after our timeout
        client = jira_client(jira, policy=TIMES_OUT)
        with pytest.raises(TicketError) as caught:
            await client.create(request())
        await client.aclose()
    assert caught.value.kind == "unknown"  # never "not created", and never sent again blindly
    assert len(jira.to("POST")) == 1 and len(jira.created) == 1


async def test_a_jira_answer_with_odd_links_still_names_the_request_it_created():
    async with FakeJira() as jira:
        jira.script(status(201, {"issueKey": "HELP-9", "_links": "web"}))
        client = jira_client(jira)
        ticket = await client.create(request())
        await client.aclose()
    assert (ticket.id, ticket.url) == ("HELP-9", f"{jira.url}/browse/HELP-9")
