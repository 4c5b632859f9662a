"""execute_query (a 100-row SELECT) over Streamable HTTP against the SDK's floor (issue 5).

Starts a throwaway PostgreSQL 18, loads Pagila (../shared/datasets/pagila, with /usr/bin/psql),
VACUUM ANALYZEs it, then spawns six HTTP servers on loopback ports, all running at once:

- `pg-mcp-server --transport http` itself (run as `python -m pg_mcp_server`, one uvicorn
  worker), serving `execute_query` with SQL = QUERY;
- the same gateway app under uvicorn with `workers=2` (bench/http_constant_server.py --app
  ours, through an import-string factory), as uvicorn ships and with `--tcp-nodelay` (with
  more than one worker uvicorn's own listening socket makes asyncio leave Nagle on; see
  http_constant_server.py);
- the floor, bench/http_constant_server.py --app constant (an MCPServer whose tool returns 42,
  served the same way), with the same three worker set-ups.

The load client is this process: a small asyncio HTTP/1.1 client (asyncio.Protocol, one
keep-alive connection per concurrent caller, requests prebuilt as bytes) that sends raw
JSON-RPC `tools/call` POSTs, with no `initialize` (the server is stateless; each server's first
call is such a bare call). For each concurrency in CONCURRENCY and each server, interleaved,
REPEATS times (every other repeat in reverse order): WARMUP_S seconds of calls, then DURATION_S
seconds (at most MAX_CALLS calls) measured. A call is an error unless the answer is HTTP 200
with a JSON-RPC result that is not `isError`; every SAMPLE_EVERY-th answer is parsed in full
and checked (100 rows, or 42). Around each measured window the CPU time (user + system) of the
server's processes, of this process (the client) and of the PostgreSQL processes is read with
psutil, as is the whole machine's, so what other programs used shows too.

Afterwards a one-worker server of each kind runs alone at the highest concurrency for
PROFILE_S seconds under a CPU sampler (SIGPROF per tick of process CPU; its samples are split
into BUCKETS, ours beside the floor's), then under cProfile (top functions, own time by
package). py-spy is not installed, hence these two.

Run: uv run python bench/bench_http.py [--duration S] [--repeats N] [--skip-profile]
(~8.5 min; results in bench/HTTP.md). Everything listens on and connects to 127.0.0.1 only;
every loop is bounded in calls and time; the servers and PostgreSQL are stopped and removed
at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import pstats
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import asyncpg
import psutil
from benchlib import create_database, embedded_server, summary, top_functions

ROOT = Path(__file__).resolve().parents[1]
PAGILA = ROOT.parent / "shared" / "datasets" / "pagila"
PSQL = "/usr/bin/psql"
FLOOR_SERVER = Path(__file__).with_name("http_constant_server.py")

QUERY = "SELECT * FROM rental ORDER BY rental_id LIMIT 100"
CONCURRENCY = (1, 8, 32)
WARMUP_S = 2.0
DURATION_S = 10.0
MAX_CALLS = 100_000  # per measured run, whatever the duration
REPEATS = 2
PROFILE_S = 8.0
SAMPLE_EVERY = 50  # parse every n-th good answer in full
REQUEST_TIMEOUT_S = 30.0
START_TIMEOUT_S = 90.0
PROTOCOL_VERSION = "2025-11-25"
SETTINGS = {
    "PG_POOL_SIZE": "20",  # per worker process
    "MCP_MAX_CONCURRENT_REQUESTS": "64",  # per worker; above the highest concurrency
}


# --- what each server is and answers --------------------------------------------------------------


def _rows_ok(result: dict[str, Any]) -> bool:
    return int(result.get("structuredContent", {}).get("row_count", -1)) == 100


def _constant_ok(result: dict[str, Any]) -> bool:
    return result.get("structuredContent") == {"result": 42}


@dataclass(frozen=True, eq=False)  # compared and hashed by identity
class Spec:
    label: str
    kind: str  # "ours" or "floor"
    workers: int
    tool: str
    arguments: dict[str, Any]
    expect: Callable[[dict[str, Any]], bool]
    nodelay: bool = False  # --tcp-nodelay (see http_constant_server.py)

    def command(
        self, port: int, dsn: str, profile: Path | None = None, profiler: str = "cprofile"
    ) -> list[str]:
        if self.kind == "ours" and self.workers == 1 and profile is None:
            # what the console script runs (`pg-mcp-server` = pg_mcp_server.__main__:main)
            server = [sys.executable, "-m", "pg_mcp_server", "--transport", "http"]
            return [*server, "--port", str(port), "--dsn", dsn]
        app = "ours" if self.kind == "ours" else "constant"
        cmd = [sys.executable, str(FLOOR_SERVER), "--app", app, "--port", str(port)]
        cmd += ["--workers", str(self.workers)] + (["--tcp-nodelay"] if self.nodelay else [])
        return cmd + (["--profile", str(profile), "--profiler", profiler] if profile else [])


Call = tuple[str, dict[str, Any], Callable[[dict[str, Any]], bool]]  # tool, arguments, check
EXECUTE: Call = ("execute_query", {"sql": QUERY}, _rows_ok)
CONSTANT: Call = ("constant", {}, _constant_ok)
OURS_1 = Spec("pg-mcp-server, 1 worker", "ours", 1, *EXECUTE)
FLOOR_1 = Spec("floor, 1 worker", "floor", 1, *CONSTANT)
OURS_2 = Spec("pg-mcp-server, 2 workers", "ours", 2, *EXECUTE)
FLOOR_2 = Spec("floor, 2 workers", "floor", 2, *CONSTANT)
OURS_2N = Spec("pg-mcp-server, 2 workers + NODELAY", "ours", 2, *EXECUTE, nodelay=True)
FLOOR_2N = Spec("floor, 2 workers + NODELAY", "floor", 2, *CONSTANT, nodelay=True)
SPECS = (OURS_1, FLOOR_1, OURS_2, FLOOR_2, OURS_2N, FLOOR_2N)
PAIRS = ((OURS_1, FLOOR_1), (OURS_2, FLOOR_2), (OURS_2N, FLOOR_2N))  # judged side by side


def request_bytes(port: int, spec: Spec) -> bytes:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": spec.tool, "arguments": spec.arguments},
        },
        separators=(",", ":"),
    ).encode()
    head = (
        "POST /mcp HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: {PROTOCOL_VERSION}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


RESULT_PREFIX = b'{"jsonrpc":"2.0","id":1,"result":'


# --- the load client ------------------------------------------------------------------------------


class HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection, one request at a time; answers need Content-Length
    (the SDK's JSON responses and our gateway's all have it)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.status = 0
        self.need = -1  # bytes of head + body once the head is parsed
        self.head_len = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        self.buf += data
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.need < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).split(b"\r\n")
            self.status = int(head[0].split(b" ", 2)[1])
            length = next(
                (int(h[15:]) for h in head[1:] if h[:15].lower() == b"content-length:"), None
            )
            if length is None:
                waiter.set_exception(ConnectionError("answer without Content-Length"))
                return
            self.need = end + 4 + length
            self.head_len = end + 4
        if len(self.buf) >= self.need:
            body = bytes(self.buf[self.head_len : self.need])
            del self.buf[: self.need]
            self.need = -1
            waiter.set_result((self.status, body))

    def request(self, payload: bytes) -> asyncio.Future[tuple[int, bytes]]:
        if self.transport is None:
            raise ConnectionError("connection closed")
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(payload)
        return self.waiter

    def close(self) -> None:
        """Close; the next call through this slot opens a new connection."""
        if self.transport is not None:
            self.transport.close()
            self.transport = None


async def connect(port: int) -> HttpConnection:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(HttpConnection, "127.0.0.1", port)
    return conn


def full_check(spec: Spec, body: bytes) -> str | None:
    """None if `body` is the full, expected answer; else what is wrong."""
    try:
        message = json.loads(body)
    except ValueError:
        return f"not JSON: {body[:300]!r}"
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict) or result.get("isError"):
        return f"not a good result: {body[:300]!r}"
    return None if spec.expect(result) else f"unexpected result: {body[:300]!r}"


@dataclass
class Load:
    calls: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    first_error: str | None = None
    answer_bytes: int = 0

    def error(self, what: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = what


async def drive(
    port: int, spec: Spec, conns: list[HttpConnection], seconds: float, max_calls: int
) -> Load:
    """Each connection sends calls back to back until `seconds` or `max_calls` is reached."""
    payload = request_bytes(port, spec)
    load = Load()
    started = 0
    start = time.perf_counter()
    deadline = start + seconds

    async def caller(slot: int) -> None:
        nonlocal started
        good = 0
        while started < max_calls and time.perf_counter() < deadline:
            started += 1
            conn = conns[slot]
            t0 = time.perf_counter_ns()
            try:
                if conn.transport is None:
                    conn = conns[slot] = await connect(port)
                status, body = await asyncio.wait_for(conn.request(payload), REQUEST_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                load.calls += 1
                load.error(f"{type(exc).__name__}: {exc}")
                conn.close()
                await asyncio.sleep(0.01)
                continue
            load.latencies.append((time.perf_counter_ns() - t0) / 1e6)
            load.calls += 1
            load.answer_bytes = len(body)
            if status != 200 or not body.startswith(RESULT_PREFIX) or b'"isError":true' in body:
                load.error(f"HTTP {status}: {body[:300]!r}")
                continue
            good += 1
            if good % SAMPLE_EVERY == 1 and (problem := full_check(spec, body)):
                load.error(problem)

    await asyncio.gather(*(caller(i) for i in range(len(conns))))
    load.elapsed_s = time.perf_counter() - start
    return load


# --- CPU accounting ----------------------------------------------------------------------------

CpuSnapshot = dict[tuple[int, float], float]  # (pid, create time) -> user + system seconds


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def cpu_of(procs: list[psutil.Process]) -> CpuSnapshot:
    snap: CpuSnapshot = {}
    for proc in procs:
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                snap[(proc.pid, proc.create_time())] = times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return snap


def cpu_used(before: CpuSnapshot, after: CpuSnapshot) -> float:
    """Seconds used between the snapshots (a process that started in between counts whole)."""
    return sum(t - before.get(key, 0.0) for key, t in after.items())


def machine_busy() -> float:
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


@dataclass
class Measure:
    spec: Spec
    concurrency: int
    load: Load
    cpu_s: dict[str, float]  # server, client, postgres, other (rest of the machine)
    loadavg: float

    @property
    def rate(self) -> float:
        return self.load.calls / self.load.elapsed_s

    def cpu_ms_per_call(self, who: str) -> float:
        return 1000 * self.cpu_s[who] / max(1, self.load.calls)


# --- servers --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Running:
    spec: Spec
    proc: subprocess.Popen[bytes]
    port: int

    def processes(self) -> list[psutil.Process]:
        return tree(self.proc.pid)


async def call_once(port: int, spec: Spec) -> tuple[int, bytes]:
    conn = await connect(port)
    try:
        return await asyncio.wait_for(conn.request(request_bytes(port, spec)), REQUEST_TIMEOUT_S)
    finally:
        conn.close()


def wait_ready(running: Running) -> tuple[int, bytes]:
    """The first tools/call that answers (no initialize before it: the server is stateless)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if running.proc.poll() is not None:
            raise RuntimeError(f"{running.spec.label} exited during start-up")
        try:
            return asyncio.run(call_once(running.port, running.spec))
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextmanager
def serve(
    spec: Spec, dsn: str, logdir: Path, profile: Path | None = None, profiler: str = "cprofile"
) -> Iterator[Running]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "MCP_"))}
    env.update(SETTINGS, PG_DSN=dsn)
    name = spec.label.replace(" ", "").replace(",", "-").replace("(", "").replace(")", "")
    logfile = logdir / f"{name}{'-' + profiler if profile else ''}.log"
    with logfile.open("w") as log:
        proc = subprocess.Popen(
            spec.command(port, dsn, profile, profiler),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    running = Running(spec, proc, port)
    try:
        try:
            status, body = wait_ready(running)
        except (OSError, RuntimeError):
            print(logfile.read_text()[-3000:], file=sys.stderr)
            raise
        problem = full_check(spec, body) if status == 200 else f"HTTP {status}"
        if problem:
            raise RuntimeError(f"{spec.label}: first call failed: {problem}")
        yield running
    finally:
        stop(running)


def stop(running: Running) -> None:
    procs = running.processes()
    running.proc.terminate()
    try:
        running.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        running.proc.kill()
        running.proc.wait(timeout=10)
    for proc in procs[1:]:  # workers the supervisor left behind, if any
        with suppress(psutil.NoSuchProcess):
            proc.kill()


# --- runs -----------------------------------------------------------------------------------------


async def measure(running: Running, concurrency: int, pg_pid: int, duration_s: float) -> Measure:
    conns = [await connect(running.port) for _ in range(concurrency)]
    try:
        await drive(running.port, running.spec, conns, WARMUP_S, MAX_CALLS)
        me = [psutil.Process()]
        server, pg = running.processes(), tree(pg_pid)
        before = {"server": cpu_of(server), "client": cpu_of(me), "postgres": cpu_of(pg)}
        busy = machine_busy()
        load = await drive(running.port, running.spec, conns, duration_s, MAX_CALLS)
        busy = machine_busy() - busy
        server, pg = running.processes(), tree(pg_pid)
        after = {"server": cpu_of(server), "client": cpu_of(me), "postgres": cpu_of(pg)}
    finally:
        for conn in conns:
            conn.close()
    cpu_s = {who: cpu_used(before[who], after[who]) for who in before}
    cpu_s["other"] = max(0.0, busy - sum(cpu_s.values()))
    return Measure(running.spec, concurrency, load, cpu_s, os.getloadavg()[0])


def load_pagila(dsn: str) -> float:
    start = time.perf_counter()
    files = ("pagila-schema.sql", "pagila-data.sql")
    subprocess.run(
        [PSQL, "-X", "-v", "ON_ERROR_STOP=1", "-q", "-d", dsn]
        + [arg for f in files for arg in ("-f", str(PAGILA / f))]
        + ["-c", "VACUUM ANALYZE"],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    return time.perf_counter() - start


async def max_connections(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        value: str = await conn.fetchval("SHOW max_connections")
        return value
    finally:
        await conn.close()


def benchmark(
    dsn: str, pg_pid: int, logdir: Path, repeats: int, duration_s: float
) -> list[Measure]:
    results: list[Measure] = []
    with ExitStack() as stack:
        servers = {}
        for spec in SPECS:
            servers[spec] = stack.enter_context(serve(spec, dsn, logdir))
            status, body = asyncio.run(call_once(servers[spec].port, spec))
            print(
                f"{spec.label}: port {servers[spec].port}, tools/call {spec.tool} without "
                f"initialize -> HTTP {status}, {len(body):,} bytes",
                flush=True,
            )
        for repeat in range(repeats):
            for concurrency in CONCURRENCY:
                order = SPECS if repeat % 2 == 0 else tuple(reversed(SPECS))
                for spec in order:
                    m = asyncio.run(measure(servers[spec], concurrency, pg_pid, duration_s))
                    results.append(m)
                    print(
                        f"  repeat {repeat + 1} c={concurrency:<2} {spec.label:<34} "
                        f"{m.rate:7.1f} calls/s  p50 {summary(m.load.latencies)[0]:6.2f} ms  "
                        f"errors {m.load.errors}  cpu ms/call server "
                        f"{m.cpu_ms_per_call('server'):.2f} client "
                        f"{m.cpu_ms_per_call('client'):.2f} pg "
                        f"{m.cpu_ms_per_call('postgres'):.2f} other "
                        f"{m.cpu_ms_per_call('other'):.2f}  load {m.loadavg:.2f}"
                        + (f"  first error: {m.load.first_error}" if m.load.first_error else ""),
                        flush=True,
                    )
    return results


# --- profiles -------------------------------------------------------------------------------------

_STDLIB = re.compile(r"/lib/python3\.\d+/(?!site-packages)([\w]+)")
_PACKAGE = re.compile(r"/site-packages/([\w]+)")
_BUILTIN_OWNERS = (
    ("select.epoll", "(waiting: epoll)"),
    ("pydantic_core", "pydantic_core (C)"),
    ("asyncpg", "asyncpg (C)"),
    ("_json", "json (C)"),
    ("socket", "socket calls"),
    ("_asyncio", "asyncio (C)"),
    ("_contextvars", "asyncio (C)"),
    ("pglast", "pglast (C)"),
    ("_hashlib", "hashlib"),
    ("_io.", "io (file writes)"),
    ("posix.write", "io (file writes)"),
)


def owner(key: tuple[str, int, str]) -> str:
    """Which package a profiled function belongs to."""
    filename, _, name = key
    if "pg_mcp_server" in filename:
        return "pg_mcp_server (ours)"
    if m := _PACKAGE.search(filename):
        return m.group(1)
    if m := _STDLIB.search(filename):
        return f"stdlib {m.group(1)}"
    for marker, label in _BUILTIN_OWNERS:
        if marker in name:
            return label
    return "other built-ins"


def by_package(stats: pstats.Stats, calls: int) -> list[tuple[str, float, float]]:
    """(package, share of the non-waiting own time, ms per call under cProfile)."""
    totals: dict[str, float] = {}
    for key, value in stats.stats.items():  # type: ignore[attr-defined]  # untyped internals
        totals[owner(key)] = totals.get(owner(key), 0.0) + value[2]
    busy = sum(t for k, t in totals.items() if not k.startswith("(waiting"))
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])
    return [
        (k, t / busy if not k.startswith("(waiting") else 0.0, 1000 * t / calls) for k, t in ranked
    ]


def profile(
    spec: Spec, dsn: str, logdir: Path, concurrency: int, profiler: str
) -> tuple[Load, Path]:
    """PROFILE_S seconds of calls at `concurrency` against a one-worker server of `spec`'s kind
    with `profiler` ("cprofile" or "sample") on, after WARMUP_S seconds with it off."""
    path = logdir / f"{spec.kind}.{profiler}"
    with serve(spec, dsn, logdir, path, profiler) as running:

        async def run() -> Load:
            conns = [await connect(running.port) for _ in range(concurrency)]
            try:
                await drive(running.port, spec, conns, WARMUP_S, MAX_CALLS)
                os.kill(running.proc.pid, signal.SIGUSR1)
                await asyncio.sleep(0.1)
                load = await drive(running.port, spec, conns, PROFILE_S, MAX_CALLS)
                os.kill(running.proc.pid, signal.SIGUSR2)
            finally:
                for conn in conns:
                    conn.close()
            if load.errors:
                raise RuntimeError(f"profiled run had errors: {load.first_error}")
            return load

        load = asyncio.run(run())
        deadline = time.monotonic() + 30
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    return load, path


# --- report ---------------------------------------------------------------------------------------


def med(values: list[float]) -> float:
    return statistics.median(values)


def table(results: list[Measure]) -> tuple[list[str], dict[tuple[Spec, int], dict[str, float]]]:
    lines = [
        "| server | concurrency | calls/s | p50 (ms) | p95 (ms) | errors | server CPU ms/call "
        "| client CPU ms/call | PostgreSQL CPU ms/call | other CPU ms/call |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    cells: dict[tuple[Spec, int], dict[str, float]] = {}
    for spec in SPECS:
        for c in CONCURRENCY:
            runs = [m for m in results if m.spec == spec and m.concurrency == c]
            row = {
                "rate": med([m.rate for m in runs]),
                "p50": med([summary(m.load.latencies)[0] for m in runs]),
                "p95": med([summary(m.load.latencies)[1] for m in runs]),
                "errors": float(sum(m.load.errors for m in runs)),
                "calls": float(sum(m.load.calls for m in runs)),
            }
            for who in ("server", "client", "postgres", "other"):
                row[who] = med([m.cpu_ms_per_call(who) for m in runs])
            cells[(spec, c)] = row
            lines.append(
                f"| {spec.label} | {c} | {row['rate']:.0f} | {row['p50']:.2f} | {row['p95']:.2f} "
                f"| {row['errors']:.0f} / {row['calls']:.0f} | {row['server']:.2f} "
                f"| {row['client']:.2f} | {row['postgres']:.2f} | {row['other']:.2f} |"
            )
    return lines, cells


def verdicts(cells: dict[tuple[Spec, int], dict[str, float]]) -> list[str]:
    top = max(CONCURRENCY)
    lines = [
        f"| c={top}: ours vs floor | calls/s ours / floor | >= floor | p95 ours / floor (ms) "
        "| <= 2x | errors (ours) | pass |",
        "|---|---|---|---|---|---|---|",
    ]
    for ours, floor in PAIRS:
        o, f = cells[(ours, top)], cells[(floor, top)]
        rate_ok = o["rate"] >= f["rate"]
        p95_ok = o["p95"] <= 2 * f["p95"]
        errors_ok = o["errors"] == 0
        lines.append(
            f"| {ours.label} vs {floor.label} | {o['rate']:.0f} / {f['rate']:.0f} "
            f"({o['rate'] / f['rate']:.2f}x) | {'yes' if rate_ok else 'NO'} "
            f"| {o['p95']:.1f} / {f['p95']:.1f} ({o['p95'] / f['p95']:.2f}x) "
            f"| {'yes' if p95_ok else 'NO'} | {o['errors']:.0f} "
            f"| {'PASS' if rate_ok and p95_ok and errors_ok else 'FAIL'} |"
        )
    return lines


def environment() -> str:
    mods = ", ".join(
        f"{m} {version(m)}" for m in ("mcp", "uvicorn", "starlette", "h11", "asyncpg", "pydantic")
    )
    fast = [m for m in ("uvloop", "httptools") if _importable(m)]
    return (
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs; {mods}; uvicorn loop/http: "
        + (", ".join(fast) if fast else "asyncio + h11 (no uvloop, no httptools installed)")
    )


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=DURATION_S, help="measured seconds per run")
    p.add_argument("--repeats", type=int, default=REPEATS)
    p.add_argument("--skip-profile", action="store_true")
    args = p.parse_args()
    duration = min(max(args.duration, 1.0), 60.0)
    repeats = min(max(args.repeats, 1), 5)
    print(environment(), flush=True)
    load_start = os.getloadavg()[0]
    with embedded_server() as pg, tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp)
        dsn = asyncio.run(create_database(pg, "pagila"))
        print(f"Pagila loaded in {load_pagila(dsn):.1f} s; max_connections "
              f"{asyncio.run(max_connections(dsn))}; settings {SETTINGS}", flush=True)  # fmt: skip
        results = benchmark(dsn, pg.pid, logdir, repeats, duration)
        profiles = []
        if not args.skip_profile:
            top = max(CONCURRENCY)
            buckets = []
            for spec in (OURS_1, FLOOR_1):
                load, path = profile(spec, dsn, logdir, top, "sample")
                profiles.append(sample_report(spec, load, path))
                buckets.append(cpu_buckets(load, path))
            profiles.insert(0, buckets_table(*buckets))
            for spec in (OURS_1, FLOOR_1):
                load, path = profile(spec, dsn, logdir, top, "cprofile")
                profiles.append(profile_report(spec, load.calls, path))
    load_end = os.getloadavg()[0]
    lines, cells = table(results)
    print(
        f"\n{repeats} repeats, interleaved; each run {WARMUP_S:g} s warm-up then "
        f"{duration:g} s measured (at most {MAX_CALLS} calls); medians over repeats. "
        f"1-minute load average {load_start:.2f} at start, {load_end:.2f} at the end.\n"
    )
    print("\n".join(lines))
    print()
    print("\n".join(verdicts(cells)))
    print("\n".join(profiles))


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/src/", "/lib/python3.11/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


