"""The terminal chat on embedded defaults: offline model, local index, SQLite."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from adapters.cli import main
from adapters.cli.console import ask, chat, decide_by_id, outcome_json, recover_unless_served
from bot.config import Settings
from bot.models.offline import OfflineModel
from bot.store import utcnow
from bot.wiring import SAMPLE_POLICIES, build_model, open_service
from retrieval import Embedder, PolicyIndex
from tests.bot.helpers import ALICE, left_executing_by_a_crash

REPO = Path(__file__).resolve().parents[3]
ALIVE = timedelta(seconds=30)  # POLICYPAL_WORKER_STALE_S


async def offline_service(tmp_path, sample_index):
    settings = Settings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    assert isinstance(build_model(settings), OfflineModel)  # no API key: the offline model
    return await open_service(settings, searcher=sample_index)


async def test_ask_answers_with_citations_from_the_sample_policies(tmp_path, sample_index):
    svc = await offline_service(tmp_path, sample_index)
    out = io.StringIO()
    code = await ask(svc, "What does VPN error NG-412 mean?", ALICE, as_json=True, out=out)
    await svc.close()
    data = json.loads(out.getvalue())
    assert code == 0
    assert data["reason"] == "answered"
    assert "NG-412" in data["answer"] or "certificate" in data["answer"].lower()
    assert any("VPN" in c["title"] for c in data["citations"])
    assert data["steps"] == 2 and data["tokens"] > 0


async def test_an_answer_cites_the_path_inside_the_indexed_folder_not_the_servers(tmp_path):
    """Citations of a local folder showed absolute file paths: the server's layout, to every reader."""
    text, data = await ask_a_local_folder(tmp_path, "How many days of annual leave do I get?")

    assert {c["source"] for c in data["citations"]} == {"people/leave.md"}
    assert "(people/leave.md)\n" in text and str(tmp_path) not in text + json.dumps(data)


async def test_with_a_source_base_url_an_answer_links_to_the_published_file(tmp_path):
    base = "https://git.example/handbook/blob/main"
    text, data = await ask_a_local_folder(tmp_path, "How many days of annual leave do I get?", source_base_url=base)

    assert {c["source"] for c in data["citations"]} == {f"{base}/people/leave.md"}
    assert f"({base}/people/leave.md)\n" in text


async def ask_a_local_folder(tmp_path: Path, question: str, **settings: Any) -> tuple[str, dict[str, Any]]:
    """The question asked (as text, then as JSON) of a folder of plain files: no front matter URL to cite."""
    handbook = tmp_path / "srv" / "handbook"
    (handbook / "people").mkdir(parents=True)
    policy = (SAMPLE_POLICIES / "leave.md").read_text()
    (handbook / "people" / "leave.md").write_text(re.sub(r"(?m)^url: .*\n", "", policy))
    configured = Settings(_env_file=None, data_dir=tmp_path / "data", **settings)  # type: ignore[call-arg]
    cfg = configured.retrieval()
    embedder = Embedder(cfg.embedding_model, cfg.model_cache_dir, batch_size=16).load()
    text, data = io.StringIO(), io.StringIO()
    with PolicyIndex.open(cfg, create=True, embedder=embedder) as index:
        assert index.index_paths([handbook]).ok
        svc = await open_service(configured, searcher=index)
        try:
            await ask(svc, question, ALICE, out=text)
            await ask(svc, question, ALICE, as_json=True, out=data)
        finally:
            await svc.close()
    return text.getvalue(), json.loads(data.getvalue())


async def test_a_question_the_policies_do_not_cover_says_so(tmp_path, sample_index):
    svc = await offline_service(tmp_path, sample_index)
    out = io.StringIO()
    await ask(svc, "Does the company match donations to my favourite charity?", ALICE, as_json=True, out=out)
    await svc.close()
    data = json.loads(out.getvalue())
    assert data["reason"] == "not_covered"  # an honest "not in the policy": counted as a knowledge gap
    assert "not" in data["answer"].lower() and "polic" in data["answer"].lower()


