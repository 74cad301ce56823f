"""What the model is given of each passage: a documented size, and whole table rows and list items."""

from __future__ import annotations

import pytest

from bot.config import Settings
from retrieval import PolicyIndex
from retrieval.search import snippet

TABLE = (
    "Before you look up an error, restart NorthGate.\n\n"
    "| Code | Message | What to do |\n| --- | --- | --- |\n"
    "| NG-117 | Client version not supported | Open NorthStore and install the update. |\n"
    "| NG-412 | Certificate expired | Follow the steps in Renewing an expired certificate. |\n"
    "| NG-809 | Tunnel could not be established | Turn on TCP fallback and reconnect. |\n\n"
    "- Collect the diagnostic bundle from NorthGate > Help > Export diagnostics.\n"
    "- Attach it to your ticket; it contains logs but no passwords.\n"
)


def test_the_passage_size_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLICYPAL_PASSAGE_CHARS", "900")

    assert Settings(_env_file=None).retrieval().snippet_chars == 900  # type: ignore[call-arg]
    assert Settings(_env_file=None, passage_chars=500).retrieval().snippet_chars == 500  # type: ignore[call-arg]


def test_a_cut_passage_keeps_only_whole_rows_and_items() -> None:
    for limit in range(120, len(TABLE), 7):
        cut = snippet(TABLE, limit)

        assert len(cut) <= limit and cut.endswith("…")
        kept = cut.removesuffix("…").rstrip().splitlines()
        assert all(line in TABLE.splitlines() for line in kept), limit  # no row or item ends early
        assert not kept[-1].startswith(("| ---", "| Code")), limit  # never a header alone


def test_an_error_code_row_reaches_the_model_whole(sample_index: PolicyIndex) -> None:
    passage = next(p for p in sample_index.search("what does NG-809 mean") if "Common error codes" in p.heading)

    assert "| NG-809 | Tunnel could not be established |" in passage.text
    assert "Turn on **Settings > Connection > TCP fallback** and reconnect. |" in passage.text


def test_a_long_list_item_is_quoted_by_its_sentences_whole() -> None:
    """An item past the quoting limit is not cut at 300 characters: its last sentence is often the answer."""
    from bot.models.offline.units import UNIT_CHARS, passage_units

    item = (
        "- 'Who can post' manages who can send messages to your group. Select **Group members** if you wish to "
        "limit messages to group members only. Select **Entire organization** if you want to give all "
        "example.com users the ability to send messages to the group. If this group is being used for "
        "external communications, select **Anyone on the web**."
    )
    passage = {"cite": "Groups › Privacy settings", "text": f"Groups › Privacy settings\n\n- Short item.\n{item}"}

    units = passage_units(passage)

    assert len(item) > UNIT_CHARS
    last = "If this group is being used for external communications, select Anyone on the web."
    assert units[-1].text == last
    assert not any(unit.text.endswith("…") for unit in units)
    assert len({unit.items for unit in units}) == 1  # the pieces stay items of the one list
