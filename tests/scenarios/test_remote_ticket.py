"""A confirmed ticket through the service to a remote backend: ids and links back, failures never dropped."""

from __future__ import annotations

import pytest

from bot.helpdesk import HandoffCase, case_number
from bot.types import TerminationReason
from tests.bot.helpers import ALICE, ask, last_tool_results, left_executing_by_a_crash, service
from tests.fakes.helpdesk_servers import FakeJira, FakeServiceNow, FakeWebhook, status
from tests.fakes.openai_server import text, tool_calls

pytestmark = pytest.mark.asyncio

TICKET = {"category": "network_vpn", "summary": "NorthGate VPN fails with NG-809", "urgency": "high"}


def propose():
    return tool_calls(("create_it_ticket", TICKET), content="I can raise a ticket for this. Please confirm.")


def jira_settings(jira: FakeJira, request_type: str = "25") -> dict[str, object]:
    return {
        "tickets": "jira",
        "jira_url": jira.url,
        "jira_email": jira.email,
        "jira_api_token": jira.token,
        "jira_service_desk_id": jira.desk,
        "jira_request_type_id": request_type,
        "tickets_timeout_s": 1.0,
    }


async def confirm(svc, reply):
    action = reply.outcome.action
    return await svc.decide(action.id, ALICE, "confirm", action.args_hash)


async def test_a_confirmed_jira_ticket_comes_back_with_its_key_and_link(tmp_path, fake_openai, sample_index):
    fake_openai.script(propose(), text("Done: HELP-1 is open."))
    async with FakeJira() as jira, service(tmp_path, fake_openai, sample_index, **jira_settings(jira)) as svc:
        reply = await ask(svc, "VPN broken with NG-809")
        decided = await confirm(svc, reply)
    web = f"{jira.url}/servicedesk/customer/portal/1/HELP-1"
    assert decided.result == {"status": "created", "ticket_id": "HELP-1", "url": web}
    (result,) = last_tool_results(fake_openai.requests[1])
    assert result["ticket_id"] == "HELP-1" and result["url"] == web
    description = jira.created[0]["requestFieldValues"]["description"]
    assert f"PolicyPal request id: {reply.outcome.action.id}" in description
    assert decided.case is None and decided.reply.reason == TerminationReason.ANSWERED


async def test_the_pending_action_id_is_the_servicenow_correlation_id(tmp_path, fake_openai, sample_index):
    fake_openai.script(propose(), text("Done."))
    async with FakeServiceNow() as sn:
        settings = {"tickets": "servicenow", "servicenow_url": sn.url, "servicenow_user": sn.user}
        settings["servicenow_password"] = sn.password
        async with service(tmp_path, fake_openai, sample_index, **settings) as svc:
            reply = await ask(svc, "VPN broken with NG-809")
            decided = await confirm(svc, reply)
    assert sn.incidents[0]["correlation_id"] == reply.outcome.action.id
    assert decided.result["ticket_id"] == "INC0010001"


async def test_a_ticket_the_backend_refuses_reaches_the_model_the_card_and_a_helpdesk_case(
    tmp_path, fake_openai, sample_index
):
    fake_openai.script(propose(), text("Jira refused the ticket; the helpdesk will follow up on HD-1001."))
    async with FakeJira() as jira:
        settings = jira_settings(jira, request_type="99")
        async with service(tmp_path, fake_openai, sample_index, **settings) as svc:
            reply = await ask(svc, "VPN broken with NG-809")
            decided = await confirm(svc, reply)
            record = await svc.pending.get(reply.outcome.action.id)
            stored = await svc.store.cases.get(case_number("HD-1001"))
    refusal = (
        "Jira Service Management rejected the request (400): The request type you are trying to use does not exist."
    )
    assert decided.status == "confirmed"
    assert refusal in decided.result["error"] and decided.result["kind"] == "validation"
    assert decided.result["case_id"] == "HD-1001" and "HD-1001" in decided.result["handoff"]
    assert record.state == "failed"
    (seen_by_model,) = last_tool_results(fake_openai.requests[1])
    assert refusal in seen_by_model["error"] and seen_by_model["case_id"] == "HD-1001"
    case = HandoffCase.from_record(stored)
    assert decided.case.case_id == case.case_id
    assert (case.reason, case.user.id, case.question) == ("ticket_failed", "U_ALICE", "VPN broken with NG-809")
    assert refusal in case.transcript["detail"]
    (action,) = case.transcript["actions"]
    assert action["state"] == "failed" and refusal in action["result"]
    assert decided.reply.reason == TerminationReason.ANSWERED