async def test_a_reported_problem_shows_a_card_and_yes_creates_the_ticket(tmp_path, sample_index):
    svc = await offline_service(tmp_path, sample_index)
    out = io.StringIO()
    code = await ask(
        svc, "My laptop was stolen from my car this morning", ALICE, answer_pending="confirm", as_json=True, out=out
    )
    tickets = await svc.store.tickets.count()
    await svc.close()
    data = json.loads(out.getvalue())
    assert code == 0
    assert data["pending"]["tool"] == "create_it_ticket"
    assert data["pending"]["arguments"]["category"] == "security_incident"
    assert data["decision"] == "confirmed"
    assert data["ticket"]["ticket_id"] == "IT-1001"
    assert tickets == 1


async def test_no_cancels_the_ticket_and_the_card_shows_the_exact_fields(tmp_path, sample_index):
    svc = await offline_service(tmp_path, sample_index)
    out = io.StringIO()
    await ask(svc, "my VPN is broken, error NG-809, please open a ticket", ALICE, answer_pending="cancel", out=out)
    tickets = await svc.store.tickets.count()
    await svc.close()
    text = out.getvalue()
    assert "create_it_ticket: needs your confirmation" in text
    assert "category  network_vpn" in text
    assert "Cancelled: no ticket was raised." in text
    assert tickets == 0


async def test_chat_keeps_one_thread_so_follow_ups_have_history(tmp_path, sample_index):
    svc = await offline_service(tmp_path, sample_index)
    lines = iter(["How many days of annual leave do I get?", "Can I carry them over?", ""])
    out = io.StringIO()
    await chat(svc, ALICE, read=lambda _prompt: next(lines), out=out)
    runs = await svc.store.runs.recent()
    history = await svc.store.threads.load_history(runs[0].conversation_key)
    await svc.close()
    assert len({r.conversation_key for r in runs}) == 1
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]


def test_outcome_json_is_one_object_for_scripts():
    from bot.service import Reply
    from bot.types import Answer, Citation, TerminationReason

    reply = Reply("run_1", TerminationReason.ANSWERED, Answer("ok", (Citation("T", "H", "s"),)), "k", 2, 100, 0.0)
    data = outcome_json(reply)
    assert data == {
        "run_id": "run_1",
        "reason": "answered",
        "answer": "ok",
        "citations": [{"title": "T", "heading": "H", "source": "s"}],
        "steps": 2,
        "tokens": 100,
        "cost_usd": 0.0,
    }


