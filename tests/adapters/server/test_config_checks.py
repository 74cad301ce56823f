"""The configuration check, in process: each problem found, in words an operator can act on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from adapters.checks import PLATFORM_CHECKS
from adapters.cli import main
from bot.config import Settings
from bot.config_check import check_index, check_model, find_problems, report


def settings(tmp_path: Path, **values: Any) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path, **values)  # type: ignore[call-arg]


async def test_an_index_built_with_another_model_is_named_with_the_way_out(tmp_path: Path, built_index: Path):
    index = shutil.copytree(built_index, tmp_path / "qdrant")
    meta = index / "policies.meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "model": "BAAI/bge-small-en-v1.5"}))
    (problem,) = await check_index(settings(tmp_path))
    assert "built with the embedding model BAAI/bge-small-en-v1.5" in problem and "Re-index" in problem


async def test_an_endpoint_without_its_key_is_a_problem_not_a_silent_offline_model(tmp_path: Path):
    (problem,) = await check_model(settings(tmp_path, openai_base_url="http://vllm.internal:8000/v1"))
    assert "OPENAI_API_KEY is not" in problem


async def test_a_clean_configuration_has_no_problems(tmp_path: Path, built_index: Path):
    shutil.copytree(built_index, tmp_path / "qdrant")
    assert await find_problems(settings(tmp_path), PLATFORM_CHECKS) == []


def test_the_report_numbers_every_problem_and_keeps_multi_line_ones_together():
    text = report(["Slack is misconfigured:\n  SLACK_BOT_TOKEN is not set", "No policy index at /data/qdrant"])
    assert text.splitlines()[:4] == [
        "PolicyPal cannot start: 2 configuration problems.",
        "  1. Slack is misconfigured:",
        "     SLACK_BOT_TOKEN is not set",
        "  2. No policy index at /data/qdrant",
    ]


@pytest.mark.parametrize("command", [["config", "check"], ["ask", "hi"]])
def test_settings_that_cannot_work_exit_2_naming_each_variable_from_any_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
):
    monkeypatch.chdir(tmp_path)  # no .env here
    for name, value in {
        "POLICYPAL_DATA_DIR": str(tmp_path),
        "POLICYPAL_MAX_CONCURRENT_RUNS": "-1",
        "POLICYPAL_DATABASE_URL": f"sqlite:///{tmp_path / 'new.db'}",  # a file that does not exist yet
        "POLICYPAL_HELPDESK_WEBHOOK_URL": "helpdesk.example.com/hook",
        "POLICYPAL_HELPDESK_WEBHOOK_SECRET": "whsec-123456",
    }.items():
        monkeypatch.setenv(name, value)
    assert main(command) == 2
    message = capsys.readouterr().err
    assert message.startswith("Invalid configuration:"), message
    for variable in ("POLICYPAL_MAX_CONCURRENT_RUNS", "POLICYPAL_DATABASE_URL", "POLICYPAL_HELPDESK_WEBHOOK_URL"):
        assert f"\n  {variable}: " in message, (variable, message)
    assert "sqlite+aiosqlite:///" in message and not (tmp_path / "new.db").exists()


async def test_a_url_password_is_redacted_in_every_problem_and_in_the_summary(tmp_path: Path):
    """`policypal config check` printed OPENAI_BASE_URL and POLICYPAL_QDRANT_URL with their passwords."""
    from adapters.cli.admin import summary

    configured = settings(
        tmp_path,
        openai_base_url="https://bot:llm-s3cret-pw@llm.example/v1",
        qdrant_url="http://reader:qd-s3cret-pw@127.0.0.1:1",
    )
    problems = "\n".join(await find_problems(configured))
    assert "OPENAI_BASE_URL is set (https://bot:[redacted]@llm.example/v1)" in problems, problems
    assert "http://reader:[redacted]@127.0.0.1:1" in problems, problems
    shown = summary(configured)
    assert "index:    http://reader:[redacted]@127.0.0.1:1" in shown, shown
    assert "s3cret" not in problems + shown


async def test_a_database_under_a_file_is_a_problem_not_creatable(tmp_path: Path):
    """POLICYPAL_DATA_DIR naming a file: the check said nothing, then every command died on mkdir."""
    (tmp_path / "a-file").write_text("")
    problems = await find_problems(settings(tmp_path / "a-file"))
    assert any("cannot be created" in p and "is not a directory" in p for p in problems), problems


async def test_a_reranker_that_cannot_load_is_a_problem_not_a_failure_at_the_first_question(
    tmp_path: Path, built_index: Path
):
    """A known reranker name with an empty model directory passed the check; every search then failed."""
    shutil.copytree(built_index, tmp_path / "qdrant")
    empty = tmp_path / "reranker"
    empty.mkdir()
    configured = settings(tmp_path, rerank_model="Xenova/ms-marco-MiniLM-L-6-v2", rerank_model_dir=empty)
    (problem,) = await find_problems(configured, PLATFORM_CHECKS)
    assert f"POLICYPAL_RERANK_MODEL_DIR={empty} lacks" in problem, problem
