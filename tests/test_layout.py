"""The architecture holds: the core never imports an adapter, no import circles, packages are entered by
their public names, and the agent loop stays light. Read from the source itself, so a new import that
breaks a rule fails here, naming the file."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("bot", "adapters", "retrieval")


@cache
def modules() -> dict[str, Path]:
    found = {}
    for root in ROOTS:
        for path in (REPO / root).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if "migrations" in parts:
                continue  # Alembic loads these by path
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def packages() -> set[str]:
    return {name for name, path in modules().items() if path.name == "__init__.py"}


def imports(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """(line, module, names) of every first-party import that runs (``if TYPE_CHECKING:`` blocks never do)."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(node)
        for guard in ast.walk(tree)
        if isinstance(guard, ast.If) and "TYPE_CHECKING" in ast.unparse(guard.test)
        for stmt in guard.body
        for node in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in ROOTS:
                yield node.lineno, node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ROOTS:
                    yield node.lineno, alias.name, []


def resolve(name: str) -> str:
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name


@cache
def graph() -> dict[str, set[str]]:
    """Module -> the first-party modules it makes Python load (a package's __init__ included)."""
    edges: dict[str, set[str]] = {}
    for name, path in modules().items():
        targets = set()
        for _line, module, names in imports(path):
            for target in [f"{module}.{n}" if f"{module}.{n}" in modules() else module for n in names] or [module]:
                target = resolve(target)
                parts = target.split(".")
                targets |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(modules())
        edges[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            component.append(node)
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


def unit(module: str) -> str:
    """A sub-package counts as one unit (bot.agent); a top-level module is its own (bot.service)."""
    return ".".join(module.split(".")[:2])


def test_the_core_never_imports_an_adapter_and_retrieval_imports_neither():
    wrong = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        for target in targets
        if (name.startswith("bot") and target.startswith("adapters"))
        or (name.startswith("retrieval") and not target.startswith("retrieval"))
    ]
    assert wrong == []


def test_no_module_imports_itself_round_a_circle():
    assert cycles(graph()) == []


def test_no_two_packages_import_each_other():
    edges: dict[str, set[str]] = {}
    for name, targets in graph().items():
        edges.setdefault(unit(name), set()).update(
            unit(t) for t in targets if unit(t) != unit(name) and t not in ROOTS and name not in ROOTS
        )
    assert cycles(edges) == []


def test_other_packages_enter_a_package_through_its_public_names():
    """``from bot.store import Store``, never ``from bot.store.store import Store``, outside bot/store."""
    wrong = []
    for name, path in modules().items():
        for line, module, _names in imports(path):
            package = next((p for p in sorted(packages(), key=len, reverse=True) if module.startswith(p + ".")), None)
            if package is None or package in ROOTS or name == package or name.startswith(package + "."):
                continue
            wrong.append(f"{path.relative_to(REPO)}:{line} imports {module} (use {package})")
    assert wrong == []


def test_every_package_names_its_public_surface():
    missing = [
        name for name in packages()
        if name not in ROOTS and "__all__" not in modules()[name].read_text() and modules()[name].read_text().strip()
    ]
    assert missing == []


def loaded_by(imports: str, packages: set[str]) -> list[str]:
    """Which of ``packages`` a fresh interpreter has loaded after ``import {imports}``."""
    script = f"import sys, {imports}; print(sorted({{m.split('.')[0] for m in sys.modules}} & {packages!r}))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    return list(ast.literal_eval(result.stdout.strip()))


def test_the_agent_loop_loads_neither_the_database_layer_nor_a_model_sdk():
    assert loaded_by("bot.agent", {"sqlalchemy", "openai", "aiohttp", "retrieval"}) == []


def test_the_openai_sdk_loads_only_when_its_model_first_calls_the_endpoint():
    """Start-up builds the model (the config check one more) and must not pay about 0.4 s for the SDK;
    the offline model never does. The first call loads it (here to a port nobody listens on)."""
    script = (
        "import asyncio, sys, bot.wiring\n"
        "from bot.errors import ModelError\n"
        "from bot.models import OpenAIChatModel\n"
        "model = OpenAIChatModel(api_key='sk-test', model='m', base_url='http://127.0.0.1:9/v1', max_retries=0)\n"
        "print('openai' in sys.modules)\n"
        "try:\n"
        "    asyncio.run(model.complete([{'role': 'user', 'content': 'hi'}], [], max_tokens=5, timeout=5))\n"
        "except ModelError:\n"
        "    print('openai' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.split() == ["False", "True"]


def test_a_server_without_teams_settings_never_loads_the_bot_framework_sdk(tmp_path):
    """botbuilder costs about 0.3 s of start-up and 20 MB: building the app, checking the configuration and
    registering the probes load it only once a Teams setting is present."""
    script = (
        "import asyncio, sys\n"
        "from adapters.checks import check_teams\n"
        "from adapters.server.app import build_app\n"
        "from adapters.teams import teams_endpoint\n"
        "from bot.config import Settings\n"
        "for teams in (False, True):\n"
        "    settings = Settings(_env_file=None, data_dir=sys.argv[1], teams_allow_unauthenticated=teams)\n"
        "    app = build_app(settings)\n"
        "    asyncio.run(check_teams(settings)), teams_endpoint(app)\n"
        "    print('botbuilder' in sys.modules)\n"
    )
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}  # no MicrosoftAppId from a shell
    command = [sys.executable, "-c", script, str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=clean, check=True)
    assert result.stdout.split() == ["False", "True"]


def test_a_terminal_command_run_alone_loads_neither_a_model_sdk_nor_aiohttp():
    """`policypal ask` offline talks to no remote service and serves nothing: its start-up pays for neither."""
    terminal = "adapters.cli.main, adapters.cli.console, adapters.cli.served"
    assert loaded_by(terminal, {"openai", "aiohttp", "slack_bolt", "botbuilder"}) == []
