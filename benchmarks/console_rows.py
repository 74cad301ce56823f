"""Generated rows for the console benchmark, shaped as production writes them.

Runs over the last ``days`` days (the reason mix below, Slack and Teams, private and shared, ~2,000 people
of very different activity), each with a trace of model and tool steps quoting the sample policies, its
exchange, citations, guards and feedback; one helpdesk case per run that gave up, with its deliveries;
one outbox row per reply posted; one pending action per run that proposed a ticket. Gap questions come
from paraphrase families (``GAP_TOPICS`` x ``GAP_TEMPLATES``), so the gaps page has real grouping work.
The same seed gives the same rows.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bot.policy_tools import cite_for
from retrieval import Passage

SAMPLE_POLICIES = Path(__file__).resolve().parent.parent / "bot" / "sample_policies"
MODEL = "gpt-4o-mini"
SERVED_MODEL = "gpt-4o-mini-2024-07-18"
PRICE_IN, PRICE_OUT = 0.15e-6, 0.6e-6  # USD per token
PENDING_TTL = timedelta(hours=24)
EVERYONE = ["all"]

# Share of runs per ending (percent): what a deployment that answers most questions sees.
REASONS = {
    "answered": 70.0,
    "not_covered": 12.0,
    "pending_confirmation": 8.0,
    "step_budget": 3.0,
    "deadline": 2.0,
    "model_error": 2.0,
    "no_progress": 1.0,
    "token_budget": 0.7,
    "policy_denied": 0.5,
    "cost_budget": 0.3,
    "cancelled": 0.3,
    "internal_error": 0.2,
}
GIVE_UPS = frozenset(REASONS) - {"answered", "not_covered", "pending_confirmation"}

POLICY_TOPICS = (
    "taxi receipts", "hotel limits in London", "the per diem abroad", "working from another country",
    "VPN on hotel wifi", "password rotation", "MFA on a new phone", "parental leave", "carrying over annual leave",
    "sick leave notice", "visitor badges", "laptop replacement", "a second monitor", "the expense claim deadline",
    "mileage allowance", "train class for business trips", "client dinner limits", "reporting a phishing email",
    "a lost laptop", "sharing confidential files externally", "USB sticks", "performance review dates",
    "the salary review", "home office equipment", "working hours when abroad", "booking flights",
    "travel insurance", "conference fees", "server access requests", "the change freeze",
    "classifying customer lists", "printing confidential documents", "guest wifi", "office keys",
    "returning part time after parental leave", "bereavement leave", "jury duty", "overtime",
    "the on-call allowance", "installing software",
)  # fmt: skip
POLICY_TEMPLATES = (
    "What is the policy on {t}?", "Can you tell me about {t}?", "How does {t} work here?",
    "Do we have rules for {t}?", "Quick question about {t}: what applies?", "I need to know about {t} before Friday",
    "Where do I find the rules on {t}?", "Is there a limit for {t}?", "who approves {t}?",
    "what do I need to do for {t}", "Hi! A question on {t} please", "Can I get help with {t}?",
)  # fmt: skip
POLICY_SUFFIXES = ("", " Thanks!", " (I'm in the Berlin office)", " for my team", " asap")

# Things the policies do not cover, each in two wordings; six ways of asking each: 300 gap questions.
GAP_TOPICS = (
    ("a gym membership", "the fitness studio fee"), ("pet insurance", "insurance for my dog"),
    ("a company car", "a lease car"), ("bike leasing", "an e-bike through work"),
    ("childcare vouchers", "nursery fees"), ("a sabbatical", "a career break"),
    ("stock options", "employee shares"), ("dental insurance", "dentist bills"),
    ("language classes", "Spanish lessons"), ("relocation costs", "moving house for the job"),
    ("a standing desk at home", "an ergonomic chair at home"), ("my mobile phone bill", "my personal phone contract"),
    ("noise-cancelling headphones", "a headset for calls"), ("the Christmas party budget", "the team party budget"),
    ("volunteering days", "charity leave"), ("a referral bonus", "a bonus for recommending a friend"),
    ("eye tests", "glasses for screen work"), ("a parking space", "parking at the office"),
    ("public transport passes", "a monthly train ticket"), ("a pension top-up", "extra pension contributions"),
    ("study leave for exams", "time off to study"), ("a wedding gift from the company", "leave for my wedding"),
    ("moving days", "a day off to move flat"), ("a coworking space", "a desk at a coworking office"),
    ("the internet at home", "my broadband bill"), ("cycling to work", "a shower at the office"),
    ("a four-day week", "compressed hours"), ("bringing my dog to the office", "pets at the office"),
    ("meditation apps", "a mindfulness subscription"), ("a massage at work", "physiotherapy"),
    ("mental health days", "days off for burnout"), ("flu shots", "vaccinations through work"),
    ("night shifts", "working at night"), ("a second job", "a side business"),
    ("political activity", "standing for local council"), ("religious holidays", "leave for Eid"),
    ("blood donation leave", "time off to give blood"), ("caring for a parent", "carer's leave"),
    ("fertility treatment", "IVF leave"), ("a sign-on bonus", "a joining bonus"),
    ("unpaid leave", "taking a month off unpaid"), ("the office dress code", "wearing shorts at work"),
    ("tattoos at work", "visible piercings"), ("smoking breaks", "vaping at the office"),
    ("napping at work", "a quiet room for naps"), ("lunch vouchers", "free lunch"),
    ("the coffee machine", "office snacks"), ("a company credit card for travel", "a corporate card"),
    ("frequent flyer miles", "airline points from business trips"), ("upgrading to business class", "premium economy"),
)  # fmt: skip
GAP_TEMPLATES = (
    "Does the company pay for {a}?", "Is {b} covered by the company?", "Can I expense {a}?",
    "Do we get {b} as a benefit?", "What's our policy on {a}?", "Is there anything about {b} in the handbook?",
)  # fmt: skip
NOT_IN_POLICY = (
    "That is not in the policy documents. The helpdesk can help with questions the policies do not cover.",
    "I couldn't find anything about that in the policies I can search. The HR helpdesk will know more.",
)
TICKETS = (
    ("network_vpn", "VPN keeps dropping on the train", "high"), ("hardware", "Laptop battery swells", "high"),
    ("access", "Need access to the finance share", "normal"), ("software", "Install Visual Studio Code", "low"),
    ("account", "Locked out after MFA reset", "high"), ("hardware", "Second monitor for my desk", "low"),
)  # fmt: skip
GUARD_OBSERVATIONS = {
    "repeat": "You already ran this search; use its results or answer.",
    "search_cap": "The search limit for this question is reached; answer from what you found.",
}
SYSTEM_PROMPT = (
    "You are PolicyPal, Northwind Labs' assistant for company policies. Answer only from the passages the "
    "search_policies tool returns, cite every fact as [Title › Section], and say plainly when the policies do "
    "not cover a question. Never invent limits, dates or amounts. "
) * 12


@dataclass(frozen=True)
class Person:
    id: str
    name: str
    email: str
    platform: str
    tenant: str


@dataclass
class Batch:
    """Rows to insert together, one list per table (every dict of a list has the same keys)."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    cases: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    ratings: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Picks:
    """Rows the benchmark opens by id: a readable answered run's trace, a case of two runs, users to filter on."""

    trace_run: str = ""
    case_number: int = 0
    runs_per_user: dict[str, int] = field(default_factory=dict)

    def busiest_user(self) -> str:
        return max(self.runs_per_user, key=lambda u: self.runs_per_user[u])

    def rarest_user(self) -> str:
        return min(self.runs_per_user, key=lambda u: self.runs_per_user[u])


