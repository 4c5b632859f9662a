"""How long a stop signal takes to end an idle server, from the signal to the process's exit.

Starts `pg-mcp-server` (the installed entry point, as `uv run` would; `--uv` to go through
`uv run` as the tests do) in each way a user runs it: stdio and HTTP, against a database
(`--dsn`, an embedded PostgreSQL this script starts once) or with `--demo`, and HTTP with
`--workers 2`. It waits until the server answers (an `initialize` over stdio, `GET /health`
over HTTP), sends SIGINT or SIGTERM, and times the exit. Prints the median and the slowest of
`--runs` runs of each, and counts runs whose stderr holds a traceback.

    uv run python bench/bench_stop.py [--runs 5] [--uv] [--only stdio-demo,http-dsn]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import header

from pg_mcp_server.demo import start_demo

ROOT = Path(__file__).parents[1]
EXECUTABLE = str(Path(sys.executable).parent / "pg-mcp-server")
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
MODES = {
    "stdio-dsn": ["--transport", "stdio"],
    "stdio-demo": ["--transport", "stdio", "--demo"],
    "http-dsn": ["--transport", "http"],
    "http-demo": ["--transport", "http", "--demo"],
    "http-dsn-2w": ["--transport", "http", "--workers", "2"],
    "http-demo-2w": ["--transport", "http", "--demo", "--workers", "2"],
}
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}
START_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_stdio(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(INIT).encode() + b"\n")
    proc.stdin.flush()
    fd = proc.stdout.fileno()
    buffer = b""
    deadline = time.monotonic() + START_S
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise RuntimeError("no answer to initialize")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError("stdout closed")
            buffer += chunk
    assert json.loads(buffer.partition(b"\n")[0])["id"] == 1


def wait_http(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                conn.close()
                return
            conn.close()
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("no /health in time")


def one_stop(argv: list[str], env: dict[str, str], sig: signal.Signals) -> tuple[float, bool]:
    """Seconds from the signal to the exit, and whether stderr holds a traceback."""
    port = free_port()
    http_mode = "http" in argv
    if http_mode:
        argv = [*argv, "--port", str(port)]
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=ROOT,
        )
        try:
            if http_mode:
                wait_http(proc, port)
            else:
                wait_stdio(proc)
            started = time.monotonic()
            proc.send_signal(sig)
            code = proc.wait(60)
            elapsed = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        stderr.seek(0)
        log = stderr.read().decode(errors="replace")
    if code != 0:
        raise RuntimeError(f"exit code {code}:\n{log[-2000:]}")
    if "Traceback" in log:
        print(f"traceback on stderr:\n{log[-3000:]}", file=sys.stderr, flush=True)
        return elapsed, True
    return elapsed, False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--uv", action="store_true", help="start through `uv run`")
    parser.add_argument("--only", help="comma-separated modes: " + ",".join(MODES))
    args = parser.parse_args()
    modes = args.only.split(",") if args.only else list(MODES)
    if args.uv:
        uv = os.environ.get("UV") or shutil.which("uv")
        assert uv, "uv not found"
        command = [uv, "run", "pg-mcp-server"]
    else:
        command = [EXECUTABLE]
    print(header(), flush=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "MCP_"))}
    env.pop("DATABASE_URL", None)
    env["MCP_LOG_FORMAT"] = "json"
    print(f"{'mode':<14} {'signal':<8} {'median s':>9} {'max s':>7}  tracebacks")
    with start_demo() as dsn:
        for mode in modes:
            argv = [*command, *MODES[mode]]
            if "--demo" not in argv:
                argv += ["--dsn", dsn]
            for name, sig in SIGNALS.items():
                times, tracebacks = [], 0
                for _ in range(args.runs):
                    elapsed, traceback = one_stop(argv, env, sig)
                    times.append(elapsed)
                    tracebacks += traceback
                print(
                    f"{mode:<14} {name:<8} {statistics.median(times):>9.2f} {max(times):>7.2f}"
                    f"  {tracebacks}/{args.runs}",
                    flush=True,
                )
    print(header(), flush=True)


if __name__ == "__main__":
    main()
