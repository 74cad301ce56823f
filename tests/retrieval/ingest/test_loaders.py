"""Loading policy files: formats, metadata, clean-up of site-generator markup, and bad input."""

from __future__ import annotations

import io
import os
from pathlib import Path

import docx
import pytest
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from docx.oxml.xmlchemy import BaseOxmlElement
from docx.shared import Inches

from retrieval import Document, LoadReport
from retrieval.chunking import chunk_document
from retrieval.ingest import load_documents


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def load_one(path: Path) -> Document:
    report = load_documents([path])
    assert report.failures == [], report.failures
    assert len(report.documents) == 1
    return report.documents[0]


def failure_reasons(report: LoadReport) -> dict[str, str]:
    return {failure.path.name: failure.reason for failure in report.failures}


def pdf_bytes(*pages: list[str]) -> bytes:
    """A minimal valid PDF whose pages' content streams draw their ``lines`` in Helvetica."""
    font = 3 + 2 * len(pages)
    kids = b" ".join(b"%d 0 R" % (3 + 2 * number) for number in range(len(pages)))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(pages))]
    for number, lines in enumerate(pages):
        escaped = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines]
        content = ("BT /F1 11 Tf 72 720 Td 14 TL " + " ".join(f"({line}) Tj T*" for line in escaped) + " ET").encode(
            "cp1252"
        )
        objects += [
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R" % (4 + 2 * number)
            + b" /Resources << /Font << /F1 %d 0 R >> >> >>" % font,
            b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        ]
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


def docx_bytes() -> bytes:
    document = docx.Document()
    document.add_heading("Expense Policy", 0)
    document.add_heading("Meals", 1)
    document.add_paragraph("Meals are reimbursed up to 40 euros a day.")
    document.add_paragraph("Keep every receipt", style="List Bullet")
    document.add_paragraph("Photograph paper receipts", style="List Bullet 2")
    table = document.add_table(rows=2, cols=2)
    for (row, col), text in {(0, 0): "City", (0, 1): "Hotel cap", (1, 0): "Lisbon", (1, 1): "150 euros"}.items():
        table.cell(row, col).text = text
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


# --- metadata -------------------------------------------------------------------------------------


def test_front_matter_sets_title_source_section_audience_and_id(tmp_path: Path) -> None:
    path = write(
        tmp_path / "remote.md",
        "---\ntitle: Remote Work\nurl: https://intranet.example/remote\nsection: People\n"
        "audience: [staff, managers]\nid: POL-7\n---\n\n# Remote and Hybrid Work\n\nBody text.\n",
    )
    doc = load_one(path)
    assert (doc.doc_id, doc.title, doc.source) == ("POL-7", "Remote Work", "https://intranet.example/remote")
    assert (doc.section, doc.audience) == ("People", ("staff", "managers"))
    assert "title:" not in doc.text and doc.text.startswith("# Remote and Hybrid Work")


def test_front_matter_classification_is_kept_and_changes_the_hash_only_when_set(tmp_path: Path) -> None:
    body = "# Reorg\n\nThe new structure starts in May.\n"
    plain = load_one(write(tmp_path / "reorg.md", f"---\ntitle: Reorg\n---\n\n{body}"))
    marked = load_one(write(tmp_path / "reorg.md", f"---\ntitle: Reorg\nclassification: confidential\n---\n\n{body}"))
    assert (plain.classification, marked.classification) == (None, "confidential")
    assert plain.content_hash != marked.content_hash


def test_front_matter_with_windows_line_endings_keeps_its_metadata(tmp_path: Path) -> None:
    text = "---\ntitle: Bonus plan\nsection: Exec\naudience: [executives]\n---\n\n# Bonus plan\n\nThe pool is 4%.\n"
    for name, ending in (("crlf.md", "\r\n"), ("cr.md", "\r")):
        doc = load_one(write(tmp_path / name, text.replace("\n", ending)))
        assert (doc.title, doc.section, doc.audience) == ("Bonus plan", "Exec", ("executives",))
        assert doc.text == "# Bonus plan\n\nThe pool is 4%."


def test_html_front_matter_sets_audience_and_is_not_body_text(tmp_path: Path) -> None:
    # Jekyll and Eleventy give .html pages front matter too; ignored, a restricted page was public.
    page = "---\ntitle: Salary bands\naudience: [hr]\n---\n<html><body><h1>Bands</h1><p>Band 3 pays 70k.</p></body>\n"
    doc = load_one(write(tmp_path / "bands.html", page))
    assert (doc.title, doc.audience) == ("Salary bands", ("hr",))
    assert doc.text == "# Bands\n\nBand 3 pays 70k."


def test_audience_may_be_a_comma_separated_string(tmp_path: Path) -> None:
    doc = load_one(write(tmp_path / "a.md", "---\naudience: it, security ,\n---\nText.\n"))
    assert doc.audience == ("it", "security")


def test_front_matter_keys_in_any_case_restrict_the_document(tmp_path: Path) -> None:
    # Read as an unknown key, "Audience" left a restricted document visible to everyone.
    doc = load_one(write(tmp_path / "pay.md", "---\nTitle: Pay\nAudience: [HR]\n---\n# Pay\n\nBand 3 pays 70k.\n"))
    assert (doc.title, doc.audience) == ("Pay", ("HR",))


def test_a_misspelt_or_repeated_audience_key_fails_the_file_instead_of_publishing_it(tmp_path: Path) -> None:
    write(tmp_path / "typo.md", "---\naudiences: [hr]\n---\nSalary bands.\n")
    write(tmp_path / "twice.md", "---\naudience: [hr]\nAudience: [everyone]\n---\nSalary bands.\n")
    write(tmp_path / "good.md", "# Good\n\nBody.\n")
    report = load_documents([tmp_path])
    assert [doc.doc_id for doc in report.documents] == ["good.md"]
    reasons = failure_reasons(report)
    assert "`audiences` is not `audience`" in reasons["typo.md"]
    assert "sets `audience` twice" in reasons["twice.md"]