def policy_passages() -> list[Passage]:
    """Every paragraph of the sample policies under its section heading: what the traces quote."""
    passages = []
    for path in sorted(SAMPLE_POLICIES.glob("*.md")):
        body = path.read_text().split("\n---\n", 1)[-1]
        title = re.search(r"^# (.+)$", body, re.M)
        name = title.group(1).strip() if title else path.stem
        for section in re.split(r"^## ", body, flags=re.M)[1:]:
            heading, _, text = section.partition("\n")
            for paragraph in (p.strip() for p in text.split("\n\n")):
                if len(paragraph) > 80:
                    passages.append(Passage(0.0, path.name, name, f"{name} > {heading.strip()}", path.name, paragraph))
    return passages


def policy_questions() -> list[str]:
    return [t.format(t=topic) + s for topic in POLICY_TOPICS for t in POLICY_TEMPLATES for s in POLICY_SUFFIXES]


def gap_families() -> list[list[str]]:
    """Per topic, the ways of asking about it: 50 families of 6."""
    return [[t.format(a=a, b=b) for t in GAP_TEMPLATES] for a, b in GAP_TOPICS]


class Rows:
    """Runs, cases, deliveries and actions in started order, in batches; ``picks`` fills in as they go."""

    def __init__(self, runs: int, now: datetime, *, days: int = 90, users: int = 2_000, seed: int = 20) -> None:
        self.count, self.now, self.days = runs, now, days
        self.rng = random.Random(seed)
        self.passages = policy_passages()
        self.questions = policy_questions()
        self.families = gap_families()
        self.people = [self._person(n) for n in range(users)]
        # Activity differs a lot between people: the busiest asks ~2% of all questions, the quietest a handful.
        self.activity = [1 / (rank + 10) for rank in range(users)]
        self.family_weights = [1 / (rank + 2) ** 0.8 for rank in range(len(self.families))]
        self.picks = Picks()
        self.case_number = 0
        self._last_run: dict[str, dict[str, Any]] = {}

    def batches(self, size: int) -> Iterator[Batch]:
        starts = sorted(self.now - timedelta(days=self.days * self.rng.random()) for _ in range(self.count))
        batch = Batch()
        for n, started in enumerate(starts):
            self._add(batch, started, running=n >= self.count - 3)  # the newest few: still running
            if len(batch.runs) >= size:
                yield batch
                batch = Batch()
        if batch.runs:
            yield batch

    # --- one run and what it left behind -----------------------------------------------------------

    def _add(self, batch: Batch, started: datetime, *, running: bool) -> None:
        rng = self.rng
        person = rng.choices(self.people, self.activity)[0]
        reason = rng.choices(list(REASONS), list(REASONS.values()))[0]
        question = self._question(reason)
        shared = rng.random() < 0.3
        previous = self._last_run.get(person.id)
        follows_up = previous is not None and previous["place"] == "private" and not shared and rng.random() < 0.25
        key = previous["conversation_key"] if previous and follows_up else self._conversation(person, shared, started)
        run = self._run(person, reason, question, started, key, shared)
        if running:
            run |= {"status": "running", "reason": None, "finished_at": None, "owner": "pp-7f9c:4711", "trace": [],
                    "steps": 0, "exchange": None, "citations": None, "guards": None, "feedback": None,
                    "feedback_by": None, "feedback_comment": None}  # fmt: skip
        batch.runs.append(run)
        batch.ratings += self._ratings(run)
        self.picks.runs_per_user[person.id] = self.picks.runs_per_user.get(person.id, 0) + 1
        if running:
            return
        batch.deliveries.append(self._post(run))
        if reason in GIVE_UPS:
            earlier = [previous] if follows_up and previous else []
            self._case(batch, run, person, [*earlier, run])
        if reason == "pending_confirmation":
            batch.actions.append(self._action(run))
        if reason == "answered" and run["audience"] == EVERYONE and run["steps"] >= 3:
            self.picks.trace_run = run["id"]  # the newest such run: its trace is the page to time
        self._last_run[person.id] = run

    def _question(self, reason: str) -> str:
        rng = self.rng
        gap = reason == "not_covered" or (reason in GIVE_UPS and rng.random() < 0.5)
        if not gap:
            return rng.choice(self.questions)
        text = rng.choice(rng.choices(self.families, self.family_weights)[0])
        noise = rng.random()  # people type the same question differently: case, spaces, punctuation
        if noise < 0.1:
            return text.lower()
        if noise < 0.2:
            return text.rstrip("?")
        if noise < 0.25:
            return text.replace(" ", "  ", 1) + "??"
        return text

    def _run(
        self, person: Person, reason: str, question: str, started: datetime, key: str, shared: bool
    ) -> dict[str, Any]:
        rng = self.rng
        trace, answer, cited = self._trace(reason, question)
        model_steps = [s for s in trace if s["kind"] == "model"]
        input_tokens = sum(s.get("input_tokens", 0) for s in model_steps)
        output_tokens = sum(s.get("output_tokens", 0) for s in model_steps)
        latency = sum(s["latency_ms"] for s in trace) + rng.uniform(30, 120)
        guards = sorted({s["guard"] for s in trace if s.get("guard")})
        feedback = self._feedback(reason)
        roll = rng.random()
        audience = EVERYONE if roll < 0.95 else ["all", "hr"] if roll < 0.99 else ["all", "managers"]
        return {
            "id": "run_" + uuid.UUID(int=rng.getrandbits(128)).hex[:16],
            "conversation_key": key,
            "platform": person.platform,
            "user_id": person.id,
            "question": question,
            "status": "finished",
            "reason": reason,
            "started_at": started,
            "finished_at": started + timedelta(milliseconds=latency),
            "steps": len(model_steps),
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost_usd": input_tokens * PRICE_IN + output_tokens * PRICE_OUT,
            "latency_ms": latency,
            "model": MODEL,
            "trace": trace,
            "feedback": feedback,
            "feedback_by": person.id if feedback else None,
            "feedback_comment": "It quoted the old limit." if feedback == "not_helpful" and roll < 0.3 else None,
            "owner": "",
            "inbox_id": f"{person.platform}:Ev{rng.getrandbits(64):016X}",
            "exchange": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            if answer
            else None,
            "audience": audience,
            "place": "shared" if shared else "private",
            "citations": [{"title": p.title, "heading": p.heading, "source": p.source} for p in cited] or None,
            "guards": ",".join(guards),
        }

    def _ratings(self, run: dict[str, Any]) -> list[dict[str, Any]]:
        """Everyone's ratings of a run (run_feedback): the asker's, and in a shared place sometimes a reader's."""
        rated_at = run["finished_at"]
        ratings = []
        if run["feedback"]:
            ratings.append({"run_id": run["id"], "user_id": run["user_id"], "rating": run["feedback"],
                            "comment": run["feedback_comment"], "rated_at": rated_at})  # fmt: skip
        if run["place"] == "shared" and rated_at is not None and self.rng.random() < 0.02:
            reader = self.rng.choice(self.people).id
            if reader != run["user_id"]:
                rating = "helpful" if self.rng.random() < 0.7 else "not_helpful"
                ratings.append({"run_id": run["id"], "user_id": reader, "rating": rating, "comment": None,
                                "rated_at": rated_at})  # fmt: skip
        return ratings

    def _feedback(self, reason: str) -> str | None:
        roll = self.rng.random()
        if reason == "answered" and roll < 0.06:
            return "helpful" if roll < 0.042 else "not_helpful"
        if reason == "not_covered" and roll < 0.05:
            return "not_helpful" if roll < 0.04 else "helpful"
        return None

    # --- traces ---------------------------------------------------------------------------------------

    def _trace(self, reason: str, question: str) -> tuple[list[dict[str, Any]], str, list[Passage]]:
        """The steps, the answer (empty: none given) and the passages it cited."""
        rng, steps = self.rng, list[dict[str, Any]]()
        searches = {"answered": rng.choice((1, 1, 1, 2)), "not_covered": rng.choice((1, 1, 2)), "step_budget": 3,
                    "no_progress": 3, "token_budget": 2, "cost_budget": 2, "deadline": 1,
                    "pending_confirmation": 1}.get(reason, rng.choice((0, 1)))  # fmt: skip
        found: list[Passage] = []
        guarded = "repeat" if rng.random() < 0.8 else "search_cap"
        searched: list[str | None] = [None] * searches
        if reason == "answered" and rng.random() < 0.03:  # one more search, which a guard refused
            searched.append(guarded)
        for n, guard in enumerate(searched):
            if reason == "no_progress" and n > 0:
                guard = "repeat"
            hits = [] if guard or (reason == "not_covered" and rng.random() < 0.6) else rng.sample(self.passages, 3)
            steps.append(self._model_step(len(steps), tool_calls=True))
            steps.append(self._search_step(self._query(question, n), hits, guard))
            found += hits
        cited = found[: rng.choice((1, 1, 2, 3))] if reason == "answered" else []
        answer = {"answered": self._answer(cited), "not_covered": rng.choice(NOT_IN_POLICY)}.get(reason, "")
        if answer:
            steps.append(self._model_step(len(steps), text=answer))
        elif reason == "pending_confirmation":
            steps.append(self._model_step(len(steps), tool_calls=True))
            steps.append(self._ticket_step())
        elif reason in ("deadline", "model_error", "internal_error"):
            error = "timeout" if reason == "deadline" else "APIConnectionError: Connection error."
            steps.append({"kind": "model", "name": "model", "latency_ms": rng.uniform(2_000, 20_000), "error": error})
        elif reason == "policy_denied":
            steps.append(self._model_step(len(steps), tool_calls=True))
            steps.append({"kind": "tool", "name": "create_it_ticket", "latency_ms": 0.4, "call_id": _call_id(rng),
                          "arguments": json.dumps(_ticket_arguments(rng)),
                          "error": "Guests may not create tickets."})  # fmt: skip
        return steps, answer, cited

    def _query(self, question: str, n: int) -> str:
        words = [w for w in re.findall(r"[A-Za-z-]+", question) if len(w) > 3]
        return " ".join(words[n % 2 :][:4]) or question[:40]

    def _model_step(self, before: int, *, tool_calls: bool = False, text: str | None = None) -> dict[str, Any]:
        rng = self.rng
        input_tokens = int(1_900 + before * 700 + rng.uniform(0, 600))
        output_tokens = int(rng.uniform(18, 45) if tool_calls else rng.uniform(70, 260))
        step: dict[str, Any] = {
            "kind": "model",
            "name": SERVED_MODEL,
            "latency_ms": rng.uniform(500, 2_800),
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost_usd": input_tokens * PRICE_IN + output_tokens * PRICE_OUT,
            "stop_reason": "tool_calls" if tool_calls else "stop",
        }
        if text is not None:
            step["text"] = text
        return step

    def _search_step(self, query: str, hits: list[Passage], guard: str | None) -> dict[str, Any]:
        rng = self.rng
        step: dict[str, Any] = {
            "kind": "tool",
            "name": "search_policies",
            "latency_ms": rng.uniform(35, 320),
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0,
            "call_id": _call_id(rng),
            "arguments": json.dumps({"query": query}),
        }
        if guard is not None:  # refused before it ran: the model hears why
            return step | {"latency_ms": 0.2, "error": GUARD_OBSERVATIONS[guard], "guard": guard}
        results = [{"cite": cite_for(p), "source": p.source, "score": round(rng.uniform(0.45, 0.92), 3),
                    "text": p.text} for p in hits]  # fmt: skip
        content = json.dumps({"results": results}, ensure_ascii=False)
        return step | {"result_chars": len(content), "text": content[:1_000]}

    def _ticket_step(self) -> dict[str, Any]:
        arguments = _ticket_arguments(self.rng)
        return {"kind": "tool", "name": "create_it_ticket", "latency_ms": 0.0, "call_id": _call_id(self.rng),
                "arguments": json.dumps(arguments), "text": "Waiting for the requester to confirm."}  # fmt: skip

    def _answer(self, cited: list[Passage]) -> str:
        parts = []
        for passage in cited:
            sentence = re.split(r"(?<=[.!?])\s", passage.text.replace("\n", " "))[0]
            parts.append(f"{sentence[:240]} [{cite_for(passage)}]")
        return "Here is what the policy says. " + " ".join(parts) + " Ask me if you need the details."

    # --- what a run leaves behind ---------------------------------------------------------------------

    def _post(self, run: dict[str, Any]) -> dict[str, Any]:
        """The reply's outbox row: posted, except the odd one the platform kept refusing."""
        failed = self.rng.random() < 0.002
        at = run["finished_at"]
        channel, thread = run["conversation_key"].split(":", 2)[2].rsplit(":", 1)
        text = (run["exchange"] or [{}, {"content": "I've passed this to the helpdesk."}])[1]["content"]
        return _delivery(
            kind="post", case_number=None, destination=run["platform"], at=at, failed=failed, rng=self.rng,
            payload={"channel": channel, "thread": thread, "text": text[:400]},
            conversation_key=run["conversation_key"], inbox_id=run["inbox_id"],
        )  # fmt: skip

    def _case(self, batch: Batch, run: dict[str, Any], person: Person, runs: list[dict[str, Any]]) -> None:
        rng = self.rng
        self.case_number += 1
        number, at = self.case_number, run["finished_at"]
        _, tenant, rest = run["conversation_key"].split(":", 2)
        channel, thread = rest.rsplit(":", 1)
        batch.cases.append({
            "number": number, "origin": f"run:{run['id']}", "created_at": at, "reason": run["reason"],
            "user_id": person.id, "user_name": person.name, "user_email": person.email, "platform": person.platform,
            "tenant": tenant, "channel": channel, "thread": thread, "link": None,
            "conversation_key": run["conversation_key"], "run_id": run["id"], "question": run["question"],
            "reply_within": "one working day", "transcript": _transcript(run, runs),
        })  # fmt: skip
        destinations = rng.choices((["slack"], ["slack", "webhook"], ["email"]), (6, 3, 1))[0]
        for destination in destinations:
            roll = rng.random()
            batch.deliveries.append(
                _delivery(kind="case", case_number=number, destination=destination, at=at, rng=rng,
                          failed=roll < 0.025, retrying=0.025 <= roll < 0.035, superseded=0.035 <= roll < 0.04)
            )  # fmt: skip
        if len(runs) == 2 and run["audience"] == EVERYONE and runs[0]["audience"] == EVERYONE:
            self.picks.case_number = number

    def _action(self, run: dict[str, Any]) -> dict[str, Any]:
        rng = self.rng
        created = run["finished_at"]
        arguments = json.loads(run["trace"][-1]["arguments"])
        age = self.now - created
        if age < PENDING_TTL:
            state = "open"
        else:
            state = rng.choices(("done", "cancelled", "expired", "failed", "unknown", "executing"),
                                (55, 15, 25, 3, 1.5, 0.2))[0]  # fmt: skip
        decided = created + timedelta(seconds=rng.uniform(5, 600)) if state not in ("open", "expired") else None
        return {
            "id": uuid.UUID(int=rng.getrandbits(128)).hex,
            "run_id": run["id"],
            "conversation_key": run["conversation_key"],
            "requester": run["user_id"],
            "tool": "create_it_ticket",
            "call_id": run["trace"][-1]["call_id"],
            "arguments": arguments,
            "args_hash": hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest(),
            "text": f"Create an IT ticket: {arguments['summary']} ({arguments['urgency']})",
            "state": state,
            "created_at": created,
            "expires_at": created + PENDING_TTL,
            "decided_at": decided,
            "decider": run["user_id"] if decided else None,
            "executor": "pp-7f9c:4711" if state in ("done", "failed", "unknown", "executing") else None,
            "decided_item": f"slack:click:{rng.getrandbits(48):x}" if decided else None,
            "finished_at": decided + timedelta(seconds=1) if decided and state != "executing" else None,
            "result": {"status": "created", "ticket_id": f"IT-{rng.randint(1001, 99999)}"} if state == "done" else None,
            "platform_message": {"channel": run["conversation_key"].split(":")[2], "ts": f"{created.timestamp():.6f}"},
            "run_state": _run_state(run, arguments),
        }

    # --- people and places ---------------------------------------------------------------------------

    def _person(self, n: int) -> Person:
        rng = self.rng
        first = rng.choice(("Ana", "Ben", "Chloe", "Dev", "Elif", "Femi", "Greta", "Hiro", "Ines", "Jonas"))
        last = rng.choice(("Meyer", "Okafor", "Silva", "Nakamura", "Dubois", "Kowalski", "Larsen", "Rossi"))
        email = f"{first.lower()}.{last.lower()}{n}@northwind.example"
        if rng.random() < 0.65:
            return Person(f"U0{n:04d}{rng.getrandbits(20):05X}", f"{first} {last}", email, "slack", "T0NORTHWND")
        aad = uuid.UUID(int=rng.getrandbits(128))
        return Person(f"29:1{aad.hex}{rng.getrandbits(40):010x}", f"{first} {last}", email, "teams",
                      "72f988bf-86f1-41af-91ab-2d7cd011db47")  # fmt: skip

    def _conversation(self, person: Person, shared: bool, started: datetime) -> str:
        ts, millis = f"{started.timestamp():.6f}", int(started.timestamp() * 1000)
        if person.platform == "slack":
            channel = f"C0{self.rng.randrange(40):02d}POLICY" if shared else f"D{person.id[1:]}"
            return f"slack:{person.tenant}:{channel}:{ts}"
        if shared:
            return f"teams:{person.tenant}:19:{self.rng.randrange(40):032x}@thread.tacv2:{millis}"
        return f"teams:{person.tenant}:a:1{person.id[4:40]}:{millis}"


