"""`policypal traces RUN_ID`: one run's totals, its ratings and its steps."""

from __future__ import annotations

import io
import json
from pathlib import Path

from adapters.cli.traces import show_traces
from bot.config import Settings
from bot.store import Store, utcnow


async def test_a_runs_detail_shows_the_askers_rating_and_everyone_elses(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    store = await Store.open(settings.resolved_database_url)
    try:
        await store.runs.record(
            {"id": "r1", "conversation_key": "slack:T1:C1:1.0", "platform": "slack", "user_id": "U1",
             "question": "q", "reason": "answered", "started_at": utcnow(), "model": "m", "trace": [], "owner": ""}
        )  # fmt: skip
        await store.runs.set_feedback("r1", "helpful", "U1")
        await store.runs.set_feedback("r1", "not_helpful", "U2", "wrong office")  # someone else in the channel
    finally:
        await store.close()
    text, as_json = io.StringIO(), io.StringIO()
    assert await show_traces(settings, "r1", out=text) == 0
    assert await show_traces(settings, "r1", as_json=True, out=as_json) == 0
    assert "feedback: helpful (others: 1 not_helpful)\n" in text.getvalue()
    ratings = json.loads(as_json.getvalue())["ratings"]
    assert [(r["user_id"], r["rating"], r["comment"]) for r in ratings] == [
        ("U1", "helpful", None), ("U2", "not_helpful", "wrong office"),
    ]  # fmt: skip
