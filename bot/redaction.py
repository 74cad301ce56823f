"""Keep secrets out of anything a human or another system will read: transcripts, webhooks, email.

Two nets: the exact values of every secret PolicyPal was configured with, and the shapes of common
credentials (API keys, bot tokens, bearer and basic auth, ``Authorization:`` headers of any scheme with every
parameter of Digest's, ``Cookie:`` headers and curl's ``-b``/``-u``, mysql's ``-pSECRET`` and ``--password
SECRET``, sshpass's ``-p``, ``docker login``'s and ``az login``'s ``-p``/``--password``, ``htpasswd -b``'s last
argument, API Management's subscription key, passwords in URLs, storage keys and signatures in
connection strings and signed URLs, JWTs, private keys, ``password=...``), so a token a user pasted into a
question is caught too. Mapping keys that name a secret have every string inside their value replaced, however
deep; numbers stay (they are counts such as ``tokens`` or rules such as ``password_min_length``).

After ``password:`` or ``passphrase:`` (or a spaced ``password = ``) the value goes up to the end of its
line, a closing quote, or a sentence end (``.``, ``!`` or ``?`` then a space; the mark goes with it): a
passphrase is several words ("correct horse battery staple"), and an apostrophe inside a word ("don't")
does not end it. An unspaced ``DB_PASSWORD=x`` is a shell word: only ``x`` goes. After any other
``api_key=...`` the value goes; a PIN read out in groups ("pin: 42 17", "4217 9921abc") goes whole, not its first
group only.
After ``Authorization: Bearer`` (or another known scheme) the credential goes whatever it looks like.

A bare label may head a field of a policy ("Password: at least 14 characters, changed every 90 days"), so a
value that reads as a rule stays: several words, opening with a word of rules or a count ("14"), holding two
words of rules (must, not, at least, characters, days, changed, ...), none shaped like a credential. A
password someone gives comes first ("password: sunshine, it must not expire" goes), and a passphrase is
arbitrary words ("correct horse battery staple" goes). "my password is:" only ever introduces a value.

A label ending its line: after "password is:" the next line holding text is the value, whole, even in a code
fence or a quote; after a bare "password:" it is a heading ("change your password:" above a list) and its next
line goes only if it is one word shaped like a credential.

After "password is ..." the word goes too, unless it is one of the words people use to describe a password
("not", "expired", "wrong", ...): leaking "my password is sunshine" is worse than reading "my password is
[redacted]" for an odd word.
After the looser "password - ..." or "password for wifi is ..." only a value that looks like a credential
does (a digit, a symbol, a capital inside, or 20 characters and more), so "reset your password - see the
portal" and "the password for guests is rotated monthly" stay.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
HIDDEN_PASSWORD = "***"  # how SQLAlchemy shows a URL's password (render_as_string(hide_password=True))
MIN_SECRET_CHARS = 6  # shorter configured values would redact ordinary words
MIN_PIN_CHARS = 4  # "my password is 1234" is a secret; "is 2" or "is a" is prose
LONG_SECRET_CHARS = 20  # a single "word" this long after "password is" is a passphrase, not prose
TRACE_VALUE_CHARS = 8_000  # each string of a stored trace step (arguments, result preview, error), marker included
_CUT_MARKER_ROOM = 64  # "…[cut: N characters, M not stored]" for any N a process can hold

# A name is matched from the start of its dotted or underscored chain only: tried again after every dot, a
# pasted "a.a.a..." of 40,000 characters took minutes.
_NAME_START = r"(?<![a-z0-9])(?<![a-z0-9][_.-])"
# "password", "DB_PASSWORD", "db.password", and glued as libpq and Azure spell it (PGPASSWORD, MicrosoftAppPassword).
_PASSWORD_NAME = r"(?:[a-z0-9]+[_.-])*(?:[a-z0-9]*(?:password|passwd)|passphrase|passcode|pwd)"
# Where a value after a label ends: its line's end, a closing quote, or a sentence end (the mark goes with it).
_CLAUSE_END = r"(?=[\"`]|'(?![a-z])|(?<=[.!?])\s|$)"
_CLAUSE = re.compile(rf"(?im)[^\r\n]+?{_CLAUSE_END}")
# Any name a value is given under: a password's, a PIN's, an API key's, a token's (OPENAI_API_KEY, auth_token).
_SECRET_NAME = (
    rf"(?:{_PASSWORD_NAME}|(?:[a-z0-9]+[_.-])*"
    r"(?:pin|secret[_ -]?(?:access[_ -]?)?key|secret|client[_ -]?secret|api[_ -]?key|access[_ -]?token|token))"
)
# Groups as a PIN is read out ("42 17"), each a word opening with a digit ("4217 9921abc": the letters are the
# PIN's too), up to a space, a mark or a quote.
_DIGIT_GROUP = r"\d[^\s.,;:!?)\]\"'`]*"
_DIGIT_GROUPS = rf"{_DIGIT_GROUP}(?:[ \t]+{_DIGIT_GROUP})+"
# A few words saying what the secret opens, before "is": "password for the Okta portal is".
_OPENS = r"(?:\s+(?:for|on|to|of|at)(?:\s+(?!is\b)[\w.@'-]+){1,3})?"

_PATTERNS = [
    # A private key up to its end line or, pasted without one, through its header and base64 lines.
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----(?:.*?-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:\s+(?:[A-Za-z0-9+/]{16,}={0,2}|=[A-Za-z0-9+/]{4}|(?:Proc-Type|DEK-Info|Version|Comment):[^\r\n]*))*)",
        re.S,
    ),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),  # OpenAI and compatible API keys
    re.compile(r"\bxox[abcoeprs]-[A-Za-z0-9-]{8,}"),  # Slack bot/user/client/refresh tokens
    re.compile(r"\bxapp-[A-Za-z0-9-]{8,}"),
    # Slack incoming webhooks and Workflow Builder's webhooks and triggers: the URL is the key.
    re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/]+"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"),  # GitHub fine-grained
    re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe
    re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),  # GitLab
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),  # Google API key
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key id, long-lived or temporary
    re.compile(r"\bATATT[A-Za-z0-9_=-]{16,}"),  # Atlassian API token
    re.compile(r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{32,}"),  # SendGrid: "SG.", a 22-char id, a 43-char secret
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),  # Hugging Face
    re.compile(r"\bglsa_[A-Za-z0-9]{24,}_[A-Fa-f0-9]{8,}"),  # Grafana service account: 32 alphanumerics, "_", 8 hex
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWT
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{12,}"),
]
# "scheme://user:password@host": keep the scheme, user and host, drop the password. The password runs to
# the last "@" before the path, so one holding an unencoded "@" (p@ss) goes whole. A scheme is read from its
# first character only, as a name is (_NAME_START).
_URL_PASSWORD = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://[^\s:/@]*):([^\s/?#]+)@")
# Azure's AccountKey= and SharedAccessKey=, a SAS URL's sig=, a presigned URL's signature, API Management's
# ?subscription-key=: each is the key.
_SIGNED = re.compile(
    r"(?i)(?<![a-z0-9-])"
    r"((?:AccountKey|SharedAccessKey|sig|X-Amz-Signature|X-Goog-Signature|subscription-key)=)([^\s;&\"'<>]+)"
)
# Azure API Management's key header, as a header, curl's -H, or a JSON key (escaped too, inside a JSON string).
# The key goes if it looks like one: "Ocp-Apim-Subscription-Key: required" is a line of API docs.
_APIM_KEY = re.compile(r"(?i)\b(ocp-apim-subscription-key(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?)([^\s\"'\\,;]+)")
# The rest of a shell command up to the end of its line or of its shell command, quoted arguments and "\" line
# continuations included. Read to its end in one go: the options are found inside it, so no command is scanned
# again from each later word.
_COMMAND_REST = r"[ \t](?:'[^'\r\n]*'|\"[^\"\r\n]*\"|\\(?:\r?\n|[^\r\n])|[^\r\n;&|'\"\\])*"
# A mysql or mariadb command (mysqldump, mysqladmin, ...): its -p option holds the password glued to it
# ("-pSECRET"), its --password option the next word. A lone "-p" prompts for it, and "-P 3306" is the port.
_MYSQL_COMMAND = re.compile(rf"(?<![\w-])(?:mysql|mariadb)[\w-]*{_COMMAND_REST}")
# One shell word, quoted or not, given as an option's value; not a mark ending a sentence ("-p," or "-p.").
_OPTION_VALUE = r"((?![.,;:!?)]*(?:\s|$))(?:'[^'\r\n]*'|\"[^\"\r\n]*\"|[^\s'\"`])+)"
# "-pSECRET", "-p'pass word'", "--password SECRET": the option kept, the password dropped. "-p prod" stays: mysql
# reads a spaced -p as "prompt" and "prod" as the database ("mysql -u root -p prod" is the manual's idiom);
# whoever writes "--password X" means X as the password, and hiding a database name there costs little.
_MYSQL_PASSWORD = re.compile(rf"(?<!\S)(-p|--password[ \t]+(?![-\\])){_OPTION_VALUE}")
# sshpass's "-p SECRET" or "-pSECRET", after sshpass's own options only: in "sshpass -f pw ssh -p 2222 host" the
# "-p" is ssh's port.
_SSHPASS_PASSWORD = re.compile(rf"(?<![\w-])(sshpass(?:[ \t]+-(?:v|e\w*|P[ \t]*\S+))*[ \t]+-p[ \t]*){_OPTION_VALUE}")
# Words that follow an option named in a sentence about it ("docker login -p is insecure", "htpasswd -nb puts it
# in ps"), where a command would have its value.
_OPTION_PROSE = (
    r"(?i:is|are|was|were|and|or|then|but|if|when|to|in|on|for|with|as|of|not|also|only|still|instead|flag|flags"
    r"|option|argument|shows|puts|leaves|exposes|prints|stores|saves|writes|keeps|prompts|asks|reads|takes|works)"
    r"(?![^\s.,;:!?)])"
)
_PROSE_WORD = re.compile(_OPTION_PROSE)
# "docker login" and "az login" (and "az acr login"): "-p SECRET", "-pSECRET" and "--password SECRET" give the
# password ("--password=SECRET" is an assignment, below). A lone "-p", "--password-stdin" and "-p is ..." stay.
_LOGIN_COMMAND = re.compile(rf"(?<![\w-])(?:docker[ \t]+login|az[ \t]+(?:acr[ \t]+)?login)(?![\w-]){_COMMAND_REST}")
_LOGIN_PASSWORD = re.compile(
    rf"(?<!\S)(-p(?=[^\s-])|(?:-p|--password)[ \t]+(?![-\\])(?!{_OPTION_PROSE})){_OPTION_VALUE}"
)
# One shell word as htpasswd's arguments are given: quoted, or up to a space or a shell mark.
_SHELL_WORD = r"(?:'[^'\r\n]*'|\"[^\"\r\n]*\"|[^\s'\"`;&|<>()])+"
_SHELL_WORDS = re.compile(_SHELL_WORD)
# "htpasswd -b[c...] FILE USER PASSWORD" and "htpasswd -nb USER PASSWORD": batch mode (-b) takes the password as
# the last argument, which ends the command. Options: letter clusters, "-C 10" (cost), "-r 5" (rounds).
_HTPASSWD = re.compile(
    rf"(?m)(?<![\w-])(htpasswd((?:[ \t]+-[A-Za-z]+(?:[ \t]+\d+)?)*)((?:[ \t]+(?!-){_SHELL_WORD}){{1,2}})[ \t]+)"
    rf"(?!-)({_SHELL_WORD})(?=[ \t]*(?:[;&|<>)`\"'\r]|$))"
)
# "Cookie: sid=x; csrf=y" and "Set-Cookie: ...": the value is the session, up to the end of line or a quote.
_COOKIE = re.compile(r"(?i)\b((?:set-)?cookie[\"']?[ \t]*:[ \t]*[\"']?)([^\s=;,\"']{1,128}=[^\r\n\"']*)")
# curl's "-b 'sid=abc; csrf=x'" and "--cookie sid=abc": the value is the session. Without an "=" the argument
# names a cookie file, kept.
_CURL_COOKIE = re.compile(
    r"(?<![\w-])((?:-b|--cookie)(?:[ \t]+|=))"
    r"(\"[^\"\r\n]*=[^\"\r\n]*\"|'[^'\r\n]*=[^'\r\n]*'|[^\s\"'=]+=[^\s\"']*)"
)
# curl's "-u bob:hunter2" (--user, and -U/--proxy-user for a proxy): the user kept, the password dropped; quoted,
# the password runs to the quote.
_CURL_USER = re.compile(
    r"(?<![\w-])((?:-u|--user|-U|--proxy-user)(?:[ \t]+|=)([\"'])?[^\s:\"']*:)"
    r"((?(2)[^\"'\r\n]|[^\s\"'])+)"
)
# One auth-param, name=token or name="quoted" (escaped quotes too, as a header pasted inside JSON has them).
_AUTH_PARAM = r"[\w-]+=(?:\\?\"(?:[^\"\\\r\n]|\\[^\"\r\n])*\\?\"|[^\s,\"'\\]*)"
# "Authorization: Token abc...", any scheme or none; the credential goes if it looks like one. Digest's and
# OAuth 1's are a list of auth-params (nonce, cnonce, response, oauth_signature): the whole list goes.
_AUTHORIZATION = re.compile(
    r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)"  # the header name, kept
    r"((?:[A-Za-z][\w-]*[ \t]+)?)"  # its scheme (Bearer, Basic, Digest, Token, ...)
    rf"({_AUTH_PARAM}(?:\s*,\s*{_AUTH_PARAM})*|[^\s\"',;]+)"  # its credential
)
# After these the credential goes whatever it looks like: "Bearer sunshine" is a token, not prose.
_AUTH_SCHEMES = frozenset(
    {"bearer", "basic", "digest", "negotiate", "ntlm", "token", "oauth", "apikey", "api-key", "key", "ssws", "dpop"}
)
# "password: correct horse battery staple": a passphrase to the end of its line, a closing quote or a sentence
# end. The label is followed by ":" or a spaced "="; a quoted value is left to _ASSIGNMENTS.
_PASSPHRASE = re.compile(
    rf"(?im){_NAME_START}({_PASSWORD_NAME}(\s+is)?[\"']?[ \t]*(?::|=(?=[ \t]))[ \t]*)"
    rf"(?![\"'\s])([^\r\n]+?){_CLAUSE_END}"
)
# "my password is:" ending its line: the value is the next line holding text, as chat clients paste it, inside a
# code fence, after a quote's "> " or between backticks.
_VALUE_ON_NEXT_LINE = re.compile(
    rf"(?im){_NAME_START}({_SECRET_NAME}({_OPENS}\s+is)?[ \t]*:[ \t]*\r?\n"
    r"(?:[ \t]*(?:```[\w-]*[ \t]*)?\r?\n)*"  # blank lines and a code fence's opening line
    r"[ \t]*(?:>[ \t]*)?`*)"  # a quote's mark, inline code's backticks
    r"([^\s`][^\r\n`]*?)(?=`|[ \t]*\r?$)"
)
# "password: x", "api_key=x", "my password is: x", "password - x": keep the words, drop the value. The name
# may carry a prefix, as environment variables do (DB_PASSWORD=x, OPENAI_API_KEY=x), and a closing quote,
# as JSON does ("password": "x"); "is" may follow a few words saying what it opens ("password for wifi is x").
# "is:" ending its line is _VALUE_ON_NEXT_LINE's: the first word there may be a fence or a quote's mark.
# A PIN read out in groups ("pin: 42 17", "my PIN is 4217 9921") is one value: every group goes.
_ASSIGNMENTS = re.compile(
    rf"(?i){_NAME_START}({_SECRET_NAME})"
    rf"([\"']?[ \t]*[:=][ \t]*|{_OPENS}\s+is(?:[ \t]*[:=][ \t]*|\s+)|\s+[-–—]\s+)"
    rf"(\"[^\"]*\"|'[^']*'|{_DIGIT_GROUPS}|\S+)"
)
# A label's separator (":", a spaced "=", JSON's '": ') as a policy's field has it; not "is", not a shell's "=x".
_LABEL_SEPARATOR = re.compile(r"[\"']?[ \t]*(?::[ \t]*|=[ \t]+)")
_SECRET_KEYS = re.compile(
    r"(?i:password|passwd|passphrase|secret|token|api[_-]?key|private[_-]?key|subscription[_-]?key|authorization"
    r"|cookie|credential)"
    r"|(?<![A-Za-z])(?i:auth)(?![a-z])"  # "auth", "basic_auth", "authHeader"; not "author" or "oauth"
)
_PROSE_PUNCTUATION = ".,;:!?)(\"'"
# Words that follow "password is" when someone describes a password rather than gives it.
_DESCRIBES_PASSWORD = frozenset(
    {
        "not",
        "no",
        "never",
        "still",
        "now",
        "already",
        "always",
        "just",
        "also",
        "too",
        "very",
        "so",
        "the",
        "a",
        "an",
        "my",
        "your",
        "our",
        "their",
        "this",
        "that",
        "it",
        "wrong",
        "incorrect",
        "invalid",
        "expired",
        "expiring",
        "locked",
        "blocked",
        "disabled",
        "rejected",
        "required",
        "needed",
        "mandatory",
        "correct",
        "right",
        "valid",
        "fine",
        "ok",
        "okay",
        "good",
        "bad",
        "weak",
        "strong",
        "short",
        "long",
        "empty",
        "blank",
        "missing",
        "same",
        "different",
        "changed",
        "reset",
        "set",
        "saved",
        "stored",
        "forgotten",
        "lost",
        "known",
        "unknown",
        "compromised",
        "leaked",
        "stolen",
        "shared",
        "case-sensitive",
        "sensitive",
        "managed",
        "synced",
        "working",
        "broken",
        "failing",
        "asking",
        "being",
        "going",
        "about",
        "due",
        "over",
        "in",
        "on",
        "at",
        "for",
        "from",
        "of",
        "with",
        "without",
        "under",
        "older",
        "newer",
        "new",
        "old",
        "temporary",
        "default",
    }
)


# The words rules about passwords are written in: "at least 14 characters", "must not be reused", "changed
# every 90 days", "4 to 6 digits, never your birthday".
_RULE_WORDS = frozenset(
    {
        "must",
        "mustn't",
        "should",
        "shall",
        "cannot",
        "can't",
        "not",
        "never",
        "required",
        "allowed",
        "forbidden",
        "mandatory",
        "at",
        "least",
        "most",
        "more",
        "fewer",
        "minimum",
        "maximum",
        "min",
        "max",
        "length",
        "long",
        "longer",
        "character",
        "characters",
        "chars",
        "digit",
        "digits",
        "letter",
        "letters",
        "number",
        "numbers",
        "symbol",
        "symbols",
        "words",
        "uppercase",
        "lowercase",
        "special",
        "every",
        "each",
        "day",
        "days",
        "week",
        "weeks",
        "month",
        "months",
        "year",
        "years",
        "daily",
        "weekly",
        "monthly",
        "quarterly",
        "yearly",
        "annually",
        "change",
        "changed",
        "reuse",
        "reused",
        "rotate",
        "rotated",
        "expire",
        "expires",
        "share",
        "shared",
        "written",
        "stored",
        "contain",
        "contains",
        "include",
        "includes",
        "unique",
    }
)
_COUNT = re.compile(r"\d{1,3}\+?(?:[-–][a-z]+)?")  # "14", "90-day": a rule's quantity, shorter than any PIN
# How far past a label's value its clause is read to tell whether the value opens a rule. Read to the end of
# its line instead, a line repeating a label ("pin: 1 2 " * 4000, a long Slack message) was read again from
# every label: 12 s for 36,000 characters. See _clause_from for why the bound is safe.
_RULE_CONTEXT_CHARS = 300


class Redactor:
    """Replaces configured secret values and credential-shaped text with ``[redacted]``."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        values = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}
        self._secrets = sorted(values, key=len, reverse=True)  # longest first: no half-replaced secret

    def text(self, value: str) -> str:
        """One string with every secret replaced."""
        value = self.known(value)
        for pattern in _PATTERNS:
            value = pattern.sub(REDACTED, value)
        value = _SIGNED.sub(_keep_name, value)
        value = _COOKIE.sub(_keep_name, value)
        value = _CURL_COOKIE.sub(_keep_quoted, value)
        value = _CURL_USER.sub(_keep_user, value)
        value = _MYSQL_COMMAND.sub(_mysql_command, value)
        value = _SSHPASS_PASSWORD.sub(_keep_quoted, value)
        value = _LOGIN_COMMAND.sub(_login_command, value)
        value = _HTPASSWD.sub(_htpasswd, value)
        value = _APIM_KEY.sub(_apim_key, value)
        value = _AUTHORIZATION.sub(_authorization, value)
        value = _VALUE_ON_NEXT_LINE.sub(_value_on_next_line, value)
        value = _PASSPHRASE.sub(_passphrase, value)
        return _ASSIGNMENTS.sub(_assignment, value)

    def known(self, value: str) -> str:
        """Only the configured secrets and URL passwords, for operator messages: those name settings
        (``MicrosoftAppPassword``) that the credential-shaped patterns of ``text`` would hide."""
        for secret in self._secrets:
            value = value.replace(secret, REDACTED)
        return _URL_PASSWORD.sub(_url_password, value)

    def value(self, value: Any) -> Any:
        """Any JSON-like value, recursively; keys that name a secret lose every string in their value."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: _hidden(v) if _names_secret(k) else self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value


def _url_password(match: re.Match[str]) -> str:
    """``user:[redacted]@``; a password already masked (SQLAlchemy's ``***``) is left as it is."""
    masked = match.group(2) in (HIDDEN_PASSWORD, REDACTED)
    return match.group(0) if masked else f"{match.group(1)}:{REDACTED}@"


def _keep_name(match: re.Match[str]) -> str:
    """The label (``AccountKey=``, ``Cookie: ``, ``password: ``) kept, its value redacted."""
    return f"{match.group(1)}{REDACTED}"


def _keep_quoted(match: re.Match[str]) -> str:
    """The option (``-b ``) kept, its value redacted inside the quotes it had."""
    option, value = match.groups()
    quote = value[0] if value[0] in "\"'" else ""
    return f"{option}{quote}{REDACTED}{quote}"


def _keep_user(match: re.Match[str]) -> str:
    """``-u bob:[redacted]``."""
    return f"{match.group(1)}{REDACTED}"


def _mysql_command(match: re.Match[str]) -> str:
    """``mysql -u root -p[redacted]``: only inside a mysql command is a glued ``-p`` a password (ssh's is a port)."""
    return _MYSQL_PASSWORD.sub(_keep_quoted, match.group())


def _login_command(match: re.Match[str]) -> str:
    """``docker login -u bob -p [redacted]``: only in a login command is ``-p`` a password (docker run's is a port)."""
    return _LOGIN_PASSWORD.sub(_keep_quoted, match.group())


def _htpasswd(match: re.Match[str]) -> str:
    """``htpasswd -b .htpasswd bob [redacted]``; kept unless batch mode gives exactly file (unless -n), user and
    password, none of them a word of prose ("htpasswd -b is insecure")."""
    command, options, before, password = match.groups()
    flags = {c for word in options.split() if word.startswith("-") for c in word[1:]}
    words = _SHELL_WORDS.findall(before)
    given = "b" in flags and len(words) == (1 if "n" in flags else 2)
    if not given or any(_PROSE_WORD.fullmatch(word) for word in [*words, password]):
        return match.group(0)
    quote = password[0] if password[0] in "\"'" and len(password) > 1 else ""
    return f"{command}{quote}{REDACTED}{quote}"


def _apim_key(match: re.Match[str]) -> str:
    """``Ocp-Apim-Subscription-Key: [redacted]``; a word of API docs after the header name stays."""
    return f"{match.group(1)}{REDACTED}" if _looks_secret(match.group(2)) else match.group(0)


def _value_on_next_line(match: re.Match[str]) -> str:
    label, says_is, value = match.groups()
    gives_one = len(value.split()) == 1 and _looks_secret(value)  # not a heading's list or paragraph
    return f"{label}{REDACTED}" if says_is or gives_one else match.group(0)


def _passphrase(match: re.Match[str]) -> str:
    label, says_is, value = match.groups()
    return match.group(0) if not says_is and _reads_as_rule(value) else f"{label}{REDACTED}"


def _authorization(match: re.Match[str]) -> str:
    header, scheme, credential = match.groups()
    named = scheme.strip().casefold() in _AUTH_SCHEMES and credential != REDACTED
    return f"{header}{REDACTED}" if named or _looks_secret(credential) else match.group(0)


def _assignment(match: re.Match[str]) -> str:
    name, separator, value = match.groups()
    if value.rstrip(_PROSE_PUNCTUATION) == REDACTED:  # a passphrase or token already gone: keep its closing quote
        return match.group(0)
    if _LABEL_SEPARATOR.fullmatch(separator) and _reads_as_rule(_clause_from(match, value)):
        return match.group(0)
    strong = any(mark in separator for mark in ":=")  # "password: x" names its value; "password is x" may not
    plain_is = separator.strip().casefold() == "is"  # not "password for wifi is x": that needs a credential's shape
    if strong or _looks_secret(value) or (plain_is and _gives_a_password(value)):
        quote = value[0] if value[0] in "\"'" and len(value) > 1 else ""  # "password": "x" stays JSON
        return f"{name}{separator}{quote}{REDACTED}{quote}"
    return match.group(0)


def _clause_from(match: re.Match[str], value: str) -> str:
    """What a label's value says: inside its quotes, or from its first word to the end of its clause, read no
    further than ``_RULE_CONTEXT_CHARS`` past the value.

    The bound keeps redaction linear: each label reads its value (which its match consumes) and at most
    ``_RULE_CONTEXT_CHARS`` more, not the rest of its line. It is safe because only the words after the value
    are cut, never the value: that is what is kept or redacted, and it is read whole (a quoted value, a PIN's
    digit groups, however long). The words after it are only evidence; none is redacted here either way. A
    clause cut at the bound can only (a) lose its second word of rules, so its value is redacted, the safe
    side; or (b) lose a credential-shaped word that would have had the value redacted, so the value stays:
    and a value that stays opens with a word of rules or a count of three digits at most ("must", "14") and
    holds no credential's shape itself, since _reads_as_rule reads every word of it. A rule's words come
    first ("at least 14 characters", "must not be reused"), well inside 300 characters. (A clause that runs
    into a CRLF line's "\\r" is not found, and its value is judged alone, so redacted; one cut at the bound
    first is judged as on an LF line.)
    """
    if value[0] in "\"'":
        return value[1:-1]
    clause = _CLAUSE.match(match.string, match.start(3), match.end(3) + _RULE_CONTEXT_CHARS)
    return clause.group() if clause else value


def _reads_as_rule(value: str) -> bool:
    """A policy's rule about a password ("at least 14 characters"), not a password: see the module docstring."""
    words = [word.strip(_PROSE_PUNCTUATION) for word in value.split()]
    if len(words) < 2 or not (_is_rule_word(words[0]) or _COUNT.fullmatch(words[0])):
        return False
    shaped = any(_looks_secret(word) and not _COUNT.fullmatch(word) for word in words)
    return sum(map(_is_rule_word, words)) >= 2 and not shaped


def _is_rule_word(word: str) -> bool:
    return word.casefold() in _RULE_WORDS


def _gives_a_password(word: str) -> bool:
    core = word.strip(_PROSE_PUNCTUATION).casefold()
    return len(core) >= MIN_PIN_CHARS and core not in _DESCRIBES_PASSWORD


def _looks_secret(word: str) -> bool:
    """A digit, a symbol, a capital inside, or passphrase length: unlike "expired", "strict" or "see"."""
    core = word.strip(_PROSE_PUNCTUATION)
    if len(core) < MIN_PIN_CHARS or core == REDACTED:
        return False
    if any(c.isdigit() or not (c.isalnum() or c in "-'’") for c in core):
        return True
    inner_capital = any(c.isupper() for c in core[1:]) and any(c.islower() for c in core)
    return (len(core) >= MIN_SECRET_CHARS and inner_capital) or len(core) >= LONG_SECRET_CHARS


def _names_secret(key: Any) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEYS.search(key))


