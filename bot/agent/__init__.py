"""The bounded agent loop: call the model with tool schemas, run the tools it asks for, repeat until an
answer or a halt rule; budgets, tools, state, compaction and the trace are its parts.

Everything here is plain Python over ``bot.types``: ``import bot.agent`` loads neither the database
layer nor a model SDK (a test checks it), so the loop can be read, run and tested on its own.
"""

from bot.agent.budget import Budget, Budgets, CallAllowance, Spent, estimate_tokens
from bot.agent.canonical import args_hash, canonical_json, to_json
from bot.agent.compaction import thread_context
from bot.agent.decided import DecidedWrite, Verdict, decided_write
from bot.agent.loop import SYSTEM_PROMPT, AgentDeps, LoopSettings, RunResult, run_agent
from bot.agent.pricing import Price, PriceTable
from bot.agent.progress import WORKING, Progress, tell
from bot.agent.state import PendingTurn, RunState, cited_in
from bot.agent.tools import Consequence, Tool, ToolContext, ToolRegistry
from bot.agent.trace import RunTrace, Step, Stopwatch
from bot.agent.turn import GUARDS, ProposedWrite, TurnLimits, execute_confirmed

__all__ = [
    "GUARDS",
    "SYSTEM_PROMPT",
    "WORKING",
    "AgentDeps",
    "Budget",
    "Budgets",
    "CallAllowance",
    "Consequence",
    "DecidedWrite",
    "LoopSettings",
    "PendingTurn",
    "Price",
    "PriceTable",
    "Progress",
    "ProposedWrite",
    "RunResult",
    "RunState",
    "RunTrace",
    "Spent",
    "Step",
    "Stopwatch",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "TurnLimits",
    "Verdict",
    "args_hash",
    "canonical_json",
    "cited_in",
    "decided_write",
    "estimate_tokens",
    "execute_confirmed",
    "run_agent",
    "tell",
    "thread_context",
    "to_json",
]
