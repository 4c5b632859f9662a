"""Server-side timings of get_foreign_keys and find_join_path on the 10k-table / 20k-FK catalog.

Starts a throwaway PostgreSQL 18, generates the `spread` catalog of bench/catalog.py (10
schemas x 1,000 tables, 20,000 foreign keys: `parent_id` to the previous table of the schema,
`other_id` to the same-numbered table of the previous schema, or a pseudo-random earlier one in
s00), adds one table with no foreign key (`public.lonely`) so that a PATH_NOT_FOUND between
unconnected tables can be timed, and a `public.busy_log` table for the busy-database writer,
and VACUUM ANALYZEs.

For each case, through `mcp.Client(server)` in-process with the client's output validation
switched off (as bench_catalog.py does), it times:
  - cold: the first call of a fresh server (new pool, empty graph cache), COLD_RUNS times, each
    a new server; find_join_path's cold call loads the whole foreign-key graph. "cold on an
    open connection" is the same with one list_schemas call first, so the connection and the
    backend's caches exist and only the graph load is left;
  - steady: WARMUP calls, then RUNS timed calls on one server (the graph cached), median /
    p95, with stopwatches on the tool function, the one statement (GraphCache.load /
    foreign_keys_of), the path search in Python (Graph.paths) and, for PATH_NOT_FOUND, building
    the error's suggestions (no_path). It also counts the timed calls in which GRAPH computed
    the catalog fingerprint (the cached snapshot changed): none while nothing commits.
Every find_join_path call uses max_depth 6 (the largest allowed).

Busy database: the steady measurement of BUSY_CASES again while a background task on its own
connection commits one-row INSERTs into public.busy_log at about BUSY_RATE a second, so the
snapshot moves between calls and every call computes the fingerprint. These rows are labelled
"busy:" and have the same targets. The writer is stopped afterwards.

Then, without the tool, on a plain asyncpg connection while nothing commits: GRAPH with the
snapshot unchanged (the snapshot and fingerprint of a GRAPH call just before: the steady
statement), GRAPH with a changed snapshot and the fingerprint unchanged (what each call costs
when other sessions keep committing), the fingerprint expression alone and each of its four
parts, GRAPH's full load (cold and warm), FOREIGN_KEYS_OF for each get_foreign_keys case, and
building the Graph object in Python, plus EXPLAIN ANALYZE hot spots. Statements and round
trips per call are counted on the wire and with pg_stat_statements
(benchlib.count_round_trips). A case whose steady median misses its target is profiled with
cProfile (PROFILED_CALLS calls).

Run: uv run python bench/bench_relationships.py
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from benchlib import (
    Stopwatch,
    count_round_trips,
    embedded_server,
    ms_since,
    patched,
    plan_hotspots,
    summary,
    top_functions,
)
from catalog import SERVER_SETTINGS, SPREAD, build
from mcp import Client
from mcp.client.session import ClientSession
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult

from pg_mcp_server.config import Settings
from pg_mcp_server.database import joinpaths, relationships
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server
from pg_mcp_server.tools import relationship_tools

WARMUP = 10
RUNS = 50
COLD_RUNS = 5
RAW_RUNS = 30
LOAD_RUNS = 5  # the full graph load is slow; fewer repetitions
CALLS_COUNTED = 10
PROFILED_CALLS = 20
MAX_DEPTH = 6

SETTINGS = SERVER_SETTINGS | {"shared_preload_libraries": "pg_stat_statements"}

LONELY = "CREATE TABLE public.lonely (id bigint PRIMARY KEY, name text)"
BUSY_LOG = "CREATE TABLE public.busy_log (n bigint, at timestamptz)"
BUSY_INSERT = "INSERT INTO public.busy_log VALUES ($1, clock_timestamp())"
BUSY_RATE = 300  # commits a second the writer aims at

# One INFO line per PATH_NOT_FOUND answer otherwise.
logging.getLogger("pg_mcp_server.tools.registry").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Case:
    label: str
    tool: str
    arguments: dict[str, Any]
    target_ms: float
    error: str | None = None  # the error code the call must answer with


def _join(label: str, start: str, goal: str, error: str | None = None) -> Case:
    (from_schema, from_table), (to_schema, to_table) = start.split("."), goal.split(".")
    arguments = {
        "from_table": from_table,
        "from_schema": from_schema,
        "to_table": to_table,
        "to_schema": to_schema,
        "max_depth": MAX_DEPTH,
    }
    return Case(
        f"find_join_path {label}: {start} -> {goal}", "find_join_path", arguments, 30, error
    )


def _keys(label: str, table: str) -> Case:
    schema, name = table.split(".")
    arguments = {"table_name": name, "schema_name": schema}
    return Case(f"get_foreign_keys {label}: {table}", "get_foreign_keys", arguments, 10)


CASES = [
    _join("near (1 join)", "s03.t500", "s03.t499"),
    _join("far (6 joins, same schema)", "s03.t500", "s03.t494"),
    _join("cross-schema (6 joins)", "s08.t700", "s04.t698"),
    _join("dense (shortcut-rich first schema)", "s00.t040", "s00.t001"),
    _join("no path: not connected", "s03.t500", "public.lonely", "PATH_NOT_FOUND"),
    _join("no path within 6 (connected)", "s09.t999", "s09.t000", "PATH_NOT_FOUND"),
    _keys("2 out, 2 in", "s03.t500"),
    _keys("2 out, many in", "s00.t001"),
    _keys("no keys", "public.lonely"),
]
BUSY_CASES = [CASES[0], CASES[2]]  # near, cross-schema


@dataclass
class Result:
    case: Case
    answer: str = ""  # what the tool answered, in short
    cold: tuple[float, float] | None = None  # medians: fresh server; on an open connection
    steady: tuple[float, float] = (0.0, 0.0)
    tool_fn: float = 0.0  # stopwatch medians, steady state
    statement: float = 0.0
    search: float = 0.0  # Graph.paths
    no_path: float | None = None  # joinpaths.no_path, when the answer is PATH_NOT_FOUND
    fingerprinted: int | None = None  # timed find_join_path calls that computed the fingerprint
    statements_per_call: float = 0.0
    round_trips: tuple[float, float] = (0.0, 0.0)  # critical path, background
    wire_detail: str = ""
    pgss_detail: str = ""
    profile: str = ""

    @property
    def passed(self) -> bool:
        return self.steady[0] <= self.case.target_ms and self.statements_per_call == 1


# --- client-side validation off -----------------------------------------------------------


async def _no_validation(self: ClientSession, name: str, result: CallToolResult) -> None:
    return None


ClientSession.validate_tool_result = _no_validation  # type: ignore[method-assign]


# --- the tool -------------------------------------------------------------------------------


async def call(client: Client, case: Case) -> CallToolResult:
    result = await client.call_tool(case.tool, case.arguments)
    body = result.structured_content or {}
    if case.error is not None:
        if not result.is_error or body.get("error", {}).get("code") != case.error:
            raise RuntimeError(f"{case.label}: expected {case.error}, got {result.content}")
    elif result.is_error:
        raise RuntimeError(f"{case.label} failed: {result.content}")
    return result


def answer(case: Case, result: CallToolResult) -> str:
    body = result.structured_content or {}
    if case.error is not None:
        ctx = body["error"].get("context") or {}
        shortest = ctx.get("shortest_depth")
        return case.error + (f" (shortest path {shortest} joins)" if shortest else "")
    if case.tool == "find_join_path":
        depths = sorted({p["depth"] for p in body["paths"]})
        return f"{body['paths_found']} paths, shortest {depths[0]} joins"
    return f"{body['outgoing_count']} out, {body['incoming_count']} in"


def new_server(dsn: str) -> MCPServer[Any]:
    return build_server(Settings.load(database={"dsn": dsn}))


async def time_cold(dsn: str, case: Case) -> tuple[float, float]:
    """Medians over COLD_RUNS fresh servers: the first call; the first call after a
    list_schemas call has opened the connection."""
    first, on_open = [], []
    for _ in range(COLD_RUNS):
        async with Client(new_server(dsn)) as client:
            start = time.perf_counter_ns()
            await call(client, case)
            first.append(ms_since(start))
        async with Client(new_server(dsn)) as client:
            await client.call_tool("list_schemas", {})
            await asyncio.sleep(0.05)  # the connection's release runs in the background
            start = time.perf_counter_ns()
            await call(client, case)
            on_open.append(ms_since(start))
    return summary(first)[0], summary(on_open)[0]


Load = Callable[..., Awaitable[Any]]


def noting_fingerprints(computed: list[bool]) -> Callable[[Load], Load]:
    """Wraps GraphCache.load to note, per call, whether GRAPH computed the fingerprint: the
    cache takes the statement's snapshot exactly when it did (see GraphCache.load)."""

    def wrap(load: Load) -> Load:
        async def noted(self: joinpaths.GraphCache, *args: Any) -> Any:
            before = self.state.snapshot
            try:
                return await load(self, *args)
            finally:
                computed.append(self.state.snapshot != before)

        return noted

    return wrap


