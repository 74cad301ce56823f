"""Employee questions a policy bot cannot always answer, by topic: what SIMILAR_WORDING was measured on.

Written as people type into chat (short, loose, some with no question mark); each topic's first question
is how it is most often asked.
"""

from __future__ import annotations

TOPICS: dict[str, tuple[str, ...]] = {
    "pets": (
        "can I bring my dog to the office?",
        "are pets allowed at work",
        "Is it OK to bring a dog into the office",
        "dogs in the office policy",
        "can my cat come to work with me",
    ),
    "paternity leave": (
        "how much paternity leave do I get?",
        "paternity leave length",
        "how many weeks of paternity leave",
        "what is the parental leave policy for new fathers",
        "time off when my partner has a baby",
    ),
    "own laptop": (
        "can I use my personal laptop for work?",
        "is it ok to use my own laptop",
        "using a personal computer for work",
        "BYOD policy for personal devices",
    ),
    "working abroad": (
        "can I work remotely from another country?",
        "am I allowed to work abroad for a few weeks",
        "working from abroad policy",
        "can I work from Spain for a month",
    ),
    "taxis": (
        "how do I claim back a taxi fare?",
        "can I expense a taxi",
        "reimbursement for an Uber to the airport",
        "are taxi rides reimbursed",
    ),
    "parking": (
        "parking at HQ",
        "where can I park at headquarters",
        "is there parking at the main office",
        "car park at head office",
    ),
    "gym": (
        "gym membership reimbursement",
        "does the company pay for the gym",
        "is there a gym allowance",
        "fitness subsidy",
    ),
    "wedding leave": (
        "wedding leave",
        "do I get time off for my wedding",
        "days off when I get married",
        "marriage leave",
    ),
    "sick child": (
        "what if my child is sick",
        "can I take a day off to look after my sick kid",
        "leave to care for an ill child",
        "time off when my son is ill",
    ),
    "payday": (
        "when is payday",
        "what day do we get paid",
        "when is salary paid each month",
        "pay date",
    ),
    "password": (
        "how do I reset my password",
        "forgot my password",
        "password reset",
        "I can't log in, reset password",
    ),
    "jury service": (
        "jury duty leave",
        "I've been called for jury service, is it paid",
        "time off for jury duty",
        "do I get paid during jury service",
    ),
    "sabbatical": (
        "can I take a sabbatical?",
        "is there a sabbatical policy after five years",
        "unpaid career break for a few months",
    ),
    "home office": (
        "will the company pay for a desk for my home office?",
        "home office equipment allowance",
        "can I expense a monitor for working from home",
    ),
    "bereavement": (
        "how many days off when a family member dies?",
        "bereavement leave",
        "compassionate leave for a funeral",
    ),
    "phone": (
        "do I get a company phone?",
        "can I expense my mobile phone bill",
        "work phone allowance",
    ),
}

EVERY_QUESTION = tuple((topic, question) for topic, questions in TOPICS.items() for question in questions)
# A week of gaps: the first three wordings of five topics, fifteen (topic, question) pairs.
WEEK = tuple(
    (topic, question)
    for topic in ("pets", "sabbatical", "home office", "bereavement", "phone")
    for question in TOPICS[topic][:3]
)
