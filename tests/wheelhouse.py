"""Wheels rebuilt from the distributions installed in this environment, for an offline clean install.

The clean-install test must not download PolicyPal's hundreds of megabytes of dependencies on every
run, and must not see anything but what the project declares. So it walks the requirements in
pyproject.toml (recursively, extras included where asked) through ``importlib.metadata`` and packs
each installed distribution back into a wheel from its RECORD, keeping its own WHEEL file and tags.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import re
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

from packaging.requirements import Requirement

SKIPPED_METADATA = frozenset({"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"})


def declared_requirements(pyproject: Path) -> list[Requirement]:
    """The project's run-time requirements as pyproject.toml declares them (not as last installed)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def runtime_closure(requirements: list[Requirement]) -> dict[str, metadata.Distribution]:
    """Every installed distribution these requirements need at run time (an extra's only when asked), by name.

    A requirement not installed here raises ``PackageNotFoundError``: install the project again.
    """
    found: dict[str, metadata.Distribution] = {}
    walked: set[tuple[str, str]] = set()  # (distribution, extra): one reached first without its extra
    pending = [(r.name, frozenset(r.extras)) for r in requirements if _applies(r, frozenset({""}))]
    while pending:
        name, extras = pending.pop()
        key = _normal(name)
        todo = {"", *extras} - {extra for dist, extra in walked if dist == key}
        if not todo:
            continue
        dist = found.setdefault(key, metadata.distribution(name))
        walked |= {(key, extra) for extra in todo}
        for text in dist.requires or []:
            requirement = Requirement(text)
            if _applies(requirement, frozenset(todo)):
                pending.append((requirement.name, frozenset(requirement.extras)))
    return found


def repack(dist: metadata.Distribution, into: Path) -> Path:
    """One installed distribution as a wheel file in ``into``."""
    tag = _compressed_tag(dist.read_text("WHEEL") or "")
    name, version = _normal(dist.metadata["Name"]).replace("-", "_"), dist.version
    info = f"{name}-{version}.dist-info"
    target = into / f"{name}-{version}-{tag}.whl"
    records = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as wheel:
        for source, arcname in _files(dist, info):
            data = source.read_bytes()
            wheel.writestr(arcname, data)
            records.append(f"{arcname},sha256={_digest(data)},{len(data)}")
        records.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return target


def _files(dist: metadata.Distribution, info: str) -> Iterator[tuple[Path, str]]:
    for entry in dist.files or []:
        parts = entry.parts
        if parts[0] == ".." or "__pycache__" in parts or entry.suffix == ".pyc":
            continue  # console scripts are made again by pip; caches are not part of a wheel
        if parts[0].endswith(".dist-info"):
            if parts[-1] in SKIPPED_METADATA:
                continue
            arcname = "/".join((info, *parts[1:]))
        else:
            arcname = "/".join(parts)
        path = Path(str(dist.locate_file(entry)))
        if path.is_file():
            yield path, arcname


def _compressed_tag(wheel_meta: str) -> str:
    """All of a wheel's tags in one filename part (``py2.py3-none-any``), as pip reads them back."""
    tags = [line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")]
    parts = zip(*(tag.split("-") for tag in tags or ["py3-none-any"]), strict=True)
    return "-".join(".".join(dict.fromkeys(values)) for values in parts)


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return "" in extras
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
