"""Load the named SQL blocks of `store/*.sql` once.

A block starts with a header line `-- name --`, continues with `--` comment lines
that describe it, and runs until the next header. Names are unique across files.

Array parameters of timestamps and jsonb are written `%(name)b`, in binary: left to
choose, psycopg sends them as text, formatting element by element, several times
slower on the loops' hottest statements (the values are aware UTC datetimes, which
binary carries exactly). The outcome poller's id arrays go in binary too: a list of 150
integers dumps in about a third of the time as text, and each batch sends several.

A block's text is kept without its comments and indentation (`compact`): psycopg caches
the parsing of a statement's placeholders only for texts of at most 4,096 bytes, and the
worker's outcome statement, with its comments, was parsed anew at every attempt.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

HEADER = re.compile(r"^--\s*([a-z_][a-z0-9_]*)\s*--\s*$")
# What `compact` reads: a literal or a quoted identifier (kept whole, line breaks and all), or a
# run of blanks and comments.
_TOKEN = re.compile(r"""('[^']*'|"[^"]*")|((?:\s|--[^\n]*)+)""")
_DOLLAR_QUOTE = re.compile(r"\$[A-Za-z_]*\$")


def compact(text: str) -> str:
    """Return `text` with each run of blanks and comments outside quotes one space, or one line break.

    A doubled quote inside a literal reads as two literals side by side, kept as they are. A
    dollar-quoted body (a function's) is left as written: its own quoting rules are not read here.
    """
    if _DOLLAR_QUOTE.search(text):
        return text

    def token(match: re.Match[str]) -> str:
        quoted = match.group(1)
        if quoted is not None:
            return quoted
        return "\n" if "\n" in match.group(2) else " "

    return _TOKEN.sub(token, text).strip()


def parse_blocks(text: str, source: str = "<sql>") -> dict[str, str]:
    blocks: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        match = HEADER.match(line.strip())
        if match:
            current = match.group(1)
            if current in blocks:
                raise ValueError(f"{source}: query {current!r} is declared twice")
            blocks[current] = []
        elif current is not None:
            blocks[current].append(line)
    return {name: "\n".join(lines).strip() for name, lines in blocks.items()}


@functools.cache
def queries() -> dict[str, str]:
    """Return every named query of the store, by name."""
    found: dict[str, str] = {}
    package = resources.files("tickwarden")
    entries = [entry for folder in ("store", "simulate") for entry in package.joinpath(folder).iterdir()]
    for entry in sorted(entries, key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, text in parse_blocks(entry.read_text(encoding="utf-8"), entry.name).items():
            if not name.startswith(entry.name.removesuffix(".sql") + "_"):
                raise ValueError(f"{entry.name}: query {name!r} is not named <area>_<verb>")
            if name in found:
                raise ValueError(f"{entry.name}: query {name!r} is declared in another file too")
            found[name] = compact(text)
    return found
