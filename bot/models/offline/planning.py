"""Understanding a new question for the offline model: small talk, the parts to search, or an IT problem to ticket."""

from __future__ import annotations

import re
from collections.abc import Sequence

from bot.models.offline.text import content_words, error_codes, shorten, unique

MAX_PARTS = 3
MIN_QUERY, MAX_QUERY = 2, 300  # the search tool's schema limits
MAX_DETAILS = 2000  # and the ticket tool's

_WH = r"(?:what|when|where|which|who|whom|whose|why|how)"
_AUX = r"(?:am|is|are|was|were|do|does|did|can|could|will|would|shall|should|may|might|must|have|has)"
_SUBJECT = (
    r"(?:i|we|you|they|he|she|it|there|my|our|your|the|a|an|this|that|these|those|employees?|staff"
    r"|contractors?|managers?|someone|anyone|people)"
)
_ASKS_ANYWHERE = re.compile(rf"\b{_WH}\b", re.I)
# "does sitting here count as work hours", "is working from a cafe ok": an activity as the subject
_ACTIVITY = r"(?:do|does|did|is|are|can|could|will|would|should)\s+\w{3,}ing\b"
_QUESTION_START = re.compile(rf"^(?:{_WH}\b|{_AUX}\s+{_SUBJECT}\b|{_ACTIVITY})", re.I)
_AND_QUESTION = re.compile(rf",?\s+and\s+(?={_WH}\b|{_AUX}\s+{_SUBJECT}\b|{_ACTIVITY})", re.I)
_SEPARATORS = re.compile(r";\s+|\s+and also\s+|(?<=[.!?])\s+also\b,?\s*|,\s+also,\s+", re.I)
_GREETING = re.compile(r"^(?:hi|hello|hey|hiya|good (?:morning|afternoon|evening))\b(?:\s+\w+)?\s*[,.!:]+\s*", re.I)
_THANKS_TAIL = re.compile(r"[\s,.!]*\b(?:thanks|thank you|thx|cheers)\b[\s.!]*$", re.I)
_SMALL_TALK = re.compile(
    r"^(?:hi|hello|hey|thanks|thank you|thx|cheers|ok|okay|great|cool|bye|good (?:morning|afternoon|evening))"
    r"(?:\s+\w+)?[\s.!]*$",
    re.I,
)
_MENTION = re.compile(r"<[@#!][^>]*>")
_LEADING_CONNECTOR = re.compile(r"^(?:and|also|so|plus|then)\b[,\s]*", re.I)

