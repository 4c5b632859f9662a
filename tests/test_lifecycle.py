"""Starting and stopping as users do: `uv run pg-mcp-server`, signals, end of input, a terminal.

SIGINT, SIGTERM, SIGHUP and end of input each end the server within a second, and nothing the
demo started (its PostgreSQL processes, its temporary directory) outlives it, also when the
terminal it runs in is closed or gets a Ctrl-C.
"""

from __future__ import annotations

import fcntl
import os
import re
import selectors
import signal
import subprocess
import termios
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from serverproc import ROOT, Server, clean_env, gone, uv_run, wait_for

STOP_S = 1.0
HOW = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, "eof"]
IDS = ["SIGINT", "SIGTERM", "SIGHUP", "eof"]


@contextmanager
def running(tmp_path: Path, *args: str) -> Iterator[Server]:
    server = Server(uv_run(*args), clean_env(), tmp_path / "stderr.log")
    try:
        yield server
    finally:
        server.close()


def stop(server: Server, how: signal.Signals | str) -> float:
    """Stop the server `how` (a signal to `uv run`, which passes it on, or end of input);
    the seconds until the process is gone."""
    started = time.monotonic()
    if how == "eof":
        assert server.proc.stdin is not None
        server.proc.stdin.close()
    else:
        assert isinstance(how, signal.Signals)
        server.proc.send_signal(how)
    server.proc.wait(60)
    return time.monotonic() - started


def demo_processes(server: Server) -> tuple[list[int], Path]:
    """The demo's PostgreSQL processes (postmaster and children) and its directory."""
    pid, files = server.embedded()
    postmaster = psutil.Process(pid)
    assert postmaster.name() == "postgres" and files.is_dir()
    return [pid, *(c.pid for c in postmaster.children())], files


@pytest.mark.parametrize("how", HOW, ids=IDS)
def test_stops_within_a_second(tmp_path: Path, demo_dsn: str, how: signal.Signals | str) -> None:
    with running(tmp_path, "--dsn", demo_dsn) as server:
        server.initialize()
        server.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        assert server.read()["id"] == 2  # serving
        elapsed = stop(server, how)
        assert server.proc.returncode == 0
        assert elapsed < STOP_S, f"took {elapsed:.2f} s"
        assert "Traceback" not in server.stderr_path.read_text()


@pytest.mark.parametrize("how", HOW, ids=IDS)
def test_the_demo_leaves_nothing_behind(tmp_path: Path, how: signal.Signals | str) -> None:
    with running(tmp_path, "--demo") as server:
        server.initialize()
        pids, files = demo_processes(server)
        stop(server, how)
        assert server.proc.returncode == 0
        # The process waits for its PostgreSQL to stop: nothing may be left at its exit.
        assert all(gone(pid) for pid in pids), "a PostgreSQL process outlived the server"
        assert not files.exists(), "the demo's directory outlived the server"
        assert "Traceback" not in server.stderr_path.read_text()


class Terminal:
    """`uv run pg-mcp-server ARGS` in a pseudo-terminal of its own, as from a shell."""

    def __init__(self, *args: str) -> None:
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen(
            uv_run(*args),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=clean_env(TERM="dumb"),
            cwd=ROOT,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.output = ""

    def read_until(self, pattern: str, timeout: float = 90.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.master, selectors.EVENT_READ)
            while not (match := re.search(pattern, self.output)):
                left = deadline - time.monotonic()
                assert left > 0 and selector.select(left), f"no {pattern!r} in:\n{self.output}"
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # EIO: every process on the terminal has closed it
                    chunk = b""
                assert chunk, f"terminal closed before {pattern!r}:\n{self.output}"
                self.output += chunk.decode(errors="replace")
        return match

    def close(self) -> None:
        if self.master >= 0:
            os.close(self.master)
            self.master = -1
        if self.proc.poll() is None:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                child.kill()
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal("--demo")
    try:
        yield term
    finally:
        term.close()


def _serving_in(term: Terminal) -> tuple[list[int], Path]:
    """Wait until the demo serves in `term` (an initialize typed in is answered)."""
    started = term.read_until(r"embedded PostgreSQL started \(pid (\d+), files in (\S+)\)")
    term.read_until("demo database ready")
    os.write(term.master, b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{'
             b'"protocolVersion":"2025-11-25","capabilities":{},'
             b'"clientInfo":{"name":"t","version":"1"}}}\n')  # fmt: skip
    term.read_until(r'\{"jsonrpc":"2.0","id":1,"result"')
    pid = int(started.group(1))
    return [pid, *(c.pid for c in psutil.Process(pid).children())], Path(started.group(2))


def test_a_terminal_user_is_told_what_this_is(terminal: Terminal) -> None:
    terminal.read_until("Stop it with Ctrl-C")
    assert "speaks MCP (JSON-RPC) on stdin and stdout" in terminal.output
    assert "npx -y -p node@22 -p @modelcontextprotocol/inspector@2.12.0 -c" in terminal.output
    assert "pg-mcp-server --demo --method tools/list" in terminal.output
    _serving_in(terminal)
    # Logs in a terminal are text for a person, not JSON.
    assert re.search(r"\d\d:\d\d:\d\d INFO pg_mcp_server\.embedded: embedded", terminal.output)


def test_closing_the_terminal_stops_everything(terminal: Terminal) -> None:
    pids, files = _serving_in(terminal)
    os.close(terminal.master)  # the terminal window closes: SIGHUP to the session
    terminal.master = -1
    assert wait_for(lambda: terminal.proc.poll() is not None, 30)
    assert wait_for(lambda: all(gone(pid) for pid in pids), 5), "PostgreSQL outlived the server"
    assert not files.exists()


def test_ctrl_c_in_the_terminal_stops_everything(terminal: Terminal) -> None:
    pids, files = _serving_in(terminal)
    os.write(terminal.master, b"\x03")  # the terminal sends SIGINT to its foreground group
    assert wait_for(lambda: terminal.proc.poll() is not None, 30)
    assert terminal.proc.returncode == 0
    assert all(gone(pid) for pid in pids) and not files.exists()
    with pytest.raises(AssertionError):  # read what is left, up to the terminal's end
        terminal.read_until("never printed", timeout=5)
    assert "Traceback" not in terminal.output
