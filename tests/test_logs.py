"""Log lines: one per event, bounded in size, unforgeable, JSON unless a person is reading."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from pg_mcp_server.logs import (
    MAX_LINE,
    MAX_TRACEBACK,
    QUIET,
    JsonFormatter,
    TextFormatter,
    configure_logging,
    resolve_format,
)


def record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("deep " + "y" * 20_000)
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("pg_mcp_server.test", logging.WARNING, __file__, 1, message, args,
                             exc_info)  # fmt: skip


def test_a_json_line_is_one_bounded_line() -> None:
    line = JsonFormatter().format(record("client sent %s", "x" * 900_000))
    assert "\n" not in line and len(line) < MAX_LINE + 200
    entry = json.loads(line)
    assert entry["level"] == "WARNING" and entry["message"].endswith("characters cut]")


def test_a_traceback_is_bounded_and_keeps_its_end() -> None:
    line = JsonFormatter().format(record("bug", exc=True))
    assert "\n" not in line and len(line) < MAX_LINE + MAX_TRACEBACK + 300
    trace = json.loads(line)["exception"]
    assert trace.startswith("[") and trace.rstrip().endswith("y")  # ValueError: deep yyy...


def test_text_escapes_what_could_forge_a_line() -> None:
    line = TextFormatter().format(record("tool %s", "x\nERROR pg_mcp_server: forged\x1b[31m"))
    assert "\n" not in line
    assert "x\\nERROR pg_mcp_server: forged\\x1b[31m" in line
    assert line.split(" ", 2)[1] == "WARNING"


def test_auto_format_is_json_unless_a_terminal() -> None:
    assert resolve_format("auto") == ("text" if sys.stderr.isatty() else "json")
    assert resolve_format("text") == "text" and resolve_format("json") == "json"


def test_third_party_chatter_is_quiet_unless_debugging(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in QUIET:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("INFO", "json")
        logging.getLogger("sqlalchemy.pool").info("checked out")
        logging.getLogger("uvicorn.access").info('"POST /mcp" 200')
        logging.getLogger("pg_mcp_server").info("ours")
        assert [json.loads(x)["message"] for x in stream.getvalue().splitlines()] == ["ours"]
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
