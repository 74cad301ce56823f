"""A passage's source as readers see it: a URL, or the path inside the indexed folder, never the server's disk.

The index stores each document's source as loaded (a front matter URL, else the file path as given to
`policypal index`), the root it was indexed from and its real file path. Citations are built from this:
a full path such as /srv/policypal/handbook/people/leave.md would tell every reader where the server
keeps its files, so a file's citation shows ``people/leave.md``, or that path under
``RetrievalConfig.source_base_url`` (where the same folder is published). Computed when a passage is
read, so an index written before any of this (or before ``file`` was stored) needs no re-indexing.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any
from urllib.parse import quote

URL_MARK = "://"  # http(s) and any other scheme: a URL its author chose, shown as written


def shown_source(payload: dict[str, Any], base_url: str | None = None) -> str:
    """The citation source for a stored point: its URL, base URL + relative path, or the relative path."""
    source = str(payload.get("source") or "")
    root, file = str(payload.get("root") or ""), str(payload.get("file") or "")
    if URL_MARK in source or not _is_file_source(source, root, file):
        return source
    relative = path_in_root(file or source, root) or PurePath(source).name
    if base_url:
        return f"{base_url.rstrip('/')}/{quote(relative)}"
    return relative


def path_in_root(path: str, root: str) -> str:
    """``path`` relative to the folder it was indexed from, in / form; its name when the root is the file
    itself; "" when it is not under ``root`` (an index too old to say)."""
    if not path or not root:
        return ""
    try:
        relative = PurePath(path).relative_to(root)
    except ValueError:
        return ""
    return relative.as_posix() if relative.parts else PurePath(path).name


def _is_file_source(source: str, root: str, file: str) -> bool:
    """Whether ``source`` is the file's path (as typed or absolute), not a front matter value such as
    ``intranet/leave``: the path ends with the file's path inside its root."""
    if not file:
        return bool(source)  # indexed before the file was stored: only a front matter URL is not a path
    if source == file:
        return True
    inside = PurePath(path_in_root(file, root) or PurePath(file).name).parts
    return PurePath(source).parts[-len(inside):] == inside
