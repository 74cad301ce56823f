"""The data home: made before the command that first keeps something in it, and named once on stderr
then, so nobody has to guess where their index, database and traces went."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from bot.config import Settings

FIRST_USE = "PolicyPal keeps its index and database in {path} (set POLICYPAL_DATA_DIR to change)"

# Commands that keep nothing in the data home: a check changes nothing; the Teams package goes to --out.
KEEP_NOTHING = frozenset({"config", "teams-package"})
# Commands that only open the database: the data home is theirs when the database is its SQLite file.
DATABASE_ONLY = frozenset({"traces", "gaps", "handoffs", "db"})
# Commands that check their input first and make the data home themselves once it passes (a bad task
# file must leave nothing behind): `eval` (adapters.cli.eval).
INPUT_FIRST = frozenset({"eval"})


def prepare_for_command(command: str, settings: Settings) -> bool:
    """Before ``command`` runs: make the data home if it keeps something there (index, ask, serve, ...)."""
    if command in KEEP_NOTHING or command in INPUT_FIRST:
        return False
    if command in DATABASE_ONLY and settings.database_url is not None:
        return False
    return make_data_home(settings)


def make_data_home(settings: Settings, err: TextIO | None = None) -> bool:
    """Make the data home; True, and the note on ``err`` saying where it is, when this call made it.

    Raises OSError when it cannot be made (POLICYPAL_DATA_DIR naming a file, no permission).
    """
    if not _made_now(settings.data_dir):
        return False
    print(FIRST_USE.format(path=settings.data_dir.absolute()), file=err or sys.stderr)
    return True


def _made_now(path: Path) -> bool:
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        if path.is_dir():
            return False  # made by an earlier run, or by another command started at the same moment
        raise
    return True
