"""One data home per user whatever the working directory: made once, named once, overridden by
POLICYPAL_DATA_DIR (the conftest points XDG_DATA_HOME, platformdirs' Linux home, at the test's tmp)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import platformdirs
import pytest

from adapters.cli import main
from adapters.cli.data_home import FIRST_USE
from bot.config import Settings
from bot.store import RunRow, Store
from tests.adapters.server.harness import POLICIES

REPO = Path(__file__).resolve().parents[3]


def note(path: Path) -> str:
    return FIRST_USE.format(path=path)


def stored_runs(data_home: Path) -> list[RunRow]:
    async def recent() -> list[RunRow]:
        store = await Store.open(f"sqlite+aiosqlite:///{data_home / 'policypal.db'}")
        try:
            return await store.runs.recent()
        finally:
            await store.close()

    return asyncio.run(recent())


def in_new_folder(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def test_the_default_data_home_is_the_users_platform_data_directory(isolated_data_home: Path):
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.data_dir == Path(platformdirs.user_data_dir("policypal")) == isolated_data_home
    assert settings.resolved_database_url == f"sqlite+aiosqlite:///{isolated_data_home / 'policypal.db'}"
    assert settings.retrieval().qdrant_path == isolated_data_home / "qdrant"


def test_ask_from_two_working_directories_uses_one_index_and_one_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], isolated_data_home: Path
):
    """`./data` made a second index of the samples and a second database in every folder `ask` ran from."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, body in POLICIES.items():
        (docs / name).write_text(body)
    folders = [in_new_folder(tmp_path, "somewhere", monkeypatch)]
    assert main(["index", str(docs)]) == 0
    capsys.readouterr()
    for name, question in [("project", "Can I work abroad for three weeks?"), ("home", "What does NG-412 mean?")]:
        folders.append(in_new_folder(tmp_path, name, monkeypatch))
        assert main(["ask", "--json", question]) == 0
        err = capsys.readouterr().err
        assert "first run" not in err and "PolicyPal keeps" not in err, err  # the index it found was the home's

    runs = stored_runs(isolated_data_home)
    assert {run.question for run in runs} == {"Can I work abroad for three weeks?", "What does NG-412 mean?"}
    assert {run.reason for run in runs} == {"answered"}
    assert all(not any(folder.iterdir()) for folder in folders)  # nothing kept where the commands ran


def test_the_first_use_note_names_the_data_home_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], isolated_data_home: Path
):
    monkeypatch.chdir(tmp_path)
    assert main(["db", "upgrade"]) == 0
    first = capsys.readouterr().err
    assert main(["db", "upgrade"]) == 0
    second = capsys.readouterr().err
    assert first.count(note(isolated_data_home)) == 1, first
    assert "PolicyPal keeps" not in second, second
    assert (isolated_data_home / "policypal.db").is_file()


def test_policypal_data_dir_overrides_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], isolated_data_home: Path
):
    chosen = tmp_path / "chosen"
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(chosen))
    monkeypatch.chdir(tmp_path)
    assert main(["db", "upgrade"]) == 0
    assert note(chosen) in capsys.readouterr().err
    assert (chosen / "policypal.db").is_file() and not isolated_data_home.exists()


def test_a_command_with_nothing_to_keep_there_makes_no_data_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], isolated_data_home: Path
):
    """`traces` on PostgreSQL keeps nothing on this machine: no empty folder, no note about one."""
    monkeypatch.setenv("POLICYPAL_DATABASE_URL", "postgresql+asyncpg://bot@127.0.0.1:1/policypal")
    monkeypatch.chdir(tmp_path)
    assert main(["traces"]) == 1
    assert "PolicyPal keeps" not in capsys.readouterr().err
    assert not isolated_data_home.exists()


def test_the_container_keeps_its_data_home_in_the_data_volume():
    assert "POLICYPAL_DATA_DIR=/data" in (REPO / "Dockerfile").read_text()
