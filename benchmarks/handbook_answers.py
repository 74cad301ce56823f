"""How accurate the offline model's answers are on the real handbooks (18F and Sourcegraph).

    python benchmarks/handbook_answers.py [--corpus 18f|sourcegraph|all] [--corpora DIR] [--data-dir DIR]
                                          [--show] [--json OUT]

--corpora DIR (default: $POLICYPAL_CORPORA) is the folder holding 18f-handbook/ and sourcegraph-handbook/,
as for benchmarks/retrieval.py; the labels' `doc` paths are relative to each handbook's docs/ folder.

Each handbook is indexed the way `policypal index DOCS` indexes it (the bundled embedding model, the
product's settings for POLICYPAL_DATA_DIR=DIR/<corpus>), one corpus at a time. --data-dir keeps the
indexes between runs (a temporary folder by default): an unchanged handbook is not embedded again.
Then each labelled question (benchmarks/labels/<corpus>.jsonl) runs through the real service with the
offline model, as `policypal ask --json --no` runs it (and as benchmarks/offline_answers.py does for
the sample policies): a proposed ticket is cancelled, so the answer given after it is the one scored.
The asker is in no group but `all` (the handbooks have no audience restrictions).

Printed per corpus, for the answerable questions (N) and the ones the handbook does not cover (M):

- facts: every label fact (a case-insensitive regex, `|` for alternatives) matches the answer text
  (as written, or with Markdown marks removed and whitespace collapsed, as the label checker
  benchmarks/check_eval_tasks.py matches facts to pages), and, looser, at least one does;
- cited: some citation's source (the file path) ends with or contains a labelled `doc`;
- accurate: both, the headline figure (k/N and %, with its 95% Wilson interval);
- not covered: the run ended `not_covered` (the honest not-in-the-policy answer), k/M;
- tickets proposed, over all the questions, and how the runs ended (termination reasons: a
  `deadline` usually means the machine was busy, as the 20 s budget counts the search's embedding).

When the labels carry a `split` (train/test, benchmarks/labels/README.md), a line per split follows;
the test figures are the result to quote.

--show prints one line per question: id, ok or MISS, the reason (missing facts, missing cite) with a
hint where the miss comes from, from the run's searches (replayed from its trace): the labelled
file, or its labelled section, was not among the passages the searches returned (wrong passage
retrieved); a missing fact is in the searched passages but not in the answer (wrong sentence
chosen); it is in the labelled file but not in those passages (another chunk, or past the passage
cut); it matches nowhere in the labelled files (the regex is too strict). Then the answer's first
150 characters.

--json OUT writes the totals and every question's outcome: the answer, citations, the passages the
searches returned (cite and source) and the hints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from adapters.cli.index import run_index  # noqa: E402
from benchmarks.check_eval_tasks import MARKS  # noqa: E402
from benchmarks.offline_answers import NOT_IN_POLICY_MARK, heading_key, run_one  # noqa: E402
from benchmarks.retrieval import CORPORA_VAR, real_corpora  # noqa: E402
from bot.config import Settings  # noqa: E402
from bot.identity import known_groups  # noqa: E402
from bot.policy_tools import CITE_SEPARATOR, SEARCH_TOOL  # noqa: E402
from bot.service import PolicyPal  # noqa: E402
from bot.types import TerminationReason, UserRef  # noqa: E402
from bot.wiring import open_service  # noqa: E402
from retrieval import SearchFilter, UnknownSectionError  # noqa: E402

ASKER_GROUPS = ("all",)
ANSWER_PREVIEW = 150
ENDS_WITH_ANSWER = frozenset(r.value for r in (TerminationReason.ANSWERED, TerminationReason.NOT_COVERED))


def settings_for(data_dir: Path) -> Settings:
    """The product's settings for POLICYPAL_DATA_DIR=data_dir, with no API key: the offline model."""
    return Settings(_env_file=None, data_dir=data_dir, openai_api_key=None)  # type: ignore[call-arg]


