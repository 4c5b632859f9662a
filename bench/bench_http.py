"""execute_query (a 100-row SELECT) over Streamable HTTP against the SDK's floor (issue 5).

Starts a throwaway PostgreSQL 18, loads Pagila (../shared/datasets/pagila, with /usr/bin/psql),
VACUUM ANALYZEs it, then spawns four HTTP servers on loopback ports, all running at once:

- `pg-mcp-server --transport http` itself (run as `python -m pg_mcp_server`, the console
  script's `main()`), with `--workers 1` and with `--workers 2`, serving `execute_query` with
  SQL = QUERY;
- the floor, bench/http_constant_server.py --app constant (an MCPServer whose tool returns 42,
  served the same way, under uvicorn's defaults like ours, so uvloop and httptools when they
  are installed), with 1 and 2 workers.

Two load clients, chosen with --client (raw, sdk or both; both share the running servers):

- raw (the default): this process runs a small asyncio HTTP/1.1 client (asyncio.Protocol, one
  keep-alive connection per concurrent caller, requests prebuilt as bytes) that sends raw
  JSON-RPC `tools/call` POSTs, with no `initialize` (the server is stateless; each server's
  first call is such a bare call). A call is an error unless the answer is HTTP 200 with a
  JSON-RPC result that is not `isError`; every SAMPLE_EVERY-th answer is parsed in full and
  checked (100 rows, or 42). It costs ~0.1-0.3 ms of CPU per call: it measures the server.
- sdk: the SDK's own client, `mcp.Client(url)` (Streamable HTTP), one session per concurrent
  caller, all in this process, each calling `call_tool` in a loop. The client validates
  structured content against the tool's output schema (its default, left on). A call is an
  error if `call_tool` raises or returns `isError`; every SAMPLE_EVERY-th good result is
  checked (100 rows, or 42). It costs several ms of CPU per call: it measures what an
  SDK-based agent sees, as the issue's reference figure (~175 calls/s) did.

For each client, each concurrency in CONCURRENCY and each server, interleaved, REPEATS times
(every other repeat in reverse order): WARMUP_S seconds of calls, then the measured duration (at
most MAX_CALLS calls). Around each measured window the CPU time (user + system) of the server's
processes, of this process (the client) and of the PostgreSQL processes is read with psutil, as
is the whole machine's, so what other programs used shows too.

Afterwards (unless --skip-profile) a one-worker server of each kind runs alone at the highest
concurrency, loaded by the raw client, for PROFILE_S seconds under a CPU sampler (SIGPROF per
tick of process CPU; its samples are split into BUCKETS, ours beside the floor's), then under
cProfile (top functions, own time by package). py-spy is not installed, hence these two. The
profiled "ours" is http_constant_server.py --app ours: the same gateway app in a process that
can be told when to profile.

Run: uv run python bench/bench_http.py [--client raw|sdk|both] [--duration S] [--repeats N]
[--sdk-duration S] [--sdk-repeats N] [--skip-profile] (results in bench/HTTP.md). Everything
listens on and connects to 127.0.0.1 only; every loop is bounded in calls and time; the
servers and PostgreSQL are stopped and removed at the end.
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
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import psutil
from benchlib import create_database, embedded_server, load_pagila, summary, top_functions
from mcp import Client
from mcp.types import CallToolResult

ROOT = Path(__file__).resolve().parents[1]
FLOOR_SERVER = Path(__file__).with_name("http_constant_server.py")

QUERY = "SELECT * FROM rental ORDER BY rental_id LIMIT 100"
CONCURRENCY = (1, 8, 32)
WARMUP_S = 2.0
DURATION_S = 10.0
MAX_CALLS = 100_000  # per measured run, whatever the duration
REPEATS = 2  # raw client
SDK_REPEATS = 2
PROFILE_S = 8.0
SAMPLE_EVERY = 50  # parse every n-th good answer in full
REQUEST_TIMEOUT_S = 30.0
START_TIMEOUT_S = 90.0
MODERN_PROTOCOL = "2026-07-28"  # what mcp.Client settles on with these servers (printed)
HANDSHAKE_PROTOCOL = "2025-11-25"  # the last handshake-era version (initialize; not needed here)
raw_protocol = MODERN_PROTOCOL  # the raw client's; --raw-protocol
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

    def command(
        self, port: int, dsn: str, profile: Path | None = None, profiler: str = "cprofile"
    ) -> list[str]:
        if self.kind == "ours" and profile is None:
            # what the console script runs (`pg-mcp-server` = pg_mcp_server.__main__:main)
            server = [sys.executable, "-m", "pg_mcp_server", "--transport", "http"]
            return [*server, "--workers", str(self.workers), "--port", str(port), "--dsn", dsn]
        app = "ours" if self.kind == "ours" else "constant"
        cmd = [sys.executable, str(FLOOR_SERVER), "--app", app, "--port", str(port)]
        cmd += ["--workers", str(self.workers)]
        return cmd + (["--profile", str(profile), "--profiler", profiler] if profile else [])


Call = tuple[str, dict[str, Any], Callable[[dict[str, Any]], bool]]  # tool, arguments, check
EXECUTE: Call = ("execute_query", {"sql": QUERY}, _rows_ok)
CONSTANT: Call = ("constant", {}, _constant_ok)
OURS_1 = Spec("pg-mcp-server, 1 worker", "ours", 1, *EXECUTE)
FLOOR_1 = Spec("floor, 1 worker", "floor", 1, *CONSTANT)
OURS_2 = Spec("pg-mcp-server, 2 workers", "ours", 2, *EXECUTE)
FLOOR_2 = Spec("floor, 2 workers", "floor", 2, *CONSTANT)
SPECS = (OURS_1, FLOOR_1, OURS_2, FLOOR_2)
PAIRS = ((OURS_1, FLOOR_1), (OURS_2, FLOOR_2))  # judged side by side
CLIENTS = ("raw", "sdk")


def request_bytes(port: int, spec: Spec) -> bytes:
    """The raw client's `tools/call` POST. In the 2026-07-28 protocol each request carries its
    envelope (`params._meta`: protocol version, client info and capabilities) and the
    `Mcp-Method` / `Mcp-Name` headers, as mcp.Client sends them; in 2025-11-25 neither (the
    stateless server takes a bare call without `initialize`)."""
    params: dict[str, Any] = {"name": spec.tool, "arguments": spec.arguments}
    extra = ""
    if raw_protocol == MODERN_PROTOCOL:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": raw_protocol,
            "io.modelcontextprotocol/clientInfo": {"name": "bench_http", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        extra = f"Mcp-Method: tools/call\r\nMcp-Name: {spec.tool}\r\n"
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    body = json.dumps(message, separators=(",", ":")).encode()
    head = (
        "POST /mcp HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: {raw_protocol}\r\n{extra}"
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


async def open_connections(port: int, spec: Spec, n: int) -> list[HttpConnection]:
    """`n` connections, each opened after the previous one has answered a call, as the SDK's
    sessions are opened. (Opened back to back, they all land in one uvicorn worker: see
    connections_per_process.)"""
    conns: list[HttpConnection] = []
    for _ in range(n):
        conn = await connect(port)
        conns.append(conn)
        await asyncio.wait_for(conn.request(request_bytes(port, spec)), REQUEST_TIMEOUT_S)
    return conns


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


T = TypeVar("T")


class CallFailed(Exception):
    """A call that got no answer at all (transport error, timeout)."""


async def run_load(
    slots: int,
    call: Callable[[int], Awaitable[T]],
    problem: Callable[[T], str | None],
    sample: Callable[[T], str | None],
    seconds: float,
    max_calls: int,
) -> Load:
    """`slots` callers make calls back to back until `seconds` or `max_calls` is reached.
    `call(slot)` makes one (raising CallFailed when nothing came back), `problem` checks
    every answer quickly, `sample` checks every SAMPLE_EVERY-th good one in full."""
    load = Load()
    started = 0
    start = time.perf_counter()
    deadline = start + seconds

    async def caller(slot: int) -> None:
        nonlocal started
        good = 0
        while started < max_calls and time.perf_counter() < deadline:
            started += 1
            t0 = time.perf_counter_ns()
            try:
                answer = await call(slot)
            except CallFailed as exc:
                load.calls += 1
                load.error(str(exc))
                await asyncio.sleep(0.01)
                continue
            load.latencies.append((time.perf_counter_ns() - t0) / 1e6)
            load.calls += 1
            if wrong := problem(answer):
                load.error(wrong)
                continue
            good += 1
            if good % SAMPLE_EVERY == 1 and (wrong := sample(answer)):
                load.error(wrong)

    await asyncio.gather(*(caller(i) for i in range(slots)))
    load.elapsed_s = time.perf_counter() - start
    return load


async def drive(
    port: int, spec: Spec, conns: list[HttpConnection], seconds: float, max_calls: int
) -> Load:
    """The raw client: each connection sends the prebuilt request back to back."""
    payload = request_bytes(port, spec)
    answer_bytes = 0

    async def call(slot: int) -> tuple[int, bytes]:
        nonlocal answer_bytes
        conn = conns[slot]
        try:
            if conn.transport is None:
                conn = conns[slot] = await connect(port)
            status, body = await asyncio.wait_for(conn.request(payload), REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            conn.close()
            raise CallFailed(f"{type(exc).__name__}: {exc}") from None
        answer_bytes = len(body)
        return status, body

    def problem(answer: tuple[int, bytes]) -> str | None:
        status, body = answer
        if status != 200 or not body.startswith(RESULT_PREFIX) or b'"isError":true' in body:
            return f"HTTP {status}: {body[:300]!r}"
        return None

    load = await run_load(
        len(conns), call, problem, lambda a: full_check(spec, a[1]), seconds, max_calls
    )
    load.answer_bytes = answer_bytes
    return load


# --- the SDK's client -----------------------------------------------------------------------------


async def sdk_sessions(stack: AsyncExitStack, port: int, n: int) -> list[Client]:
    """`n` connected `mcp.Client` sessions (Streamable HTTP), closed when `stack` closes."""
    url = f"http://127.0.0.1:{port}/mcp"
    return [
        await stack.enter_async_context(Client(url, read_timeout_seconds=REQUEST_TIMEOUT_S))
        for _ in range(n)
    ]


async def sdk_protocol(port: int) -> str:
    """The protocol version an `mcp.Client` session settles on with the server at `port`."""
    async with AsyncExitStack() as stack:
        (client,) = await sdk_sessions(stack, port, 1)
        return client.protocol_version


def sdk_problem(spec: Spec, result: CallToolResult) -> str | None:
    """None if `result` is the full, expected answer; else what is wrong."""
    if result.is_error:
        return f"isError: {str(result.content)[:300]}"
    if spec.expect({"structuredContent": result.structured_content}):
        return None
    return f"unexpected result: {str(result.structured_content)[:300]}"


async def drive_sdk(spec: Spec, clients: list[Client], seconds: float, max_calls: int) -> Load:
    """The SDK's client: each session calls `call_tool` back to back."""

    async def call(slot: int) -> CallToolResult:
        try:
            return await asyncio.wait_for(
                clients[slot].call_tool(spec.tool, spec.arguments), REQUEST_TIMEOUT_S
            )
        except Exception as exc:  # any failure of the call is an error of the run
            raise CallFailed(f"{type(exc).__name__}: {str(exc)[:300]}") from None

    def problem(result: CallToolResult) -> str | None:
        return (sdk_problem(spec, result) or "isError") if result.is_error else None

    return await run_load(
        len(clients), call, problem, lambda r: sdk_problem(spec, r), seconds, max_calls
    )


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
    client: str  # "raw" or "sdk"
    spec: Spec
    concurrency: int
    load: Load
    cpu_s: dict[str, float]  # server, client, postgres, other (rest of the machine)
    loadavg: float
    spread: list[int]  # the client's connections each server process holds (workers only)

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


