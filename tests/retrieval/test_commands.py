"""`policypal index` and `policypal search` as a user runs them: output, exit codes, clear errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.cli.index import index_if_missing
from retrieval import Embedder, RetrievalConfig
from tests.retrieval.conftest import LEAVE_DOC, REPO, VPN_DOC, run_cli

FRONT_MATTER = "---\ntitle: {title}\nsection: {section}\n---\n\n"


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    corpus = tmp_path / "policies"
    corpus.mkdir()
    (corpus / "vpn.md").write_text(FRONT_MATTER.format(title="VPN Standard", section="IT") + VPN_DOC)
    (corpus / "leave.md").write_text(FRONT_MATTER.format(title="Leave Policy", section="People") + LEAVE_DOC)
    return corpus



def test_index_then_search_prints_passages(
    data_dir: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _err = run_cli(capsys, "index", str(corpus_dir))
    assert code == 0
    assert "added (2): leave.md, vpn.md" in out and str(data_dir / "qdrant") in out

    code, out, _err = run_cli(capsys, "search", "what does error KX-7731 mean?")
    assert code == 0
    assert out.startswith("1. VPN Standard > Troubleshooting  (score ")
    assert "KX-7731" in out and "\n   vpn.md\n" in out  # its path in the folder, as citations show it
    assert str(corpus_dir) not in out


def test_search_json_is_one_array_of_passages(
    data_dir: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(capsys, "index", str(corpus_dir))

    code, out, _err = run_cli(
        capsys, "search", "how many days of annual leave", "-k", "2", "--json", "--section", "People"
    )

    passages = json.loads(out)
    assert code == 0 and 1 <= len(passages) <= 2
    assert set(passages[0]) == {"score", "title", "heading", "source", "text", "doc_id", "section"}
    assert {p["section"] for p in passages} == {"People"}


def test_a_question_outside_the_policies_prints_no_passage(
    data_dir: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(capsys, "index", str(corpus_dir))

    assert run_cli(capsys, "search", "best lasagna recipe", "--json")[:2] == (0, "[]\n")
    code, out, _err = run_cli(capsys, "search", "best lasagna recipe")
    assert code == 0 and "No passage" in out


def test_reindex_reports_added_replaced_removed_and_unchanged(
    data_dir: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (corpus_dir / "old.md").write_text("# Old policy\n\nThis policy was withdrawn in 2020.\n")
    run_cli(capsys, "index", str(corpus_dir))
    (corpus_dir / "old.md").unlink()
    (corpus_dir / "leave.md").write_text(LEAVE_DOC.replace("25 days", "27 days"))
    (corpus_dir / "new.md").write_text("# New policy\n\nBicycles may be parked in the courtyard.\n")

    code, out, _err = run_cli(capsys, "index", str(corpus_dir))

    assert code == 0
    for line in (
        "added (1): new.md",
        "replaced (1): leave.md",
        "removed (1): old.md",
        "unchanged (skipped) (1): vpn.md",
    ):
        assert line in out


def test_bad_files_are_named_and_skipped_and_the_rest_indexed(
    data_dir: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (corpus_dir / "broken.md").write_text("---\ntitle: never closed\n\n# Body\n")

    code, out, err = run_cli(capsys, "index", str(corpus_dir), str(corpus_dir.parent / "missing"))

    assert code == 1
    assert "added (2): leave.md, vpn.md" in out
    assert f"failed: {corpus_dir / 'broken.md'}: front matter" in err
    assert f"failed: {corpus_dir.parent / 'missing'}: no such file or directory" in err
    assert "Traceback" not in err


def test_a_large_folder_is_summarised_by_count_but_every_failure_is_named(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A handbook's 237 added file names were printed on one line; failures each need the user's action."""
    handbook = tmp_path / "handbook"
    handbook.mkdir()
    for number in range(14):
        (handbook / f"p{number:02}.md").write_text(f"# Policy {number}\n\nRule number {number} applies to desks.\n")
    for number in range(12):
        (handbook / f"broken{number:02}.md").write_text("---\ntitle: never closed\n\n# Body\n")

    code, out, err = run_cli(capsys, "index", str(handbook))

    added = ", ".join(f"p{number:02}.md" for number in range(10))
    assert code == 1
    assert f"  added (14): {added}, … and 4 more\n" in out and "p10.md" not in out
    assert "  failed (12): skipped, each listed with its reason\n" in out
    assert [line.split(": ")[1] for line in err.splitlines() if line.startswith("failed: ")] == [
        str(handbook / f"broken{number:02}.md") for number in range(12)
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_index_on_a_terminal_shows_a_progress_bar(
    data_dir: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("retrieval.indexing.PROGRESS_DELAY_S", 0.0)  # the bar waits for long runs only
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)

    code, out, _err = run_cli(capsys, "index", str(corpus_dir))

    assert code == 0 and "added (2)" in out
    assert "embedding: 100%" in terminal.getvalue() and "chunk/s" in terminal.getvalue()


def test_index_into_a_log_writes_no_progress_bar(
    data_dir: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("retrieval.indexing.PROGRESS_DELAY_S", 0.0)

    code, out, err = run_cli(capsys, "index", str(corpus_dir))

    assert code == 0 and "added (2)" in out
    assert "chunk/s" not in err and "\r" not in err


def test_an_empty_corpus_is_a_clear_error(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()

    code, _out, err = run_cli(capsys, "index", str(tmp_path / "empty"))

    assert code == 1 and "No documents to index" in err
    assert not (data_dir / "qdrant").exists()


def test_search_before_indexing_says_to_run_index(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "search", "anything")

    assert code == 1 and out == ""
    assert "run `policypal index" in err


def test_index_while_another_process_holds_it_is_a_clear_error(
    data_dir: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(capsys, "index", str(corpus_dir))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from retrieval.backends import EdgeBackend; "
            f"held = EdgeBackend.open(Path({str(data_dir / 'qdrant')!r}), 'policies', create=False); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        code, _out, err = run_cli(capsys, "index", str(corpus_dir))
    finally:
        holder.kill()
        holder.wait()

    assert code == 1
    assert f"The index at {data_dir / 'qdrant'} is in use by another process (e.g. `policypal serve`)" in err
    assert "Traceback" not in err


def test_index_if_missing_indexes_only_the_first_time(
    corpus_dir: Path, embedder: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Embedder, "from_config", lambda cfg: embedder)
    cfg = RetrievalConfig(qdrant_path=tmp_path / "q", model_cache_dir=tmp_path / "m")

    assert index_if_missing(cfg, corpus_dir) is True
    assert index_if_missing(cfg, corpus_dir) is False


@pytest.mark.parametrize("k", ["0", "-3", "51", "many"])
def test_search_k_out_of_range_is_a_usage_error(data_dir: Path, k: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(capsys, "search", "anything", "-k", k)

    assert exit_info.value.code == 2
    assert "argument -k: " in capsys.readouterr().err


def test_search_in_an_unknown_section_names_the_sections(
    data_dir: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(capsys, "index", str(corpus_dir))

    code, out, err = run_cli(capsys, "search", "annual leave", "--section", "Finance")

    assert code == 1 and out == ""
    assert "No section 'Finance' in the policy index: its sections are IT, People." in err


@pytest.mark.parametrize("command", [["index", ""], ["index", "--remove", " "]])
def test_an_empty_path_is_a_usage_error_not_the_working_directory(
    data_dir: Path, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    """`policypal index --remove "$DIR"` with DIR unset removed everything indexed from the working directory."""
    monkeypatch.chdir(corpus_dir)
    run_cli(capsys, "index", ".")

    with pytest.raises(SystemExit) as exit_info:
        run_cli(capsys, *command)

    assert exit_info.value.code == 2
    assert "argument paths: an empty path" in capsys.readouterr().err
    code, out, _err = run_cli(capsys, "search", "what does error KX-7731 mean?")
    assert code == 0 and "KX-7731" in out  # still indexed


def test_an_empty_query_is_a_usage_error_not_no_passage(
    data_dir: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`policypal search " "` said no passage answers it, as if the policy had been searched."""
    run_cli(capsys, "index", str(corpus_dir))
    with pytest.raises(SystemExit) as exit_info:
        run_cli(capsys, "search", "  ")
    assert exit_info.value.code == 2
    assert "argument query: an empty query" in capsys.readouterr().err
