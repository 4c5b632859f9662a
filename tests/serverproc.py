"""The real entry point as a user starts it (`uv run pg-mcp-server ...`), and what it leaves.

Helpers for tests that spawn the server: a clean environment (no PG_* / MCP_* of the caller),
lines read from its stdout with a deadline, its JSON log lines, and waiting on a condition.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

ROOT = Path(__file__).parents[1]
EXECUTABLE = str(Path(sys.executable).parent / "pg-mcp-server")
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
_STARTED = re.compile(r"embedded PostgreSQL started \(pid (\d+), files in (.+)\)")


def uv_run(*args: str) -> list[str]:
    """`uv run pg-mcp-server ARGS`, with the uv that runs these tests (`uv run` sets UV)."""
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv is needed to start the server as users do"
    return [uv, "run", "pg-mcp-server", *args]


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without its settings, except that the test PostgreSQL's
    superuser is allowed (MCP_ALLOW_PRIVILEGED_ROLE; pass "false" to see the refusal)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "MCP_"))}
    env.pop("DATABASE_URL", None)
    env["MCP_ALLOW_PRIVILEGED_ROLE"] = "true"
    env.update(extra)
    return env


def gone(pid: int) -> bool:
    """No such process (a zombie waiting for its parent counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Server:
    """A spawned server speaking over pipes; stderr goes to a file (`log_lines()`)."""

    def __init__(self, argv: list[str], env: dict[str, str], stderr: Path) -> None:
        self.stderr_path = stderr
        self._stderr: IO[bytes] = stderr.open("wb")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=ROOT,
        )
        self._buffer = b""

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 60.0) -> dict[str, Any]:
        """The next message the server writes on stdout."""
        line = self.read_line(timeout)
        message: dict[str, Any] = json.loads(line)
        return message

    def read_line(self, timeout: float = 60.0) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                assert left > 0 and selector.select(left), "no answer in time"
                chunk = os.read(fd, 1 << 20)
                assert chunk, f"stdout closed; log:\n{self.stderr_path.read_text()[-3000:]}"
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def initialize(self, timeout: float = 90.0) -> dict[str, Any]:
        self.send(INIT)
        reply = self.read(timeout)
        assert reply["id"] == 1 and "result" in reply, reply
        self.send(INITIALIZED)
        return reply

    def log_lines(self) -> list[str]:
        """The messages of the JSON log lines on stderr so far."""
        lines = []
        for raw in self.stderr_path.read_text(errors="replace").splitlines():
            try:
                lines.append(json.loads(raw)["message"])
            except (ValueError, KeyError, TypeError):
                lines.append(raw)
        return lines

    def embedded(self) -> tuple[int, Path]:
        """The demo's postmaster pid and its directory, from the log."""
        for line in self.log_lines():
            if match := _STARTED.search(line):
                return int(match.group(1)), Path(match.group(2))
        raise AssertionError("no embedded PostgreSQL in the log")

    def close(self) -> None:
        """Stop what is left (a test that failed, or left its server running): SIGTERM first,
        as a user would, so that the server stops its embedded PostgreSQL (pg_ctl made the
        postmaster no child of it); then SIGKILL to the server's own processes (`uv run`
        cannot pass SIGKILL on), never to the watchdog that stops PostgreSQL once they are
        gone (embedded._WATCH)."""
        if self.proc.poll() is None:
            servers = [self.proc.pid]
            with contextlib.suppress(psutil.NoSuchProcess):
                servers += [
                    child.pid
                    for child in psutil.Process(self.proc.pid).children(recursive=True)
                    if any("pg-mcp-server" in part for part in child.cmdline())
                ]
            processes = []
            for pid in servers:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process = psutil.Process(pid)
                    process.terminate()
                    processes.append(process)
            _, alive = psutil.wait_procs(processes, timeout=10)
            for process in alive:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


def http_answers(proc: subprocess.Popen[Any], base: str) -> bool:
    """Whether the HTTP server `proc` answers /health at `base` yet (for wait_for); it must
    not have exited meanwhile."""
    import httpx2 as httpx

    assert proc.poll() is None, "server exited during start-up"
    try:
        httpx.get(base + "/health", timeout=2)
    except httpx.TransportError:  # not listening yet
        return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on now (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Running:
    base: str
    proc: subprocess.Popen[bytes]

    @property
    def mcp(self) -> str:
        return self.base + "/mcp"


@contextmanager
def http_server(
    dsn: str, *args: str, stderr: Path | None = None, wait_s: float = 30, **env: str
) -> Iterator[Running]:
    """The server over HTTP on a free loopback port, with `env` added to a clean
    environment, its stderr to `stderr`; stopped (SIGTERM, then SIGKILL) when left."""
    from eventually import wait_for

    port = free_port()
    log = stderr.open("wb") if stderr is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        [EXECUTABLE, "--transport", "http", "--port", str(port), "--dsn", dsn, *args],
        env=clean_env(**env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_for(lambda: http_answers(proc, base), wait_s):
            said = stderr.read_text()[-3000:] if stderr is not None else ""
            raise AssertionError(f"the server did not listen in {wait_s:g} s {said}")
        yield Running(base, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
        if not isinstance(log, int):
            log.close()