def test_a_common_misspelling_or_an_exact_repeat_of_audience_fails_the_file(tmp_path: Path) -> None:
    # "audiance" (not starting "audien") was ignored; a second `audience:` silently replaced the first (PyYAML).
    write(tmp_path / "typo.md", "---\naudiance: [hr]\n---\nSalary bands.\n")
    write(tmp_path / "again.md", "---\naudience: [hr]\ntitle: Pay\naudience:\n---\nPay bands.\n")
    write(tmp_path / "cadence.md", "---\ncadence: yearly\n---\nReviews.\n")
    report = load_documents([tmp_path])
    assert [doc.doc_id for doc in report.documents] == ["cadence.md"]
    reasons = failure_reasons(report)
    assert "`audiance` is not `audience`" in reasons["typo.md"]
    assert "sets `audience` twice" in reasons["again.md"]


def test_an_audience_naming_no_group_fails_the_file_instead_of_publishing_it(tmp_path: Path) -> None:
    # `audience: []` read as "no restriction" made a document meant for a few readable by everyone.
    write(tmp_path / "list.md", "---\naudience: []\n---\nSalary bands.\n")
    write(tmp_path / "string.md", '---\naudience: ""\n---\nSalary bands.\n')
    write(tmp_path / "blank.md", "---\naudience:\n---\nSalary bands.\n")
    write(tmp_path / "commas.md", "---\naudience: ' , '\n---\nSalary bands.\n")
    write(tmp_path / "public.md", "---\ntitle: Leave\n---\nLeave rules.\n")
    report = load_documents([tmp_path])
    assert [(doc.doc_id, doc.audience) for doc in report.documents] == [("public.md", ())]
    reasons = failure_reasons(report)
    assert set(reasons) == {"list.md", "string.md", "blank.md", "commas.md"}
    assert all("`audience` names no group" in reason for reason in reasons.values())


def test_an_audience_that_is_not_a_configured_group_fails_that_file_by_name(tmp_path: Path) -> None:
    # A misspelt group ("hrr") hid the document from HR and showed it to nobody, silently.
    write(tmp_path / "typo.md", "---\naudience: [hrr]\n---\nSalary bands.\n")
    write(tmp_path / "mixed.md", "---\naudience: hr, Managers\n---\nReorg plan.\n")
    write(tmp_path / "hr.md", "---\naudience: [hr]\n---\nPay review dates.\n")
    write(tmp_path / "everyone.md", "---\naudience: [all]\n---\nLeave rules.\n")
    report = load_documents([tmp_path], known_groups=["hr", "managers"])
    assert {doc.doc_id: doc.audience for doc in report.documents} == {"everyone.md": ("all",), "hr.md": ("hr",)}
    reasons = failure_reasons(report)
    assert reasons["typo.md"] == (
        "front matter audience `hrr` is not a known group (known: all, hr, managers): "
        "fix it, or nobody in that group can see the document"
    )
    assert "audience `Managers` is not a known group" in reasons["mixed.md"]


def test_any_audience_is_accepted_when_no_groups_are_configured(tmp_path: Path) -> None:
    doc = load_one(write(tmp_path / "typo.md", "---\naudience: [hrr]\n---\nSalary bands.\n"))
    assert doc.audience == ("hrr",)
    report = load_documents([tmp_path], known_groups=None)
    assert [doc.audience for doc in report.documents] == [("hrr",)] and report.failures == []


def test_front_matter_after_blank_lines_or_in_toml_restricts_the_document(tmp_path: Path) -> None:
    # Read as body text (a rule, then "## audience: hr"), both published a document meant for HR to everyone.
    body = "# Salary bands\n\nBand {} pays 70k.\n"
    write(tmp_path / "blank.md", "\n  \n---\ntitle: Pay\naudience: [hr]\n---\n\n" + body.format(1))
    write(tmp_path / "crlf.md", ("\n---\ntitle: Pay\naudience: [hr]\n---\n\n" + body.format(2)).replace("\n", "\r\n"))
    write(tmp_path / "hugo.md", "+++\ntitle = 'Pay'\naudience = ['hr']\n+++\n\n" + body.format(3))
    page = "<h1>Salary bands</h1><p>Band 4 pays 70k.</p>\n"
    write(tmp_path / "page.html", "\n---\ntitle: Pay\naudience: hr\n---\n" + page)
    report = load_documents([tmp_path])
    assert report.failures == []
    assert {doc.doc_id: (doc.title, doc.audience, doc.text) for doc in report.documents} == {
        name: ("Pay", ("hr",), f"# Salary bands\n\nBand {band} pays 70k.")
        for band, name in enumerate(("blank.md", "crlf.md", "hugo.md", "page.html"), 1)
    }


def test_broken_toml_front_matter_fails_the_file_by_name(tmp_path: Path) -> None:
    write(tmp_path / "bad.md", "+++\naudience = [hr\n+++\nSalary bands.\n")
    write(tmp_path / "open.md", "+++\naudience = ['hr']\n\nSalary bands.\n")
    write(tmp_path / "typo.md", "+++\naudiences = ['hr']\n+++\nSalary bands.\n")
    report = load_documents([tmp_path])
    assert report.documents == []
    reasons = failure_reasons(report)
    assert "malformed front matter" in reasons["bad.md"]
    assert "never closed" in reasons["open.md"]
    assert "`audiences` is not `audience`" in reasons["typo.md"]


def test_malformed_front_matter_is_reported_and_the_rest_load(tmp_path: Path) -> None:
    write(tmp_path / "bad.md", "---\ntitle: [unclosed\n---\nBody.\n")
    write(tmp_path / "list.md", "---\n- just\n- a list\n---\nBody.\n")
    write(tmp_path / "open.md", "---\ntitle: never closed\n\nBody.\n")
    write(tmp_path / "good.md", "# Good\n\nBody.\n")
    report = load_documents([tmp_path])
    assert [doc.doc_id for doc in report.documents] == ["good.md"]
    reasons = failure_reasons(report)
    assert "malformed front matter" in reasons["bad.md"]
    assert "malformed front matter" in reasons["list.md"]
    assert "never closed" in reasons["open.md"]


