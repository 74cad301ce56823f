"""`policypal teams-package`: the zip an admin uploads to Teams, filled in from ``MicrosoftAppId``.

The package is the manifest plus its two icons, flat at the root of the zip, as Teams requires. The
manifest in the repository holds ``{{MICROSOFT_APP_ID}}`` wherever the bot's app id goes, so one
manifest serves every deployment.
"""

from __future__ import annotations

import json
import sys
import uuid
import zipfile
from pathlib import Path
from typing import Any, TextIO

from bot.config import Settings
from bot.errors import PackageError

MANIFEST_DIR = Path(__file__).resolve().parent / "manifest"  # package data: found installed too
APP_ID_PLACEHOLDER = "{{MICROSOFT_APP_ID}}"
PACKAGE_FILES = ("manifest.json", "color.png", "outline.png")


def write_package(settings: Settings, out: str, *, source: Path = MANIFEST_DIR, err: TextIO = sys.stderr) -> int:
    """Write the app package to ``out``; returns an exit code (2 when the app id is missing or invalid)."""
    try:
        manifest = filled_manifest(settings.microsoft_app_id, source)
    except PackageError as exc:
        err.write(f"{exc}\n")
        return 2
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as package:
        package.writestr("manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False))
        for name in PACKAGE_FILES[1:]:
            package.write(source / name, arcname=name)
    err.write(f"Wrote {target} (app id {settings.microsoft_app_id}); upload it in Teams > Apps > Manage your apps.\n")
    return 0


def filled_manifest(app_id: str | None, source: Path = MANIFEST_DIR) -> dict[str, Any]:
    """The manifest with the bot's app id in place of every placeholder."""
    if not app_id:
        raise PackageError("MicrosoftAppId is not set: register the bot first (see docs/teams.md).")
    try:
        uuid.UUID(app_id)
    except ValueError:
        raise PackageError(f"MicrosoftAppId must be the bot's Azure app id (a GUID), not {app_id!r}.") from None
    text = (source / "manifest.json").read_text(encoding="utf-8")
    manifest: dict[str, Any] = json.loads(text.replace(APP_ID_PLACEHOLDER, app_id))
    return manifest