async def time_steady(dsn: str, case: Case, result: Result) -> None:
    """WARMUP then RUNS calls on one server, with stopwatches (see module docstring)."""
    server = new_server(dsn)
    tool = server._tool_manager.get_tool(case.tool)  # private; bench only
    assert tool is not None
    in_tool, in_statement, in_search, in_no_path = (Stopwatch() for _ in range(4))
    tool.fn = in_tool.wrap(tool.fn)
    samples = []
    computed: list[bool] = []
    with ExitStack() as patches:
        # The statement (with its decoding) and the search in Python; the tool functions look
        # these up as module globals at call time.
        patches.enter_context(patched(joinpaths.GraphCache, "load", in_statement.wrap))
        patches.enter_context(patched(joinpaths.GraphCache, "load", noting_fingerprints(computed)))
        patches.enter_context(patched(relationship_tools, "foreign_keys_of", in_statement.wrap))
        patches.enter_context(patched(joinpaths.Graph, "paths", in_search.wrap_sync))
        patches.enter_context(patched(relationship_tools, "no_path", in_no_path.wrap_sync))
        async with Client(server) as client:
            result.answer = answer(case, await call(client, case))
            for i in range(WARMUP + RUNS):
                start = time.perf_counter_ns()
                await call(client, case)
                if i >= WARMUP:
                    samples.append(ms_since(start))
            result.steady = summary(samples)
            result.tool_fn = in_tool.median(RUNS)
            result.statement = in_statement.median(RUNS)
            if case.tool == "find_join_path":
                result.search = in_search.median(RUNS)
                result.fingerprinted = sum(computed[-RUNS:])
            if case.error is not None:
                result.no_path = in_no_path.median(RUNS)
            if result.steady[0] > case.target_ms:
                result.profile = await profile(client, case)