_TICKET_REQUEST = re.compile(
    r"\b(?:raise|open|create|log|file|submit|make|lodge)\s+(?:me\s+)?(?:an?\s+|the\s+)?"
    r"(?:it\s+|support\s+|helpdesk\s+|help desk\s+)?(?:ticket|case|incident|support request)\b"
    r"|\b(?:need|want|get)\s+(?:me\s+)?(?:an?\s+)?(?:it\s+|support\s+)?ticket\b",
    re.I,
)
_PROBLEM = re.compile(
    r"not working|n't work|does not work|do not work|stopped working|won't (?:start|boot|turn on|connect|load"
    r"|open|charge|print)|\bbroken\b|\bbroke\b|\b(?:can't|cant|cannot|unable to) (?:log ?in|sign ?in|connect"
    r"|access|open|print|get into)|\berror\b|\bcrash|lost my|\bi(?:'ve| have)? lost\b|\bstolen\b|locked out"
    r"|forgot my password"
    r"|reset my password|\bhacked\b|phishing|ransomware|\bbreach\b|\bvirus\b|malware|no internet"
    r"|keeps (?:crashing|disconnecting|freezing|dropping)|\bfrozen\b|need access|(?:don't|do not) have access"
    r"|\b(?:got |been )?(?:nicked|pinched)\b|\bclicked (?:a|on a|the) (?:\w+ )?link"
    r"|\b(?:didn'?t|did not|never) (?:trigger|request|ask for)\b|\bfake (?:login|sign-?in|site|page|website|email)"
    r"|\b(?:typed|entered|gave away) my password"
    r"|\b(?:cracked|smashed|shattered|spilled|spilt)\b|\b(?:is|went|gone|it's|its) dead\b",  # damage
    re.I,
)
_HYPOTHETICAL = re.compile(
    r"\b(?:what happens if|what should i do if|what do i do if|what to do if|in case|if (?:my|i|a|an|the"
    r"|someone|your|our|you)|polic(?:y|ies)|allowed|permitted|entitled|rules?)\b",
    re.I,
)
_HELP_REQUEST = re.compile(
    r"\b(?:can|could|would|will)\s+(?:someone|somebody|anyone|you|it|IT)\s+(?:please\s+)?(?:look|help|fix|check|sort"
    r"|take a look|have a look)|\bplease help\b|\bhelp me\b",
    re.I,
)
# "ok to paste a customer's error logs into chatgpt?", "am i allowed to ...": asking whether something may be
# done is a question about the policy, whatever problem words it holds ("error", "help me debug").
_ASKS_PERMISSION = re.compile(
    r"^(?:(?:so|but|and|also|quick q(?:uestion)?)[,:]?\s+)?(?:is it |would it be |it's |its |is that |would that be )?"
    r"(?:ok|okay|fine|alright|all right|acceptable|allowed|permitted)\s+(?:to|if)\b"
    r"|^(?:am i|are we|is (?:someone|anyone|an? \w+))\s+(?:allowed|permitted)\s+to\b",
    re.I,
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|im|i've|my|me|mine|we|we're|our|us)\b", re.I)
_ASKS_MEANING = re.compile(  # "what does error NG-412 mean?", also as one part of a longer question
    r"\b(?:what|which)\s+(?:does|do|is|are)\b[^.!?]*?\b(?:mean|means|meaning|stand for|refer to|error|code)\b[^.!]*\?",
    re.I,
)
_CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.I))
    for name, pattern in (
        (
            "security_incident",
            r"stolen|theft|lost my|phishing|ransomware|malware|virus|hacked|breach"
            r"|compromised|suspicious|data leak|did(?:n'?t| not) trigger|fake (?:login|sign-?in|site|page|website)"
            r"|(?:typed|entered) my password",
        ),
        ("network_vpn", r"\bvpn\b|wi-?fi|network|internet|connection|disconnect"),
        (
            "accounts_passwords",
            r"password|locked out|log ?in|sign ?in|\bmfa\b|\b2fa\b|two-factor|authenticator"
            r"|account",
        ),
        ("access", r"\baccess\b|permission|shared drive|folder|repositor"),
        (
            "hardware",
            r"laptop|monitor|keyboard|mouse|printer|screen|battery|dock|charger|headset|webcam|phone"
            r"|hardware|device",
        ),
        (
            "software",
            r"software|\bapp\b|application|install|update|outlook|excel|\bword\b|teams|slack|zoom"
            r"|browser|crash|licen[cs]e",
        ),
    )
)
_URGENCY: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("critical", re.compile(r"\bbreach|ransomware|data leak|\bhacked\b", re.I)),
    ("low", re.compile(r"not urgent|no rush|whenever|low priority|when you (?:get|have) a (?:chance|moment)", re.I)),
    (
        "high",
        re.compile(
            r"urgent|\basap\b|a\.s\.a\.p|immediately|emergency|(?:can't|cannot|unable to) work"
            r"|\bstolen\b|lost my (?:laptop|phone)|right now",
            re.I,
        ),
    ),
)


# "what can you do?", "help": a question about the assistant, which no policy answers (nor is it a knowledge gap)
_ABOUT_ME = re.compile(
    r"^(?:/?help(?: me)?|what (?:can|do) you do|what are you|who are you|how does this work|how do i use (?:you|this)"
    r"|what can i ask(?: you)?(?: about)?|what do you know(?: about)?"
    r"|(?:what|which) (?:policies|policy documents|documents|docs|topics|sections|subjects) (?:do|can) you"
    r" (?:have|know(?: about)?|cover|search|answer(?: questions)? (?:about|on)|help(?: me)? with)"
    r"|(?:(?:can|could) you |please )?(?:list|show(?: me)?) (?:all )?(?:the |your )?"
    r"(?:policies|policy documents|documents|sections|topics)(?: you (?:have|know|cover|search))?)[\s?!.]*$",
    re.I,
)
# "quick q", "can I ask you something?": the question is still to come
_ABOUT_TO_ASK = re.compile(
    r"^(?:quick (?:q|question)|(?:i have|i've got|got) a (?:quick )?question"
    r"|can i ask (?:you )?(?:something|a question)|question)[\s?!.:]*$",
    re.I,
)
# "thanks, that helps", "ok got it", "perfect, thank you!": the end of an exchange, nothing to look up
_CLOSING = re.compile(
    r"^(?:(?:thanks|thank\s*(?:you|u)|so much|ty|thx|cheers|much appreciated|appreciate it|ok(?:ay)?|got it|great"
    r"|perfect|awesome|cool|nice|brilliant|super|that helps|that helped|(?:very )?helpful|that answers it|all good"
    r"|no|nope|that'?s all|that is all|nothing else|sounds good|will do|noted|understood|bye|see you"
    r"|have a (?:good|nice) (?:day|one))(?:[\s,.!]+|$))+$",
    re.I,
)
_THANKED = re.compile(r"\b(?:thanks|thank\s*(?:you|u)|ty|thx|cheers|appreciate[d]?|helps|helped|helpful)\b", re.I)
CAPABILITIES = (
    "I answer questions about the company's policies (leave, expenses, travel, remote work, IT and security, and "
    "more) from the policy documents, and say which section each answer comes from. Tell me about an IT problem "
    'and I can raise a ticket once you confirm it. Say "talk to the helpdesk" to reach a person.'
)


