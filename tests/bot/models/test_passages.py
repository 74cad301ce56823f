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


def test_an_item_knows_the_sentence_that_quotes_it_with_its_list() -> None:
    """Where a lead carries its list, an item is quoted under it; a list too long to carry keeps its items alone."""
    from bot.models.offline.units import passage_units

    short = "The button:\n\n- sends a copy to Security;\n- removes the email.\n\nDo not forward it."
    long_items = "\n".join(f"- Step {n}: " + "do this and then that, carefully and in order. " * 4 for n in range(9))
    units = passage_units({"cite": "Phishing", "text": f"Phishing\n\n{short}"})
    steps = passage_units({"cite": "Steps", "text": f"Steps\n\nFollow these steps:\n\n{long_items}"})

    assert units[0].text == "The button: sends a copy to Security; removes the email."
    assert [unit.lead for unit in units] == [None, 0, 0, None]
    assert steps[0].text.startswith("Follow these steps: Step 0")  # the first items fit under the lead ...
    assert steps[1].lead == 0 and steps[-1].lead is None  # ... the rest are quoted alone
