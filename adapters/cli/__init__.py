"""The terminal surface and the composition root: ``policypal`` and every subcommand."""

from adapters.cli.main import main

__all__ = ["main"]
