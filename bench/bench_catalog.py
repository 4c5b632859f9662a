"""Server-side timings of list_tables and describe_table on the 10k-table / 100k-column catalog.

Starts a throwaway PostgreSQL 18, generates both catalog variants (bench/catalog.py), then for
each case measures, after WARMUP calls, RUNS calls of:
  (a) the catalog statement alone on a new plain asyncpg connection (prepared by asyncpg, json
      left as text); its very first call, on a backend with a cold relation cache, is reported
      separately as "cold";
  (b) the tool through `mcp.Client(server)` in-process, with the client's output-schema
      validation switched off (ClientSession.validate_tool_result -> no-op): what remains is the
      server (pool checkout, read-only transaction, query, pydantic models, JSON) plus the SDK's
      in-process dispatch.
WARMUP is 10 because PostgreSQL plans a prepared statement afresh for its first 5 executions
before it may switch to a cached generic plan.

Then it counts statements and round trips per tool call, two independent ways:
  - wire: every round trip asyncpg makes (its protocol's prepare / bind_execute / query / ...
    calls, each one a request answered by ReadyForQuery) on the server's pooled connections;
  - PostgreSQL: pg_stat_statements (preloaded) `calls` over CALLS_COUNTED tool calls.
A case whose median misses its target is profiled with cProfile, and for list_tables the cost
of each per-table expression is measured in PostgreSQL (EXPLAIN ANALYZE, see expression_costs).

Run: uv run python bench/bench_catalog.py
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import time
from dataclasses import dataclass
from typing import Any

import asyncpg
from benchlib import Stopwatch, embedded_server, ms_since, quote_ident, summary, top_functions
from catalog import BIG, SERVER_SETTINGS, SPREAD, Variant, build
from mcp import Client
from mcp.client.session import ClientSession
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult

from pg_mcp_server.config import Settings
from pg_mcp_server.database import catalog
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server

WARMUP = 10
RUNS = 50
CALLS_COUNTED = 10
PROFILED_CALLS = 10

SETTINGS = SERVER_SETTINGS | {"shared_preload_libraries": "pg_stat_statements"}


@dataclass(frozen=True)
class Case:
    label: str
    variant: Variant
    tool: str
    arguments: dict[str, Any]
    sql: str
    binds: tuple[Any, ...]
    target_ms: float


def _list(schema: str) -> tuple[str, dict[str, Any], str, tuple[Any, ...]]:
    # The tool's defaults: include_views=True (all relkinds), no name pattern.
    return ("list_tables", {"schema_name": schema}, catalog.LIST_TABLES,
            (schema, catalog.RELKINDS_ALL, None))  # fmt: skip


def _describe(schema: str, table: str) -> tuple[str, dict[str, Any], str, tuple[Any, ...]]:
    return ("describe_table", {"schema_name": schema, "table_name": table},
            catalog.DESCRIBE_TABLE, (schema, table, True, True))  # fmt: skip


CASES = [
    Case("list_tables: schema of 1,000 tables", SPREAD, *_list("s03"), 100),
    Case("list_tables: schema of 10,000 tables", BIG, *_list("big"), 100),
    Case("describe_table s03.t500 (10 cols, 2 FKs)", SPREAD, *_describe("s03", "t500"), 20),
    Case("describe_table big.t5000 (10 cols, 2 FKs)", BIG, *_describe("big", "t5000"), 20),
]


@dataclass
class Result:
    case: Case
    raw_cold: float
    raw: tuple[float, float]
    tool: tuple[float, float] = (0.0, 0.0)
    tool_fn: float = 0.0  # medians of the stopwatches, see time_tool
    catalog_fn: float = 0.0
    catalog_per_call: float = 0.0
    wire_per_call: float = 0.0
    wire_detail: str = ""
    pgss_detail: str = ""

    @property
    def passed(self) -> bool:
        return self.tool[0] <= self.case.target_ms and self.catalog_per_call == 1


# --- client-side validation off -----------------------------------------------------------


async def _no_validation(self: ClientSession, name: str, result: CallToolResult) -> None:
    return None


ClientSession.validate_tool_result = _no_validation  # type: ignore[method-assign]


# --- timing --------------------------------------------------------------------------------


async def time_raw(dsn: str, case: Case) -> tuple[float, list[float]]:
    """(first call on a fresh connection, the RUNS timed calls after WARMUP)."""
    conn = await asyncpg.connect(dsn)
    try:
        samples = []
        for _ in range(1 + WARMUP + RUNS):
            start = time.perf_counter_ns()
            await conn.fetch(case.sql, *case.binds)
            samples.append(ms_since(start))
        return samples[0], samples[1 + WARMUP :]
    finally:
        await conn.close()


async def call(client: Client, case: Case) -> CallToolResult:
    result = await client.call_tool(case.tool, case.arguments)
    if result.is_error:
        raise RuntimeError(f"{case.tool} failed: {result.content}")
    return result


async def time_tool(server: MCPServer[Any], case: Case, result: Result) -> str | None:
    """Time whole calls in-process, and with stopwatches the tool function (reached through
    the SDK's private tool manager) and the catalog function it calls (query + rows to dicts).
    Fills `result`; returns a cProfile report if the median misses the target."""
    tool = server._tool_manager.get_tool(case.tool)  # private; bench only
    assert tool is not None
    in_tool, in_catalog = Stopwatch(), Stopwatch()
    tool.fn = in_tool.wrap(tool.fn)
    real = getattr(catalog, case.tool)
    setattr(catalog, case.tool, in_catalog.wrap(real))
    samples = []
    try:
        async with Client(server) as client:
            check_shape(case, await call(client, case))
            for i in range(WARMUP + RUNS):
                start = time.perf_counter_ns()
                await call(client, case)
                if i >= WARMUP:
                    samples.append(ms_since(start))
            result.tool = summary(samples)
            result.tool_fn, result.catalog_fn = in_tool.median(RUNS), in_catalog.median(RUNS)
            missed = result.tool[0] > case.target_ms
            return await profile(client, case) if missed else None
    finally:
        setattr(catalog, case.tool, real)


def check_shape(case: Case, result: CallToolResult) -> None:
    """The tool answered the whole thing: every table listed, every column described."""
    body = result.structured_content or {}
    if case.tool == "list_tables":
        assert body["total_count"] == case.variant.tables_per_schema, body.get("total_count")
    else:
        assert len(body["columns"]) == 10
        assert sum(c["foreign_key"] is not None for c in body["columns"]) == 2


async def profile(client: Client, case: Case) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILED_CALLS):
        await call(client, case)
    profiler.disable()
    return top_functions(profiler)


# The per-table expressions of LIST_TABLES that cost something, as written there.
_EXPRESSIONS = {
    "pg_total_relation_size (size_bytes)": "pg_catalog.pg_total_relation_size(c.oid)",
    "obj_description (description)": "pg_catalog.obj_description(c.oid, 'pg_class')",
    "column-count subquery (column_count)": """(SELECT count(*) FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)""",
    "primary-key EXISTS (has_primary_key)": """EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
        WHERE k.conrelid = c.oid AND k.contype = 'p')""",
}


async def expression_costs(dsn: str, case: Case) -> str:
    """PostgreSQL execution time of each expression over the schema's tables, minus the bare
    scan, and of the whole statement (EXPLAIN ANALYZE, TIMING OFF; best of 3 after 1)."""
    schema = case.arguments["schema_name"]
    scan = """SELECT c.oid{} FROM pg_catalog.pg_class c
        WHERE c.relnamespace = $1::text::regnamespace AND NOT c.relispartition"""
    namespace = quote_ident(schema)
    conn = await asyncpg.connect(dsn)

    async def execution_ms(sql: str, *binds: Any) -> float:
        explain = f"EXPLAIN (ANALYZE, TIMING OFF, SUMMARY) {sql}"
        times = []
        for _ in range(4):
            lines = [r[0] for r in await conn.fetch(explain, *binds)]
            times.append(float(next(x for x in lines if x.startswith("Execution")).split()[2]))
        return min(times[1:])

    try:
        base = await execution_ms(scan.format(""), namespace)
        lines = [f"- whole statement: {await execution_ms(case.sql, *case.binds):.0f} ms"]
        lines.append(f"- bare scan of pg_class: {base:.0f} ms")
        for name, expr in _EXPRESSIONS.items():
            cost = await execution_ms(scan.format(", " + expr), namespace) - base
            lines.append(f"- {name}: +{cost:.0f} ms")
    finally:
        await conn.close()
    return "\n".join(lines)


# --- counting round trips ------------------------------------------------------------------

# asyncpg protocol methods that each make one round trip, and the argument naming the SQL.
_WIRE_METHODS = {
    "query": (0, "query"),  # simple-query protocol: one message, maybe several statements
    "prepare": (1, "query"),  # Parse/Describe/Sync
    "bind_execute": (0, "state"),  # Bind/Execute/Sync of a prepared statement
    "bind_execute_many": (0, "state"),
    "bind": (0, "state"),
    "execute": (0, "state"),
    "close_statement": (0, "state"),
}


def _sql_of(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    position, name = _WIRE_METHODS[method]
    value = args[position] if len(args) > position else kwargs[name]
    return value if isinstance(value, str) else str(value.query)


class CountingProtocol:
    """Stands in for an asyncpg connection's protocol and logs each round trip it makes."""

    def __init__(self, inner: Any, log: list[tuple[str, str]]) -> None:
        self._inner = inner
        self._log = log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in _WIRE_METHODS:
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self._log.append((name, _sql_of(name, args, kwargs)))
            return await attr(*args, **kwargs)

        return counted


