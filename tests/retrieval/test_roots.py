"""Roots across runs: a file that fails keeps its chunks, one file is one document however it is named,
and what a folder that is gone indexed can be removed on purpose."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.retrieval.conftest import LEAVE_DOC, VPN_DOC, run_cli

TRAVEL = "# Travel\n\n## Booking\n\nBook every train and flight through the travel desk, at least 14 days ahead.\n"
CORRUPT = "---\ntitle: never closed\n\n# Body\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def found(capsys: pytest.CaptureFixture[str], query: str) -> set[str]:
    """Titles the CLI's search returns for query."""
    code, out, err = run_cli(capsys, "search", query, "--json")
    assert code == 0, err
    import json

    return {passage["title"] for passage in json.loads(out)}


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    write(tmp_path / "docs" / "vpn.md", VPN_DOC)
    write(tmp_path / "docs" / "leave.md", LEAVE_DOC)
    return tmp_path / "docs"


def test_a_corrupt_file_with_a_front_matter_id_keeps_its_chunks(
    data_dir: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(docs / "travel.md", "---\nid: handbook-travel\n---\n" + TRAVEL)
    assert run_cli(capsys, "index", str(docs))[0] == 0
    write(docs / "travel.md", CORRUPT)

    code, out, err = run_cli(capsys, "index", str(docs))

    assert code == 1 and f"failed: {docs / 'travel.md'}: front matter" in err
    assert "removed" not in out
    assert "Travel" in found(capsys, "how far ahead must I book a train through the travel desk")


def test_a_file_given_on_its_own_that_fails_keeps_its_chunks(
    data_dir: Path, docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    travel = write(tmp_path / "single" / "travel.md", TRAVEL)
    assert run_cli(capsys, "index", str(docs), str(travel))[0] == 0
    write(travel, CORRUPT)

    code, out, _err = run_cli(capsys, "index", str(docs), str(travel))

    assert code == 1 and "removed" not in out
    assert "Travel" in found(capsys, "how far ahead must I book a train through the travel desk")


def test_a_missing_root_next_to_a_valid_one_removes_nothing_it_indexed(
    data_dir: Path, docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = write(tmp_path / "extra" / "travel.md", TRAVEL).parent
    assert run_cli(capsys, "index", str(docs), str(extra))[0] == 0
    extra.rename(tmp_path / "unmounted")

    code, out, err = run_cli(capsys, "index", str(docs), str(extra))

    assert code == 1 and f"failed: {extra}: no such file or directory" in err
    assert "removed" not in out and "is kept (`policypal index --remove`)" in out
    assert "Travel" in found(capsys, "how far ahead must I book a train through the travel desk")


def test_a_failed_file_symlinked_from_outside_the_root_keeps_its_chunks(
    data_dir: Path, docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = write(tmp_path / "elsewhere" / "travel.md", TRAVEL)
    (docs / "travel.md").symlink_to(target)
    assert run_cli(capsys, "index", str(docs))[0] == 0
    write(target, CORRUPT)

    code, out, _err = run_cli(capsys, "index", str(docs))

    assert code == 1 and "removed" not in out
    assert "Travel" in found(capsys, "how far ahead must I book a train through the travel desk")


def test_a_file_given_with_its_folder_is_indexed_once_from_the_folder(
    data_dir: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "index", str(docs / "vpn.md"), str(docs))

    assert code == 0, err
    assert "added (2): leave.md, vpn.md" in out and f"{docs / 'vpn.md'}: inside {docs}" in out


def test_a_file_indexed_alone_is_taken_over_when_its_folder_is_indexed(
    data_dir: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, "index", str(docs / "vpn.md"))[0] == 0

    code, out, err = run_cli(capsys, "index", str(docs))

    assert code == 0, err
    assert "replaced (1): vpn.md" in out and "added (1): leave.md" in out
    assert run_cli(capsys, "index", str(docs))[0] == 0  # and the folder owns it from now on


def test_nested_folders_index_each_file_once(data_dir: Path, docs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(docs / "sub" / "travel.md", TRAVEL)

    code, out, err = run_cli(capsys, "index", str(docs), str(docs / "sub"))

    assert code == 0, err
    assert "added (3): leave.md, sub/travel.md, vpn.md" in out


def test_a_file_moved_between_two_roots_stays_indexed_whatever_their_order(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a / "travel.md", TRAVEL)
    write(b / "leave.md", LEAVE_DOC)
    assert run_cli(capsys, "index", str(a), str(b))[0] == 0
    write(a / "vpn.md", VPN_DOC)  # a keeps a document, so it still loads
    (a / "travel.md").rename(b / "travel.md")

    code, out, err = run_cli(capsys, "index", str(b), str(a))

    assert code == 0, err
    assert "removed" not in out and "replaced (1): travel.md" in out
    assert "Travel" in found(capsys, "how far ahead must I book a train through the travel desk")


def test_remove_drops_what_a_folder_that_is_gone_indexed(
    data_dir: Path, docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write(tmp_path / "old" / "travel.md", TRAVEL).parent
    assert run_cli(capsys, "index", str(docs), str(old))[0] == 0
    (old / "travel.md").unlink()
    old.rmdir()

    code, out, err = run_cli(capsys, "index", "--remove", str(old))

    assert code == 0, err
    assert "removed (1): travel.md" in out
    assert "Travel" not in found(capsys, "how far ahead must I book a train through the travel desk")
    assert found(capsys, "how many days of annual leave do I get")  # the other folder is untouched


def test_remove_of_a_path_that_indexed_nothing_is_a_clear_error(
    data_dir: Path, docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, "index", str(docs))[0] == 0

    code, out, err = run_cli(capsys, "index", "--remove", str(tmp_path / "typo"))

    assert code == 1 and f"failed: {tmp_path / 'typo'}: nothing is indexed from here" in err
    assert "removed" not in out


def test_the_same_folder_named_another_way_embeds_nothing(
    data_dir: Path, docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_cli(capsys, "index", "docs")[0] == 0

    code, out, err = run_cli(capsys, "index", str(docs.resolve()))

    assert code == 0, err
    assert "(0 chunks embedded" in out and "unchanged (skipped) (2)" in out


def test_symlink_loops_are_reported_by_name_not_tracebacks(
    data_dir: Path, docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.symlink(docs / "loop.md", docs / "loop.md")  # inside a folder
    os.symlink(tmp_path / "looped", tmp_path / "looped")  # given directly

    code, out, err = run_cli(capsys, "index", str(docs), str(tmp_path / "looped"))

    assert code == 1 and "Traceback" not in err
    assert f"failed: {docs / 'loop.md'}: cannot read file" in err and f"failed: {tmp_path / 'looped'}" in err
    assert "added (2): leave.md, vpn.md" in out


def test_a_file_with_only_headings_says_why_nothing_was_indexed(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stub = write(tmp_path / "onboarding.md", "# Onboarding\n\n## Week one\n")

    code, _out, err = run_cli(capsys, "index", str(stub))

    assert code == 1
    assert f"note: {stub}: skipped: only headings, no body text" in err and "No documents to index" in err


def test_a_file_indexed_alone_then_with_its_folder_is_one_document_and_goes_when_deleted(
    data_dir: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `index docs/sub/travel.md` then `index docs` kept both "travel.md" and "sub/travel.md" for one file:
    # every passage twice, and once the file was deleted, "travel.md" stayed searchable for good.
    travel = write(docs / "sub" / "travel.md", TRAVEL)
    assert run_cli(capsys, "index", str(travel))[0] == 0

    code, out, err = run_cli(capsys, "index", str(docs))

    assert code == 0, err
    assert "added (3): leave.md, sub/travel.md, vpn.md" in out and "removed (1): travel.md" in out
    travel.unlink()
    assert run_cli(capsys, "index", str(docs))[0] == 0
    assert "Travel" not in found(capsys, "how far ahead must I book a train through the travel desk")


def test_a_folder_takes_over_its_file_indexed_from_a_subfolder_and_indexes_its_namesake(
    data_dir: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `index docs/sub` then `index docs`: docs/travel.md failed as "already indexed from docs/sub", though
    # the file holding that id is in docs too (as sub/travel.md): a policy missing from every answer.
    write(docs / "sub" / "travel.md", TRAVEL)
    write(docs / "travel.md", "# Per diem\n\n## Meals abroad\n\nThe per diem for meals abroad is 45 euros a day.\n")
    assert run_cli(capsys, "index", str(docs / "sub"))[0] == 0

    code, out, err = run_cli(capsys, "index", str(docs))

    assert code == 0, err
    assert "Per diem" in found(capsys, "what is the per diem for meals abroad")
    assert "Travel" in found(capsys, "how far ahead must I book a train through the travel desk")
    code, out, err = run_cli(capsys, "index", str(docs))
    assert code == 0 and "(0 chunks embedded" in out, err
