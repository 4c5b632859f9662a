"""Starting and stopping as users do: `uv run pg-mcp-server`, signals, end of input, a terminal.

SIGINT, SIGTERM, SIGHUP and end of input each end an idle server within a second (the bound
checked here is 1.5 s, for a busy machine; measured figures: bench/bench_stop.py, README), over
stdio and HTTP, with and without the demo and with workers. No PostgreSQL process the demo
started outlives it, and its temporary directory is deleted (by a process of its own, just
after the exit), also when the terminal it runs in is closed or gets a Ctrl-C.
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
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from eventually import wait_for
from serverproc import EXECUTABLE, ROOT, Server, clean_env, free_port, gone, uv_run

STOP_S = 1.5  # from the signal to the exit of an idle server (README: "within a second")
DELETED_S = 30.0  # the demo's files are deleted after the exit, by a process of its own
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
        elapsed = stop(server, how)
        assert server.proc.returncode == 0
        assert elapsed < STOP_S, f"took {elapsed:.2f} s"
        # The process waits for its PostgreSQL to stop: nothing may be left at its exit.
        assert all(gone(pid) for pid in pids), "a PostgreSQL process outlived the server"
        assert wait_for(lambda: not files.exists(), DELETED_S), "the demo's files were kept"
        assert "Traceback" not in server.stderr_path.read_text()


def test_a_killed_demo_leaves_nothing_behind_either(tmp_path: Path) -> None:
    """SIGKILL runs no exit hook, and pg_ctl daemonised the postmaster: the server's watchdog
    (embedded._WATCH) sees the server gone, stops PostgreSQL and deletes its files. (A client
    that kills a server slow to stop left a demo PostgreSQL running before.)"""
    server = Server([EXECUTABLE, "--demo"], clean_env(), tmp_path / "stderr.log")
    try:
        server.initialize()
        pids, files = demo_processes(server)
        server.proc.kill()
        server.proc.wait(timeout=10)
        assert wait_for(lambda: all(gone(pid) for pid in pids), 20), "PostgreSQL outlived it"
        assert wait_for(lambda: not files.exists(), DELETED_S), "the demo's files were kept"
    finally:
        server.close()


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


HTTP_CASES = [
    (["--dsn"], signal.SIGINT),
    (["--dsn"], signal.SIGTERM),
    (["--dsn", "--workers", "2"], signal.SIGTERM),
    (["--demo"], signal.SIGINT),
    (["--demo", "--workers", "2"], signal.SIGTERM),
]


@pytest.mark.parametrize(
    ("args", "how"),
    HTTP_CASES,
    ids=[" ".join(a).replace("--", "") + "-" + h.name for a, h in HTTP_CASES],
)
def test_http_stops_within_a_second(
    tmp_path: Path, demo_dsn: str, args: list[str], how: signal.Signals
) -> None:
    port = free_port()
    argv = [a if a != "--dsn" else f"--dsn={demo_dsn}" for a in args]
    with running(tmp_path, "--transport", "http", "--port", str(port), *argv) as server:
        assert wait_for(lambda: healthy(port) or server.proc.poll() is not None, 120)
        assert server.proc.poll() is None, server.stderr_path.read_text()
        pids, files = demo_processes(server) if "--demo" in args else ([], None)
        elapsed = stop(server, how)
        assert server.proc.returncode == 0
        assert elapsed < STOP_S, f"took {elapsed:.2f} s"
        assert all(gone(pid) for pid in pids), "a PostgreSQL process outlived the server"
        if files is not None:
            assert wait_for(lambda: not files.exists(), DELETED_S)
        assert "Traceback" not in server.stderr_path.read_text()


# One demo stop in a dozen used to end with a FileNotFoundError traceback from the clean-up
# (two clean-ups of the same files); the cause is fixed, this keeps it so, with a fixed
# number of stops: a time budget filled with as many as fit (30 s, 10-15 stops on an idle
# machine, 8 on a busy one) made the passing test always wait it out, the suite's longest.
# bench/bench_stop.py runs 50 (README).
RUNS = 8


def test_the_demo_stops_cleanly_again_and_again(tmp_path: Path) -> None:
    started, runs = time.monotonic(), 0
    while runs < RUNS:
        how = (signal.SIGINT, signal.SIGTERM)[runs % 2]
        server = Server([EXECUTABLE, "--demo"], clean_env(), tmp_path / f"stderr{runs}.log")
        try:
            server.initialize()
            pids, files = demo_processes(server)
            elapsed = stop(server, how)
            log = server.stderr_path.read_text()
            assert server.proc.returncode == 0, log
            assert "Traceback" not in log and "Error" not in log, log
            assert elapsed < STOP_S, f"run {runs}: took {elapsed:.2f} s"
            assert all(gone(pid) for pid in pids)
            assert wait_for(lambda: not files.exists(), DELETED_S)  # noqa: B023 (waited here)
        finally:
            server.close()
        runs += 1
    print(f"{runs} demo stops in {time.monotonic() - started:.0f} s")


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
            # Stopped as a user would first, so that the server stops its PostgreSQL (whose
            # postmaster pg_ctl made no child of it: killing the server alone would leave it).
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
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
    assert wait_for(lambda: not files.exists(), DELETED_S)


def test_ctrl_c_in_the_terminal_stops_everything(terminal: Terminal) -> None:
    pids, files = _serving_in(terminal)
    os.write(terminal.master, b"\x03")  # the terminal sends SIGINT to its foreground group
    assert wait_for(lambda: terminal.proc.poll() is not None, 30)
    assert terminal.proc.returncode == 0
    assert all(gone(pid) for pid in pids)
    assert wait_for(lambda: not files.exists(), DELETED_S)
    with pytest.raises(AssertionError):  # read what is left, up to the terminal's end
        terminal.read_until("never printed", timeout=5)
    assert "Traceback" not in terminal.output