def describe_sql(sql: str) -> str:
    if sql in (catalog.LIST_TABLES, catalog.DESCRIBE_TABLE):
        return "CATALOG " + ("LIST_TABLES" if sql == catalog.LIST_TABLES else "DESCRIBE_TABLE")
    return repr(" ".join(sql.split())[:100])


async def count_round_trips(dsn: str, case: Case, result: Result) -> None:
    """Run a fresh server whose pooled connections count round trips; read pg_stat_statements."""
    log: list[tuple[str, str]] = []
    real_connect = asyncpg.connect

    async def counting_connect(*args: Any, **kwargs: Any) -> Any:
        conn = await real_connect(*args, **kwargs)
        conn._protocol = CountingProtocol(conn._protocol, log)
        return conn

    admin = await asyncpg.connect(dsn)
    catalog_id = await query_id(admin, case)
    asyncpg.connect = counting_connect
    try:
        server = build_server(Settings.load(database={"dsn": dsn}))
        async with Client(server) as client:
            for _ in range(WARMUP):  # connect, codecs, statement cache
                await call(client, case)
            await admin.execute("SELECT pg_stat_statements_reset()")
            log.clear()
            for _ in range(CALLS_COUNTED):
                await call(client, case)
            calls = list(log)
    finally:
        asyncpg.connect = real_connect
    try:
        rows = await admin.fetch(
            "SELECT queryid, query, calls FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND query !~ 'pg_stat_statements' ORDER BY calls DESC, query"
        )
    finally:
        await admin.close()

    per_call: dict[str, int] = {}
    for method, sql in calls:
        key = f"{method} {describe_sql(sql)}"
        per_call[key] = per_call.get(key, 0) + 1
    result.wire_per_call = len(calls) / CALLS_COUNTED
    result.wire_detail = "; ".join(f"{n / CALLS_COUNTED:g} x {k}" for k, n in per_call.items())
    catalog_calls = sum(r["calls"] for r in rows if r["queryid"] == catalog_id)
    result.catalog_per_call = catalog_calls / CALLS_COUNTED
    result.pgss_detail = "; ".join(
        f"{r['calls'] / CALLS_COUNTED:g} x "
        + ("CATALOG" if r["queryid"] == catalog_id else repr(" ".join(r["query"].split())[:50]))
        for r in rows
    )