def _call_id(rng: random.Random) -> str:
    return f"call_{rng.getrandbits(96):024x}"


def _ticket_arguments(rng: random.Random) -> dict[str, str]:
    category, summary, urgency = rng.choice(TICKETS)
    return {"category": category, "summary": summary, "urgency": urgency}


def _delivery(
    *,
    kind: str,
    case_number: int | None,
    destination: str,
    at: datetime,
    rng: random.Random,
    failed: bool = False,
    retrying: bool = False,
    superseded: bool = False,
    payload: dict[str, Any] | None = None,
    conversation_key: str | None = None,
    inbox_id: str | None = None,
) -> dict[str, Any]:
    """One outbox row in a state the outbox worker leaves alone: settled, or retrying later than the benchmark runs."""
    state = "failed" if failed else "pending" if retrying else "superseded" if superseded else "delivered"
    attempts = 8 if failed else 3 if retrying else 1
    return {
        "kind": kind, "case_number": case_number, "destination": destination, "payload": payload,
        "conversation_key": conversation_key, "inbox_id": inbox_id, "coalesce_key": None, "state": state,
        "attempts": attempts, "next_attempt_at": at + timedelta(days=400) if retrying else at,
        "claimed_by": None, "claimed_at": None,
        "last_error": "HTTP 503 from the helpdesk webhook" if failed or retrying else None,
        "external_ref": f"{rng.getrandbits(40):x}" if state == "delivered" else None,
        "delivered_at": at + timedelta(seconds=rng.uniform(0.2, 3)) if state == "delivered" else None,
        "created_at": at, "idempotency_key": str(uuid.UUID(int=rng.getrandbits(128))),
    }  # fmt: skip