# Where a sample's CPU goes: the innermost of these functions on its stack (so each sample
# counts once). (label, file name ends with, function names)
BUCKETS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("ours: rows to JSON values (values.row_to_json)", "values.py", frozenset({"row_to_json"})),
    ("ours: SQL guard (guard.check)", "guard.py", frozenset({"check"})),
    (
        "ours: pool checkout, session reset (engine)",
        "database/engine.py",
        frozenset({"read_only", "_begin", "_end", "_release"}),
    ),
    (
        "ours: rest of run_query (prepare, fetch, json.dumps of each row for the size cap)",
        "queries.py",
        frozenset({"run_query"}),
    ),
    ("ours: ok() (model_dump_json + model_dump)", "registry.py", frozenset({"ok"})),
    (
        "ours: rest of execute_query (ExecuteQueryOutput validation, query_hash)",
        "query_tools.py",
        frozenset({"execute_query"}),
    ),
    (
        "SDK: result checked against the output schema (convert_result)",
        "func_metadata.py",
        frozenset({"convert_result"}),
    ),
    (
        "SDK: JSON-RPC response serialised (runner._serialize)",
        "runner.py",
        frozenset({"_serialize"}),
    ),
    (
        "SDK: request dispatch (jsonrpc_dispatcher, runner, otel, request_state)",
        "jsonrpc_dispatcher.py",
        frozenset({"run"}),
    ),
    ("logging (2 INFO lines per request)", "logging/__init__.py", frozenset({"_log"})),
    ("HTTP: uvicorn h11 response write", "h11_impl.py", frozenset({"send"})),
    ("HTTP: uvicorn h11 request parse", "h11_impl.py", frozenset({"data_received"})),
    (
        "HTTP app: gateway, Starlette, SDK streamable HTTP transport",
        "h11_impl.py",
        frozenset({"run_asgi"}),
    ),
    (
        "socket reads, asyncpg protocol (C) (selector _read_ready)",
        "selector_events.py",
        frozenset({"_read_ready"}),
    ),
)
OTHER_BUCKET = "event loop, anyio/asyncio tasks, the rest"


