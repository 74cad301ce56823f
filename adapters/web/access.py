"""Which runs an operator may open: a trace built for restricted groups holds what only they may read.

A run's audience is the groups its searches ran with (``bot.audience``). Built for everyone, its
trace holds only public passages; built for more groups (a manager's DM), its tool results may quote
documents restricted to them, so only the operators named in ``POLICYPAL_CONSOLE_RESTRICTED_OPERATORS``
may read it. A run recorded before audiences were (None) counts as restricted.
"""

from __future__ import annotations

from collections.abc import Sequence

from adapters.web.auth import Operator
from bot.config import Settings
from bot.identity import EVERYONE

ANYONE = "*"


def restricted(audience: Sequence[str] | None) -> bool:
    """Whether what was built for ``audience`` may hold documents not everyone may read."""
    return audience is None or any(group != EVERYONE for group in audience)


class Access:
    """The restricted-trace rule for one configuration."""

    def __init__(self, settings: Settings) -> None:
        listed = settings.console_restricted_operators or ""
        self._allowed = frozenset(name.strip() for name in listed.split(",") if name.strip())

    def may_read(self, operator: Operator, audience: Sequence[str] | None) -> bool:
        """Whether ``operator`` may read a trace or transcript built for ``audience``."""
        return not restricted(audience) or ANYONE in self._allowed or operator.name in self._allowed
