"""Who can see what: a reply where several people read it is built from what all of them may read.

A real index of two documents (one public, one for HR only, in its own section), the real service
and loop, a scripted model on loopback; what the model is sent is what is checked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.agent import ToolRegistry
from bot.audience import MemberLists, Members, PlaceNow
from bot.delivery import Address
from bot.identity import EVERYONE
from bot.policy_tools import search_tool
from bot.service import PRIVATE_PART_ASK, PRIVATE_PART_SENT
from bot.store import Store
from bot.types import Answer, Inbound, Pending, UserRef
from retrieval import PolicyIndex
from tests.bot.helpers import RecordingSender, service
from tests.conftest import built_index
from tests.fakes.openai_server import text, tool_calls

HR_USER = UserRef("U_HR", "Hana", groups=(EVERYONE, "hr"))
HR_TOO = UserRef("U_HUGO", "Hugo", groups=(EVERYONE, "hr"))
OUTSIDER = UserRef("U_BOB", "Bob", groups=(EVERYONE,))
TICKET = {"category": "network_vpn", "summary": "NorthGate VPN fails with NG-809", "urgency": "high"}
SECRET_SECTION = "Confidential Reorg Plan"
REORG_CITE = "Reorg Plan 2027 › Team changes"
LEAVE_CITE = "Leave Policy › Team changes and leave"
RESTRICTED_FACT = "Operations team"

REORG = f"""---
title: Reorg Plan 2027
section: {SECRET_SECTION}
audience: [hr]
---
# Reorg Plan 2027

## Team changes

The finance and facilities teams merge into one {RESTRICTED_FACT} on 1 March 2027; twelve team roles change.
"""
LEAVE = """---
title: Leave Policy
section: People
audience: [all]
---
# Leave Policy

## Team changes and leave