def small_talk(cleaned: str, sections: Sequence[str] = ()) -> str | None:
    """The reply to a greeting, a thank-you, a question about the assistant or an empty message; None when the
    message asks something the policies may answer. ``sections``: those the asker's documents are in, which
    "what policies do you have?" is told."""
    if _ABOUT_ME.match(cleaned):
        return f"{CAPABILITIES} {_covering(sections)}" if sections else CAPABILITIES
    if _ABOUT_TO_ASK.match(cleaned):
        return "Sure, what's your question?"
    if _CLOSING.match(cleaned) or _only_symbols(cleaned):  # "👍" after an answer
        return _WELCOME if _THANKED.search(cleaned) else "Glad that helped. Ask me anything else about our policies."
    if cleaned and not _SMALL_TALK.match(cleaned):
        return None
    if _THANKED.match(cleaned):  # "thanks Anna"
        return _WELCOME
    return "Hello! Ask me anything about our company policies, or tell me about an IT problem."


_WELCOME = "You're welcome! Ask me anything else about our policies."


def _covering(sections: Sequence[str]) -> str:
    listed = sections[0] if len(sections) == 1 else f"{', '.join(sections[:-1])} and {sections[-1]}"
    noun = "this section" if len(sections) == 1 else "these sections"
    return f"The documents I can search for you are in {noun}: {listed}."


def _only_symbols(text: str) -> bool:
    """Emoji or other symbols and nothing to read ("👍", "🙏"): punctuation alone ("?!") is not one."""
    return bool(text) and not re.search(r"[^\W_]", text) and any(ord(char) > 0x2000 for char in text)


def clean_question(text: str) -> str:
    """The question without mentions, greetings and sign-offs, on one line."""
    text = _MENTION.sub(" ", text.replace("’", "'"))
    text = " ".join(text.split())
    text = _GREETING.sub("", text)
    stripped = _THANKS_TAIL.sub("", text)
    return (stripped or text).strip()


def opens_like_question(text: str) -> bool:
    """Starts like a question ("What ...", "Can I ..."), so it reads as one even without a "?"."""
    return bool(_QUESTION_START.match(text))


def split_question(text: str) -> list[str]:
    """Split a multi-part question conservatively: ``?``, ``;``, "and also", "Also," and ``and`` + question."""
    pieces = [clean_question(text)]
    for splitter in (_split_question_marks, _SEPARATORS.split, _split_on_and, _split_elliptical):
        pieces = [piece for whole in pieces for piece in splitter(whole)]
    parts = unique(shorten(_tidy(piece), MAX_QUERY) for piece in pieces if content_words(piece))
    if len(parts) > MAX_PARTS:
        parts = [*parts[: MAX_PARTS - 1], " ".join(parts[MAX_PARTS - 1 :])]
    return parts or [text]


def _split_question_marks(text: str) -> list[str]:
    return re.split(r"(?<=\?)\s+", text)


def _split_on_and(piece: str) -> list[str]:
    """Only "X and Y" where both sides ask, each about something of its own: "What is A and can I B?",
    "flying to Toronto, what class can I book and how much per diem do I get?", but not "A and B".
    Each side keeps the question mark the whole ended with."""
    first = _AND_QUESTION.search(piece)
    if first is None:
        return [piece]
    left = re.split(r",\s+|\s+-+\s+|(?<=[.!?])\s+", piece[: first.start()])
    if not any(opens_like_question(_tidy(clause)) for clause in left):
        return [piece]
    pieces = _AND_QUESTION.split(piece)
    if not all(content_words(part) for part in pieces):
        return [piece]  # "who do i tell and what do they need from me?": the second asks about the first
    if not piece.rstrip().endswith("?"):
        return pieces
    return [p if p.rstrip().endswith(("?", ".", "!")) else f"{p.rstrip(' ,')}?" for p in pieces]  # each still asks


_ELLIPTICAL = re.compile(
    r"^(?P<opener>what(?:'s| is| are)|how (?:much|many|long) (?:is|are)|which (?:is|are))\s+(?P<first>.+?),?\s+and\s+"
    r"(?P<second>(?:the|my|your|our|a|an)\s+.+)$",
    re.I,
)


def _split_elliptical(piece: str) -> list[str]:
    """ "What's the taxi limit per ride, and the mileage rate if I drive?": the second question leaves
    out "what's"; split only after a comma, where "the X and the Y" is not one subject."""
    match = _ELLIPTICAL.match(piece)
    if match is None or "," not in piece[: match.start("second")]:
        return [piece]
    opener = match["opener"]
    return [f"{opener} {match['first'].rstrip(' ,')}?", f"{opener.lower()} {match['second']}"]


