"""Logs: one JSON object a line for machines, plain text on a terminal; set up once per command.

Every record carries its time (UTC, from the record itself), level, logger and
message; the ids a line is about (`run_id`, `attempt_id`, `alert_id`, …) are
fields of their own, given with `extra={...}` or bound for a block with `bind`, so
a log search can follow one run or one alert without parsing sentences.

The message and any traceback pass through `sanitize.redact` on the way out: a
credential or a customer value that slipped into an error never reaches the logs.

Settings: `TICKWARDEN_LOG_LEVEL` (debug, info, warning, error; default: what the
command chooses, warning for one-off commands, info for `serve` and `worker`) and
`TICKWARDEN_LOG_FORMAT` (`json` or `text`; default text on a terminal, else JSON).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from tickwarden.errors import InvalidInput
from tickwarden.sanitize import redact

if TYPE_CHECKING:
    from structlog.typing import EventDict, WrappedLogger

LEVEL_ENV = "TICKWARDEN_LOG_LEVEL"
FORMAT_ENV = "TICKWARDEN_LOG_FORMAT"
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
FORMATS = ("json", "text")
HANDLER_NAME = "tickwarden"

_explicit_level = False
# Attributes every LogRecord has (and `message`, which formatting adds): the rest came from `extra`.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def configure(environ: Mapping[str, str] | None = None, stream: TextIO | None = None) -> None:
    """Install tickwarden's one handler on the root logger (replacing an earlier one), per the settings."""
    global _explicit_level
    env = os.environ if environ is None else environ
    stream = stream or sys.stderr
    level_name = env.get(LEVEL_ENV, "").strip().lower()
    if level_name and level_name not in LEVELS:
        raise InvalidInput(f"{LEVEL_ENV} must be one of {', '.join(LEVELS)}, not {level_name!r}.")
    fmt = env.get(FORMAT_ENV, "").strip().lower() or ("text" if _is_terminal(stream) else "json")
    if fmt not in FORMATS:
        raise InvalidInput(f"{FORMAT_ENV} must be json or text, not {fmt!r}.")
    handler = logging.StreamHandler(stream)
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(_Deferred(fmt))
    root = logging.getLogger()
    # Ours from an earlier call, and a plain basicConfig handler: either would print every line twice.
    for old in [h for h in root.handlers
                if h.get_name() == HANDLER_NAME or (type(h) is logging.StreamHandler and h.stream is stream)]:
        root.removeHandler(old)
    root.addHandler(handler)
    _explicit_level = bool(level_name)
    root.setLevel(LEVELS.get(level_name, logging.WARNING))
    logging.getLogger("tickwarden").setLevel(logging.NOTSET)


def configure_or_exit() -> None:
    """Configure logging for the command line: a bad setting is one line on stderr and exit status 2."""
    try:
        configure()
    except InvalidInput as exc:
        print(f"tickwarden: {exc.message}", file=sys.stderr)
        sys.exit(2)


def default_level(level: int) -> None:
    """Set the level a command logs at unless TICKWARDEN_LOG_LEVEL chose one."""
    if not _explicit_level:
        logging.getLogger("tickwarden").setLevel(level)


@contextmanager
def bind(**ids: Any) -> Iterator[None]:
    """Add these ids to every line logged in this block (this thread or task only)."""
    import structlog

    with structlog.contextvars.bound_contextvars(**ids):
        yield


def formatter(fmt: str) -> logging.Formatter:
    """Return the formatter of one output format, `json` or `text`."""
    import structlog

    chain = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _extra,
        _timestamp,
    ]
    if fmt == "json":
        renderer: Any = structlog.processors.JSONRenderer(sort_keys=False)
        tail = [structlog.processors.format_exc_info, _redact, renderer]
    else:
        tail = [structlog.processors.format_exc_info, _redact, _text]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=chain,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail],
    )


class _Deferred(logging.Formatter):
    """`formatter(fmt)`, built when the first record is formatted: a command that logs nothing loads no structlog.

    A record without a traceback or stack (nearly all: the deployed worker logs one line an
    attempt) is formatted by `_Plain`, the same processors' output without structlog's
    per-record machinery; one with either goes through `formatter(fmt)`.
    """

    def __init__(self, fmt: str):
        super().__init__()
        self.fmt = fmt
        self.built: logging.Formatter | None = None
        self.plain: _Plain | None = None

    def format(self, record: logging.LogRecord) -> str:
        if self.built is None or self.plain is None:
            self.built = formatter(self.fmt)
            self.plain = _Plain(self.fmt)
        if record.exc_info or record.stack_info:
            return self.built.format(record)
        return self.plain.format(record)


class _Plain:
    """What `formatter(fmt)` writes for a record without traceback or stack, field for field and in
    the same order, at a fraction of its cost.

    The event dict is built as structlog's `ProcessorFormatter` builds a foreign record's (the
    message, the ids bound with `bind`, level, logger, the record's extras, the time first),
    the message is redacted by `_redact`, and the line is rendered by the same renderer
    (JSON with structlog's fallback for values JSON does not know, or `_text`).
    `test_logs` compares both paths' lines.
    """

    def __init__(self, fmt: str):
        import structlog

        self._merge = structlog.contextvars.merge_contextvars
        self._level = structlog.stdlib.add_log_level
        self._render: Any = structlog.processors.JSONRenderer(sort_keys=False) if fmt == "json" else _text

    def format(self, record: logging.LogRecord) -> str:
        event: EventDict = {"event": record.getMessage()}
        method = record.levelname.lower()
        event = self._level(None, method, self._merge(None, method, event))
        event["logger"] = record.name
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and key not in event:
                event[key] = value
        event = _redact(None, method, {"timestamp": _stamp(record.created), **event})
        return str(self._render(None, method, event))


def _stamp(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _timestamp(logger: WrappedLogger, name: str, event: EventDict) -> EventDict:
    # The record's own creation time: no second reading of the clock, and lines from threads stay ordered.
    record = event.get("_record")
    return {"timestamp": _stamp(record.created if record is not None else 0.0), **event}


def _extra(logger: WrappedLogger, name: str, event: EventDict) -> EventDict:
    # What `extra={...}` put on the record: everything a plain LogRecord does not have.
    record = event.get("_record")
    if record is not None:
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and key not in event:
                event[key] = value
    return event


def _redact(logger: WrappedLogger, name: str, event: EventDict) -> EventDict:
    if isinstance(event.get("event"), str):
        event["event"] = redact(event["event"])
    if isinstance(event.get("exception"), str):
        # `File "…", line n` keeps its path for whoever debugs; source lines and messages may carry values.
        event["exception"] = "\n".join(line if line.startswith('  File "') else redact(line)
                                        for line in event["exception"].splitlines())
    return event


def _text(logger: WrappedLogger, name: str, event: EventDict) -> str:
    """`<time> LEVEL logger: message key=value …`, then the traceback when there is one."""
    stamp, level, source = event.pop("timestamp", ""), event.pop("level", ""), event.pop("logger", "")
    message, exception = event.pop("event", ""), event.pop("exception", None)
    fields = " ".join(f"{key}={value}" for key, value in event.items())
    line = f"{stamp} {str(level).upper():<7} {source}: {message}" + (f"  {fields}" if fields else "")
    return line + (f"\n{exception}" if exception else "")


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