async def profile(client: Client, case: Case) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILED_CALLS):
        await call(client, case)
    profiler.disable()
    return top_functions(profiler)


def graph_binds(case: Case, snapshot: str | None, fingerprint: str | None) -> tuple[Any, ...]:
    """GRAPH's binds: the cached snapshot and fingerprint (None: none cached), both ends, and
    no fan-out statistics to read."""
    a = case.arguments
    ends = (a["from_schema"], a["from_table"], a["to_schema"], a["to_table"])
    return (snapshot, fingerprint, *ends, "[]")


def keys_binds(case: Case) -> tuple[Any, ...]:
    return (case.arguments["schema_name"], case.arguments["table_name"])


async def count(dsn: str, case: Case, result: Result) -> None:
    if case.tool == "find_join_path":
        label, statement = "GRAPH", (relationships.GRAPH, graph_binds(case, None, None))
    else:
        label, statement = "FOREIGN_KEYS_OF", (relationships.FOREIGN_KEYS_OF, keys_binds(case))
    counts = await count_round_trips(
        dsn,
        new_server(dsn),
        lambda client: call(client, case),
        {label: statement},
        warmup=WARMUP,
        counted=CALLS_COUNTED,
    )
    result.statements_per_call = counts.statement_calls(label)
    result.round_trips = (counts.round_trips(False), counts.round_trips(True))
    result.wire_detail = counts.wire_detail()
    result.pgss_detail = counts.pgss_detail()


