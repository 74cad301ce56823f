"""The README's test command is the one CI runs, word for word, and it shows why tests were skipped."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_ci_runs_the_readmes_test_command_word_for_word_with_skip_reasons_shown() -> None:
    (command,) = [line for line in readme_commands() if "pytest" in line and "pip install" in line]
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]

    assert command in ci_lines
    assert command.split("&&")[-1].split() == [".venv/bin/pytest", "-rs", "-n", "2"]