Team changes are announced by HR on the intranet. Annual leave already booked stays booked when teams change.
"""


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyIndex]:
    root = tmp_path_factory.mktemp("audiences")
    docs = root / "policies"
    docs.mkdir()
    (docs / "reorg.md").write_text(REORG)
    (docs / "leave.md").write_text(LEAVE)
    built = built_index(root, docs)
    yield built
    built.close()


def slack(user: UserRef, text: str, *, channel: str, thread: str, event: str, shared: bool) -> Inbound:
    return Inbound(
        "slack", channel, thread, user, text, event_id=event, tenant="T1", shared=shared, private_channel=True
    )


def search(query: str = "planned team changes") -> Any:
    return tool_calls(("search_policies", {"query": query}))


def section_description(request: Any) -> str:
    (tool,) = [t for t in request.tools if t["function"]["name"] == "search_policies"]
    return json.dumps(tool["function"]["parameters"])


def sent_to_model(request: Any) -> str:
    return json.dumps(request.messages)


async def test_in_a_dm_the_asker_gets_what_their_groups_may_read(tmp_path: Path, fake_openai: Any, index) -> None:
    fake_openai.script(search(), text(f"The teams merge [{REORG_CITE}]."))
    async with service(tmp_path, fake_openai, index) as svc:
        reply = await svc.handle_message(
            slack(HR_USER, "what team changes are planned?", channel="D1", thread="1.0", event="E1", shared=False)
        )
    assert reply is not None and isinstance(reply.outcome, Answer)
    assert SECRET_SECTION in section_description(fake_openai.requests[0])
    assert RESTRICTED_FACT in sent_to_model(fake_openai.requests[1])
    assert PRIVATE_PART_SENT not in reply.outcome.text


async def test_the_same_question_in_a_channel_thread_answers_publicly_and_sends_the_restricted_part_privately(
    tmp_path: Path, fake_openai: Any, index
) -> None:
    fake_openai.script(
        search(),
        text(f"Team changes are announced on the intranet [{LEAVE_CITE}]."),  # the thread's answer
        search(),
        text(f"Finance and facilities merge into one {RESTRICTED_FACT} [{REORG_CITE}]."),  # the asker's
    )
    async with service(tmp_path, fake_openai, index) as svc:
        sender = RecordingSender()
        svc.outbox.register(sender)
        question = slack(HR_USER, "what team changes are planned?", channel="C1", thread="1.0", event="E1", shared=True)
        reply = await svc.handle_message(question)
        await svc.outbox.drain(5)
        runs = await svc.store.runs.recent(10)
    public_call, public_results, private_call, private_results = fake_openai.requests
    assert SECRET_SECTION not in section_description(public_call)
    assert RESTRICTED_FACT not in sent_to_model(public_results)  # the thread's run never saw the HR document
    assert SECRET_SECTION in section_description(private_call)
    assert RESTRICTED_FACT in sent_to_model(private_results)
    assert reply is not None and isinstance(reply.outcome, Answer)
    assert reply.outcome.text.endswith(PRIVATE_PART_SENT) and RESTRICTED_FACT not in reply.outcome.text
    kinds = {post.kind: post for post in sender.posts}
    assert set(kinds) == {"reply", "direct"}
    assert RESTRICTED_FACT in (kinds["direct"].text or "") and kinds["direct"].address.user == "U_HR"
    assert RESTRICTED_FACT not in json.dumps(kinds["reply"].outcome)
    assert sorted(tuple(r.audience or ()) for r in runs) == [(EVERYONE,), (EVERYONE, "hr")]  # recorded per reply


async def test_an_outsider_in_the_thread_never_gets_the_private_part_back_through_history(
    tmp_path: Path, fake_openai: Any, index
) -> None:
    fake_openai.script(
        search(),
        text(f"Announced on the intranet [{LEAVE_CITE}]."),
        search(),
        text(f"They merge into one {RESTRICTED_FACT} [{REORG_CITE}]."),
        text("As said above, they are announced on the intranet."),  # Bob's follow-up in the same thread
    )
    async with service(tmp_path, fake_openai, index) as svc:
        await svc.handle_message(
            slack(HR_USER, "what team changes are planned?", channel="C1", thread="1.0", event="E1", shared=True)
        )
        await svc.handle_message(
            slack(OUTSIDER, "and what did the bot say?", channel="C1", thread="1.0", event="E2", shared=True)
        )
    follow_up = fake_openai.requests[-1]
    assert "Announced on the intranet" in sent_to_model(follow_up)
    assert RESTRICTED_FACT not in sent_to_model(follow_up)


async def test_where_nothing_restricted_answers_the_thread_reply_is_all_there_is(
    tmp_path: Path, fake_openai: Any, index
) -> None:
    fake_openai.script(
        search("annual leave"),
        text(f"Booked leave stays booked [{LEAVE_CITE}]."),
        search("annual leave"),
        text(f"Booked leave stays booked [{LEAVE_CITE}]."),  # the asker's run: public too
    )
    async with service(tmp_path, fake_openai, index) as svc:
        sender = RecordingSender()
        svc.outbox.register(sender)
        reply = await svc.handle_message(
            slack(HR_USER, "does booked leave stay booked?", channel="C1", thread="1.0", event="E1", shared=True)
        )
        await svc.outbox.drain(5)
    assert reply is not None and isinstance(reply.outcome, Answer)
    assert PRIVATE_PART_SENT not in reply.outcome.text
    assert [post.kind for post in sender.posts] == ["reply"]


async def test_without_a_private_channel_the_asker_is_told_where_to_ask(
    tmp_path: Path, fake_openai: Any, index
) -> None:
    fake_openai.script(
        search(),
        text(f"Announced on the intranet [{LEAVE_CITE}]."),
        search(),
        text(f"They merge into one {RESTRICTED_FACT} [{REORG_CITE}]."),
    )
    question = Inbound(
        "teams",
        "19:abc@thread.tacv2",
        "1700",
        HR_USER,
        "what team changes are planned?",
        event_id="E1",
        tenant="T1",
        shared=True,
    )
    async with service(tmp_path, fake_openai, index) as svc:
        reply = await svc.handle_message(question)
    assert reply is not None and isinstance(reply.outcome, Answer)
    assert reply.outcome.text.endswith(PRIVATE_PART_ASK) and RESTRICTED_FACT not in reply.outcome.text


async def test_an_outsider_is_never_offered_or_told_a_restricted_section_name(
    tmp_path: Path, fake_openai: Any, index
) -> None:
    fake_openai.script(
        tool_calls(("search_policies", {"query": "team changes", "section": "Reorg"})),
        text("Announced on the intranet."),
    )
    async with service(tmp_path, fake_openai, index) as svc:
        await svc.handle_message(
            slack(OUTSIDER, "team changes in the reorg section?", channel="D2", thread="1.0", event="E1", shared=False)
        )
    first, second = fake_openai.requests
    assert "People" in section_description(first) and SECRET_SECTION not in section_description(first)
    assert SECRET_SECTION not in sent_to_model(second)  # nor in the "no such section" note
    assert RESTRICTED_FACT not in sent_to_model(second)


async def test_history_is_redacted_before_it_is_stored_and_sent_again(tmp_path: Path, fake_openai: Any, index) -> None:
    fake_openai.script(text("Please never share your password; I can't reset it."), text("Use the reset page."))
    async with service(tmp_path, fake_openai, index) as svc:
        first = slack(
            OUTSIDER,
            "my password is hunter2 and it stopped working",
            channel="D2",
            thread="1.0",
            event="E1",
            shared=False,
        )
        await svc.handle_message(first)
        await svc.handle_message(slack(OUTSIDER, "so what now?", channel="D2", thread="1.0", event="E2", shared=False))
        stored = await svc.store.threads.load_history(first.conversation_key)
    assert "hunter2" not in json.dumps(stored)
    assert "hunter2" not in sent_to_model(fake_openai.requests[-1])


async def test_history_from_before_audiences_stays_out_of_shared_places(
    tmp_path: Path, fake_openai: Any, index
) -> None:
    fake_openai.script(text("Hello."), text("Hello again."))
    async with service(tmp_path, fake_openai, index) as svc:
        channel = slack(OUTSIDER, "hi", channel="C1", thread="1.0", event="E1", shared=True)
        dm = slack(OUTSIDER, "hi", channel="D2", thread="1.0", event="E2", shared=False)
        old = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "an answer built for HR"}]
        for inbound in (channel, dm):
            await svc.store.threads.append_history(inbound.conversation_key, old)  # no audience recorded
        await svc.handle_message(channel)
        await svc.handle_message(dm)
    in_channel, in_dm = fake_openai.requests
    assert "built for HR" not in sent_to_model(in_channel)
    assert "built for HR" in sent_to_model(in_dm)


async def test_an_asker_missing_from_the_member_list_still_reads_the_reply_so_it_is_built_for_them_too(
    tmp_path: Path, fake_openai: Any, index
) -> None:
    # A Teams shared channel's roster is the host team's: an outside asker is not in it, yet reads the reply.
    fake_openai.script(search(), text(f"Announced on the intranet [{LEAVE_CITE}]."))
    question = Inbound(
        "teams",
        "19:shared@thread.tacv2",
        "1700",
        OUTSIDER,
        "what team changes are planned?",
        event_id="E1",
        tenant="T1",
        shared=True,
        members=(HR_USER,),
    )
    async with service(tmp_path, fake_openai, index) as svc:
        await svc.handle_message(question)
    first, second = fake_openai.requests
    assert SECRET_SECTION not in section_description(first)
    assert RESTRICTED_FACT not in sent_to_model(second)


async def test_the_search_tool_as_registered_names_no_section_some_readers_may_not_read(index: PolicyIndex) -> None:
    tool = search_tool(index, sections=index.sections)
    registered = ToolRegistry([tool])

    described = json.dumps([tool.parameters, tool.schema(), registered.schemas()])

    assert SECRET_SECTION not in described
    assert "People" in json.dumps(tool.schema((EVERYONE,)))  # readers' own sections are still offered by name
    assert "section" in tool.parameters["properties"]  # and a section argument still validates


@pytest.mark.parametrize(
    "members_at_the_click",
    [
        pytest.param((HR_USER, HR_TOO, OUTSIDER), id="an-outsider-joined"),
        pytest.param(None, id="the-member-list-cannot-be-read"),
    ],
)
async def test_a_run_confirmed_in_a_channel_goes_on_for_the_readers_there_at_the_click(
    tmp_path: Path, fake_openai: Any, index, members_at_the_click: Members | None
) -> None:
    fake_openai.script(
        search(),
        tool_calls(("create_it_ticket", TICKET), content="I can raise a ticket for this. Please confirm."),
        search(),
        text(f"Your ticket is open; changes are announced on the intranet [{LEAVE_CITE}]."),  # the click's
    )
    question = Inbound(
        "slack",
        "C_HR",
        "1.0",
        HR_USER,
        "what team changes are planned? my VPN fails too",
        event_id="E1",
        tenant="T1",
        shared=True,
        private_channel=True,
        members=(HR_USER, HR_TOO),
    )
    read_at_the_click: list[str] = []

    async def members_now() -> Members | None:
        read_at_the_click.append("members")
        return members_at_the_click

    async with service(tmp_path, fake_openai, index) as svc:
        proposed = await svc.handle_message(question)
        assert proposed is not None and isinstance(proposed.outcome, Pending)
        action = proposed.outcome.action
        decided = await svc.click(
            action.id,
            HR_USER,
            "confirm",
            action.args_hash,
            address=Address("slack", "C_HR", "1.0", user=HR_USER.id),
            place=PlaceNow(True, members_now),
        )
        assert decided.reply is not None
        continued = await svc.store.runs.get(decided.reply.run_id)
    _, proposal_results, after_the_click, after_its_search = fake_openai.requests
    assert RESTRICTED_FACT in sent_to_model(proposal_results)  # proposed where everyone read HR documents
    assert RESTRICTED_FACT not in sent_to_model(after_the_click)  # nor what the run had read before the card
    assert SECRET_SECTION not in section_description(after_the_click)
    assert read_at_the_click == ["members"]  # after the decision, not when the card was proposed
    assert "IT-" in sent_to_model(after_the_click)  # the ticket's result, all it goes on with
    assert "announced by HR on the intranet" in sent_to_model(after_its_search)  # searched again, for them
    assert RESTRICTED_FACT not in sent_to_model(after_its_search)
    assert continued is not None and (continued.audience, continued.place) == ([EVERYONE], "shared")


async def test_a_member_list_being_read_when_someone_joins_is_not_kept_or_shared_with_later_readers() -> None:
    lists = MemberLists(ttl_s=300)
    first_read_may_end = asyncio.Event()
    reads: list[str] = []

    async def before_the_join() -> Members:
        reads.append("before")
        await first_read_may_end.wait()
        return (HR_USER, HR_TOO)

    async def after_the_join() -> Members:
        reads.append("after")
        return (HR_USER, HR_TOO, OUTSIDER)

    under_way = asyncio.create_task(lists.of("C_HR", before_the_join))
    await asyncio.sleep(0)
    await lists.joined("C_HR")
    later = await lists.of("C_HR", after_the_join)
    first_read_may_end.set()
    assert await under_way == (HR_USER, HR_TOO)  # its caller asked before the join
    assert later == (HR_USER, HR_TOO, OUTSIDER) and reads == ["before", "after"]
    assert await lists.of("C_HR", before_the_join) == later  # the list read after the join is the one kept


async def test_someone_joining_a_team_drops_the_member_lists_of_its_channels_only() -> None:
    lists = MemberLists(ttl_s=300)
    reads: list[str] = []

    def reader(place: str):
        async def read() -> Members:
            reads.append(place)
            return (HR_USER,)

        return read

    await lists.of("general", reader("general"), within="team")
    await lists.of("other-team's", reader("other-team's"), within="other team")
    await lists.joined("team")
    await lists.of("general", reader("general"), within="team")
    await lists.of("other-team's", reader("other-team's"), within="other team")
    assert reads == ["general", "other-team's", "general"]


class Reads:
    """A place's member list as the platform has it now, and how often it was read."""

    def __init__(self, *members: UserRef) -> None:
        self.members: Members = members
        self.count = 0

    async def __call__(self) -> Members:
        self.count += 1
        return self.members


