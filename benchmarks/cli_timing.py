"""`policypal ask` on a warm cache, end to end: wall time over N runs, and where the start-up time goes.

Each run is a fresh ``python -m adapters.cli ask`` process, as a person types it: offline model (no
OPENAI_API_KEY), HF_HUB_OFFLINE=1, a data directory indexed once beforehand (the sample policies, unless
``--data-dir`` names one already indexed). Then one more run under ``-X importtime``, summed by top-level
package (self times, so the rows add up to the whole import time), and the same for ``import bot.agent``.
The machine may be busy: min and median are printed with the load average.

    python benchmarks/cli_timing.py [--runs 7] [--data-dir DIR] [--top 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUESTION = "Can I work abroad?"


def clean_env(data_dir: Path) -> dict[str, str]:
    """This shell's environment without a model key or other PolicyPal settings, so every run is the same."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLICYPAL_") and k != "OPENAI_API_KEY"}
    return env | {"POLICYPAL_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1"}


def policypal(env: dict[str, str], *args: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, *flags, "-m", "adapters.cli", *args]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=True)


def wall_times(env: dict[str, str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        policypal(env, "ask", QUESTION, "--user", "bench")
        times.append(time.perf_counter() - started)
    return times


def import_seconds(env: dict[str, str], runs: int, module: str) -> list[float]:
    """Wall time of a bare ``python -c "import MODULE"``, interpreter start-up included."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], env=env, cwd=REPO, check=True)
        times.append(time.perf_counter() - started)
    return times


def by_package(importtime_stderr: str) -> dict[str, float]:
    """Self import time (s) per top-level package, from ``-X importtime`` lines."""
    totals: defaultdict[str, float] = defaultdict(float)
    for line in importtime_stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = line.removeprefix("import time:").split("|")
        totals[name.strip().split(".")[0]] += int(self_us) / 1e6
    return dict(totals)


def show_breakdown(title: str, totals: dict[str, float], top: int) -> None:
    print(f"{title}: {sum(totals.values()):.2f} s of imports; top packages by self time:")
    for name, seconds in sorted(totals.items(), key=lambda item: item[1], reverse=True)[:top]:
        print(f"  {seconds:6.3f} s  {name}")


def summary(label: str, times: list[float]) -> str:
    return f"{label:<28} min {min(times):.2f} s  median {statistics.median(times):.2f} s  ({len(times)} runs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=None, help="an indexed data directory (default: index one)")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or Path(tmp) / "data"
        env = clean_env(data_dir)
        if args.data_dir is None:
            policypal(env, "index", str(REPO / "bot" / "sample_policies"))
        policypal(env, "ask", QUESTION, "--user", "bench")  # warm the OS file cache and the model files
        print(f"load average before: {os.getloadavg()}")
        print(summary("policypal ask (warm)", wall_times(env, args.runs)))
        print(summary("python -c 'import bot.agent'", import_seconds(env, args.runs, "bot.agent")))
        print(f"load average after:  {os.getloadavg()}")
        traced = policypal(env, "ask", QUESTION, "--user", "bench", flags=("-X", "importtime"))
        show_breakdown("policypal ask", by_package(traced.stderr), args.top)
        agent = subprocess.run([sys.executable, "-X", "importtime", "-c", "import bot.agent"],
                               env=env, cwd=REPO, capture_output=True, text=True, check=True)
        show_breakdown("import bot.agent", by_package(agent.stderr), args.top)


if __name__ == "__main__":
    main()