async def query_id(conn: asyncpg.Connection, case: Case) -> int:
    """The query identifier pg_stat_statements files the case's catalog statement under."""
    plan = await conn.fetch(f"EXPLAIN (VERBOSE) {case.sql}", *case.binds)
    line = next(r[0] for r in plan if r[0].startswith("Query Identifier:"))
    return int(line.split(":")[1])


# --- driver --------------------------------------------------------------------------------


async def run_case(dsn: str, case: Case) -> tuple[Result, list[str]]:
    """Time, count and (on a miss) diagnose one case; returns the result and report lines."""
    cold, raw = await time_raw(dsn, case)
    result = Result(case, cold, summary(raw))
    profiled = await time_tool(build_server(Settings.load(database={"dsn": dsn})), case, result)
    await count_round_trips(dsn, case, result)
    report = [
        f"\n## {case.label}: tool median {result.tool[0]:.1f} ms, raw SQL {result.raw[0]:.1f} ms",
        f"wire round trips per call: {result.wire_detail}",
        f"pg_stat_statements per call: {result.pgss_detail}",
    ]
    if profiled:
        report.append(f"\nTarget missed. cProfile of {PROFILED_CALLS} in-process calls:\n")
        report.append(profiled)
        if case.tool == "list_tables":
            report.append("Per-table expressions in PostgreSQL (EXPLAIN ANALYZE):")
            report.append(await expression_costs(dsn, case))
    return result, report


