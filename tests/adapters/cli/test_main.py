"""`policypal` as a user runs it: bad arguments are usage errors, an unusable database is one line."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest

from adapters.cli import main


@pytest.mark.parametrize("command", [["traces"], ["handoffs"], ["traces", "run_1"], ["handoffs", "HD-1001"]])
def test_a_data_directory_that_is_a_file_is_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
):
    (tmp_path / "data").write_text("")  # e.g. POLICYPAL_DATA_DIR pointing at a file by mistake
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)

    assert main(command) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"policypal {command[0]}: FileExistsError: ") and err.count("\n") == 1, err


def test_a_refused_database_connection_is_one_line_without_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("POLICYPAL_DATABASE_URL", "postgresql+asyncpg://bot:pg-s3cret-pw@127.0.0.1:1/policypal")
    monkeypatch.chdir(tmp_path)

    assert main(["traces"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("policypal traces: ConnectionRefusedError: ") and err.count("\n") == 1, err
    assert "pg-s3cret-pw" not in err


@pytest.mark.parametrize("command", [["traces", "-n", "-1"], ["handoffs", "-n", "0"], ["traces", "-n", "many"]])
def test_a_list_length_below_one_is_a_usage_error_not_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
):
    """SQLite reads LIMIT -1 as no limit: `traces -n -1` printed every run ever recorded."""
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(SystemExit) as exit_info:
        main(command)
    assert exit_info.value.code == 2
    assert "argument -n: " in capsys.readouterr().err


def test_retrying_a_case_that_does_not_exist_says_so_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """`handoffs HD-9999 --retry` said "0 failed deliveries put back" and exited 0, as if all was sent."""
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)

    assert main(["handoffs", "HD-9999", "--retry"]) == 1
    assert capsys.readouterr().out == "No case HD-9999.\n"


def test_version_prints_the_installed_version_and_exits_0(capsys: pytest.CaptureFixture[str]):
    """`policypal --version` did not exist; it names the installed distribution's version."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"policypal {version('policypal')}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", version("policypal"))


@pytest.mark.parametrize("retry", [[], ["--retry"]])
def test_a_case_id_beyond_any_stored_number_is_no_case_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], retry: list[str]
):
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)

    assert main(["handoffs", "HD-99999999999999999999", *retry]) == 1
    assert capsys.readouterr().out == "No case HD-99999999999999999999.\n"


@pytest.mark.parametrize(("command", "said"), [
    (["traces", "run_nope", "--json"], "No run run_nope.\n"),
    (["handoffs", "HD-9999", "--json"], "No case HD-9999.\n"),
])  # fmt: skip
def test_an_unknown_id_with_json_leaves_stdout_empty_for_the_script_and_says_so_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str], said: str
):
    """`policypal traces ID --json | jq` got "No run ID." on stdout: a parse error instead of the exit code's 1."""
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)

    assert main(command) == 1
    printed = capsys.readouterr()
    assert printed.out == ""
    assert printed.err.endswith(said)