def connections_per_process(running: Running) -> list[int]:
    """How many established connections to the server's port each of its processes holds
    (those holding none, such as uvicorn's supervisor, left out)."""
    counts = []
    for proc in running.processes():
        try:
            conns = proc.net_connections("tcp")
        except psutil.NoSuchProcess:
            continue
        n = sum(
            1
            for c in conns
            if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == running.port
        )
        if n:
            counts.append(n)
    return sorted(counts, reverse=True)


def native_stack(running: Running) -> str:
    """Which of uvloop and httptools each of the server's processes has loaded."""
    out = []
    for proc in running.processes():
        try:
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
        except OSError:
            continue
        have = [m for m in ("uvloop", "httptools") if f"/{m}/" in maps]
        out.append(f"pid {proc.pid}: {' + '.join(have) or 'neither'}")
    return "; ".join(out)


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


async def measure(
    client: str, running: Running, concurrency: int, pg_pid: int, duration_s: float
) -> Measure:
    """WARMUP_S seconds of calls with `client` ("raw" or "sdk"), then `duration_s` measured.
    Connections or sessions are opened before the warm-up and kept for both."""
    spec, port = running.spec, running.port
    async with AsyncExitStack() as stack:
        run: Callable[[float], Awaitable[Load]]
        if client == "raw":
            conns = await open_connections(port, spec, concurrency)
            for conn in conns:
                stack.callback(conn.close)
            run = lambda seconds: drive(port, spec, conns, seconds, MAX_CALLS)  # noqa: E731
        else:
            sessions = await sdk_sessions(stack, port, concurrency)
            run = lambda seconds: drive_sdk(spec, sessions, seconds, MAX_CALLS)  # noqa: E731
        await run(WARMUP_S)
        spread = connections_per_process(running)
        me = [psutil.Process()]
        server, pg = running.processes(), tree(pg_pid)
        before = {"server": cpu_of(server), "client": cpu_of(me), "postgres": cpu_of(pg)}
        busy = machine_busy()
        load = await run(duration_s)
        busy = machine_busy() - busy
        server, pg = running.processes(), tree(pg_pid)
        after = {"server": cpu_of(server), "client": cpu_of(me), "postgres": cpu_of(pg)}
    cpu_s = {who: cpu_used(before[who], after[who]) for who in before}
    cpu_s["other"] = max(0.0, busy - sum(cpu_s.values()))
    return Measure(client, spec, concurrency, load, cpu_s, os.getloadavg()[0], spread)


