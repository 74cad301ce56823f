"""docs/deploy.md's commands work with docker-compose.yml as written: every `docker compose` command names
a service the file defines, and every URL a command uses is reachable from where the command runs (a
service's port inside the compose network, a published port on the host). Both files are parsed, so
the docs cannot drift from the compose file again."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
INSIDE = ("exec", "run")  # compose subcommands whose command runs in a service's container
LISTS_SERVICES = ("up", "build", "pull", "logs", "restart", "stop", "start")
# Options of `docker compose run|exec` that take the next word as their value.
VALUED = {"-v", "--volume", "-e", "--env", "-u", "--user", "-w", "--workdir", "--index", "--name", "--entrypoint",
          "-p", "--publish", "-l", "--label"}
URL = re.compile(r"https?://([A-Za-z0-9_.-]+)(?::(\d+))?")
LOOPBACK = ("localhost", "127.0.0.1")


def shell_commands(markdown: str) -> list[str]:
    """The commands in the code blocks (continuation lines joined) and in the inline code that runs something."""
    blocks = re.findall(r"```(?:sh|bash|shell)\n(.*?)```", markdown, flags=re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", "").splitlines()]
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    spans = re.findall(r"`([^`\n]+)`", prose)
    wanted = [text.strip() for text in [*lines, *spans] if "docker compose" in text or "://" in text]
    return [text for text in wanted if text and not text.startswith("#")]


def container_ports(service: dict[str, Any]) -> set[int]:
    """The ports a service says it listens on: its `expose` list and the container side of `ports`."""
    found = {int(str(port).split("/")[0]) for port in service.get("expose", [])}
    for port in service.get("ports", []):
        found.add(int(port["target"]) if isinstance(port, dict) else int(str(port).rsplit(":", 1)[-1].split("/")[0]))
    return found


def published_ports(services: dict[str, Any]) -> set[int]:
    """The host ports the compose file publishes ("3000-3001:3000" publishes 3000 and 3001)."""
    found: set[int] = set()
    for service in services.values():
        for port in service.get("ports", []):
            if isinstance(port, dict):
                found.add(int(port["published"]))
                continue
            parts = str(port).split(":")
            if len(parts) < 2:
                continue  # a container port alone: Docker picks a random host port
            first, _, last = parts[-2].partition("-")
            found |= set(range(int(first), int(last or first) + 1))
    return found


def compose_use(words: list[str]) -> tuple[str, list[str]] | None:
    """(subcommand, the services it names) for `docker compose ...`, or None for another command."""
    start = next((i for i in range(len(words) - 1) if words[i : i + 2] == ["docker", "compose"]), None)
    if start is None or len(words) < start + 3:
        return None
    sub, rest = words[start + 2], words[start + 3 :]
    if sub == "cp":
        return sub, [word.split(":", 1)[0] for word in rest if ":" in word and not word.startswith(("/", "."))]
    names, skip = [], False
    for word in rest:
        if skip or word.startswith("-"):
            skip = not skip and word in VALUED
            continue
        names.append(word)
        if sub in INSIDE:
            break  # the rest is the command run in that service
    return (sub, names) if sub in (*INSIDE, *LISTS_SERVICES) else (sub, [])


def doc_problems(markdown: str, compose: dict[str, Any]) -> list[str]:
    """What in the docs' commands the compose file does not back: unknown services, unreachable URLs."""
    services = compose["services"]
    problems = []
    for text in shell_commands(markdown):
        use = compose_use(shlex.split(text))
        inside = use[1][0] if use and use[0] in INSIDE and use[1] else None
        problems += [f"{text}: no service {name!r} in docker-compose.yml" for name in (use[1] if use else [])
                     if name not in services]
        for host, port in URL.findall(text):
            number = int(port or 80)
            if host in services and inside is None:
                problems.append(f"{text}: {host}:{number} is reachable only inside the compose network")
            elif host in services and number not in container_ports(services[host]):
                problems.append(f"{text}: docker-compose.yml declares no port {number} for {host}")
            elif host in LOOPBACK and inside is None and number not in published_ports(services):
                problems.append(f"{text}: docker-compose.yml publishes no port {number} on the host")
            elif host in LOOPBACK and inside in services and number not in container_ports(services[inside]):
                problems.append(f"{text}: {inside} declares no port {number}")
    return problems


def test_deploy_docs_commands_use_only_services_and_ports_the_compose_file_defines():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    markdown = (REPO / "docs" / "deploy.md").read_text()
    assert any("qdrant:6333" in command for command in shell_commands(markdown))  # the backup is checked
    assert doc_problems(markdown, compose) == []


def test_the_check_refuses_a_host_command_on_a_port_compose_does_not_publish():
    """The backup row as it was: curl on the host to Qdrant, whose port compose keeps inside its network."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    old = "| Qdrant server | `curl -X POST http://qdrant:6333/collections/policies/snapshots` |\n"
    assert doc_problems(old, compose) == [
        "curl -X POST http://qdrant:6333/collections/policies/snapshots: "
        "qdrant:6333 is reachable only inside the compose network"
    ]
    also = "`curl http://127.0.0.1:6333/healthz` `docker compose exec -T qdrnt true` `docker compose exec bot curl http://postgres:5433`"
    assert doc_problems(also, compose) == [
        "curl http://127.0.0.1:6333/healthz: docker-compose.yml publishes no port 6333 on the host",
        "docker compose exec -T qdrnt true: no service 'qdrnt' in docker-compose.yml",
        "docker compose exec bot curl http://postgres:5433: docker-compose.yml declares no port 5433 for postgres",
    ]
