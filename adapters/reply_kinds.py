"""Which replies came from a run: only those have a trace to rate and a run to hand to the helpdesk.

A polite refusal (rate limited, busy) starts no run, and a typed request for a person opens a case
instead of one; both are ``Answer`` outcomes whose id is not a run id, so feedback or "Still need
help?" buttons under them could only fail.
"""

from __future__ import annotations

from bot.helpdesk.cases import case_number
from bot.service import Reply


def from_a_run(reply: Reply) -> bool:
    """False for a refusal and for a reply that opened a helpdesk case (its id is the case id)."""
    return reply.refused is None and case_number(reply.run_id) is None