async def max_connections(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        value: str = await conn.fetchval("SHOW max_connections")
        return value
    finally:
        await conn.close()


def progress(m: Measure) -> str:
    p50, p95 = summary(m.load.latencies)
    cpu = " ".join(
        f"{who} {m.cpu_ms_per_call(who):.2f}" for who in ("server", "client", "postgres", "other")
    )
    error = f"  first error: {m.load.first_error}" if m.load.first_error else ""
    return (
        f"{m.client} c={m.concurrency:<2} {m.spec.label:<26} {m.rate:7.1f} calls/s  "
        f"p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  errors {m.load.errors}  "
        f"cpu ms/call {cpu}  conns/worker {'+'.join(map(str, m.spread))}  "
        f"load {m.loadavg:.2f}{error}"
    )


@dataclass(frozen=True)
class Plan:
    client: str  # "raw" or "sdk"
    repeats: int
    duration_s: float


def benchmark(dsn: str, pg_pid: int, logdir: Path, plans: list[Plan]) -> list[Measure]:
    """All SPECS running at once; for each plan (load client), its repeats, interleaved."""
    results: list[Measure] = []
    with ExitStack() as stack:
        servers = {}
        for spec in SPECS:
            servers[spec] = stack.enter_context(serve(spec, dsn, logdir))
            status, body = asyncio.run(call_once(servers[spec].port, spec))
            print(
                f"{spec.label}: port {servers[spec].port}, tools/call {spec.tool} without "
                f"initialize -> HTTP {status}, {len(body):,} bytes; mcp.Client protocol "
                f"{asyncio.run(sdk_protocol(servers[spec].port))}",
                flush=True,
            )
        for plan in plans:
            print(f"client {plan.client}: {plan.repeats} repeats of {plan.duration_s:g} s")
            for repeat in range(plan.repeats):
                for concurrency in CONCURRENCY:
                    order = SPECS if repeat % 2 == 0 else tuple(reversed(SPECS))
                    for spec in order:
                        running = servers[spec]
                        m = asyncio.run(
                            measure(plan.client, running, concurrency, pg_pid, plan.duration_s)
                        )
                        results.append(m)
                        print(f"  repeat {repeat + 1} {progress(m)}", flush=True)
        for spec in SPECS:
            print(f"{spec.label}: {native_stack(servers[spec])}", flush=True)
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


Cells = dict[tuple[Spec, int], dict[str, float]]


def table(results: list[Measure], client: str) -> tuple[list[str], Cells]:
    lines = [
        "| server | concurrency | calls/s | p50 (ms) | p95 (ms) | errors | server CPU ms/call "
        "| client CPU ms/call | PostgreSQL CPU ms/call | other CPU ms/call |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    cells: Cells = {}
    for spec in SPECS:
        for c in CONCURRENCY:
            runs = [
                m for m in results if m.client == client and m.spec == spec and m.concurrency == c
            ]
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


def verdicts(cells: Cells) -> list[str]:
    """Pass/fail at the highest concurrency: each worker count against the floor's same count,
    then our best worker count (by calls/s) against the floor's best."""
    top = max(CONCURRENCY)
    lines = [
        f"| c={top}: ours vs floor | calls/s ours / floor | >= floor | p95 ours / floor (ms) "
        "| <= 2x | errors (ours) | pass |",
        "|---|---|---|---|---|---|---|",
    ]
    best_ours = max((o for o, _ in PAIRS), key=lambda spec: cells[(spec, top)]["rate"])
    best_floor = max((f for _, f in PAIRS), key=lambda spec: cells[(spec, top)]["rate"])
    for ours, floor, name in [
        *((o, f, f"{o.label} vs {f.label}") for o, f in PAIRS),
        (best_ours, best_floor, f"best: {best_ours.label} vs {best_floor.label}"),
    ]:
        o, f = cells[(ours, top)], cells[(floor, top)]
        rate_ok = o["rate"] >= f["rate"]
        p95_ok = o["p95"] <= 2 * f["p95"]
        errors_ok = o["errors"] == 0
        lines.append(
            f"| {name} | {o['rate']:.0f} / {f['rate']:.0f} "
            f"({o['rate'] / f['rate']:.2f}x) | {'yes' if rate_ok else 'NO'} "
            f"| {o['p95']:.1f} / {f['p95']:.1f} ({o['p95'] / f['p95']:.2f}x) "
            f"| {'yes' if p95_ok else 'NO'} | {o['errors']:.0f} "
            f"| {'PASS' if rate_ok and p95_ok and errors_ok else 'FAIL'} |"
        )
    return lines


def environment() -> str:
    mods = ", ".join(
        f"{m} {version(m)}"
        for m in ("mcp", "uvicorn", "uvloop", "httptools", "starlette", "asyncpg", "pydantic")
        if _importable(m)
    )
    fast = [m for m in ("uvloop", "httptools") if _importable(m)]
    return (
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs; {mods}; uvicorn loop/http "
        "(auto): " + (", ".join(fast) if fast else "asyncio + h11 (no uvloop, no httptools)")
    )


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--client", choices=[*CLIENTS, "both"], default="raw", help="load client")
    p.add_argument("--duration", type=float, default=DURATION_S, help="raw: measured s per run")
    p.add_argument("--repeats", type=int, default=REPEATS, help="raw: repeats")
    p.add_argument("--sdk-duration", type=float, default=DURATION_S, help="sdk: measured s/run")
    p.add_argument("--sdk-repeats", type=int, default=SDK_REPEATS, help="sdk: repeats")
    p.add_argument(
        "--raw-protocol",
        choices=[MODERN_PROTOCOL, HANDSHAKE_PROTOCOL],
        default=MODERN_PROTOCOL,
        help="protocol version of the raw client's requests",
    )
    p.add_argument("--skip-profile", action="store_true")
    args = p.parse_args()
    global raw_protocol
    raw_protocol = args.raw_protocol

    def plan(client: str, duration: float, repeats: int) -> Plan:
        return Plan(client, min(max(repeats, 1), 5), min(max(duration, 1.0), 60.0))

    plans = []
    if args.client in ("raw", "both"):
        plans.append(plan("raw", args.duration, args.repeats))
    if args.client in ("sdk", "both"):
        plans.append(plan("sdk", args.sdk_duration, args.sdk_repeats))
    print(f"{environment()}; raw client protocol {raw_protocol}", flush=True)
    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    with embedded_server() as pg, tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp)
        dsn = asyncio.run(create_database(pg, "pagila"))
        print(f"Pagila loaded in {load_pagila(dsn):.1f} s; max_connections "
              f"{asyncio.run(max_connections(dsn))}; settings {SETTINGS}", flush=True)  # fmt: skip
        results = benchmark(dsn, pg.pid, logdir, plans)
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
    print(f"\n1-minute load average {load_start[0]:.2f} at start, {load_end:.2f} at the end.")
    for pl in plans:
        lines, cells = table(results, pl.client)
        print(
            f"\n## client {pl.client}: {pl.repeats} repeats, interleaved; each run "
            f"{WARMUP_S:g} s warm-up then {pl.duration_s:g} s measured (at most {MAX_CALLS} "
            "calls); medians over repeats.\n"
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
    (
        "ours: rows to JSON values (queries._rows, per-column converters)",
        "queries.py",
        frozenset({"_rows"}),
    ),
    (
        "ours: rows to JSON values (queries._rows, per-column converters)",
        "values.py",
        frozenset({"_temporal", "_decimal", "_range", "to_json", "row_to_json"}),
    ),
    (
        "ours: rows encoded to JSON text once (size cap; reused in the answer)",
        "queries.py",
        frozenset({"_dumps", "_within"}),
    ),
    (
        "ours: fetch (cached statement, Bind/Execute, asyncpg cursor)",
        "queries.py",
        frozenset({"fetch_upto"}),
    ),
    ("ours: SQL guard (guard.check)", "guard.py", frozenset({"check"})),
    (
        "ours: pool checkout, BEGIN, background ROLLBACK/reset (engine)",
        "database/engine.py",
        frozenset({"read_only", "_begin", "_end", "_release", "_checkout", "_use", "run"}),
    ),
    ("ours: rest of run_query", "queries.py", frozenset({"run_query"})),
    ("ours: ok_json (the result's text content)", "registry.py", frozenset({"ok_json", "ok"})),
    (
        "ours: rest of execute_query (result dict, query_hash)",
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
        "SDK: response dumped to JSON (model_dump + json.dumps of the JSON-RPC message)",
        "_streamable_http_modern.py",
        frozenset({"_write", "_sse_event"}),
    ),
    (
        "SDK: response dumped to JSON (model_dump + json.dumps of the JSON-RPC message)",
        "streamable_http.py",
        frozenset({"_create_json_response"}),
    ),
    (
        "SDK: request dispatch (runner, otel, request_state, tool manager)",
        "runner.py",
        frozenset({"serve_one", "_on_request", "_inner"}),
    ),
    (
        "SDK: request dispatch (runner, otel, request_state, tool manager)",
        "jsonrpc_dispatcher.py",  # the 2025-11-25 path
        frozenset({"run"}),
    ),
    (
        "SDK: modern request handling (handle_modern_request: body, envelope, headers)",
        "_streamable_http_modern.py",
        frozenset({"handle_modern_request", "_to_jsonrpc_response"}),
    ),
    ("logging (2 INFO lines per request)", "logging/__init__.py", frozenset({"_log"})),
    ("HTTP: uvicorn response write", "_impl.py", frozenset({"send"})),
    (
        "HTTP: request parse (httptools callbacks; under uvloop also the C work before them)",
        "_impl.py",
        frozenset({"data_received", "on_url", "on_header", "on_headers_complete", "on_body"}),
    ),
    (
        "HTTP app: gateway, Starlette, SDK streamable HTTP transport",
        "_impl.py",
        frozenset({"run_asgi"}),
    ),
)
OTHER_BUCKET = (
    "event loop (under uvloop also socket I/O and asyncpg decoding, in C), tasks, the rest"
)


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
