"""Every exception bot/ and the adapters raise on purpose, in one tree.

Two families matter to a run (STYLE: things the model should hear, things that end the run); the
rest are refusals at the edge (configuration) and the failures of talking to other systems::

    PolicyPalError
    ├── Observation             the model hears it as the call's tool result; the run goes on
    │   ├── ToolRefusal         unknown tool, arguments that are not JSON or break the schema, text that
    │   │                       is not Unicode, a tool this user may not call (``denied_write``: a refused
    │   │                       write, which then ends the run ``policy_denied``)
    │   └── TicketError         the ticket system refused or failed (``kind``): the ticket tool's result
    │                           is ``{"error": ...}``, and a confirmed one opens a helpdesk case
    ├── RunEnded                ends the run with a ``TerminationReason``; the user gets the honest message
    │   ├── ModelError          ``model_error``: the endpoint failed after the client's own retries
    │   │   └── ModelTimeout    no reply within the call's time: ``deadline`` when the run has none left
    │   └── StateVersionError   a run state saved by a release this one cannot resume: the click's result
    │                           is still shown, no continued run
    ├── ConfigError             settings that cannot work: every command exits 2, naming each problem
    │   ├── UnknownPrice        a dollar cap on a model with no known price (the cap fails closed)
    │   ├── DatabaseNotReady    the schema is not this release's; the message says what to run
    │   └── PackageError        the Teams app package cannot be built as configured
    ├── RemoteError             an HTTP peer (ticket system, helpdesk webhook, a platform) failed:
    │   │                       ``kind``, ``status``, ``retryable``; the message is safe to show
    │   └── DeliveryFailed      it kept failing until the retry budget ran out (``bot.delivery.retry``)
    └── ClaimLost               another worker took an outbox delivery over: stop quietly, it carries on

Anything else that reaches the agent loop is a bug: the loop logs it and ends the run
``internal_error``, still with a reply and a helpdesk case (``bot.agent.loop``). Retrieval keeps its
own tree (``retrieval.errors``: it knows nothing of bot/); the search tool turns an unknown section
into a note the model reads, and the wiring turns a missing or busy index into a ``ConfigError``-like
refusal at start.
"""

from __future__ import annotations

__all__ = [
    "ClaimLost",
    "ConfigError",
    "DatabaseNotReady",
    "DeliveryFailed",
    "LeftForLater",
    "ModelError",
    "ModelTimeout",
    "Observation",
    "PackageError",
    "PolicyPalError",
    "RemoteError",
    "RunEnded",
    "StateVersionError",
    "TicketError",
    "ToolRefusal",
    "UnknownPrice",
]


class PolicyPalError(Exception):
    """The root: ``except PolicyPalError`` catches what PolicyPal raises on purpose, never a bug."""


class Observation(PolicyPalError):
    """Told to the model as a tool result; never ends the run by itself."""


class ToolRefusal(Observation):
    """A call the model should hear about (unknown tool, bad JSON, schema violation, bad Unicode, not permitted)."""

    def __init__(self, message: str, *, denied_write: bool = False) -> None:
        super().__init__(message)
        self.denied_write = denied_write


class TicketError(Observation):
    """The ticket system refused or failed; the message is shown to the model and the user.

    ``kind`` is one of auth, validation, rate_limited, unavailable, timeout, protocol, config, or
    unknown: the request reached the system and no answer came back, so the ticket may exist.
    """

    def __init__(self, message: str, *, kind: str = "unavailable") -> None:
        super().__init__(message)
        self.kind = kind


class RunEnded(PolicyPalError):
    """Ends a run with a termination reason (the loop maps each to its reason)."""


class ModelError(RunEnded):
    """The model endpoint failed after the client's retries; the run ends with ``model_error``."""


class ModelTimeout(ModelError):
    """The model call ran past its timeout; ``deadline`` if the run has no time left, else ``model_error``."""


class StateVersionError(RunEnded):
    """Saved run state written by a release this one cannot read."""


class ConfigError(PolicyPalError):
    """Configuration that cannot work; the message lists every problem found."""


class UnknownPrice(ConfigError):
    """A dollar cap is set but the model has no price: refuse rather than run uncapped."""


class DatabaseNotReady(ConfigError):
    """The database's schema is not the one this release needs; the message says what to run."""


class PackageError(ConfigError):
    """The Teams app package cannot be built as configured; the message says what to set."""


class RemoteError(PolicyPalError):
    """A remote API call failed; the message is safe to show to the user and the model."""

    def __init__(self, message: str, *, kind: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.kind in ("rate_limited", "unavailable", "timeout")


class DeliveryFailed(RemoteError):
    """A remote call kept failing until its retry budget ran out (already logged); ``kind`` is the last failure's."""


class ClaimLost(PolicyPalError):
    """Another worker took this delivery over (ours was presumed dead): stop, it carries on."""


class LeftForLater(PolicyPalError):
    """Work that never began, left unanswered in the inbox for a process that stays (this one is stopping).

    A message whose turn comes after the shutdown grace period is not run and given up on: it is still
    in the inbox, so the restarted process (or another replica) answers it in full.
    """
