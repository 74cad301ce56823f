"""The gaps CSV: one row per question under its group's label, and no cell a spreadsheet would run."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

from bot.insights import CSV_COLUMNS, GapGroup, GapQuestion, gaps_csv, group_gaps

MONDAY = datetime(2025, 3, 3, 9, 15, 30, 123456, tzinfo=UTC)


def question(
    text: str, count: int = 1, reasons: tuple[str, ...] = ("not_covered",), runs: tuple[str, ...] = ()
) -> GapQuestion:
    return GapQuestion(text, count, count, MONDAY, reasons, runs)


def group(*questions: GapQuestion) -> GapGroup:
    (only,) = group_gaps(questions, lambda batch: [[1.0, 0.0]] * len(batch))  # one group whatever the wording
    return only


def rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_one_row_per_question_under_its_groups_label() -> None:
    wedding = group(
        question("wedding leave", 2, ("not_covered", "not_helpful", "not_covered"), ("r2", "r1")),
        question('Do I get time off for my wedding, "officially"?\nThanks', 1, ("step_budget",), ("r3",)),
    )
    parking = group(question("parking at HQ"))
    assert rows(gaps_csv([wedding, parking])) == [
        list(CSV_COLUMNS),
        [
            "wedding leave",
            "wedding leave",
            "2",
            "2",
            "2025-03-03T09:15:30+00:00",
            "not_covered: 2; not_helpful: 1",
            "r2 r1",
        ],
        [
            "wedding leave",
            'Do I get time off for my wedding, "officially"?\nThanks',
            "1",
            "1",
            "2025-03-03T09:15:30+00:00",
            "step_budget: 1",
            "r3",
        ],
        ["parking at HQ", "parking at HQ", "1", "1", "2025-03-03T09:15:30+00:00", "not_covered: 1", ""],
    ]


def test_no_cell_starts_a_formula() -> None:
    attacks = ['=HYPERLINK("http://evil.example","click")', "+1+1", "-2+3", "@SUM(A1:A9)", "\t=1", "\r=1"]
    csv_text = gaps_csv([group(*(question(text, 9 - i, runs=(text,)) for i, text in enumerate(attacks)))])
    body = rows(csv_text)[1:]
    assert [row[1] for row in body] == ["'" + text for text in attacks]
    assert {row[0] for row in body} == {"'" + attacks[0]}  # the label too
    assert [row[6] for row in body] == ["'" + text for text in attacks]  # and the run ids


def test_text_that_only_contains_formula_characters_is_left_alone() -> None:
    (row,) = rows(gaps_csv([group(question("is 2+2=4 in the pay-rise policy? @HR"))]))[1:]
    assert row[1] == "is 2+2=4 in the pay-rise policy? @HR"


def test_no_groups_is_just_the_header() -> None:
    assert rows(gaps_csv([])) == [list(CSV_COLUMNS)]