def test_title_falls_back_to_first_h1_then_to_the_prettified_file_name(tmp_path: Path) -> None:
    write(tmp_path / "with-h1.md", "Intro line.\n\n# Leave Policy\n\nText.\n")
    write(tmp_path / "sick_leave-rules.md", "## Not a title\n\nText.\n")
    write(tmp_path / "travel" / "index.md", "Text about travel.\n")
    titles = {doc.doc_id: doc.title for doc in load_documents([tmp_path]).documents}
    assert titles == {
        "with-h1.md": "Leave Policy",
        "sick_leave-rules.md": "Sick leave rules",
        "travel/index.md": "Travel",
    }


def test_doc_id_is_relative_to_the_directory_given_and_source_is_the_path(tmp_path: Path) -> None:
    nested = write(tmp_path / "people" / "leave.md", "Text.\n")
    from_dir = load_one(tmp_path)
    from_file = load_one(nested)
    assert from_dir.doc_id == "people/leave.md" and from_dir.source == str(tmp_path / "people" / "leave.md")
    assert from_file.doc_id == "leave.md" and from_file.source == str(nested)


def test_content_hash_is_stable_and_changes_with_metadata(tmp_path: Path) -> None:
    path = write(tmp_path / "a.md", "---\nsection: People\n---\nSame body.\n")
    first, again = load_one(path).content_hash, load_one(path).content_hash
    write(tmp_path / "a.md", "---\nsection: Finance\n---\nSame body.\n")
    assert first == again != load_one(path).content_hash


# --- walking --------------------------------------------------------------------------------------


def test_directory_walk_is_recursive_sorted_and_skips_hidden_and_unsupported_files(tmp_path: Path) -> None:
    for name in ["b.md", "a/z.txt", "a/c.html", ".hidden.md", ".git/config.md", "notes.xlsx", "img.png"]:
        write(tmp_path / name, f"<p>Body of {name}</p>" if name.endswith("html") else f"Body of {name}\n")
    report = load_documents([tmp_path])
    assert [doc.doc_id for doc in report.documents] == ["a/c.html", "a/z.txt", "b.md"]
    assert report.failures == []


def test_an_explicitly_named_unsupported_file_is_a_failure(tmp_path: Path) -> None:
    sheet = write(tmp_path / "rates.xlsx", b"PK\x03\x04")
    report = load_documents([sheet, tmp_path / "missing.md"])
    reasons = failure_reasons(report)
    assert "unsupported file type '.xlsx'" in reasons["rates.xlsx"]
    assert reasons["missing.md"] == "no such file or directory"


def test_the_same_id_under_two_roots_is_reported_not_overwritten(tmp_path: Path) -> None:
    write(tmp_path / "one" / "index.md", "First handbook.\n")
    write(tmp_path / "two" / "index.md", "Second handbook.\n")
    report = load_documents([tmp_path / "one", tmp_path / "two"])
    assert [doc.text for doc in report.documents] == ["First handbook."]
    assert "already used by" in report.failures[0].reason


# --- Markdown normalisation -----------------------------------------------------------------------


def test_hard_wrapped_lines_are_rejoined_but_lists_tables_and_code_are_not(tmp_path: Path) -> None:
    text = (
        "# Policy\n\nThis paragraph was\nhard wrapped at\neighty columns.\n\n"
        "* first item that\n  wraps\n* second item\n    + nested\n\n"
        "Country | Days\n--- | ---\nPortugal | 22\n\n"
        "```\nline one\nline two\n```\n"
    )
    doc = load_one(write(tmp_path / "p.md", text))
    assert doc.text == (
        "# Policy\n\nThis paragraph was hard wrapped at eighty columns.\n\n"
        "- first item that wraps\n- second item\n  - nested\n\n"
        "| Country | Days |\n| --- | --- |\n| Portugal | 22 |\n\n"
        "```\nline one\nline two\n```"
    )


def test_code_holding_a_backtick_fence_gets_a_longer_fence_and_stays_one_block(tmp_path: Path) -> None:
    example = "```bash\necho hi\n\n# not a heading\n\necho bye\n```"
    markdown = load_one(write(tmp_path / "md.md", f"# Deploy\n\n## Setup\n\n~~~markdown\n{example}\n~~~\n\nAfter.\n"))
    page = load_one(write(tmp_path / "page.html", f"<h1>Deploy</h1><h2>Setup</h2><pre>{example}</pre><p>After.</p>"))
    for doc, info in ((markdown, "markdown"), (page, "")):
        assert f"## Setup\n\n````{info}\n{example}\n````\n\nAfter." in doc.text
        assert [chunk.heading for chunk in chunk_document(doc)] == ["Deploy > Setup"]
    assert load_one(write(tmp_path / "snippet.md", f"~~~\n{example}\n~~~\n")).title == "Snippet"  # no H1 in code


def test_label_lines_and_hard_breaks_stay_on_their_own_lines(tmp_path: Path) -> None:
    doc = load_one(write(tmp_path / "p.md", "**Owner:** People Team\n**Last reviewed:** March 2025\n"))
    assert doc.text == "**Owner:** People Team\n**Last reviewed:** March 2025"


def test_links_keep_their_text_and_mail_addresses_and_images_their_descriptive_alt_text(tmp_path: Path) -> None:
    text = (
        "Read the [travel\nguide](https://x.example/a_(b)) or ask [HR](mailto:hr@example.com).\n"
        "[![Screenshot](shot.png)](https://x.example/big) See <https://y.example> or <it@example.com>.\n\n"
        "![Fields to complete before day one](https://x.example/fields.png)\n"
    )
    doc = load_one(write(tmp_path / "p.md", text))
    assert doc.text == (
        "Read the travel guide or ask HR (hr@example.com). See https://y.example or it@example.com.\n\n"
        "Fields to complete before day one"
    )