# --- without the tool -----------------------------------------------------------------------


@dataclass
class Raw:
    lines: list[str] = field(default_factory=list)
    hotspots: list[str] = field(default_factory=list)

    def add(self, label: str, samples: list[float]) -> tuple[float, float]:
        median, p95 = summary(samples)
        self.lines.append(f"| {label} | {median:.1f} / {p95:.1f} | {len(samples)} |")
        return median, p95

    def note(self, text: str) -> None:
        self.lines.append(f"| ({text}) | | |")


async def timed(conn: asyncpg.Connection, runs: int, sql: str, *binds: Any) -> list[float]:
    """One untimed call, then `runs` timed ones."""
    await conn.fetch(sql, *binds)
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        await conn.fetch(sql, *binds)
        samples.append(ms_since(start))
    return samples


async def timed_graph(
    conn: asyncpg.Connection, runs: int, binds: tuple[Any, ...]
) -> tuple[list[float], int]:
    """GRAPH `runs` times (after one untimed call), and in how many it computed the
    fingerprint."""
    await conn.fetchrow(relationships.GRAPH, *binds)
    samples, computed = [], 0
    for _ in range(runs):
        start = time.perf_counter_ns()
        row = await conn.fetchrow(relationships.GRAPH, *binds)
        samples.append(ms_since(start))
        assert row is not None
        computed += row["fingerprint"] is not None
    return samples, computed


def fingerprint_parts() -> list[str]:
    """The four subqueries of relationships._FINGERPRINT (private; bench only)."""
    parts = relationships._FINGERPRINT.split("|| '/' ||")
    assert len(parts) == 4, parts
    return [p.strip() for p in parts]


