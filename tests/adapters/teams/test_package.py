"""The Teams app package: a manifest Teams accepts, icons at the sizes it requires, and the zip an admin uploads."""

from __future__ import annotations

import io
import json
import re
import zipfile

import pytest
from PIL import Image

from adapters.teams.package import APP_ID_PLACEHOLDER, MANIFEST_DIR, write_package
from bot.config import Settings

APP_ID = "0f3c2b1a-1234-4cde-8f00-0123456789ab"
REQUIRED = ("$schema", "manifestVersion", "version", "id", "developer", "name", "description", "icons", "accentColor")


def manifest() -> dict:
    return json.loads((MANIFEST_DIR / "manifest.json").read_text(encoding="utf-8"))


def test_the_manifest_has_every_required_field_on_the_current_schema():
    data = manifest()
    assert all(data.get(field) for field in REQUIRED)
    assert data["$schema"].endswith(f"/v{data['manifestVersion']}/MicrosoftTeams.schema.json")
    assert re.fullmatch(r"\d+\.\d+\.\d+", data["version"])
    assert data["id"] == APP_ID_PLACEHOLDER
    assert all(data["developer"][key].startswith("https://") for key in ("websiteUrl", "privacyUrl", "termsOfUseUrl"))
    assert len(data["name"]["short"]) <= 30 and len(data["name"]["full"]) <= 100
    assert len(data["description"]["short"]) <= 80 and len(data["description"]["full"]) <= 4000
    assert re.fullmatch(r"#[0-9A-Fa-f]{6}", data["accentColor"])
    assert data["validDomains"]


def test_the_bot_serves_personal_team_and_group_chat_with_command_hints():
    (bot,) = manifest()["bots"]
    assert bot["botId"] == APP_ID_PLACEHOLDER
    assert set(bot["scopes"]) == {"personal", "team", "groupChat"}
    commands = [c for group in bot["commandLists"] for c in group["commands"]]
    assert 1 <= len(commands) <= 10
    assert all(len(c["title"]) <= 32 and len(c["description"]) <= 128 for c in commands)


def test_icons_are_the_sizes_teams_requires_and_the_outline_is_white_on_transparent():
    icons = manifest()["icons"]
    with Image.open(MANIFEST_DIR / icons["color"]) as color:
        assert color.size == (192, 192)
    with Image.open(MANIFEST_DIR / icons["outline"]) as outline:
        assert outline.size == (32, 32)
        pixels = set(outline.convert("RGBA").get_flattened_data())
    assert all(a == 0 or (r, g, b) == (255, 255, 255) for r, g, b, a in pixels)
    assert {a for *_, a in pixels} >= {0, 255}  # a drawn glyph on a transparent ground


def test_the_package_is_filled_from_the_app_id(tmp_path):
    out = tmp_path / "policypal-teams.zip"
    code = write_package(Settings(_env_file=None, microsoft_app_id=APP_ID), str(out), err=io.StringIO())  # type: ignore[call-arg]

    assert code == 0
    with zipfile.ZipFile(out) as package:
        assert sorted(package.namelist()) == ["color.png", "manifest.json", "outline.png"]
        data = json.loads(package.read("manifest.json"))
    assert data["id"] == APP_ID and data["bots"][0]["botId"] == APP_ID
    assert APP_ID_PLACEHOLDER not in json.dumps(data)


def test_the_cli_command_writes_the_package(tmp_path, monkeypatch):
    from adapters.cli import main

    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.setenv("MicrosoftAppId", APP_ID)
    assert main(["teams-package", "--out", str(tmp_path / "out.zip")]) == 0
    with zipfile.ZipFile(tmp_path / "out.zip") as package:
        assert json.loads(package.read("manifest.json"))["id"] == APP_ID


@pytest.mark.parametrize("app_id", [None, "my-bot"])
def test_without_a_valid_app_id_no_package_is_written(tmp_path, app_id):
    err = io.StringIO()
    out = tmp_path / "p.zip"
    assert write_package(Settings(_env_file=None, microsoft_app_id=app_id), str(out), err=err) == 2  # type: ignore[call-arg]
    assert not out.exists() and "MicrosoftAppId" in err.getvalue()