def _tidy(piece: str) -> str:
    piece = _LEADING_CONNECTOR.sub("", piece.strip(" ,;.")).strip()
    return piece[:1].upper() + piece[1:]


def is_problem_report(text: str) -> bool:
    """A report of something broken, or an explicit ticket request; not "what is the policy if ..."."""
    text = text.replace("’", "'")
    if _TICKET_REQUEST.search(text):
        return True
    if _ASKS_PERMISSION.search(text):
        return False
    if _ASKS_MEANING.search(text):  # "what does error NG-412 mean?" asks the policy, reports nothing
        return False
    if opens_like_question(text) and not _FIRST_PERSON.search(text):  # "is POL-SEC-004 about phishing?"
        return False
    return bool(_PROBLEM.search(text)) and not _HYPOTHETICAL.search(text)


def asks_for_ticket(text: str) -> bool:
    """An explicit request for a ticket ("can you raise a ticket?", "need a ticket")."""
    return bool(_TICKET_REQUEST.search(text))


# "raise it", "go ahead and open one", "yes please do": a ticket asked for about what was said before
_TICKET_FOR_THAT = re.compile(
    r"\b(?:raise|open|create|log|file|submit|lodge|make)\s+(?:it|one|that|this)\b|\bgo ahead\b"
    r"|^\W*(?:(?:yes|yeah|yep|ok|okay)\W+)?please do\b",
    re.I,
)


def asks_for_ticket_about_earlier(text: str) -> bool:
    """A ticket asked for with no problem of its own ("please raise a ticket for that", "yes, raise it"): it is
    about the problem reported before."""
    if not (asks_for_ticket(text) or _TICKET_FOR_THAT.search(text)):
        return False
    return not is_problem_report(_TICKET_FOR_THAT.sub(" ", _TICKET_REQUEST.sub(" ", text)))


def is_problem_clause(clause: str) -> bool:
    """One clause of a message that reports a problem or asks for help with it, rather than asking."""
    if _TICKET_REQUEST.search(clause):
        return True
    if _ASKS_PERMISSION.search(clause.replace("’", "'")):  # "ok to ... to help me debug?" asks, not reports
        return False
    if _HELP_REQUEST.search(clause):
        return True
    if opens_like_question(clause):
        return False
    if clause.endswith("?") and (_ASKS_ANYWHERE.search(clause) or not _FIRST_PERSON.search(clause)):
        return False  # "got 5 prompts i didn't trigger??" reports; "... what should i try?" asks
    return is_problem_report(clause)


def names_error_code(text: str) -> bool:
    """ "NG-809": a code the policies may explain, worth looking up even in a problem report."""
    return bool(error_codes(text))


def ticket_arguments(message: str, problem: str = "", related: str = "") -> dict[str, str]:
    """create_it_ticket arguments inferred from the user's words, every value from the tool's enums;
    category and summary come from the ``problem`` clauses when the message also asks something. When
    the words name no category, ``related`` (the answer given beside the ticket, with its cites: "NG-412"
    is explained in the Remote Access and VPN Standard) may."""
    text = message.replace("’", "'")
    about = (problem or message).replace("’", "'")
    found = (next((name for name, pattern in _CATEGORIES if pattern.search(t)), None) for t in (about, text, related))
    return {
        "category": next((category for category in found if category), "other"),
        "summary": _summary(problem, message),
        "urgency": next((level for level, pattern in _URGENCY if pattern.search(text)), "normal"),
        "details": shorten(message, MAX_DETAILS),
    }


def _summary(problem: str, message: str) -> str:
    """The problem clauses' summary; the whole message's when they only ask for a ticket."""
    summary = ticket_summary(problem or message)
    return ticket_summary(message) if problem and summary.startswith(_GENERIC_SUMMARY) else summary


_GENERIC_SUMMARY = "IT support request"


def ticket_summary(message: str, limit: int = 120) -> str:
    """The first clauses that describe the problem, without "please raise a ticket", on one line."""
    clauses = re.split(r"(?<=[.!?:;])\s+|,\s+", clean_question(message))
    kept = [clause.strip(" ,;:.") for clause in clauses if clause.strip() and not _TICKET_REQUEST.search(clause)]
    kept = [clause for clause in kept if not opens_like_question(clause)] or kept  # "how do I fix it?" says nothing
    summary = _tidy(", ".join(part for part in kept[:2] if part)).rstrip(".!")
    if len(summary) < 5:  # the tool's schema asks for at least five characters
        summary = f"{_GENERIC_SUMMARY}: {summary}".rstrip(": ")
    return shorten(summary, limit)