async def raw_costs(dsn: str) -> Raw:
    raw = Raw()
    case = CASES[2]  # cross-schema
    conn = await asyncpg.connect(dsn)
    try:
        fp_sql = f"SELECT {relationships._FINGERPRINT} AS fingerprint"
        # The snapshot and fingerprint as the cache would keep them: one GRAPH call (with a
        # bogus snapshot, so it computes the fingerprint; the real one, so it loads no keys).
        row = await conn.fetchrow(
            relationships.GRAPH, *graph_binds(case, "x", await conn.fetchval(fp_sql))
        )
        assert row is not None
        steady = graph_binds(case, row["snapshot"], row["fingerprint"])
        moved = graph_binds(case, "x", row["fingerprint"])
        samples, computed = await timed_graph(conn, RAW_RUNS, steady)
        raw.add("GRAPH, snapshot unchanged (steady state, nothing commits)", samples)
        raw.note(f"it computed the fingerprint in {computed} of {len(samples)} timed runs")
        samples, computed = await timed_graph(conn, RAW_RUNS, moved)
        raw.add("GRAPH, snapshot changed, fingerprint unchanged (others commit)", samples)
        raw.note(f"it computed the fingerprint in {computed} of {len(samples)} timed runs")
        raw.add("fingerprint expression alone", await timed(conn, RAW_RUNS, fp_sql))
        names = ["pg_constraint (FKs)", "pg_class", "pg_attribute", "pg_namespace"]
        for name, part in zip(names, fingerprint_parts(), strict=True):
            raw.add(f"- its {name} part", await timed(conn, RAW_RUNS, f"SELECT {part}"))
        sizes = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM pg_catalog.pg_attribute) AS attributes,"
            " (SELECT count(*) FROM pg_catalog.pg_class) AS classes,"
            " (SELECT count(*) FROM pg_catalog.pg_constraint) AS constraints,"
            " (SELECT count(*) FROM pg_catalog.pg_constraint WHERE contype = 'f') AS fks"
        )
        assert sizes is not None
        raw.note(
            f"rows scanned: pg_attribute {sizes['attributes']:,}, pg_class "
            f"{sizes['classes']:,}, pg_constraint {sizes['constraints']:,} "
            f"of which {sizes['fks']:,} foreign keys"
        )
        for keys_case in (c for c in CASES if c.tool == "get_foreign_keys"):
            schema, name = keys_binds(keys_case)
            raw.add(
                f"FOREIGN_KEYS_OF {schema}.{name}",
                await timed(conn, RAW_RUNS, relationships.FOREIGN_KEYS_OF, schema, name),
            )
        raw.hotspots.append("GRAPH, snapshot unchanged (steady state):")
        raw.hotspots.append(await plan_hotspots(conn, relationships.GRAPH, *steady))
        raw.hotspots.append("GRAPH, snapshot changed, fingerprint unchanged:")
        raw.hotspots.append(await plan_hotspots(conn, relationships.GRAPH, *moved))
        raw.hotspots.append("FOREIGN_KEYS_OF s03.t500:")
        raw.hotspots.append(await plan_hotspots(conn, relationships.FOREIGN_KEYS_OF, "s03", "t500"))
    finally:
        await conn.close()

    full = graph_binds(case, None, None)
    conn = await asyncpg.connect(dsn)  # a fresh backend: cold relation and catalog caches
    try:
        start = time.perf_counter_ns()
        row = await conn.fetchrow(relationships.GRAPH, *full)
        cold = ms_since(start)
        raw.add(
            "GRAPH, full load (warm connection)",
            await timed(conn, LOAD_RUNS, relationships.GRAPH, *full),
        )
    finally:
        await conn.close()
    raw.lines.append(f"| GRAPH, full load, first statement of a new connection | {cold:.1f} | 1 |")
    assert row is not None
    keys = row["keys"] if isinstance(row["keys"], list) else json.loads(row["keys"])
    raw.note(f"the full load returns {len(keys):,} keys")
    build_samples = []
    for _ in range(LOAD_RUNS):
        start = time.perf_counter_ns()
        joinpaths.Graph([relationships.ForeignKey.from_json(k) for k in keys])
        build_samples.append(ms_since(start))
    raw.add("ForeignKey objects + Graph build in Python", build_samples)
    return raw


# --- a busy database --------------------------------------------------------------------------


@dataclass
class Writer:
    commits: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.commits / self.seconds if self.seconds else 0.0


@asynccontextmanager
async def busy_writer(dsn: str) -> AsyncIterator[Writer]:
    """Inside the block, a task on its own connection commits one-row INSERTs into
    public.busy_log, paced to BUSY_RATE a second; stopped (and its connection closed) at the
    end."""
    conn = await asyncpg.connect(dsn)
    writer = Writer()
    stop = asyncio.Event()

    async def write() -> None:
        began = time.monotonic()
        while not stop.is_set():
            await conn.execute(BUSY_INSERT, writer.commits)  # autocommit: one commit each
            writer.commits += 1
            await asyncio.sleep(max(0.0, began + writer.commits / BUSY_RATE - time.monotonic()))

    began = time.monotonic()
    task = asyncio.create_task(write())
    try:
        await asyncio.sleep(0.5)  # running before the first call
        yield writer
    finally:
        stop.set()
        await task
        writer.seconds = time.monotonic() - began
        await conn.close()


async def busy(dsn: str) -> tuple[list[Result], Writer]:
    results = []
    async with busy_writer(dsn) as writer:
        for case in BUSY_CASES:
            case = Case(f"busy: {case.label}", case.tool, case.arguments, case.target_ms)
            result = Result(case)
            await time_steady(dsn, case, result)
            await count(dsn, case, result)
            results.append(result)
            report(result)
    return results, writer


# --- driver ----------------------------------------------------------------------------------


