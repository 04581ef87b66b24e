"""Data minimisation: what may leave tickwarden in a log line, an error or a message.

Errors and log tails are reduced before they are stored or sent: one line, bounded
length, credentials and tokens redacted, quoted literal values (which are usually
customer data) replaced, while identifiers such as column or step names survive so
the message still says what broke.
"""

from __future__ import annotations

import re

MAX_ERROR = 300
MAX_LOG_TAIL_LINES = 20
MAX_LOG_TAIL_CHARS = 2000
REDACTED = "[redacted]"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # user:password@ in any URL
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"), r"\1" + REDACTED + "@"),
    (re.compile(r"(?i)\bbearer\s+[a-z0-9._~+/=-]+"), "Bearer " + REDACTED),
    # key=value and key: value for secret-sounding keys
    (
        re.compile(
            r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|auth|authorization|credential|private[_-]?key)"
            r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"
        ),
        r"\1\2" + REDACTED,
    ),
    # well-known token shapes: Slack, GitHub, OpenAI-style, AWS access keys, JWTs
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]+"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"), REDACTED),
    # long opaque strings (keys, hashes, signed blobs)
    (re.compile(r"\b[A-Za-z0-9+/_-]{40,}={0,2}"), REDACTED),
    # e-mail addresses are personal data
    (re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"), "[email]"),
)

_QUOTED = re.compile(r"(['\"])(.*?)\1")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")


def _literal(match: re.Match[str]) -> str:
    quote, body = match.group(1), match.group(2)
    if _IDENTIFIER.match(body) or body == REDACTED:
        return match.group(0)
    return f"{quote}[value]{quote}"


def redact(text: str) -> str:
    """Remove credentials, tokens, personal data and quoted literal values."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return _QUOTED.sub(_literal, text)


def sanitize_error(message: object, limit: int = MAX_ERROR) -> str:
    """Return an error as one redacted line of at most `limit` characters."""
    text = " ".join(str(message).split())
    text = redact(text)
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def sanitize_log_tail(log: str, lines: int = MAX_LOG_TAIL_LINES, limit: int = MAX_LOG_TAIL_CHARS) -> str:
    """Return the last `lines` lines of a log, redacted and bounded to `limit` characters."""
    tail = [redact(line.rstrip()) for line in log.splitlines()[-lines:]]
    text = "\n".join(tail)
    if len(text) > limit:
        text = "…" + text[-(limit - 1) :]
    return text
