"""Where one call's time goes over stdio, as the shared peer run measures it: the server as its
own process on stdio, the official `mcp` client (`ClientSession.call_tool`, which checks the
result against the tool's output schema), the peer run's three operations.

Three passes per operation, each on a fresh server process after 30 warm-up calls:
1. timing: wall time per call (median), server CPU and voluntary context switches per call
   (psutil, the server process), the client's CPU per call;
2. where the server's CPU goes: the server runs under cProfile with a CPU clock, switched on
   for the measured calls only (SIGUSR1, SIGUSR2 writes the stats); each function's own time
   goes to its part (the SDK, our transport, ours, the driver and pool, JSON, the event loop,
   the system calls on the client's pipe and on PostgreSQL's socket), and what pydantic, the
   rest of the standard library and builtins spend goes to the parts of their callers.
   cProfile's own cost inflates the total (the shares are what to read; the ms are scaled to
   the timing pass's CPU). py-spy was tried: here it counts waiting threads as busy (ten
   times the samples the process's CPU allows) and slowed each call several times;
3. the database round trips: the server reaches PostgreSQL through a relay in this process
   that counts flights (a burst of bytes from the server after PostgreSQL answered; the pool's
   rollback and reset included, sent just before the answer is written and not waited for)
   and the time from each flight to PostgreSQL's first byte back (the relay's own hop in it).

Run (against the peer run's cluster, `bash ../shared/bench-peers/pg.sh start`):
    uv run python bench/profile_stdio.py --dsn postgresql://postgres:bench@127.0.0.1:55433/pagila
The role there is a superuser: the server is started with MCP_ALLOW_PRIVILEGED_ROLE=true.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import signal
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil
from common import header
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

OPERATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "SELECT 1": ("execute_query", {"sql": "SELECT 1"}),
    "100 rows": ("execute_query", {"sql": "SELECT * FROM film ORDER BY film_id", "limit": 100}),
    "describe": ("describe_table", {"table_name": "film", "schema": "public"}),
}
# A function's file (or a builtin's name) -> its part; the first match wins.
PARTS = (
    ("/json/", "JSON"),
    ("orjson", "JSON"),
    ("'loads' of", "JSON"),
    ("pg_mcp_server/transport/", "transport (ours)"),
    ("pg_mcp_server/", "ours"),
    ("asyncpg", "driver and pool"),
    ("sqlalchemy/", "driver and pool"),
    ("/mcp/", "SDK"),
    ("/mcp_types/", "SDK"),
    ("'poll' of 'select.epoll'", "event loop"),
    ("/asyncio/", "event loop"),
    ("/selectors.py", "event loop"),
    ("/anyio/", "event loop"),
    ("_socket.socket", "PostgreSQL's socket (system calls)"),
    ("posix.read", "client's pipe (system calls)"),
    ("posix.write", "client's pipe (system calls)"),
)
Function = tuple[str, int, str]


def own_part(function: Function) -> str | None:
    filename, _, name = function
    where = name if filename == "~" else filename
    return next((part for needle, part in PARTS if needle in where), None)


def by_part(stats: pstats.Stats) -> dict[str, float]:
    """Own time per part; a function of no part (pydantic, typing, the rest of the standard
    library, most builtins) is split among its callers' parts, by what each call cost."""
    table: dict[Function, Any] = stats.stats  # type: ignore[attr-defined]
    memo: dict[Function, dict[str, float]] = {}

    def shares(function: Function, depth: int) -> dict[str, float]:
        if function in memo:
            return memo[function]
        part = own_part(function)
        if part is not None:
            return {part: 1.0}
        callers = table.get(function, (0, 0, 0, 0, {}))[4]
        weights = {caller: row[2] or 1e-9 for caller, row in callers.items()}
        whole = sum(weights.values())
        if depth > 12 or not whole:
            return {"other": 1.0}
        mixed: dict[str, float] = defaultdict(float)
        for caller, weight in weights.items():
            for name, share in shares(caller, depth + 1).items():
                mixed[name] += share * weight / whole
        memo[function] = mixed
        return mixed

    totals: dict[str, float] = defaultdict(float)
    for function, row in table.items():
        for name, share in shares(function, 0).items():
            totals[name] += row[2] * share
    return totals


def serve_profiled(out: str) -> None:
    """The server's own entry point under cProfile (CPU clock): SIGUSR1 starts counting,
    SIGUSR2 stops and writes the stats to `out`."""
    from pg_mcp_server.__main__ import main

    profiler = cProfile.Profile(time.process_time)

    def stop(*_: object) -> None:
        profiler.disable()
        profiler.dump_stats(out)

    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["pg-mcp-server"]
    main()


@contextlib.asynccontextmanager
async def session(
    dsn: str, profile_to: str | None = None
) -> AsyncIterator[tuple[ClientSession, psutil.Process]]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "PG_DSN": dsn,
        "MCP_TRANSPORT": "stdio",
        "MCP_ALLOW_PRIVILEGED_ROLE": "true",
    }
    argv = [__file__, "--serve-profiled", profile_to] if profile_to else ["-m", "pg_mcp_server"]
    params = StdioServerParameters(command=sys.executable, args=argv, env=env)
    before = {p.pid for p in psutil.Process().children()}
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            await client.list_tools()  # the client checks results against these schemas
            new = [p for p in psutil.Process().children() if p.pid not in before]
            yield client, new[0]