def test_a_space_inside_link_brackets_still_separates_words(tmp_path: Path) -> None:
    # Seen in the Sourcegraph handbook: "continuation of coverage under[ COBRA](https://www.dol.gov/...)".
    text = "Coverage continues under[ COBRA](https://dol.example/cobra); insure with[ GeoBlue.](https://g.example)\n"
    doc = load_one(write(tmp_path / "p.md", text))
    assert doc.text == "Coverage continues under COBRA; insure with GeoBlue."


def test_liquid_tags_are_removed(tmp_path: Path) -> None:
    text = (
        '# Leave\n\nRequest leave in [HR Links]({% page "/tools/hrlinks/" %}) and post in '
        '{% slack_channel "people-ops" %}.\n\n'
        '{% alert "Updated guidance (2021)" %}\nNew rules apply.\n{% endalert %}\n\n'
        '{% include "step-indicator.html"\nsteps: travel.steps\ncurrent_step: 2 %}\n'
        '{% include "note.html" text="Ask your manager first." %}\n\n'
        "{% comment %}Internal: do not publish{% endcomment %}\n"
        '{% image "_img/x.png" "alt" %}Base: {{ site.baseurl }}/x\n'
    )
    doc = load_one(write(tmp_path / "leave.md", text))
    assert "{%" not in doc.text and "{{" not in doc.text and "%}" not in doc.text
    assert "Request leave in HR Links and post in #people-ops." in doc.text
    assert "**Updated guidance (2021)**\n\nNew rules apply." in doc.text
    assert "Ask your manager first." in doc.text
    assert "Internal" not in doc.text and "steps:" not in doc.text


def test_an_unclosed_template_opener_in_prose_drops_nothing_after_it(tmp_path: Path) -> None:
    # "{{" in prose ran to the next template's "}}", taking every paragraph between with it.
    text = (
        "# Escaping\n\nIn Jinja, write {{ to open an expression.\n\nKeep this paragraph.\n\n"
        "A {% tag left open.\n\nKeep this too.\n\nSite: {{ site.name }}, {% include x.html %}done.\n"
    )
    doc = load_one(write(tmp_path / "e.md", text))
    assert doc.text == (
        "# Escaping\n\nIn Jinja, write {{ to open an expression.\n\nKeep this paragraph.\n\n"
        "A {% tag left open.\n\nKeep this too.\n\nSite: , done."
    )


def test_both_branches_of_a_liquid_condition_stay_separate_words(tmp_path: Path) -> None:
    text = (
        "Staff {% if a %}Conditional text{% elsif b %}Second{%- else -%}Other branch{% endif %} apply.\n\n"
        '{% case site.office %}{% when "dc" %}Badge at F Street{% when "sf" %}Badge at desk{% endcase %}\n'
    )
    doc = load_one(write(tmp_path / "c.md", text))
    assert doc.text == "Staff Conditional text Second Other branch apply.\n\nBadge at F Street Badge at desk"


def test_a_liquid_condition_inside_a_link_target_still_leaves_only_the_link_text(tmp_path: Path) -> None:
    # The space kept between branches split the target: "[HR Links](https://a https://b)" stayed in the text.
    text = "Book it in [HR Links]({% if site.internal %}https://hr.int/l{%- else -%}https://hr.example/l{% endif %}).\n"
    doc = load_one(write(tmp_path / "l.md", text))
    assert doc.text == "Book it in HR Links."


def test_html_tables_in_markdown_become_pipe_tables(tmp_path: Path) -> None:
    text = (
        '# Office\n\n<div class="table-wrapper">\n  <table>\n  <tr>\n   <td><strong>Version</strong>\n   </td>\n'
        "   <td><strong>Comments</strong></td>\n  </tr>\n  <tr>\n   <td>1.0</td>\n"
        '   <td>First&nbsp;version<br />reviewed by <a href="https://x">Legal</a> &amp; IT | ok\n<p>\nSigned.</td>\n'
        "  </tr>\n</table>\n</div>\n\nAfter the table.\n"
    )
    doc = load_one(write(tmp_path / "office.md", text))
    assert "<" not in doc.text
    assert doc.text == (
        "# Office\n\n| Version | Comments |\n| --- | --- |\n"
        "| 1.0 | First version reviewed by Legal & IT \\| ok Signed. |\n\nAfter the table."
    )


def test_html_colspan_keeps_later_cells_under_their_own_columns(tmp_path: Path) -> None:
    # As in the Sourcegraph handbook's FX table: currency headers spanning a USD and a local column each.
    text = (
        '<table><tr><th></th><th colspan="2">EURO</th><th colspan="2">GBP</th></tr>\n'
        "<tr><td>Feb</td><td>1.000</td><td>0.8939</td><td>1.000</td><td>0.7447</td></tr></table>\n"
    )
    doc = load_one(write(tmp_path / "fx.md", text))
    assert doc.text.split("\n") == [
        "|  | EURO |  | GBP |  |",
        "| --- | --- | --- | --- | --- |",
        "| Feb | 1.000 | 0.8939 | 1.000 | 0.7447 |",
    ]