def test_the_readme_main_job_runs_offline_on_a_fresh_data_directory(tmp_path):
    """`policypal ask` on a new machine: indexes the samples, answers, lists the trace; no network."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POLICYPAL_", "OPENAI_"))}
    env.update(POLICYPAL_DATA_DIR=str(tmp_path / "data"), HF_HUB_OFFLINE="1")
    cli = [sys.executable, "-m", "adapters.cli"]
    asked = subprocess.run(
        [*cli, "ask", "--json", "How long do I have to submit expense receipts?"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert asked.returncode == 0, asked.stderr
    data = json.loads(asked.stdout)
    assert data["reason"] == "answered" and data["citations"]
    assert "first run" in asked.stderr
    traces = subprocess.run([*cli, "traces", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert json.loads(traces.stdout)[0]["id"] == data["run_id"]
    shown = subprocess.run([*cli, "traces", data["run_id"]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "search_policies" in shown.stdout and "reason: answered" in shown.stdout
    assert "built for readers in: all\n" in shown.stdout  # the terminal's user: no groups but everyone's



async def test_the_terminal_recovers_an_interrupted_action_only_when_no_server_is_alive(tmp_path, sample_index):
    svc = await offline_service(tmp_path, sample_index)
    try:
        action = await left_executing_by_a_crash(svc, "My laptop was stolen from my car this morning")
        await svc.store.workers.heartbeat("server-on-another-host", utcnow())
        served, out = await recover_unless_served(svc, ALIVE, io.StringIO()), io.StringIO()
        untouched = (await svc.pending.get(action.id)).state
        await svc.store.workers.forget("server-on-another-host")
        recovered = await recover_unless_served(svc, ALIVE, out)
        record = await svc.pending.get(action.id)
    finally:
        await svc.close()
    assert (served, untouched) == (0, "executing")  # a live server's sweeper tells the requester in their chat
    assert recovered == 1 and record.state == "unknown"
    assert out.getvalue().startswith(f"Pending action {action.id} (create_it_ticket) was interrupted: ")
    assert "HD-1001" in out.getvalue()


def test_ask_while_another_process_holds_the_index_is_a_clear_error(tmp_path, sample_index, capsys, monkeypatch):
    data = tmp_path / "data"
    held = data / "qdrant"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from retrieval.backends import EdgeBackend; "
            f"held = EdgeBackend.open(Path({str(held)!r}), 'policies', create=True); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(data))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        code = main(["ask", "What does VPN error NG-412 mean?"])
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"The index at {held} is in use by another process (e.g. `policypal serve`)" in err


async def test_a_piped_chat_reads_the_confirmation_from_the_pipe_not_as_the_next_question(
    tmp_path, sample_index, monkeypatch
):
    """`printf 'My laptop was stolen\\ny\\n' | policypal chat`: the y was asked as a question, no ticket."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("My laptop was stolen from my car this morning\ny\n"))
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # input() writes its prompt here
    svc = await offline_service(tmp_path, sample_index)
    out = io.StringIO()
    try:
        code = await chat(svc, ALICE, out=out)
        tickets = await svc.store.tickets.count()
        questions = [run.question for run in await svc.store.runs.recent()]
    finally:
        await svc.close()
    assert code == 0 and tickets == 1, out.getvalue()
    assert "Ticket IT-1001 created." in out.getvalue()
    assert "y" not in questions


async def test_ask_without_a_terminal_says_the_card_is_left_open_and_how_to_decide(tmp_path, sample_index, monkeypatch):
    """`echo y | policypal ask ...` printed the card and exited 0: the y was ignored without a word."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # not a terminal
    svc = await offline_service(tmp_path, sample_index)
    out = io.StringIO()
    try:
        code = await ask(svc, "My laptop was stolen from my car this morning", ALICE, out=out)
    finally:
        await svc.close()
    card, hint = out.getvalue().rstrip("\n").rsplit("\n", 1)
    pending_id = card.rsplit("└ pending ", 1)[1].split(" ", 1)[0]
    assert code == 0 and "needs your confirmation" in card
    assert hint == (
        f"Left open: action {pending_id} is still pending; decide it later with "
        f"`policypal decide {pending_id} confirm` or `cancel` (a script can ask with --yes or --no)."
    )


async def test_a_card_left_open_is_decided_by_a_later_process_and_the_terminal_posts_nothing(tmp_path, sample_index):
    asking = await offline_service(tmp_path, sample_index)
    out = io.StringIO()
    try:
        await ask(asking, "My laptop was stolen from my car this morning", ALICE, prompt=None, as_json=True, out=out)
    finally:
        await asking.close()
    pending_id = json.loads(out.getvalue())["pending"]["id"]
    later = await offline_service(tmp_path, sample_index)
    decided, again = io.StringIO(), io.StringIO()
    try:
        code = await decide_by_id(later, pending_id, ALICE, "confirm", out=decided)
        second = await decide_by_id(later, pending_id, ALICE, "confirm", out=again)
        tickets = await later.store.tickets.count()
        record = await later.pending.get(pending_id)
        runs = await later.store.runs.recent()
        rows = await later.store.outbox.of_conversation(record.conversation_key)
    finally:
        await later.close()
    assert (code, second, tickets) == (0, 1, 1)
    assert "Ticket IT-1001 created." in decided.getvalue() and again.getvalue().startswith("Already confirmed by")
    assert record.state == "done" and [r.inbox_id for r in runs] == [None, None]  # no inbox in the terminal
    assert rows == []  # the terminal renders its replies itself: no outbox rows for it