def _transcript(ended: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """As ``bot.helpdesk.desk`` writes it: budgets, totals and every run of the conversation step by step."""
    return {
        "version": 1,
        "reason": ended["reason"],
        "detail": None,
        "budgets": {
            "limits": {"steps": 6, "tokens": 20_000, "seconds": 20.0, "cost_usd": 0.05},
            "used": {
                "steps": ended["steps"],
                "tokens": ended["input_tokens"] + ended["output_tokens"],
                "seconds": round(ended["latency_ms"] / 1000, 2),
                "cost_usd": round(ended["cost_usd"], 6),
            },
        },
        "totals": {
            "runs": len(runs),
            "steps": sum(r["steps"] for r in runs),
            "tokens": sum(r["input_tokens"] + r["output_tokens"] for r in runs),
            "cost_usd": round(sum(r["cost_usd"] for r in runs), 6),
        },
        "runs": [
            {
                "run_id": r["id"],
                "started_at": r["started_at"].isoformat(),
                "question": r["question"],
                "reason": r["reason"],
                "model": r["model"],
                "steps": r["steps"],
                "input_tokens": r["input_tokens"],
                "output_tokens": r["output_tokens"],
                "cost_usd": r["cost_usd"],
                "latency_ms": round(r["latency_ms"], 1),
                "trace": r["trace"],
            }
            for r in runs
        ],
        "actions": [],
    }


def _run_state(run: dict[str, Any], arguments: dict[str, str]) -> dict[str, Any]:
    """The frozen agent state a pending action keeps (``RunState.to_dict``): the whole conversation so far."""
    search = next((s for s in run["trace"] if s["name"] == "search_policies"), {"text": "", "call_id": "call_0"})
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": run["question"]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": search["call_id"], "type": "function",
         "function": {"name": "search_policies", "arguments": search.get("arguments", "{}")}}]},
        {"role": "tool", "tool_call_id": search["call_id"], "content": (search.get("text") or "") * 4},
        {"role": "assistant", "content": None, "tool_calls": [{"id": run["trace"][-1]["call_id"], "type": "function",
         "function": {"name": "create_it_ticket", "arguments": json.dumps(arguments)}}]},
    ]  # fmt: skip
    return {
        "version": 1, "run_id": run["id"], "user": {"id": run["user_id"], "name": "", "email": None, "groups": ["all"],
        "is_guest": False}, "conversation_key": run["conversation_key"], "messages": messages, "question_index": 1,
        "spent": {"steps": run["steps"], "input_tokens": run["input_tokens"], "output_tokens": run["output_tokens"],
                  "cost_usd": run["cost_usd"]},
        "seen_calls": [], "searches": 1, "empty_searches": 0, "failed_searches": 0, "repeat_turns": 0,
        "sources": {}, "pending_turn": {"call_id": run["trace"][-1]["call_id"], "results": {}}, "audience": ["all"],
    }  # fmt: skip