def cpu_buckets(load: Load, path: Path) -> dict[str, float]:
    """CPU ms per call in each of BUCKETS (and OTHER_BUCKET), from a CpuSampler file."""
    data = json.loads(path.read_text())
    total = sum(n for n, _ in data["samples"])
    ms_each = 1000 * float(data["cpu_s"]) / load.calls / total
    out = dict.fromkeys([b[0] for b in BUCKETS] + [OTHER_BUCKET], 0.0)
    for n, stack in data["samples"]:
        label = OTHER_BUCKET
        for filename, _, function in stack:  # leaf first: the innermost match wins
            match = next(
                (b[0] for b in BUCKETS if function in b[2] and filename.endswith(b[1])), None
            )
            if match:
                label = match
                break
        out[label] += n * ms_each
    return out


def buckets_table(ours: dict[str, float], floor: dict[str, float]) -> str:
    lines = [
        f"\n### Where the server's CPU goes at c={max(CONCURRENCY)} (CPU samples, ms per call)\n",
        "| part | pg-mcp-server execute_query | floor (constant) |",
        "|---|---|---|",
    ]
    for label in ours:
        lines.append(f"| {label} | {ours[label]:.3f} | {floor[label]:.3f} |")
    lines.append(f"| **total** | {sum(ours.values()):.2f} | {sum(floor.values()):.2f} |")
    return "\n".join(lines)


