"""Shared output helpers: JSON for machines, Rich for people, tab-separated lines for pipes.

Everything printed comes from the database (tenant names, errors, notes), so the
console never reads markup: `row '[value]' in table` must print as it is. Colour
follows the terminal and `NO_COLOR` (Rich honours both); a table printed into a
pipe is one tab-separated line per row, with a header, and no truncation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tickwarden.clock import isoformat_z

# soft_wrap: a sentence is never broken into lines of the terminal's (or a pipe's 80) width.
console = Console(highlight=False, markup=False, soft_wrap=True)

# A status word's colour wherever it is printed (runs, alerts, workflows, channels).
STATUS_STYLES = {
    "succeeded": "green",
    "recovered": "green",
    "resolved": "green",
    "active": "green",
    "enabled": "green",
    "delivered": "green",
    "passed": "green",
    "failed": "bold red",
    "missed": "red",
    "open": "bold red",
    "critical": "bold red",
    "disabled": "red",
    "warning": "yellow",
    "acknowledged": "yellow",
    "snoozed": "yellow",
    "pending_retry": "yellow",
    "paused": "yellow",
    "running": "cyan",
    "pending": "cyan",
    "queued": "cyan",
    "cancelled": "dim",
    "archived": "dim",
}


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return isoformat_z(value)
    if hasattr(value, "as_dict"):
        return value.as_dict()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def dumps(data: Any) -> str:
    return json.dumps(data, default=_default, indent=2, sort_keys=False)


def print_json(data: Any) -> None:
    print(dumps(data))


def status(word: str | None) -> Text:
    """Return a status word in its colour (plain where colour is off)."""
    word = word or ""
    return Text(word, style=STATUS_STYLES.get(word.split(" ", 1)[0], ""))


def _plain(cell: object) -> str:
    text = cell.plain if isinstance(cell, Text) else ("" if cell is None else str(cell))
    # One row per line in a pipe: a tab or newline inside a value would split it.
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def print_table(columns: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None,
                no_wrap: Sequence[str] = ()) -> None:
    """Print rows under `columns`: a table fitted to the terminal, or tab-separated lines in a pipe."""
    if not console.is_terminal:
        print("\t".join(columns))
        for row in rows:
            print("\t".join(_plain(cell) for cell in row))
        return
    table = Table(title=title)
    for column in columns:
        # Values that are identifiers stay on one line; free text folds to fit the width.
        table.add_column(column, no_wrap=column in no_wrap, overflow="fold")
    for row in rows:
        table.add_row(*(cell if isinstance(cell, Text) else Text("" if cell is None else str(cell)) for cell in row))
    console.print(table)