def table(results: list[Result]) -> str:
    lines = [
        "| case | raw SQL cold (ms) | raw SQL median / p95 (ms) | tool median / p95 (ms) "
        "| target | pass | catalog statements per call | wire round trips per call |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.case.label} | {r.raw_cold:.0f} | {r.raw[0]:.1f} / {r.raw[1]:.1f} "
            f"| {r.tool[0]:.1f} / {r.tool[1]:.1f} | <= {r.case.target_ms:g} ms "
            f"| {'yes' if r.passed else 'NO'} | {r.catalog_per_call:g} | {r.wire_per_call:g} |"
        )
    return "\n".join(lines)


def split_table(results: list[Result]) -> str:
    """Where a tool call's time goes, medians in ms (each column contains the next)."""
    lines = [
        "| case | whole call | tool function | catalog function | SQL alone (raw) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        cells = (r.tool[0], r.tool_fn, r.catalog_fn, r.raw[0])
        lines.append(f"| {r.case.label} | " + " | ".join(f"{x:.1f}" for x in cells) + " |")
    return "\n".join(lines)


async def bench(pg: EmbeddedPostgres) -> None:
    dsns: dict[str, str] = {}
    for variant in (SPREAD, BIG):
        dsns[variant.database] = await build(pg, variant)
        admin = await asyncpg.connect(dsns[variant.database])
        try:
            await admin.execute("CREATE EXTENSION pg_stat_statements")
        finally:
            await admin.close()
    load_before = os.getloadavg()[0]
    results = []
    for case in CASES:
        result, report = await run_case(dsns[case.variant.database], case)
        results.append(result)
        print("\n".join(report), flush=True)
    load_after = os.getloadavg()[0]
    print(f"\n{WARMUP} warm-up calls, then {RUNS} timed calls per cell; in-process client with")
    print("output validation off. 1-minute load average "
          f"{load_before:.2f} before, {load_after:.2f} after.\n")  # fmt: skip
    print(table(results))
    print("\nMedians (ms): whole in-process call > tool function (pool checkout, BEGIN, catalog")
    print("function, ROLLBACK, pydantic models) > catalog function (the statement, rows to dicts);")
    print("the SQL alone on a plain connection for comparison.\n")
    print(split_table(results))


def main() -> None:
    with embedded_server(SETTINGS) as pg:
        asyncio.run(bench(pg))


if __name__ == "__main__":
    main()