def sample_report(spec: Spec, load: Load, path: Path, rows: int = 25) -> str:
    """CPU by package and by Python line (leaf frames), and by function including callees."""
    data = json.loads(path.read_text())
    cpu_ms = 1000 * float(data["cpu_s"]) / load.calls  # the server's CPU per call, profiled
    samples: list[tuple[int, list[tuple[str, int, str]]]] = [
        (n, [(f, line, fn) for f, line, fn in stack]) for n, stack in data["samples"]
    ]
    total = sum(n for n, _ in samples)
    ms_each = cpu_ms / total  # one sample's share of a call's CPU
    packages: dict[str, int] = {}
    lines: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    for n, stack in samples:
        leaf = stack[0]
        packages[owner(leaf)] = packages.get(owner(leaf), 0) + n
        where = f"{_short(leaf[0])}:{leaf[1]} ({leaf[2]})"
        lines[where] = lines.get(where, 0) + n
        for name in {f"{_short(f)} {fn}" for f, _, fn in stack}:
            inclusive[name] = inclusive.get(name, 0) + n

    def table(title: str, counts: dict[str, int], limit: int) -> list[str]:
        out = [f"| {title} | CPU share | CPU ms/call |", "|---|---|---|"]
        for key, n in sorted(counts.items(), key=lambda kv: -kv[1])[:limit]:
            out.append(f"| {key} | {n / total:.1%} | {n * ms_each:.3f} |")
        return out

    # Functions on (nearly) every stack, such as the event loop's, say nothing.
    telling = {k: n for k, n in inclusive.items() if n < 0.97 * total}
    return "\n".join(
        [
            f"\n### CPU samples of {spec.label} at c={max(CONCURRENCY)}: {load.calls} calls in "
            f"{load.elapsed_s:.1f} s ({load.calls / load.elapsed_s:.0f} calls/s while sampled), "
            f"{total} samples over {float(data['cpu_s']):.2f} s of server CPU = "
            f"{cpu_ms:.2f} ms CPU per call\n",
            *table("package (own time of the Python frame on top)", packages, 16),
            "",
            *table("Python line on top (C calls are charged to the line making them)", lines, rows),
            "",
            *table("function, including what it calls", telling, rows + 15),
        ]
    )


def profile_report(spec: Spec, calls: int, path: Path) -> str:
    lines = [
        f"\n### cProfile of {spec.label} at c={max(CONCURRENCY)}: {calls} calls\n",
        "| package | share of busy time | ms/call under cProfile |",
        "|---|---|---|",
    ]
    for name, share, ms in by_package(pstats.Stats(str(path)), calls)[:16]:
        lines.append(f"| {name} | {share:.0%} | {ms:.3f} |")
    return "\n".join([*lines, "", top_functions(str(path))])


if __name__ == "__main__":
    main()