def test_html_rowspan_repeats_its_text_and_keeps_later_cells_under_their_own_columns(tmp_path: Path) -> None:
    # As in the Sourcegraph handbook's risk matrix: "Impact" spans every row of the first column.
    text = (
        "<table><tr><th>Axis</th><th>Level</th><th>Rare</th><th>Likely</th></tr>\n"
        '<tr><td rowspan="2">Impact</td><td>Major</td><td>5</td><td>20</td></tr>\n'
        "<tr><td>Minor</td><td>2</td><td>8</td></tr>\n"
        '<tr><td>Owner</td><td rowspan="2" colspan="2">Compliance</td><td>Yearly</td></tr>\n'
        "<tr><td>Reviewer</td><td>Monthly</td></tr></table>\n"
    )
    doc = load_one(write(tmp_path / "risk.md", text))
    assert doc.text.split("\n") == [
        "| Axis | Level | Rare | Likely |",
        "| --- | --- | --- | --- |",
        "| Impact | Major | 5 | 20 |",
        "| Impact | Minor | 2 | 8 |",
        "| Owner | Compliance |  | Yearly |",
        "| Reviewer | Compliance |  | Monthly |",
    ]


def test_a_table_without_a_header_row_gets_an_empty_header(tmp_path: Path) -> None:
    text = "<table><tr><td><b>Location</b></td><td>1800 F St.<br>Washington</td></tr></table>\n"
    doc = load_one(write(tmp_path / "dc.md", text))
    assert doc.text == "|  |  |\n| --- | --- |\n| **Location** | 1800 F St. Washington |"


def test_html_blocks_comments_and_kramdown_attributes_are_removed(tmp_path: Path) -> None:
    text = (
        "# Steps\n\n<!-- editor note\nspanning lines -->\n"
        '<h3 class="accordion"><button\n  type="button">Step 1: Join</button></h3>\n\n'
        "<div markdown=1>\n\n- kept list item\n\n</div>\n\n{:.usa-list}\nText with <em>emphasis</em>.{: .note}\n"
        '<iframe src="https://video"></iframe><img src="x.png" alt="x">\n'
    )
    doc = load_one(write(tmp_path / "steps.md", text))
    assert doc.text == "# Steps\n\n### Step 1: Join\n\n- kept list item\n\nText with _emphasis_."


def test_text_that_only_looks_like_a_tag_is_kept(tmp_path: Path) -> None:
    doc = load_one(write(tmp_path / "a.md", "Create `<project>-feds` and write to <your manager> if 2 < 3.\n"))
    assert doc.text == "Create `<project>-feds` and write to <your manager> if 2 < 3."


# --- other formats --------------------------------------------------------------------------------


def test_raw_html_keeps_main_content_and_drops_scripts_styles_and_navigation(tmp_path: Path) -> None:
    page = (
        "<html><head><title>Leave | Intranet</title><style>p{}</style></head><body>"
        "<nav><a href='/'>Home</a></nav><main><h1>Annual Leave</h1><p>You get <b>25 days</b>.</p>"
        "<h2>Carry over</h2><ul><li>Up to 5 days<ul><li>Use by March</li></ul></li></ul>"
        "<script>track()</script></main><footer>Copyright</footer></body></html>"
    )
    doc = load_one(write(tmp_path / "leave.html", page))
    assert doc.title == "Annual Leave"
    assert doc.text == "# Annual Leave\n\nYou get **25 days**.\n\n## Carry over\n\n- Up to 5 days\n  - Use by March"


def test_a_page_of_several_articles_and_no_main_keeps_every_article_and_a_tables_caption(tmp_path: Path) -> None:
    page = (
        "<html><body><nav><a href='/'>Home</a></nav>"
        "<article><h1>Leave</h1><p>You get 25 days.</p></article>"
        "<article><h2>Sick leave</h2><table><caption>Sick pay by service</caption>"
        "<tr><th>Service</th><th>Full pay</th></tr><tr><td>Under 1 year</td><td>4 weeks</td></tr></table></article>"
        "<footer>Copyright</footer></body></html>"
    )
    doc = load_one(write(tmp_path / "leave.html", page))
    assert doc.text == (
        "# Leave\n\nYou get 25 days.\n\n## Sick leave\n\nSick pay by service\n\n"
        "| Service | Full pay |\n| --- | --- |\n| Under 1 year | 4 weeks |"
    )


def test_a_list_nested_without_an_li_around_it_keeps_its_items(tmp_path: Path) -> None:
    # WYSIWYG editors write <ul><li>a</li><ul><li>b</li></ul></ul>; only direct <li> children were read.
    lists = (
        "<ol><li>Ask your manager</li><ol><li>Use the leave form</li></ol><li>Wait for approval</li></ol>"
        "<ul>Bring:<li>your badge</li><div><li>a photo ID</li></div></ul>"
    )
    page = load_one(write(tmp_path / "leave.html", f"<html><body><h1>Leave</h1>{lists}</body></html>"))
    embedded = load_one(write(tmp_path / "leave.md", f"# Leave\n\n{lists}\n"))
    for doc in (page, embedded):
        assert doc.text == (
            "# Leave\n\n1. Ask your manager\n  1. Use the leave form\n2. Wait for approval\n\n"
            "- Bring:\n- your badge\n- a photo ID"
        )


def test_emphasis_inside_an_html_heading_leaves_plain_heading_words(tmp_path: Path) -> None:
    page = (
        "<main><h1>Leave</h1><h2>Leave <em>rules</em></h2><p>Ask first.</p>"
        "<h2><strong>Carry</strong> over <i>up to</i> 5 days</h2><p>By March.</p></main>"
    )
    doc = load_one(write(tmp_path / "leave.html", page))
    headings = [chunk.heading for chunk in chunk_document(doc)]
    assert headings == ["Leave > Leave rules", "Leave > Carry over up to 5 days"]


def test_pdf_text_is_extracted_with_headings_guessed(tmp_path: Path) -> None:
    lines = [
        "Travel Policy",
        "1 Booking Flights",
        "Book economy class for flights under six hours. Business class",
        "needs director approval before you book the ticket.",
        "1.1 Hotel Limits",
        "Hotels are capped at 180 euros per night.",
        "\u2022 Keep every receipt",
    ]
    doc = load_one(write(tmp_path / "travel.pdf", pdf_bytes(lines)))
    assert doc.title == "Travel Policy"
    assert doc.text == (
        "# Travel Policy\n\n## 1 Booking Flights\n\nBook economy class for flights under six hours. "
        "Business class needs director approval before you book the ticket.\n\n### 1.1 Hotel Limits\n\n"
        "Hotels are capped at 180 euros per night.\n\n- Keep every receipt"
    )