async def call(client: ClientSession, tool: str, arguments: dict[str, Any]) -> None:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content}")


async def timing(dsn: str, tool: str, arguments: dict[str, Any], calls: int) -> dict[str, float]:
    async with session(dsn) as (client, server):
        for _ in range(30):
            await call(client, tool, arguments)
        cpu0, ctx0 = server.cpu_times(), server.num_ctx_switches()
        client0 = time.process_time()
        walls = []
        for _ in range(calls):
            started = time.perf_counter()
            await call(client, tool, arguments)
            walls.append((time.perf_counter() - started) * 1000)
        client_ms = (time.process_time() - client0) * 1000 / calls
        cpu1, ctx1 = server.cpu_times(), server.num_ctx_switches()
    server_ms = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) * 1000 / calls
    return {
        "wall": statistics.median(walls),
        "server": server_ms,
        "client": client_ms,
        "switches": (ctx1.voluntary - ctx0.voluntary) / calls,
    }


async def profiled(
    dsn: str, tool: str, arguments: dict[str, Any], calls: int, save: str | None
) -> tuple[dict[str, float], pstats.Stats]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "server.prof"
        async with session(dsn, str(out)) as (client, server):
            for _ in range(30):
                await call(client, tool, arguments)
            server.send_signal(signal.SIGUSR1)
            await call(client, tool, arguments)  # the handler runs once the loop wakes
            for _ in range(calls):
                await call(client, tool, arguments)
            server.send_signal(signal.SIGUSR2)
            await call(client, tool, arguments)
            while not out.exists():
                await asyncio.sleep(0.05)
        stats = pstats.Stats(str(out))
        if save:
            stats.dump_stats(save)
    return by_part(stats), stats


class Relay:
    """A TCP relay to PostgreSQL counting flights and the time to PostgreSQL's first answer."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.flights = 0
        self.waited = 0.0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        # when the flight in the air left (None once PostgreSQL answered it)
        state: dict[str, float | None] = {"sent": None}

        async def upward() -> None:
            while data := await reader.read(65536):
                if state["sent"] is None:
                    self.flights += 1
                    state["sent"] = time.perf_counter()
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def downward() -> None:
            while data := await up_reader.read(65536):
                sent = state["sent"]
                if sent is not None:
                    self.waited += time.perf_counter() - sent
                    state["sent"] = None
                writer.write(data)
                await writer.drain()
            writer.close()

        await asyncio.gather(upward(), downward(), return_exceptions=True)


async def round_trips(
    dsn: str, tool: str, arguments: dict[str, Any], calls: int
) -> tuple[float, float]:
    """Flights to PostgreSQL per call, and ms per call from a flight to its first answer byte."""
    url = urlsplit(dsn)
    relay = Relay(url.hostname or "127.0.0.1", url.port or 5432)
    listener = await asyncio.start_server(relay.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    userinfo = url.netloc.rsplit("@", 1)[0]
    relayed = urlunsplit(url._replace(netloc=f"{userinfo}@127.0.0.1:{port}"))
    async with session(relayed) as (client, _):
        for _ in range(30):
            await call(client, tool, arguments)
        flights0, waited0 = relay.flights, relay.waited
        for _ in range(calls):
            await call(client, tool, arguments)
        # the last call's reset may still be on its way: until the relay has been quiet a while
        settled = -1
        while relay.flights != settled:
            settled = relay.flights
            await asyncio.sleep(0.2)
        flights, waited = relay.flights - flights0, relay.waited - waited0
    listener.close()
    return flights / calls, waited * 1000 / calls


async def run(args: argparse.Namespace) -> None:
    print(f"{header()}\n")
    for name in args.only or OPERATIONS:
        tool, arguments = OPERATIONS[name]
        t = await timing(args.dsn, tool, arguments, args.calls)
        flights, waited = await round_trips(args.dsn, tool, arguments, args.calls)
        save = f"{args.save}/{name.replace(' ', '_')}.prof" if args.save else None
        parts, stats = await profiled(args.dsn, tool, arguments, args.calls, save)
        whole = sum(parts.values())
        print(
            f"{name}: wall {t['wall']:.2f} ms (median), server CPU {t['server']:.2f} ms, "
            f"client CPU {t['client']:.2f} ms, server voluntary switches {t['switches']:.1f}; "
            f"{flights:.2f} round trips to PostgreSQL, {waited:.2f} ms to its first answer "
            f"byte (through the relay)\n  server CPU by part (of {whole * 1000 / args.calls:.2f}"
            " ms under cProfile): "
            + ", ".join(
                f"{k} {v / whole:.0%} ({v / whole * t['server']:.2f} ms)"
                for k, v in sorted(parts.items(), key=lambda kv: -kv[1])
            ),
            flush=True,
        )
        if args.verbose:
            stats.sort_stats("tottime").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--only", choices=list(OPERATIONS), action="append")
    parser.add_argument("--verbose", action="store_true", help="the top functions of each")
    parser.add_argument("--save", metavar="DIR", help="keep each operation's cProfile stats here")
    parser.add_argument("--serve-profiled", metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_profiled:
        serve_profiled(args.serve_profiled)
    elif not args.dsn:
        parser.error("--dsn is required")
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