async def test_an_unreachable_backend_is_explained_not_dropped(tmp_path, fake_openai, sample_index):
    fake_openai.script(propose(), text("The ticket system is down; the helpdesk has your case."))
    settings = {
        "tickets": "webhook",
        "tickets_webhook_url": "http://127.0.0.1:9/tickets",  # discard port: nothing listens
        "tickets_attempts": 2,
    }
    async with service(tmp_path, fake_openai, sample_index, **settings) as svc:
        reply = await ask(svc, "VPN broken with NG-809")
        decided = await confirm(svc, reply)
    assert decided.result["kind"] == "unavailable"
    assert "could not reach the ticket webhook" in decided.result["error"]
    assert decided.case is not None and decided.case.reason == "ticket_failed"


async def test_an_action_interrupted_by_a_crash_opens_a_case_for_a_human_to_check(tmp_path, fake_openai, sample_index):
    fake_openai.script(propose())
    async with service(tmp_path, fake_openai, sample_index) as svc:
        await left_executing_by_a_crash(svc)
    async with service(tmp_path, fake_openai, sample_index) as restarted:
        await restarted.recover()  # as the server's sweeper does at its first pass
        stored = await restarted.store.cases.get(case_number("HD-1001"))
    case = HandoffCase.from_record(stored)
    assert (case.reason, case.user.id, case.question) == ("action_unknown", "U_ALICE", "VPN broken with NG-809")
    assert "check whether it happened" in case.transcript["detail"]
    assert case.transcript["actions"][0]["state"] == "unknown"


async def test_a_ticket_request_the_system_got_but_never_answered_is_unknown_and_checked_by_a_person(
    tmp_path, fake_openai, sample_index
):
    fake_openai.script(propose(), text("I can't tell whether the ticket was made; the helpdesk will check."))
    async with FakeWebhook() as hook:
        hook.script(status(503, "upstream timeout"))  # the receiver's own server error: it may have made it
        settings = {
            "tickets": "webhook", "tickets_webhook_url": f"{hook.url}/tickets",
            "tickets_webhook_secret": hook.secret, "tickets_attempts": 1,
        }  # fmt: skip
        async with service(tmp_path, fake_openai, sample_index, **settings) as svc:
            reply = await ask(svc, "VPN broken with NG-809")
            decided = await confirm(svc, reply)
            record = await svc.pending.get(reply.outcome.action.id)
    assert decided.result["kind"] == "unknown" and len(hook.requests) == 1
    assert record.state == "unknown"  # neither done nor failed: nobody knows, and it is never retried
    assert decided.case is not None and decided.case.reason == "action_unknown"
    assert decided.card is not None and "not known whether it went through" in decided.card.status(str)


async def test_an_action_its_dead_executor_left_is_handed_to_a_person_at_once(tmp_path, fake_openai, sample_index):
    fake_openai.script(propose())
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, "VPN broken with NG-809")
        action = reply.outcome.action
        assert await svc.store.pending.transition(
            action.id, ("open",), "executing", executor="other-host:ns:7:gone", decider=ALICE.id
        )  # confirmed just now by a replica that then died mid-call
        not_yet = await svc.recover()  # without knowing it died: it might still be running
        recovered = await svc.recover(["other-host:ns:7:gone"])
        tickets = await svc.store.tickets.count()
    assert not_yet == [] and tickets == 0
    ((record, case),) = recovered
    assert (record.id, record.state, case.reason, case.case_id) == (action.id, "unknown", "action_unknown", "HD-1001")