def test_pdf_running_headers_and_footers_are_kept_once_not_read_as_headings(tmp_path: Path) -> None:
    pages = [
        [
            "ACME Travel Policy",
            "Booking Flights",
            "Book economy class for flights under six hours and keep",
            "the receipt for every booking you make.",
            "Page 1 of 2",
            "Company Confidential",
        ],
        [
            "ACME Travel Policy",
            "Hotels must be booked through the portal and cost no more",
            "than the city cap in the table.",
            "Meals",
            "Meals are reimbursed up to 40 euros a day.",
            "Page 2 of 2",
            "Company Confidential",
        ],
    ]
    chunks = chunk_document(load_one(write(tmp_path / "travel.pdf", pdf_bytes(*pages))))
    hotels = next(chunk for chunk in chunks if "Hotels must be booked" in chunk.text)
    assert hotels.heading == "ACME Travel Policy > Booking Flights"
    assert sum(chunk.text.count("Company Confidential") for chunk in chunks) == 1
    assert not any("Company Confidential" in chunk.heading for chunk in chunks)


def test_pdf_running_lines_are_found_after_a_cover_page_and_across_a_blank_page(tmp_path: Path) -> None:
    # Looked for on every page, they were missed when the cover or a blank page lacked them: the header and
    # "Page 3" became headings, filing the pages' text under them.
    header = "ACME Leave Policy v3"
    pages = [
        ["Leave Policy", "Effective from 1 January 2025 for all staff in every office."],
        [header, "Annual Leave", "Full time staff get 25 days of paid leave each year.", "Page 2"],
        [],
        [header, "Unused days may be carried over into the next year until March.", "Page 3"],
        [header, "Sick Leave", "Tell your manager on the first day.", "Page 4"],
        [header, "A doctor's note is needed after seven days of absence from work.", "Page 5"],
    ]
    chunks = chunk_document(load_one(write(tmp_path / "leave.pdf", pdf_bytes(*pages))))
    assert next(chunk.heading for chunk in chunks if "carried over" in chunk.text) == "Leave Policy > Annual Leave"
    assert next(chunk.heading for chunk in chunks if "doctor's note" in chunk.text) == "Leave Policy > Sick Leave"
    assert not any("ACME" in chunk.heading or "Page" in chunk.heading for chunk in chunks)
    assert sum(chunk.text.count(header) for chunk in chunks) == 1


def test_pdf_lines_ending_each_page_that_differ_only_in_numbers_are_content_not_footers(tmp_path: Path) -> None:
    # Read as "the same line, page numbers aside", the table row ending page 1 was dropped as a footer.
    pages = [
        ["Leave Entitlement", "Annual leave depends on your grade.", "Grade 1 20 days", "Grade 3 25 days"],
        ["Grade 4 26 days", "Grade 5 28 days"],
    ]
    doc = load_one(write(tmp_path / "leave.pdf", pdf_bytes(*pages)))
    assert [line for line in doc.text.split("\n") if "Grade" in line] == [
        "## Grade 1 20 days", "## Grade 3 25 days", "## Grade 4 26 days", "## Grade 5 28 days",
    ]


def test_docx_headings_lists_and_tables_become_markdown(tmp_path: Path) -> None:
    doc = load_one(write(tmp_path / "expenses.docx", docx_bytes()))
    assert doc.title == "Expense Policy"
    assert doc.text == (
        "# Expense Policy\n\n## Meals\n\nMeals are reimbursed up to 40 euros a day.\n\n"
        "- Keep every receipt\n  - Photograph paper receipts\n\n"
        "| City | Hotel cap |\n| --- | --- |\n| Lisbon | 150 euros |"
    )