def index_corpus(settings: Settings, docs: Path) -> tuple[int, float]:
    """`policypal index DOCS` (incremental: an unchanged file is not embedded again); rc and seconds."""
    started = time.perf_counter()
    rc = run_index(settings.retrieval(), [docs], out=sys.stderr, known_groups=known_groups(settings.user_groups))
    return rc, time.perf_counter() - started


def load_labels(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def matches(pattern: str, text: str) -> bool:
    """A fact is in the text as written or in its plain form, as benchmarks/check_eval_tasks.py checks
    the labels: Markdown marks removed and whitespace collapsed (`_private_ repository`, a hard wrap)."""
    plain = " ".join(MARKS.sub("", text).split())
    return any(re.search(pattern, candidate, re.IGNORECASE) for candidate in (text, plain))


def cites_doc(citations: Sequence[dict[str, Any]], doc: str) -> bool:
    """A citation's source path ends with, or contains, the labelled document's path."""
    return any(_posix(c.get("source", "")).endswith(doc) or doc in _posix(c.get("source", "")) for c in citations)


def _posix(path: str) -> str:
    return str(path).replace("\\", "/")


# -- what the searches returned -----------------------------------------------------------------------


async def searched(service: PolicyPal, run_ids: Sequence[str], top_k: int) -> dict[str, Any]:
    """The passages the runs' searches returned, replayed: the stored trace keeps each call's arguments
    but only a 1,000-character preview of its result, so each search is run again on the same index
    (searches are deterministic), as the search tool runs it for this asker."""
    passages: list[dict[str, Any]] = []
    searcher = service.searcher
    if searcher is None:  # a service opened on someone else's searcher: nothing to replay on
        return {"passages": [], "text": ""}
    for run_id in dict.fromkeys(run_ids):
        row = await service.store.runs.get(run_id)
        for step in row.trace if row else []:
            if step.get("kind") != "tool" or step.get("name") != SEARCH_TOOL:
                continue
            try:
                arguments = json.loads(step.get("arguments") or "{}")
                scope = SearchFilter(section=arguments.get("section"), groups=ASKER_GROUPS)
                try:
                    found = await searcher.asearch(arguments["query"], k=top_k, filter=scope)
                except UnknownSectionError:  # the tool searches everything then, and so does this
                    found = await searcher.asearch(
                        arguments["query"], k=top_k, filter=SearchFilter(groups=ASKER_GROUPS)
                    )
            except (ValueError, KeyError, TypeError):
                continue  # arguments cut or malformed: the tool rejected that call too
            passages += [
                {"doc": p.doc_id, "cite": CITE_SEPARATOR.join((p.title, p.heading)), "source": p.source, "text": p.text}
                for p in found
            ]
    unique = {(p["source"], p["cite"], p["text"]): p for p in passages}
    return {"passages": list(unique.values()), "text": "\n".join(p["text"] for p in unique.values())}


def hints(row: dict[str, Any], verdict: dict[str, Any], search: dict[str, Any], docs: Path) -> list[str]:
    """Where a miss comes from, as far as the run's trace and the labelled files tell.

    Right file but not the labelled section means the wrong passage was retrieved; a fact in the
    searched passages but not in the answer means the wrong sentence was chosen; a fact that matches
    nowhere in the labelled files means the regex is too strict (or the label is wrong).
    """
    found: list[str] = [] if verdict["reason"] in ENDS_WITH_ANSWER else [f"the run ended {verdict['reason']}"]
    passages = search["passages"]
    in_file = [p for p in passages for label in row["answers"] if cites_doc([p], label["doc"])]
    in_section = [
        p
        for p in passages
        for label in row["answers"]
        if cites_doc([p], label["doc"]) and heading_key(label.get("heading") or "") in heading_key(p["cite"])
    ]
    if not passages:
        found.append("the searches returned no passage")
    elif not in_file:
        found.append("labelled file not retrieved")
    elif not in_section:
        found.append("labelled file retrieved, not the labelled section")
    if passages and in_file and not verdict["cited"]:
        said_not_covered = verdict["reason"] == TerminationReason.NOT_COVERED.value
        found.append(
            f"labelled file retrieved but {'the answer said not covered' if said_not_covered else 'not cited'}"
        )
    labelled_text = "\n".join(_read(docs / label["doc"]) for label in row["answers"])
    for fact in verdict["missing_facts"]:
        if matches(fact, search["text"]):
            found.append(f"{fact!r} in the searched passages, not in the answer")
        elif not matches(fact, labelled_text):
            found.append(f"{fact!r} matches nowhere in the labelled files")
        else:
            found.append(f"{fact!r} in the labelled file, not in the searched passages")
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# -- one corpus --------------------------------------------------------------------------------------


def judge(row: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The scores of one question's outcome."""
    answer, citations = result.get("answer") or "", result.get("citations") or []
    verdict: dict[str, Any] = {"ticket": "pending" in result, "reason": result.get("reason")}
    if row["answerable"]:
        facts = row.get("facts") or []
        missing = [fact for fact in facts if not matches(fact, answer)]
        cited = any(cites_doc(citations, label["doc"]) for label in row["answers"])
        verdict |= {
            "facts_all": not missing,
            "facts_any": not facts or len(missing) < len(facts),
            "missing_facts": missing,
            "cited": cited,
            "ok": cited and not missing,
        }
        why = [f"missing {', '.join(repr(f) for f in missing)}"] if missing else []
        why += [] if cited else ["no cite of " + " or ".join(label["doc"] for label in row["answers"])]
    else:
        honest = result.get("reason") == TerminationReason.NOT_COVERED.value
        verdict |= {"not_covered": honest, "says_not_in_policy": NOT_IN_POLICY_MARK in answer, "ok": honest}
        cites = "; ".join(c.get("source", "") for c in citations)
        why = [] if honest else [f"ended {result.get('reason')}" + (f", cites {cites}" if cites else "")]
    verdict["why"] = why
    return verdict


async def run_corpus(name: str, docs: Path, labels: Path, data_dir: Path, *, show: bool) -> dict[str, Any]:
    rows = load_labels(labels)
    settings = settings_for(data_dir)
    print(f"{name}: indexing {docs} into {data_dir} ...", file=sys.stderr)
    rc, index_seconds = index_corpus(settings, docs)
    if rc:
        print(f"{name}: `policypal index` reported failures (rc {rc}); scoring what was indexed", file=sys.stderr)
    user = UserRef(id="benchmark", name="benchmark", groups=ASKER_GROUPS)
    questions: list[dict[str, Any]] = []
    started = time.perf_counter()
    service = await open_service(settings, destinations=[])
    try:
        for row in rows:
            try:
                result = await run_one(service, row["question"], user)
            except Exception as exc:  # one failed question is a miss, not the end of the run
                result = {"reason": "benchmark_error", "answer": f"{type(exc).__name__}: {exc}", "citations": []}
            verdict = judge(row, result)
            run_ids = [rid for rid in (result.get("run_id"), result.get("final_run_id")) if rid]
            search = await searched(service, run_ids, settings.top_k)
            if not verdict["ok"] and row["answerable"]:
                verdict["hints"] = hints(row, verdict, search, docs)
            seen = [{key: p[key] for key in ("cite", "source")} for p in search["passages"]]
            questions.append({**row, **result, "verdict": verdict, "searched": seen})
            if show:
                print(_line(row, result, verdict), flush=True)
    finally:
        await service.close()
    totals = _totals(questions)
    splits = sorted({str(q["split"]) for q in questions if q.get("split")})
    totals["by_split"] = {split: _totals([q for q in questions if q.get("split") == split]) for split in splits}
    return {
        "corpus": name,
        "docs": str(docs),
        "data_dir": str(data_dir),
        "index_rc": rc,
        "index_seconds": round(index_seconds, 1),
        "questions_seconds": round(time.perf_counter() - started, 1),
        "totals": totals,
        "questions": questions,
    }


def _line(row: dict[str, Any], result: dict[str, Any], verdict: dict[str, Any]) -> str:
    mark = "ok" if verdict["ok"] else "MISS"
    reason = "; ".join(verdict["why"] + verdict.get("hints", [])) or result.get("reason") or ""
    ticket = " +ticket" if verdict["ticket"] else ""
    said = " ".join((result.get("answer") or "").split())[:ANSWER_PREVIEW]
    return f"{row['id']} [{mark}{ticket}] {reason}\n    {said}"


def _totals(questions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    answerable = [q["verdict"] for q in questions if q["answerable"]]
    uncovered = [q["verdict"] for q in questions if not q["answerable"]]
    return {
        "questions": len(questions),
        "answerable": len(answerable),
        "facts_all": sum(v["facts_all"] for v in answerable),
        "facts_any": sum(v["facts_any"] for v in answerable),
        "cited": sum(v["cited"] for v in answerable),
        "accurate": sum(v["ok"] for v in answerable),
        "accuracy": round(sum(v["ok"] for v in answerable) / len(answerable), 4) if answerable else None,
        "uncovered": len(uncovered),
        "not_covered_honest": sum(v["not_covered"] for v in uncovered),
        "tickets_proposed": sum(v["ticket"] for v in [*answerable, *uncovered]),
        "ended": dict(Counter(str(q["verdict"]["reason"]) for q in questions).most_common()),
        "missed": [q["id"] for q in questions if not q["verdict"]["ok"]],
    }


def report(name: str, t: dict[str, Any]) -> str:
    n, m = t["answerable"], t["uncovered"]
    lines = [
        f"{name}: {t['questions']} questions, answerable {n}, not covered {m}",
        f"  facts all present:     {t['facts_all']}/{n} (any fact: {t['facts_any']}/{n})",
        f"  relevant file cited:   {t['cited']}/{n}",
        f"  accurate (both):       {t['accurate']}/{n} ({_share(t['accurate'], n)})",
        f"  not covered, honest:   {t['not_covered_honest']}/{m}",
        f"  tickets proposed:      {t['tickets_proposed']}/{t['questions']}",
        f"  runs ended:            {', '.join(f'{reason} {count}' for reason, count in t['ended'].items())}",
        f"  missed: {' '.join(t['missed']) or '-'}",
    ]
    for split, s in t.get("by_split", {}).items():
        lines.append(
            f"  {split + ':':<6} accurate {s['accurate']}/{s['answerable']} ({_share(s['accurate'], s['answerable'])}),"
            f" facts {s['facts_all']}/{s['answerable']}, cited {s['cited']}/{s['answerable']},"
            f" not covered {s['not_covered_honest']}/{s['uncovered']}, tickets {s['tickets_proposed']}"
        )
    return "\n".join(lines)


def _share(k: int, n: int) -> str:
    """k/n as a percentage with its 95% Wilson interval: on 30 questions one answer is 3 points, so a
    share is read with the range the questions leave it (25 of 31 is 80.6%: 64-91%)."""
    if not n:
        return "n/a"
    low, high = wilson(k, n)
    return f"{100 * k / n:.1f}%, 95% interval {100 * low:.0f}-{100 * high:.0f}%"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n (sound near 0% and 100%, unlike k/n ± 2 SE)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("18f", "sourcegraph", "all"), default="all")
    parser.add_argument(
        "--corpora",
        type=Path,
        metavar="DIR",
        default=os.environ.get(CORPORA_VAR) or None,
        help=f"folder with 18f-handbook/ and sourcegraph-handbook/ (default: ${CORPORA_VAR})",
    )
    parser.add_argument("--data-dir", type=Path, help="where each corpus's index and database live (DIR/<corpus>)")
    parser.add_argument("--show", action="store_true", help="print one line per question")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the totals and every outcome here")
    args = parser.parse_args()
    chosen = [c for c in real_corpora(parser, args.corpora) if args.corpus in ("all", c[0])]
    for variable in ("OPENAI_API_KEY", "POLICYPAL_OPENAI_API_KEY"):
        os.environ.pop(variable, None)  # the offline model is what is measured
    reports = []
    with tempfile.TemporaryDirectory() as scratch:
        base = args.data_dir or Path(scratch)
        for name, docs, labels in chosen:  # one index and one service at a time
            reports.append(await run_corpus(name, docs, labels, base / name, show=args.show))
            print(report(name, reports[-1]["totals"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"corpora": reports}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
