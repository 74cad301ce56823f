"""Chunking: heading paths, block boundaries, table headers, overlap and the token bound."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from retrieval import Chunk, Document
from retrieval.chunking import approx_token_count, chunk_document
from retrieval.ingest import load_documents

POLICY = """# Remote and Hybrid Work Policy

Northwind Labs is a distributed company.

## Eligibility

Any employee can ask to work remotely after probation.

### How to request

1. Talk to your manager.
2. Submit Form HR-12.

## Core hours

Be available from 10:00 to 15:00."""


def document(text: str, title: str = "Remote and Hybrid Work Policy") -> Document:
    return Document(doc_id="remote.md", title=title, source="remote.md", text=text, content_hash="x")


def words(text: str) -> int:
    return len(text.split())


def body(chunk: Chunk) -> str:
    return chunk.text.split("\n\n", 1)[1]


def test_heading_path_starts_with_the_title_and_follows_the_heading_stack() -> None:
    chunks = chunk_document(document(POLICY))
    assert [chunk.heading_path for chunk in chunks] == [
        ("Remote and Hybrid Work Policy",),
        ("Remote and Hybrid Work Policy", "Eligibility"),
        ("Remote and Hybrid Work Policy", "Eligibility", "How to request"),
        ("Remote and Hybrid Work Policy", "Core hours"),
    ]


def test_chunk_text_starts_with_the_heading_line_then_the_body() -> None:
    chunks = chunk_document(document(POLICY))
    assert chunks[2].text == (
        "Remote and Hybrid Work Policy > Eligibility > How to request\n\n"
        "1. Talk to your manager.\n2. Submit Form HR-12."
    )


def test_a_document_without_an_h1_is_rooted_at_its_title() -> None:
    chunks = chunk_document(document("Intro.\n\n## Scope\n\nAll staff.", title="Leave"))
    assert [chunk.heading_path for chunk in chunks] == [("Leave",), ("Leave", "Scope")]


def test_the_opening_h1_is_not_repeated_under_a_front_matter_title() -> None:
    text = "# Remote and Hybrid Work Policy\n\nIntro.\n\n## Scope\n\nAll staff.\n\n# Appendix\n\nForms."
    chunks = chunk_document(document(text, title="Remote Work"))
    assert [chunk.heading_path for chunk in chunks] == [
        ("Remote Work",),
        ("Remote Work", "Scope"),
        ("Remote Work", "Appendix"),
    ]


def test_positions_are_sequential_and_no_chunk_is_empty() -> None:
    text = POLICY + "\n\n## Empty section\n\n## Another\n\n" + "Sentence number one. " * 200
    chunks = chunk_document(document(text), max_tokens=64)
    assert [chunk.position for chunk in chunks] == list(range(len(chunks)))
    assert all(body(chunk).strip() for chunk in chunks)
    assert all(chunk.doc_id == "remote.md" for chunk in chunks)
    assert not any("Empty section" in chunk.heading for chunk in chunks)


@pytest.mark.parametrize("count", [None, words])
def test_no_chunk_exceeds_max_tokens(count: object) -> None:
    paragraph = " ".join(f"Rule {n} applies to every employee in every office." for n in range(60))
    rows = "\n".join(f"| Country {n} | {n} days | Notes about country {n} |" for n in range(80))
    text = f"# Policy\n\n{paragraph}\n\n| Country | Days | Notes |\n| --- | --- | --- |\n{rows}\n\n" + "x" * 3000
    counter = count or approx_token_count
    chunks = chunk_document(document(text, title="Policy"), max_tokens=100, count_tokens=count)  # type: ignore[arg-type]
    assert len(chunks) > 10
    assert max(counter(chunk.text) for chunk in chunks) <= 100


def test_table_rows_are_never_cut_and_the_header_repeats() -> None:
    header = "| Country | Hybrid | Fully remote |\n| --- | --- | --- |"
    rows = [f"| Country number {n} | {n * 10} euros | {n * 20} euros |" for n in range(40)]
    text = "# Stipend\n\n" + header + "\n" + "\n".join(rows)
    chunks = chunk_document(document(text, title="Stipend"), max_tokens=80, overlap_tokens=0)
    assert len(chunks) > 3
    seen = []
    for chunk in chunks:
        lines = body(chunk).split("\n")
        assert "\n".join(lines[:2]) == header
        assert all(line in rows for line in lines[2:])
        seen += lines[2:]
    assert seen == rows


def test_list_items_are_kept_whole() -> None:
    items = [f"- Item {n}: " + " ".join(["word"] * 12) + "." for n in range(30)]
    chunks = chunk_document(document("# L\n\n" + "\n".join(items), title="L"), max_tokens=60, overlap_tokens=0)
    pieces = [line for chunk in chunks for line in body(chunk).split("\n")]
    assert pieces == items


def test_a_long_paragraph_is_split_at_sentence_boundaries() -> None:
    sentences = [f"Sentence {n} says something about leave." for n in range(50)]
    chunks = chunk_document(document(" ".join(sentences), title="L"), max_tokens=50, overlap_tokens=0)
    assert len(chunks) > 3
    for chunk in chunks:
        assert re.fullmatch(r"(Sentence \d+ says something about leave\.\s?)+", body(chunk))


def test_a_single_giant_word_is_still_bounded() -> None:
    chunks = chunk_document(document("https://example.com/" + "a-b" * 400, title="T"), max_tokens=40)
    assert len(chunks) > 1
    assert all(approx_token_count(chunk.text) <= 40 for chunk in chunks)


def test_the_last_small_block_overlaps_into_the_next_chunk() -> None:
    paragraphs = [f"Paragraph {n} " + " ".join(["text"] * 20) + "." for n in range(6)]
    chunks = chunk_document(document("\n\n".join(paragraphs), title="T"), max_tokens=60, overlap_tokens=30)
    assert len(chunks) >= 3
    for previous, current in itertools.pairwise(chunks):
        assert body(current).startswith(body(previous).split("\n\n")[-1])


def test_without_overlap_no_block_repeats() -> None:
    paragraphs = [f"Paragraph {n} " + " ".join(["text"] * 20) + "." for n in range(6)]
    chunks = chunk_document(document("\n\n".join(paragraphs), title="T"), max_tokens=60, overlap_tokens=0)
    assert [block for chunk in chunks for block in body(chunk).split("\n\n")] == paragraphs


def test_a_heading_with_no_body_keeps_its_words_under_its_parent() -> None:
    # As in real handbooks: a process step, and an FAQ answer, written as headings with nothing under them.
    text = (
        "## Process\n\n#### 3. HR does a final review of all documents\n\n#### 4. Security contacts you\n\n"
        "You have 7 days to reply.\n\n## FAQ\n\n##### Q: Can my therapist write the note?\n\n"
        "###### A: Yes, if they are a licensed provider."
    )
    chunks = chunk_document(document(text, title="Clearance"))
    assert [(chunk.heading, body(chunk)) for chunk in chunks] == [
        ("Clearance > Process", "3. HR does a final review of all documents"),
        ("Clearance > Process > 4. Security contacts you", "You have 7 days to reply."),
        ("Clearance > FAQ > Q: Can my therapist write the note?", "A: Yes, if they are a licensed provider."),
    ]


def test_code_blocks_stay_whole_and_their_hash_lines_are_not_headings() -> None:
    text = "# T\n\n## Setup\n\n```\n# not a heading\n\nrun me\n```\n\nAfter."
    chunks = chunk_document(document(text, title="T"))
    assert [chunk.heading_path for chunk in chunks] == [("T", "Setup")]
    assert body(chunks[0]) == "```\n# not a heading\n\nrun me\n```\n\nAfter."


def test_a_shorter_fence_line_inside_a_code_block_does_not_close_it() -> None:
    code = "````markdown\n```bash\necho hi\n\n# not a heading\n\necho bye\n```\n````"
    chunks = chunk_document(document(f"# T\n\n## Setup\n\n{code}\n\nAfter.", title="T"))
    assert [chunk.heading_path for chunk in chunks] == [("T", "Setup")]
    assert body(chunks[0]) == f"{code}\n\nAfter."


def test_approx_token_count_runs_a_little_above_words_and_punctuation() -> None:
    assert approx_token_count("") == 0
    assert approx_token_count("Hello, world!") == 5  # 4 pieces * 1.15, rounded up


def test_real_handbooks_chunk_within_bounds(handbooks: list[Path]) -> None:
    chunks = [chunk for doc in load_documents(handbooks).documents for chunk in chunk_document(doc)]
    sizes = sorted(approx_token_count(chunk.text) for chunk in chunks)
    assert sizes[-1] <= 256 and all(body(chunk).strip() for chunk in chunks)
    print(f"\n{len(chunks)} chunks; tokens min {sizes[0]} median {sizes[len(sizes) // 2]} max {sizes[-1]}")