def test_docx_nested_tables_keep_their_text_and_merged_cells_keep_columns_aligned(tmp_path: Path) -> None:
    document = docx.Document()
    document.add_paragraph("Caps by region.")
    table = document.add_table(rows=3, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Allowance"
    table.cell(0, 2).text = "Approver"
    for col, text in enumerate(["EU", "150 euros", "Manager"]):
        table.cell(1, col).text = text
    table.cell(2, 0).text = "US"
    nested = table.cell(2, 1).add_table(rows=1, cols=2)
    nested.cell(0, 0).text, nested.cell(0, 1).text = "Hotel 180 dollars", "Meals 60 dollars"
    table.cell(2, 2).text = "Director"
    buffer = io.BytesIO()
    document.save(buffer)
    doc = load_one(write(tmp_path / "caps.docx", buffer.getvalue()))
    assert doc.text.split("\n\n")[1] == (
        "| Allowance |  | Approver |\n| --- | --- | --- |\n| EU | 150 euros | Manager |\n"
        "| US | Hotel 180 dollars, Meals 60 dollars | Director |"
    )


def test_docx_headers_and_footers_are_kept_once_each_not_dropped(tmp_path: Path) -> None:
    document = docx.Document(io.BytesIO(docx_bytes()))
    first = document.sections[0]
    first.header.paragraphs[0].text = "Acme Ltd - Company Confidential"
    first.footer.paragraphs[0].text = "Owner: Finance, version 3"
    first.different_first_page_header_footer = True
    first.first_page_header.paragraphs[0].text = "Draft for review"
    document.add_paragraph("Appendix text.")
    second = document.add_section()  # its header is linked to the first section's: the same text
    second.footer.is_linked_to_previous = False
    second.footer.paragraphs[0].text = "Appendix owner: Legal"
    table = second.footer.add_table(rows=1, cols=2, width=Inches(6))
    table.cell(0, 0).text, table.cell(0, 1).text = "Approved", "March 2025"
    buffer = io.BytesIO()
    document.save(buffer)
    doc = load_one(write(tmp_path / "expenses.docx", buffer.getvalue()))
    assert doc.title == "Expense Policy"
    blocks = doc.text.split("\n\n")
    assert blocks[:3] == ["Acme Ltd - Company Confidential", "Draft for review", "# Expense Policy"]
    footers = ["Owner: Finance, version 3", "Appendix owner: Legal", "Approved, March 2025"]
    assert blocks[-4:] == ["Appendix text.", *footers]
    assert doc.text.count("Company Confidential") == 1


def wrapped(tag: str, *children: BaseOxmlElement, **attributes: str) -> BaseOxmlElement:
    """A WordprocessingML element ``tag`` holding ``children``; a content control wraps them in sdtContent."""
    element = OxmlElement(tag)
    for name, value in attributes.items():
        element.set(qn(f"w:{name}"), value)
    inner = OxmlElement("w:sdtContent") if tag == "w:sdt" else element
    for child in children:
        inner.append(child)
    if inner is not element:
        element.append(inner)
    return element


def run(text: str, kind: str = "w:t") -> BaseOxmlElement:
    """A run holding ``text`` (``w:delText`` for deleted text)."""
    text_element = OxmlElement(kind)
    text_element.text = text
    return wrapped("w:r", text_element)


def test_docx_text_in_tracked_insertions_content_controls_and_fields_is_kept(tmp_path: Path) -> None:
    # python-docx reads only a paragraph's direct runs and the body's direct paragraphs: all of this was lost.
    document = docx.Document()
    document.add_heading("Laptop Policy", 1)
    tracked = document.add_paragraph("Staff must ")
    tracked._p.append(wrapped("w:ins", run("encrypt their disks and "), id="1", author="Legal"))
    tracked._p.append(wrapped("w:del", run("never ", "w:delText"), id="2", author="Legal"))
    tracked.add_run("lock the screen.")
    owner = document.add_paragraph("Owner: ")
    owner._p.append(wrapped("w:sdt", run("IT Security")))
    extension = document.add_paragraph("Call the service desk on ")
    extension._p.append(wrapped("w:fldSimple", run("extension 4411"), instr="MERGEFIELD Phone"))
    block = document.add_paragraph("Report a lost laptop to IT within one hour.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Model", "Replaced every 4 years"
    cell = table.cell(0, 1).paragraphs[0]
    cell._p.append(wrapped("w:sdt", run(", or sooner if damaged")))
    document.element.body.insert(len(document.element.body) - 1, wrapped("w:sdt", block._p, table._tbl))
    document.sections[0].header.paragraphs[0]._p.append(wrapped("w:sdt", run("Version 7")))
    contents = wrapped("w:sdt", wrapped("w:p", run("Laptop Policy 1")))  # a table of contents: left out
    gallery = wrapped("w:docPartGallery", val="Table of Contents")
    contents.insert(0, wrapped("w:sdtPr", wrapped("w:docPartObj", gallery)))
    document.element.body.insert(1, contents)
    buffer = io.BytesIO()
    document.save(buffer)
    doc = load_one(write(tmp_path / "laptops.docx", buffer.getvalue()))
    assert doc.text.split("\n\n") == [
        "Version 7",
        "# Laptop Policy",
        "Staff must encrypt their disks and lock the screen.",
        "Owner: IT Security",
        "Call the service desk on extension 4411",
        "Report a lost laptop to IT within one hour.",
        "| Model | Replaced every 4 years, or sooner if damaged |\n| --- | --- |",
    ]


def test_docx_table_rows_and_cells_in_content_controls_are_kept(tmp_path: Path) -> None:
    # A repeating section wraps each row it repeats (sdt > sdtContent > sdt > sdtContent > tr); python-docx
    # reads only direct rows and cells, so those rows were lost.
    document = docx.Document()
    document.add_heading("Equipment allowance", 1)
    table = document.add_table(rows=4, cols=2)
    for row, (item, amount) in enumerate([("Item", "Limit"), ("Monitor", "$300"), ("Chair", "$450"), ("Desk", "$500")]):
        table.cell(row, 0).text, table.cell(row, 1).text = item, amount
    rows = table._tbl.tr_lst
    repeated = wrapped("w:sdt", wrapped("w:sdt", rows[1]), wrapped("w:sdt", rows[2]))
    table._tbl.insert(table._tbl.index(rows[3]), repeated)
    desk = rows[3]
    desk.append(wrapped("w:sdt", desk.tc_lst[1]))  # a cell in a content control
    buffer = io.BytesIO()
    document.save(buffer)
    doc = load_one(write(tmp_path / "allowance.docx", buffer.getvalue()))
    assert doc.text.split("\n\n")[1].splitlines() == [
        "| Item | Limit |",
        "| --- | --- |",
        "| Monitor | $300 |",
        "| Chair | $450 |",
        "| Desk | $500 |",
    ]


# --- bad input ------------------------------------------------------------------------------------


def test_corrupt_pdf_is_reported_and_the_rest_load(tmp_path: Path) -> None:
    write(tmp_path / "fake.pdf", b"this is not a pdf at all")
    write(tmp_path / "broken.pdf", pdf_bytes(["Some text here."])[:60])
    write(tmp_path / "ok.md", "Still loaded.\n")
    report = load_documents([tmp_path])
    assert [doc.doc_id for doc in report.documents] == ["ok.md"]
    reasons = failure_reasons(report)
    assert reasons["fake.pdf"] == "not a PDF (no %PDF- header)"
    assert reasons["broken.pdf"].startswith(("unreadable PDF", "no text"))


def test_docx_that_is_not_a_zip_is_reported(tmp_path: Path) -> None:
    write(tmp_path / "memo.docx", b"plain text pretending")
    write(tmp_path / "trunc.docx", docx_bytes()[:200])
    reasons = failure_reasons(load_documents([tmp_path]))
    assert reasons["memo.docx"] == "not a DOCX (not a zip archive)"
    assert reasons["trunc.docx"].startswith("unreadable DOCX")


def test_windows_1252_text_loads_with_a_note(tmp_path: Path) -> None:
    path = write(tmp_path / "old.txt", "Caf\xe9 allowance \u2013 \u20ac5 a day.\n".encode("cp1252"))
    report = load_documents([path])
    assert report.documents[0].text == "Café allowance – €5 a day."
    assert report.notes == [(path, "not valid UTF-8; decoded as Windows-1252")]


def test_utf16_and_utf32_with_a_byte_order_mark_load_with_a_note(tmp_path: Path) -> None:
    for encoding, note in (("utf-16", "decoded as UTF-16"), ("utf-32", "decoded as UTF-32")):
        path = write(tmp_path / f"{encoding}.txt", "Caf\xe9 allowance: 5 EUR a day.\n".encode(encoding))
        report = load_documents([path])
        assert report.documents[0].text == "Café allowance: 5 EUR a day."
        assert report.notes == [(path, note)]


def test_symlinked_folders_are_not_followed_and_say_so(tmp_path: Path) -> None:
    write(tmp_path / "shared" / "travel.md", "# Travel\n\nBook through the travel desk.\n")
    write(tmp_path / "root" / "leave.md", "# Leave\n\nTwenty-five days a year.\n")
    (tmp_path / "root" / "linked").symlink_to(tmp_path / "shared")

    report = load_documents([tmp_path / "root"])

    assert [d.doc_id for d in report.documents] == ["leave.md"]
    assert report.notes == [(tmp_path / "root" / "linked", "skipped: a symlinked directory (links are not followed)")]


@pytest.mark.timeout(30)  # the old loader waited for the pipe's writer forever
def test_a_named_pipe_with_a_policys_name_in_a_folder_is_a_failure_not_a_hang(tmp_path: Path) -> None:
    write(tmp_path / "leave.md", "# Leave\n\nTwenty-five days a year.\n")
    os.mkfifo(tmp_path / "pipe.md")

    report = load_documents([tmp_path])

    assert [d.doc_id for d in report.documents] == ["leave.md"]
    assert failure_reasons(report) == {"pipe.md": "not a regular file"}


def test_undecodable_and_binary_text_are_failures(tmp_path: Path) -> None:
    write(tmp_path / "junk.txt", b"\x81\x8d\x90 not text")
    write(tmp_path / "bin.md", b"abc\x00\x01\x02")
    reasons = failure_reasons(load_documents([tmp_path]))
    assert reasons["junk.txt"].startswith("undecodable text")
    assert reasons["bin.md"] == "binary content in a text file"


def test_empty_files_are_failures_and_heading_only_stubs_are_skipped_with_a_note(tmp_path: Path) -> None:
    write(tmp_path / "empty.md", "")
    write(tmp_path / "comment-only.md", "{% comment %}draft{% endcomment %}\n<!-- nothing -->\n")
    write(tmp_path / "stub.md", "# Billing policy\n\n")
    report = load_documents([tmp_path])
    reasons = failure_reasons(report)
    assert reasons["empty.md"].startswith("no text after conversion")
    assert reasons["comment-only.md"].startswith("no text after conversion")
    assert "stub.md" not in reasons
    assert report.notes == [(tmp_path / "stub.md", "skipped: only headings, no body text")]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path / "secret.md", "Body.\n")
    path.chmod(0)
    try:
        reasons = failure_reasons(load_documents([path]))
    finally:
        path.chmod(0o644)
    assert reasons["secret.md"].startswith("cannot read file")


def test_duplicate_documents_are_skipped_and_recorded_not_failed(tmp_path: Path) -> None:
    write(tmp_path / "a" / "mental-health.md", "# Mental health\n\nThe stipend is $100 a month.\n")
    write(tmp_path / "b" / "modern-health.md", "# Modern Health\n\nThe   stipend is $100\na month.\n")
    write(tmp_path / "c.md", "# Other\n\nDifferent text.\n")
    report = load_documents([tmp_path])
    assert [doc.doc_id for doc in report.documents] == ["a/mental-health.md", "c.md"]
    assert report.duplicates == [(tmp_path / "b" / "modern-health.md", "a/mental-health.md")]
    assert report.failures == []


def test_same_text_with_another_classification_is_not_a_duplicate(tmp_path: Path) -> None:
    body = "# Salaries\n\nBands are reviewed each April.\n"
    write(tmp_path / "open.md", body)
    write(tmp_path / "closed.md", "---\nclassification: Confidential\n---\n" + body)
    report = load_documents([tmp_path])
    labels = {doc.doc_id: doc.classification for doc in report.documents}
    assert labels == {"closed.md": "Confidential", "open.md": None}
    assert report.duplicates == []


# --- the real handbooks ---------------------------------------------------------------------------

# Pages in the 18F export whose whole body is a title (their content lived in data files or redirects).
HEADING_ONLY_STUBS = {
    "about-us/org-chart.md",
    "general-information-and-resources/business-and-ops-policies/billing_policy.md",
    "general-information-and-resources/tech-policies/open-source.md",
    "office-of-solutions/org-chart.md",
    "tools/vmware-fusion.md",
    "tools/vmware-horizon.md",
}


def test_real_handbooks_load_cleanly(handbooks: list[Path]) -> None:
    report = load_documents(handbooks)
    assert report.failures == []
    stubs = {path.relative_to(handbooks[0]).as_posix(): note for path, note in report.notes if "headings" in note}
    assert stubs == dict.fromkeys(HEADING_ONLY_STUBS, "skipped: only headings, no body text")
    leftovers = [doc.doc_id for doc in report.documents if "{%" in doc.text or "<table" in doc.text.lower()]
    assert leftovers == []
    assert len(report.documents) > 400
    print(
        f"\n{len(report.documents)} documents, {len(report.failures)} failures, "
        f"{len(report.duplicates)} duplicates: {report.duplicates}"
    )
