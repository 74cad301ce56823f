"""How the index names files and roots: one spelling per file, whatever the user typed."""

from __future__ import annotations

import os
from pathlib import Path


def real_path(path: Path | str) -> str:
    """The absolute path with symlinks resolved; a symlink loop yields a path instead of an error.

    `index docs` and `index /abs/docs` must be the same run, or every document would be re-embedded
    and a file given with its folder would conflict with itself.
    """
    return os.path.realpath(path)