async def test_a_join_one_replica_records_makes_the_other_read_the_members_afresh(
    store: Store, second_store: Store
) -> None:
    here = MemberLists(ttl_s=300, joins=store.joins, scope="slack:T1")  # two replicas, one database
    there = MemberLists(ttl_s=300, joins=second_store.joins, scope="slack:T1")
    channel = Reads(HR_USER, HR_TOO)
    assert await there.of("C_HR", channel) == await there.of("C_HR", channel) == (HR_USER, HR_TOO)
    channel.members = (HR_USER, HR_TOO, OUTSIDER)
    await here.joined("C_HR")  # Bob joined; the event came to the other replica
    assert await there.of("C_HR", channel) == (HR_USER, HR_TOO, OUTSIDER)
    assert await there.of("C_HR", channel) == (HR_USER, HR_TOO, OUTSIDER)
    assert channel.count == 2  # once before the join, once after it: cached in between and since


async def test_a_team_join_one_replica_records_makes_the_other_read_its_channels_afresh(
    store: Store, second_store: Store
) -> None:
    here = MemberLists(ttl_s=300, joins=store.joins, scope="teams")
    there = MemberLists(ttl_s=300, joins=second_store.joins, scope="teams")
    general, elsewhere, other_workspace = Reads(HR_USER), Reads(HR_USER), Reads(HR_USER)
    elsewhere_there = MemberLists(ttl_s=300, joins=second_store.joins, scope="teams-other")
    for _ in range(2):
        await there.of("general", general, within="team")
        await there.of("other-team's", elsewhere, within="other team")
        await elsewhere_there.of("general", other_workspace, within="team")
        await here.joined("team")
    assert (general.count, elsewhere.count, other_workspace.count) == (2, 1, 1)


