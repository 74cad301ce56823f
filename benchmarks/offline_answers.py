"""How often the offline model's answers cite the labelled section, on the sample policies.

    python benchmarks/offline_answers.py [--data-dir DIR] [--everyone] [--show]

Each labelled question (examples/questions.jsonl) runs through the real service with the offline
model and the sample index, as `policypal ask --json --no` runs it: a proposed ticket is cancelled,
so the answer given after it is the one scored. The asker may read the labelled documents (a manager
asks about merit increases); --everyone asks everything as someone in no group but `all`. The index
is built in --data-dir (a temporary folder by default; pass one to reuse it). Printed:

- answerable questions whose answer cites a labelled section (the cite's title is the labelled
  document's title and its heading path contains the labelled heading), and those citing every one;
- questions the policies do not cover that get the not-in-the-policy answer (and no cite);
- tickets proposed for questions that report no problem (PROBLEM_REPORTS lists the ones that do, where
  a ticket is allowed but not required).

--show prints each question's outcome, the place to start reading misses.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from adapters.cli.console import ask, ensure_sample_index  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.models.offline.answers import NOT_IN_POLICY  # noqa: E402
from bot.service import PolicyPal  # noqa: E402
from bot.types import UserRef  # noqa: E402
from bot.wiring import SAMPLE_POLICIES, open_service  # noqa: E402

QUESTIONS = REPO / "examples" / "questions.jsonl"
# Questions that report something broken, lost or compromised: a ticket may be proposed for them.
PROBLEM_REPORTS = frozenset({"q02", "q05", "q34", "q55", "q61", "q62", "q64"})
NOT_IN_POLICY_MARK = NOT_IN_POLICY.split(",")[0]


def front_matter(key: str) -> dict[str, str]:
    """Policy file name -> one front-matter value (the title names a citation's document)."""
    found = {}
    for path in SAMPLE_POLICIES.glob("*.md"):
        match = re.search(rf"^{key}:\s*(.+)$", path.read_text(encoding="utf-8"), re.M)
        found[path.name] = match[1].strip() if match else ""
    return found


def asker(row: dict[str, Any], *, everyone: bool) -> UserRef:
    """Someone who may read the labelled documents (a manager asks about merit increases)."""
    audiences = front_matter("audience")
    groups = (
        {"all"}
        if everyone
        else {group.strip() for label in row["answers"] for group in audiences[label["doc"]].strip("[]").split(",")}
    )
    return UserRef(id="benchmark", name="benchmark", groups=tuple(sorted(groups | {"all"})))


def heading_key(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return " ".join(re.sub(r"[*_]", "", text).split()).casefold()


def cites(citations: list[dict[str, Any]], label: dict[str, str], doc_titles: dict[str, str]) -> bool:
    return any(
        c["title"] == doc_titles.get(label["doc"]) and heading_key(label["heading"]) in heading_key(c["heading"])
        for c in citations
    )


async def run_one(service: PolicyPal, question: str, user: UserRef) -> dict[str, Any]:
    out = io.StringIO()
    await ask(service, question, user, answer_pending="cancel", as_json=True, prompt=None, out=out)
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def score(rows: list[dict[str, Any]], results: list[dict[str, Any]], *, show: bool) -> dict[str, int]:
    doc_titles = front_matter("title")
    totals = dict.fromkeys(
        ("answerable", "cited_any", "cited_all", "uncovered", "said_not_covered", "no_problem", "unwanted_tickets"), 0
    )
    for row, result in zip(rows, results, strict=True):
        answer, citations = result.get("answer") or "", result.get("citations") or []
        ticket = "pending" in result
        if row["answerable"]:
            hits = [cites(citations, label, doc_titles) for label in row["answers"]]
            totals["answerable"] += 1
            totals["cited_any"] += any(hits)
            totals["cited_all"] += all(hits)
            verdict = "ok" if any(hits) else "MISS"
        else:
            honest = NOT_IN_POLICY_MARK in answer and not citations
            totals["uncovered"] += 1
            totals["said_not_covered"] += honest
            verdict = "ok" if honest else "ANSWERED"
        if row["id"] not in PROBLEM_REPORTS:
            totals["no_problem"] += 1
            totals["unwanted_tickets"] += ticket
            verdict += " +UNWANTED TICKET" if ticket else ""
        if show:
            cited = "; ".join(f"{c['title']} › {c['heading']}" for c in citations)
            said = " ".join(answer.split())[:400]
            print(f"{row['id']} [{verdict}] {row['question']}\n    {said}\n    cites: {cited}")
    return totals


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="where the sample index and the database live")
    parser.add_argument("--everyone", action="store_true", help="ask as a user in no group but `all`")
    parser.add_argument("--show", action="store_true", help="print each question's answer and cites")
    args = parser.parse_args()
    rows = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    os.environ.pop("OPENAI_API_KEY", None)  # the offline model is what is measured
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(_env_file=None, data_dir=args.data_dir or Path(scratch))  # type: ignore[call-arg]
        ensure_sample_index(settings)
        service = await open_service(settings, destinations=[])
        try:
            results = [await run_one(service, row["question"], asker(row, everyone=args.everyone)) for row in rows]
        finally:
            await service.close()
    t = score(rows, results, show=args.show)
    print(
        f"answerable questions citing a labelled section: {t['cited_any']}/{t['answerable']}"
        f" (every labelled section: {t['cited_all']}/{t['answerable']})"
    )
    print(f"not-covered questions answered 'not in the policy': {t['said_not_covered']}/{t['uncovered']}")
    print(f"tickets proposed for questions reporting no problem: {t['unwanted_tickets']}/{t['no_problem']}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