async def prepare(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION pg_stat_statements")
        await conn.execute(LONELY)
        await conn.execute(BUSY_LOG)
        await conn.execute("ANALYZE public.lonely")
    finally:
        await conn.close()


def report(result: Result) -> None:
    print(f"\n## {result.case.label}: {result.answer}; steady median {result.steady[0]:.1f} ms")
    print(f"wire round trips per call: {result.wire_detail}")
    print(f"pg_stat_statements per call: {result.pgss_detail}", flush=True)
    if result.profile:
        print(f"\nTarget missed. cProfile of {PROFILED_CALLS} in-process calls:\n")
        print(result.profile, flush=True)


def table(results: list[Result]) -> str:
    lines = [
        "| case | answer | target | cold: fresh server / open connection (ms) "
        "| steady median / p95 (ms) | pass | statements per call "
        "| wire round trips per call (critical path + background) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cold = "-" if r.cold is None else f"{r.cold[0]:.0f} / {r.cold[1]:.0f}"
        lines.append(
            f"| {r.case.label} | {r.answer} | <= {r.case.target_ms:g} ms "
            f"| {cold} | {r.steady[0]:.1f} / {r.steady[1]:.1f} "
            f"| {'yes' if r.passed else 'NO'} | {r.statements_per_call:g} "
            f"| {r.round_trips[0]:g} + {r.round_trips[1]:g} |"
        )
    return "\n".join(lines)


def split_table(results: list[Result]) -> str:
    lines = [
        "| case | whole call | tool function | the statement (with decoding) "
        "| path search (Graph.paths) | PATH_NOT_FOUND suggestions (no_path) "
        f"| calls that computed the fingerprint (of {RUNS}) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        search = f"{r.search:.2f}" if r.case.tool == "find_join_path" else "-"
        no_path = "-" if r.no_path is None else f"{r.no_path:.2f}"
        computed = "-" if r.fingerprinted is None else str(r.fingerprinted)
        lines.append(
            f"| {r.case.label} | {r.steady[0]:.2f} | {r.tool_fn:.2f} | {r.statement:.2f} "
            f"| {search} | {no_path} | {computed} |"
        )
    return "\n".join(lines)


async def bench(dsn: str) -> None:
    await prepare(dsn)
    load_before = os.getloadavg()[0]
    results = []
    for case in CASES:
        result = Result(case)
        result.cold = await time_cold(dsn, case)
        await time_steady(dsn, case, result)
        await count(dsn, case, result)
        results.append(result)
        report(result)
    busy_results, writer = await busy(dsn)
    results += busy_results
    raw = await raw_costs(dsn)
    load_after = os.getloadavg()[0]
    print(f"\nmax_depth {MAX_DEPTH}. Cold: median of {COLD_RUNS} fresh servers. Steady: {WARMUP}")
    print(f"warm-up then {RUNS} timed calls; in-process client, output validation off.")
    print(f"busy: {writer.commits:,} commits by the writer in {writer.seconds:.1f} s")
    print(f"({writer.rate:.0f} a second, aiming at {BUSY_RATE}).")
    print(f"1-minute load average {load_before:.2f} before, {load_after:.2f} after.\n")
    print(table(results))
    print("\nSteady-state medians (ms): the tool function contains the statement and the two")
    print("Python steps after it (the path search, then for PATH_NOT_FOUND the suggestions):\n")
    print(split_table(results))
    print("\nWithout the tool, on a plain asyncpg connection, nothing committing (ms):\n")
    print("| statement | median / p95 | runs |\n|---|---|---|")
    print("\n".join(raw.lines))
    print("\nPostgreSQL hot spots (EXPLAIN ANALYZE, one run after the timed ones):\n")
    print("\n".join(raw.hotspots))


async def bench_on(pg: EmbeddedPostgres) -> None:
    await bench(await build(pg, SPREAD))


def main() -> None:
    with embedded_server(SETTINGS) as pg:
        asyncio.run(bench_on(pg))


if __name__ == "__main__":
    main()
