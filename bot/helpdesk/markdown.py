"""A handoff case as readable Markdown: what a helpdesk agent reads in Slack, Teams, email or the CLI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.cards import when
from bot.helpdesk.reasons import reason_label

if TYPE_CHECKING:
    from bot.helpdesk.case import HandoffCase

def case_markdown(case: HandoffCase) -> str:
    """Header facts, budgets, every run step by step, then the actions the user confirmed or cancelled."""
    transcript = case.transcript
    parts = [_header(case), _budgets(transcript.get("budgets") or {})]
    parts += [_run(n, run) for n, run in enumerate(transcript.get("runs") or [], 1)]
    if transcript.get("actions"):
        parts.append(_actions(transcript["actions"]))
    return "\n\n".join(part for part in parts if part) + "\n"


def _header(case: HandoffCase) -> str:
    where = f"{case.platform} · channel {case.channel or '-'} · thread {case.thread or '-'}"
    lines = [
        f"# {case.case_id}: {reason_label(case.reason)}",
        "",
        f"- **User:** {case.who()}",
        f"- **Where:** {where}",
        f"- **Link:** {case.link or 'none'}",
        f"- **Question:** {case.question_line(500)}",
        f"- **Reason:** {case.reason}",
        f"- **Opened:** {when(case.created_at)}",
    ]
    if case.transcript.get("detail"):
        lines.append(f"- **Detail:** {case.transcript['detail']}")
    return "\n".join(lines)


def _budgets(budgets: dict[str, Any]) -> str:
    limits, used = budgets.get("limits") or {}, budgets.get("used") or {}
    if not used:
        return ""
    rows = ["## Budgets (the run that ended)", "", "| budget | used | limit |", "| --- | ---: | ---: |"]
    for name in ("steps", "tokens", "seconds", "cost_usd"):
        limit = limits.get(name)
        rows.append(f"| {name} | {used.get(name, 0)} | {'none' if limit is None else limit} |")
    return "\n".join(rows)


def _run(n: int, run: dict[str, Any]) -> str:
    head = (
        f"## Run {n}: {run.get('reason')} ({run.get('run_id')})\n\n"
        f"{run.get('question', '')}\n\n"
        f"{run.get('steps', 0)} steps · {run.get('input_tokens', 0)}+{run.get('output_tokens', 0)} tokens · "
        f"${run.get('cost_usd', 0):.5f} · {run.get('latency_ms', 0):.0f} ms · model {run.get('model', '-')}"
    )
    steps = [_step(i, step) for i, step in enumerate(run.get("trace") or [], 1)]
    return "\n\n".join([head, *steps]) if steps else head


def _step(i: int, step: dict[str, Any]) -> str:
    kind, name = step.get("kind", "?"), step.get("name", "?")
    line = f"{i}. **{kind}** `{name}` · {step.get('latency_ms', 0):.0f} ms"
    if kind in ("model", "compaction"):
        tokens = f"{step.get('input_tokens', 0)}+{step.get('output_tokens', 0)}"
        line += f" · {tokens} tokens · ${step.get('cost_usd', 0):.5f}"
    if step.get("decider"):
        line += f" · {step.get('decision', 'decided')} by {step['decider']}"
    if step.get("arguments"):
        line += f"\n   - arguments: `{step['arguments']}`"
    if step.get("error"):
        line += f"\n   - error: {step['error']}"
    if step.get("text"):
        label = "said" if kind == "model" else "result"
        line += f"\n   - {label}:\n\n{_quote(step['text'])}"
    return line


def _actions(actions: list[dict[str, Any]]) -> str:
    lines = ["## Actions"]
    for action in actions:
        lines.append(
            f"- `{action.get('tool')}` {action.get('state')} (decided by {action.get('decider') or '-'}): "
            f"`{action.get('arguments')}` → {action.get('result') or 'no result'}"
        )
    return "\n".join(lines)


def _quote(text: str) -> str:
    return "\n".join(f"     > {line}" if line else "     >" for line in str(text).splitlines())
