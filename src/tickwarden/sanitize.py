"""Data minimisation: what may leave tickwarden in a log line, an error, an output or a message.

Errors, log tails and step outputs are reduced before they are stored or sent: one
line and bounded length where it applies, credentials and tokens redacted, personal
data (e-mail addresses, phone numbers, SSN-like and card numbers) replaced, quoted
literal values (usually customer data) replaced, while identifiers such as column or
step names survive so the message still says what broke.

Credentials are recognised by their key, wherever the key hides: inside a longer
identifier (`AWS_SECRET_ACCESS_KEY=`, `DB_PASSWORD=`, `PGPASSWORD=`), in quotes
(`{'password': …}`, `{"api_key": …}`), with the value on the next line (`password:`
then the value), or as a whole authorization value (`Authorization: Basic …`,
`token …`). The values a step was actually given are scrubbed by value on top
(`secrets.scrub`), whatever key they appear under.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Any

MAX_ERROR = 300
MAX_LOG_TAIL_LINES = 20
MAX_LOG_TAIL_CHARS = 2000
MAX_ACTOR = 100
REDACTED = "[redacted]"

# A word that makes a key secret, wherever it sits in an identifier.
_SECRET_WORD = (r"pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"
                r"private[_-]?key|credential|auth|session[_-]?id|cookie|signature|dsn")
# What each alternative of `_SECRET_WORD` begins with.
_SECRET_WORDS = ("pass", "pwd", "secret", "token", "api", "access", "private", "credential", "auth", "session",
                 "cookie", "signature", "dsn")
# The lookbehind anchors a key at the start of an identifier: without it the scan retries
# from every character of every word, which made this the costliest pattern by far.
_KEY = rf"(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]*?(?:{_SECRET_WORD})[A-Za-z0-9_.-]*"
# A value already redacted by an earlier rule (an authorization header's) is left as it is.
# An unquoted value ends at whitespace, or at a delimiter (`,;}])` or a quote) that whitespace,
# another delimiter or the end follows: one inside the value (`password=p)ss]w0rd`) belongs to
# it, since stopping there would print the rest of the secret. A secret that ends in a delimiter
# loses that one character to the text; a key=value list without spaces (`password=x,user=y`)
# is hidden to its end, which is the side to err on.
_DELIMITER = r"[,;}\])\"']"
_VALUE_CHAR = r"[^\s,;}\])\"']"
_VALUE = (r"(?!\[redacted\](?:[\s,;}\])\"']|$))"
          rf"(?:\"[^\"\n]*\"|'[^'\n]*'|{_VALUE_CHAR}(?:{_VALUE_CHAR}|{_DELIMITER}+(?={_VALUE_CHAR}))*)")

# Each rule is (pattern, replacement, prefilter): the prefilter is something every match of the
# pattern contains (a literal, or a regex searched with the pattern's own flags), so a text
# without it cannot match and its substitution is skipped. A rule runs on the text the rules
# before it left, and so does its prefilter: skipping changes no output, only the time (most
# log lines and errors hold none of these, and the full scans were most of a redaction's cost).


@dataclass(frozen=True)
class _Folded:
    """A case-insensitive prefilter: `pattern`, and lower-case ASCII `words` one of which each of its matches holds.

    An ASCII text's lower-case copy holding none of the words cannot match (for ASCII,
    ignoring case is lower-casing): that is told by substring tests, where the pattern's
    scan tries every alternative at every character (the secret words' took a third of a
    log line's redaction). Any other text is searched with `pattern`, as before.
    """

    words: tuple[str, ...]
    pattern: re.Pattern[str]


_Prefilter = str | re.Pattern[str] | _Folded | None
_Rule = tuple[re.Pattern[str], str, _Prefilter]
_PATTERNS: tuple[_Rule, ...] = (
    # user:password@ in any URL
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"), r"\1" + REDACTED + "@", "://"),
    # the whole value of an authorization header, whatever its scheme
    (re.compile(r"(?im)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*)[^\n,;}]+"), r"\1" + REDACTED,
     _Folded(("authorization",), re.compile(r"(?i)authorization"))),
    (re.compile(r"(?i)\b(bearer|basic|digest)\s+[A-Za-z0-9._~+/=-]{4,}"), r"\1 " + REDACTED,
     _Folded(("bearer", "basic", "digest"), re.compile(r"(?i)bearer|basic|digest"))),
    # `token abc123…`: a digit is required so that prose ("token expired") survives
    (re.compile(r"(?i)\b(token)\s+(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED,
     _Folded(("token",), re.compile(r"(?i)token"))),
    # key=value, key: value, 'key': 'value', key:<newline>value, for secret-sounding keys;
    # `\s*` spans the newline on purpose
    (re.compile(rf"(?i)([\"']?{_KEY}[\"']?)(\s*[=:]\s*)({_VALUE})"), r"\1\2" + REDACTED,
     _Folded(_SECRET_WORDS, re.compile(rf"(?i){_SECRET_WORD}"))),
    # well-known token shapes: Slack, GitHub, OpenAI-style, AWS access keys, JWTs, PEM keys
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]+"), REDACTED, "xox"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), REDACTED, re.compile(r"gh[pousr]_")),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED, "sk-"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED, "IA"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"), REDACTED, "eyJ"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"), REDACTED,
     "-----BEGIN "),
)
# After detect-secrets' token shapes, which need the whole token to recognise it.
_LATE: tuple[_Rule, ...] = (
    # long opaque strings (keys, hashes, signed blobs)
    (re.compile(r"\b[A-Za-z0-9+/_-]{40,}={0,2}"), REDACTED, None),
    # personal data
    (re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"), "[email]", "@"),
    (re.compile(r"\b\d{3}-\d{2}-\d{4}\b"), "[ssn]", "-"),
)

_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_PHONE = re.compile(r"(?<![\w.+-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,4}){1,4}(?![\w.:-])")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_QUOTED = re.compile(r"(['\"])(.*?)\1")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")
_SECRET_KEY = re.compile(rf"(?i)^{_KEY}$")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    return "[card]" if 13 <= len(digits) <= 19 and _luhn(digits) else match.group(0)


def _phone(match: re.Match[str]) -> str:
    text = match.group(0)
    if _IPV4.match(text):
        return text
    digits = re.sub(r"\D", "", text)
    # A phone number is international (+…) or has an area code: 10+ digits, or 9+ with
    # a parenthesised prefix. Fewer digits are counts, ids and times, and stay.
    international = text.startswith("+") and len(digits) >= 8
    if international or (9 <= len(digits) <= 15 and ("(" in text or len(digits) >= 10)):
        return "[phone]"
    return text


def _literal(match: re.Match[str]) -> str:
    quote, body = match.group(1), match.group(2)
    if _IDENTIFIER.match(body) or body in (REDACTED, "[email]", "[phone]", "[card]", "[ssn]"):
        return match.group(0)
    return f"{quote}[value]{quote}"


# detect-secrets' detectors that flag things which are not secrets here (public IPs
# are what an error about an unreachable host should name).
_NOT_SECRETS = frozenset({"IPPublicDetector"})


@functools.cache
def _known_token_patterns() -> tuple[re.Pattern[str], ...]:
    """The token shapes detect-secrets knows (AWS, GitHub, GitLab, Stripe, Twilio, …), loaded once.

    Its regex-based detectors are a kept list that grows with new providers; the
    entropy and keyword detectors are left out (the keyword rules above cover keys).
    Loaded lazily: the import costs a fifth of a second that only text-reducing
    processes need to pay.
    """
    return tuple(pattern for pattern, _, _ in _known_token_rules())


@functools.cache
def _known_token_rules() -> tuple[tuple[re.Pattern[str], tuple[str, ...], re.Pattern[str] | _Folded | None], ...]:
    """`_known_token_patterns`, each with its prefilter: texts and a regex, one of which every match of it holds.

    The prefilter of one alternation (with its flags) holds, for each detector's pattern,
    the literal text every match of that pattern contains (`_required`: `AKIA`, `glpat-`,
    `eyJ`, …), or the pattern itself when it has none; so a text holding none of them
    cannot match the alternation, whose scan tries every detector at every character.
    Literals are looked for as substrings when the flags are case-sensitive, else in the
    regex, under the alternation's own flags (its case folding); when every pattern of a
    case-insensitive alternation has ASCII literals, that regex comes with them as `_Folded` words.
    """
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    by_flags: dict[int, list[str]] = {}
    for detector in get_mapping_from_secret_type_to_class().values():
        if issubclass(detector, RegexBasedDetector) and detector.__name__ not in _NOT_SECRETS:
            for pattern in detector.denylist:
                # Keyword-in-context rules (`aws.{0,20}?key…`, `(?<=\W)cloudant…`) duplicate the
                # key rules above at several times their cost; only token shapes are taken.
                if ".{0," not in pattern.pattern and "(?<=" not in pattern.pattern:
                    by_flags.setdefault(pattern.flags, []).append(pattern.pattern)
    rules = []
    for flags, patterns in by_flags.items():
        # One alternation per set of flags: a single scan of the text instead of one per detector.
        whole = re.compile("|".join(f"(?:{p})" for p in patterns), flags)
        texts: list[str] = []
        searched: list[str] = []
        words: list[str] | None = []  # None once a pattern has no ASCII literal to fold
        for p in patterns:
            literals = sorted(_required(p, flags) or ())
            if not literals:
                searched.append(f"(?:{p})")
                words = None
            elif flags & re.IGNORECASE:
                searched += [re.escape(literal) for literal in literals]
                if words is not None and all(literal.isascii() for literal in literals):
                    words += [literal.lower() for literal in literals]
                else:
                    words = None
            else:
                texts += literals
        search = re.compile("|".join(dict.fromkeys(searched)), flags) if searched else None
        rules.append((whole, tuple(dict.fromkeys(texts)),
                      _Folded(tuple(dict.fromkeys(words)), search) if search is not None and words else search))
    return tuple(rules)


def _required(pattern: str, flags: int) -> set[str] | None:
    """Texts of two characters or more one of which every match of `pattern` contains; None when none is found.

    Read from the parsed pattern: a run of literal characters in sequence, or one in each
    alternative of a group. Anything not understood (scoped flags, a parse error) gives None,
    and the caller then searches the pattern itself.
    """
    try:
        from re import _constants, _parser  # the standard library's own parser (3.11+)

        return _required_in(list(_parser.parse(pattern, flags)), _constants)
    except Exception:  # an unknown parser: no prefilter, never a wrong one
        return None


def _required_in(items: list[Any], c: Any) -> set[str] | None:
    run: list[str] = []
    for op, av in items:
        if op is c.LITERAL:
            run.append(chr(av))
            continue
        if len(run) >= 2:
            return {"".join(run)}
        run = []
        found: set[str] | None = None
        if op is c.SUBPATTERN:
            _, add_flags, del_flags, sub = av
            found = None if add_flags or del_flags else _required_in(list(sub), c)
        elif op is c.BRANCH:
            alternatives = [_required_in(list(alternative), c) for alternative in av[1]]
            found = None if any(a is None for a in alternatives) else set().union(*alternatives)  # type: ignore[arg-type]
        if found:
            return found
    return {"".join(run)} if len(run) >= 2 else None


# What PostgreSQL's text and jsonb cannot hold: NUL, and lone surrogates (a JSON `\\ud800`
# escape decodes to one; it has no UTF-8 encoding). A step's text may hold either.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` with each character the database cannot store replaced by U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


def redact(text: str) -> str:
    """Remove credentials, tokens, personal data and quoted literal values; the result is storable."""
    text = storable(text)
    lowered = _lowered(text)
    for pattern, replacement, needed in _PATTERNS:
        if _may_match(needed, text, lowered):
            text, lowered = _substituted(pattern, replacement, text, lowered)
    # The whole match goes: a detector's group is not always the secret (GitLab's is the prefix).
    for pattern, texts, searched in _known_token_rules():
        if _holds_any(text, texts) or (searched is not None and _may_match(searched, text, lowered)):
            text, lowered = _substituted(pattern, REDACTED, text, lowered)
    for pattern, replacement, needed in _LATE:
        if _may_match(needed, text, lowered):
            text, lowered = _substituted(pattern, replacement, text, lowered)
    text = _CARD.sub(_card, text)
    text = _PHONE.sub(_phone, text)
    if "'" in text or '"' in text:
        text = _QUOTED.sub(_literal, text)
    return text


def _lowered(text: str) -> str | None:
    """`text` in lower case when it is ASCII (what `_Folded` words are looked for in), else None."""
    return text.lower() if text.isascii() else None


def _substituted(pattern: re.Pattern[str], replacement: str, text: str, lowered: str | None) -> tuple[str, str | None]:
    """`pattern.sub` of `text`, with its lower-case copy (`_lowered`) again when the text changed."""
    changed = pattern.sub(replacement, text)
    return changed, (lowered if changed == text else _lowered(changed))


def _may_match(needed: _Prefilter, text: str, lowered: str | None) -> bool:
    """Whether `text` holds what every match of a rule holds (see `_PATTERNS`); True when the rule names nothing.

    `lowered`: `text` in lower case when it is ASCII (`_lowered`), else None.
    """
    if needed is None:
        return True
    if isinstance(needed, str):
        return needed in text
    if isinstance(needed, _Folded):
        if lowered is not None and not _holds_any(lowered, needed.words):
            return False
        needed = needed.pattern
    return needed.search(text) is not None


def _holds_any(text: str, texts: tuple[str, ...]) -> bool:
    for needle in texts:
        if needle in text:
            return True
    return False


def redact_value(value: Any) -> Any:
    """Redact a JSON value (a step's output): secret-keyed values whole, every string as text."""
    if isinstance(value, dict):
        return {storable(k) if isinstance(k, str) else k:
                REDACTED if isinstance(k, str) and _SECRET_KEY.match(k) and v not in (None, "")
                else redact_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, str):
        redacted = redact(value)
        # An output string is a value, not a message: redact() leaves a bare string alone
        # unless it holds something recognisable, so this keeps counts and names readable.
        return redacted
    return value


def sanitize_error(message: object, limit: int = MAX_ERROR) -> str:
    """Return an error as one redacted line of at most `limit` characters."""
    text = redact(str(message))  # before joining lines, so a value on the next line is still seen as one
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def clean_actor(actor: str) -> str:
    """Who did something by hand, as the ledger and an alert's history store it: one redacted line.

    An actor is the caller's own text (a token's name, a CLI's `--by`): an address or a
    secret in it is redacted like any message, so it never reaches a page, a message or
    an export. The same rule for every actor column (alerts' and runs' alike).
    """
    return sanitize_error(actor or "tickwarden", limit=MAX_ACTOR) or "tickwarden"


# Short logs whose redacted tails are remembered: a warm attempt's tail (its environment's note
# and each step's status) is the same text at every attempt, and redacting it again cost more
# than the rest of the tail's work. Longer logs (a step's own output) are rarely seen twice.
# Remembered by a digest of the log, never the log itself: an unredacted text (a secret a step
# printed) stays in memory no longer than the call that redacts it.
REMEMBERED_TAIL_CHARS = 512
REMEMBERED_TAILS = 256
_remembered: dict[tuple[bytes, int, int], str] = {}


def sanitize_log_tail(log: str, lines: int = MAX_LOG_TAIL_LINES, limit: int = MAX_LOG_TAIL_CHARS) -> str:
    """Return the last `lines` lines of a log, redacted and bounded to `limit` characters."""
    if len(log) > REMEMBERED_TAIL_CHARS:
        return _tail(log, lines, limit)
    key = (hashlib.blake2b(log.encode("utf-8", "surrogatepass"), digest_size=16).digest(), lines, limit)
    tail = _remembered.get(key)
    if tail is None:
        tail = _tail(log, lines, limit)
        if len(_remembered) >= REMEMBERED_TAILS:
            _remembered.clear()  # a bound, not a policy: the texts that repeat come back at once
        _remembered[key] = tail
    return tail


def _tail(log: str, lines: int, limit: int) -> str:
    # Redacted whole before it is cut, so `password:` on the last kept line and its
    # value on the next one, or a value whose key was cut off, are both seen.
    tail = [line.rstrip() for line in redact(log).splitlines()[-lines:]]
    text = "\n".join(tail)
    if len(text) > limit:
        text = "…" + text[-(limit - 1) :]
    return text
