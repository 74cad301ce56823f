"""Prometheus metrics: what an operator watches (runs by reason, budgets used, latencies, queues)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

STEP_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15)
TOKEN_BUCKETS = (500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000)
COST_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1)
PENDING_STATES = ("open", "executing", "done", "failed", "cancelled", "expired", "unknown")
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30)
UNKNOWN_TOOL = "unknown"  # the label of every tool name the model made up


class Metrics:
    """One registry per process (tests make their own, so counts never leak between them)."""

    def __init__(self, registry: CollectorRegistry | None = None, *, tools: Iterable[str] | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._tools = frozenset(tools) if tools is not None else None  # None: label every name (tests)
        r = self.registry
        self.runs = Counter("policypal_runs", "Runs by termination reason", ["reason", "platform"], registry=r)
        self.steps = Histogram("policypal_run_steps", "Model steps per run", buckets=STEP_BUCKETS, registry=r)
        self.tokens = Histogram("policypal_run_tokens", "Tokens per run", buckets=TOKEN_BUCKETS, registry=r)
        self.cost = Histogram("policypal_run_cost_usd", "Cost per run in USD", buckets=COST_BUCKETS, registry=r)
        self.model_latency = Histogram(
            "policypal_model_latency_seconds", "Model call latency", buckets=LATENCY_BUCKETS, registry=r
        )
        self.tool_latency = Histogram(
            "policypal_tool_latency_seconds", "Tool call latency", ["tool"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.pending = Gauge("policypal_pending_actions", "Pending actions by state", ["state"], registry=r)
        self.deliveries = Counter(
            "policypal_handoff_deliveries", "Handoff deliveries by outcome", ["destination", "outcome"], registry=r
        )
        self.replies = Counter(
            "policypal_reply_deliveries", "Slack/Teams replies by outcome", ["destination", "outcome"], registry=r
        )
        self.requests = Counter(
            "policypal_platform_requests", "Slack/Teams requests by status", ["platform", "status"], registry=r
        )
        self.refused = Counter(
            "policypal_refused_messages", "Messages refused politely, not run", ["reason", "platform"], registry=r
        )
        self.in_flight = Gauge("policypal_runs_in_flight", "Runs running in this process now", registry=r)
        self.queued = Gauge("policypal_runs_queued", "Messages waiting for a run slot in this process now", registry=r)
        self.recovered = Counter(
            "policypal_recovered", "Work of dead processes taken over by the sweeper", ["kind"], registry=r
        )

    def observe_run(
        self, platform: str, reason: str, steps: int, tokens: int, cost: float, trace: Iterable[Any]
    ) -> None:
        self.runs.labels(reason=reason, platform=platform).inc()
        self.steps.observe(steps)
        self.tokens.observe(tokens)
        self.cost.observe(cost)
        for step in trace:
            kind, name, ms = _step_fields(step)
            if kind == "model":
                self.model_latency.observe(ms / 1000)
            elif kind in ("tool", "decision"):  # a decision step times the confirmed write itself
                self.tool_latency.labels(tool=self._tool_label(name)).observe(ms / 1000)

    def _tool_label(self, name: str) -> str:
        """The tool's name if it is registered: the model names the tools it calls, so any text could
        otherwise become a label, one new time series per invented name."""
        return name if self._tools is None or name in self._tools else UNKNOWN_TOOL

    def observe_delivery(self, destination: str, outcome: str) -> None:
        """One attempt at delivering a helpdesk case."""
        self.deliveries.labels(destination=destination, outcome=outcome).inc()

    def observe_reply(self, destination: str, outcome: str) -> None:
        """One attempt at posting a reply (``slack:chat``, ``teams:chat``): counted apart from handoffs, or
        an alert on failed handoffs would fire on a Slack incident that the outbox rides out."""
        self.replies.labels(destination=destination, outcome=outcome).inc()

    def set_pending(self, counts: Mapping[str, int]) -> None:
        """Every state, so one that emptied shows 0 rather than its last count."""
        for state in dict.fromkeys([*PENDING_STATES, *counts]):
            self.pending.labels(state=state).set(counts.get(state, 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _step_fields(step: Any) -> tuple[str, str, float]:
    if isinstance(step, Mapping):
        return str(step.get("kind")), str(step.get("name")), float(step.get("latency_ms") or 0.0)
    return step.kind, step.name, step.latency_ms