async def test_when_the_join_log_cannot_be_read_no_cached_member_list_is_trusted(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    lists = MemberLists(ttl_s=300, joins=store.joins, scope="slack:T1")
    channel = Reads(HR_USER, HR_TOO)
    await lists.of("C_HR", channel)

    async def unreadable(places: Any) -> Any:
        raise OSError("the database is not answering")

    monkeypatch.setattr(store.joins, "counts", unreadable)
    channel.members = (HR_USER, HR_TOO, OUTSIDER)  # someone may have joined: nobody can tell
    assert await lists.of("C_HR", channel) == (HR_USER, HR_TOO, OUTSIDER)
    assert await lists.of("C_HR", channel) == (HR_USER, HR_TOO, OUTSIDER)
    assert channel.count == 3  # read afresh each time, and what was read is not kept unchecked


async def test_what_the_offline_model_says_it_covers_names_only_sections_the_asker_may_read(
    tmp_path: Path, index
) -> None:
    """The section list comes from the schema offered for this reader: an outsider never learns the HR one's name."""
    from bot.config import Settings
    from bot.wiring import open_service
    from tests.bot.helpers import ask

    svc = await open_service(Settings(_env_file=None, data_dir=tmp_path), searcher=index)  # type: ignore[call-arg]
    try:
        insider = await ask(svc, "what policies do you have?", user=HR_USER, thread="t1")
        outsider = await ask(svc, "what policies do you have?", user=OUTSIDER, thread="t2")
    finally:
        await svc.close()
    assert isinstance(insider.outcome, Answer) and isinstance(outsider.outcome, Answer)
    assert insider.outcome.text.endswith(f"these sections: {SECRET_SECTION} and People.")
    assert outsider.outcome.text.endswith("this section: People.")
