"""The loop's own time per step, next to a plain asyncio loop doing the same work; and persistence cost.

Scenario: a scripted zero-latency model asks for two tool calls a turn for N-1 turns, then answers;
the tools return at once. Whatever time is left is the loop's own: guards, budgets, traces, history.

    python benchmarks/agent_loop.py [--runs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.agent import AgentDeps, Budgets, Consequence, Price, RunState, Tool, ToolRegistry, run_agent
from bot.store import Store
from bot.types import ModelReply, ToolCall, Usage, UserRef


class ScriptedModel:
    """Zero-latency model: two calls a turn with fresh arguments, a final answer on turn N."""

    name = "scripted"

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.calls = 0

    async def complete(self, messages: Any, tools: Any, *, max_tokens: int, timeout: float) -> ModelReply:
        self.calls += 1
        if self.calls >= self.turns:
            return ModelReply("done", usage=Usage(50, 5))
        calls = tuple(ToolCall(f"c{self.calls}{x}", "lookup", f'{{"q": "{self.calls}{x}"}}') for x in "ab")
        return ModelReply(None, calls, Usage(50, 5), "tool_calls")


async def _instant(arguments: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"value": arguments["q"]}


SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
REGISTRY = ToolRegistry([Tool("lookup", "instant lookup", SCHEMA, Consequence.READ, _instant)])


def _deps(turns: int) -> AgentDeps:
    budgets = Budgets(max_steps=turns + 1, max_tokens=10**9, deadline_s=60, max_cost_usd=None)
    return AgentDeps(ScriptedModel(turns), REGISTRY, budgets, Price(0, 0))


def _state() -> RunState:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    return RunState("run", UserRef("u"), "k", messages, question_index=1)


async def ours(turns: int) -> float:
    deps = _deps(turns)
    start = time.process_time()
    result = await run_agent(deps, _state())
    elapsed = time.process_time() - start
    assert result.reason == "answered", result.reason
    return elapsed


async def plain(turns: int) -> float:
    """The 25-line baseline: call, run tools concurrently, append, repeat."""
    model = ScriptedModel(turns)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "q"}]
    start = time.process_time()
    for _ in range(turns + 1):
        reply = await model.complete(messages, [], max_tokens=1, timeout=1)
        messages.append(reply.as_message())
        if not reply.tool_calls:
            break
        results = await asyncio.gather(*(_instant(json.loads(c.arguments), None) for c in reply.tool_calls))
        for call, result in zip(reply.tool_calls, results, strict=True):
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return time.process_time() - start


async def per_step_ms(fn: Any, turns: int, runs: int, batch: int = 10) -> float:
    """Median CPU time of this process per step (CPU, not wall: other processes cannot inflate it)."""
    for _ in range(20):
        await fn(turns)
    samples = []
    for _ in range(runs // batch):
        samples.append(sum([await fn(turns) for _ in range(batch)]) / batch)
    return statistics.median(samples) / turns * 1000


async def persistence_ms(runs: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = await Store.open(f"sqlite+aiosqlite:///{tmp}/bench.db")
        result = await run_agent(_deps(5), _state())
        samples = []
        for n in range(runs):
            start = time.perf_counter()
            await store.runs.start(f"r{n}", "k", "console", "u", "q", "scripted", "bench")
            await store.runs.finish(
                f"r{n}",
                reason="answered",
                steps=5,
                input_tokens=250,
                output_tokens=25,
                cost_usd=0.0,
                latency_ms=1.0,
                trace=result.trace.step_dicts(),
            )
            samples.append(time.perf_counter() - start)
        await store.close()
    return statistics.median(samples) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    print("own CPU time per step (median of batches of 10 runs), 2 parallel tool calls a turn")
    print(f"{'turns':>6} {'policypal ms':>13} {'plain loop ms':>14} {'overhead ms':>12}")
    for turns in (5, 21):
        mine = await per_step_ms(ours, turns, args.runs)
        base = await per_step_ms(plain, turns, args.runs)
        print(f"{turns:>6} {mine:>13.4f} {base:>14.4f} {mine - base:>12.4f}")
    print(f"persisting one 5-step run (start + finish) on SQLite: {await persistence_ms(200):.2f} ms median")


if __name__ == "__main__":
    asyncio.run(main())