def _hidden(value: Any) -> Any:
    """Every string inside ``value`` redacted, its shape kept; numbers stay: "input_tokens" counts are no secret."""
    if isinstance(value, str):
        return REDACTED
    if isinstance(value, dict):
        return {key: _hidden(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_hidden(item) for item in value]
    return value


def bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with a visible marker saying how much was cut."""
    if len(text) <= limit:
        return text
    marker = f"…[truncated: {len(text) - limit} more characters]"
    return text[:limit] + marker


def bounded_value(value: Any, limit: int) -> Any:
    """Any JSON-like value with each string cut to ``limit`` characters, marker included.

    The strings inside are cut, not the serialized text, so the value keeps its shape: a trace stays a
    list of steps with the same fields, every reader (``policypal traces``, transcripts, eval) reads it
    as before, and no one is handed half a JSON document. A trace step's fields are scalars, so this
    bounds a step; the number of items in a list is not bounded here.
    """
    if isinstance(value, str):
        return _cut(value, limit)
    if isinstance(value, dict):
        return {key: bounded_value(item, limit) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [bounded_value(item, limit) for item in value]
    return value


def bounded_trace(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trace steps as stored: one tool call of megabytes cannot grow the database by megabytes.

    Apply it to the redacted steps: a cut made first could leave a secret too short for its pattern.
    """
    return [bounded_value(step, TRACE_VALUE_CHARS) for step in steps]


def _cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, ending in a marker with its full length when it was cut."""
    if len(text) <= limit:
        return text
    keep = max(limit - _CUT_MARKER_ROOM, 0)
    return f"{text[:keep]}…[cut: {len(text):,} characters, {len(text) - keep:,} not stored]"
