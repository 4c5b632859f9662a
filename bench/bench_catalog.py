"""Server-side timings of list_tables and describe_table on the 10k-table / 100k-column catalog.

Starts a throwaway PostgreSQL 18, generates both catalog variants (bench/catalog.py), then for
each case measures, after WARMUP calls, up to RUNS calls (fewer when slow: BUDGET_S) of:
  (a) the catalog statement alone on a new plain asyncpg connection (prepared by asyncpg, json
      left as text); its very first call, on a backend with a cold relation cache, is reported
      separately as "cold". For describe_table it is given no known snapshot, so it builds
      the whole answer every time (the tool's first call, or any call after a commit);
  (b) the tool through `mcp.Client(server)` in-process, with the client's output-schema
      validation switched off (ClientSession.validate_tool_result -> no-op): what remains is the
      server (pool checkout, the statement in the session's implicit read-only transaction,
      pydantic models, JSON) plus the SDK's in-process dispatch. Nothing commits during the
      loop, so describe_table's statement returns only the row estimate and size after the
      first call and the tool reuses its answer (catalog.SnapshotCache).
WARMUP is 10 because PostgreSQL plans a prepared statement afresh for its first 5 executions
before it may switch to a cached generic plan. Stopwatches split each call into the tool
function and the catalog function it calls (see time_tool).

Then it counts statements and round trips per tool call, two independent ways:
  - wire: every round trip asyncpg makes (its protocol's prepare / bind_execute / query / ...
    calls, each one a request answered by ReadyForQuery) on the server's pooled connections,
    the engine's session reset (run in a task after the tool returns) counted apart;
  - PostgreSQL: pg_stat_statements (preloaded) `calls` over CALLS_COUNTED tool calls.
A case whose median misses its target is profiled with cProfile, and for list_tables
PostgreSQL's share is broken down (EXPLAIN ANALYZE, see expression_costs): the schema's count,
the bare page scan, and what each per-table expression adds. A tool call that fails (a
statement timeout, say) is reported with its error and time.

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
from benchlib import (
    Stopwatch,
    count_round_trips,
    embedded_server,
    ms_since,
    patched,
    repeat,
    summary,
    top_functions,
)
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
# Every loop also has a time budget (benchlib.repeat), so a regression that makes calls take
# seconds (as at 16c0100) cannot make the run last hours: past it a loop stops early, with at
# least one timed call. A case whose calls take more than SLOW_MS is counted and profiled over
# a single call, and one whose cold raw call takes more than BUDGET_S gets no further raw calls.
BUDGET_S = 40.0
SLOW_MS = 2000.0
RAW_STATEMENT_TIMEOUT_S = 600  # the plain connection's own limit; the tool's is 30 s

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


DEFAULT_PAGE = 1000  # list_tables' default `limit`


CaseSpec = tuple[str, dict[str, Any], str, tuple[Any, ...]]  # tool, arguments, SQL, binds


def _list(schema: str, limit: int | None = None) -> CaseSpec:
    # The tool's defaults: include_views=True (all relkinds), no name pattern, offset 0.
    arguments: dict[str, Any] = {"schema_name": schema}
    if limit is not None:
        arguments["limit"] = limit
    return ("list_tables", arguments, catalog.LIST_TABLES,
            (schema, catalog.RELKINDS_ALL, None, limit or DEFAULT_PAGE, 0, False))  # fmt: skip


def _describe(schema: str, table: str) -> CaseSpec:
    # No known snapshot (""): the raw SQL builds the whole answer every time, as the tool's
    # statement does on its first call and whenever something has committed since the last.
    return ("describe_table", {"schema_name": schema, "table_name": table},
            catalog.DESCRIBE_TABLE, (schema, table, True, True, ""))  # fmt: skip


CASES = [
    Case("list_tables: schema of 1,000 tables", SPREAD, *_list("s03"), 100),
    Case("list_tables: 10,000-table schema, default page (1,000)", BIG, *_list("big"), 100),
    Case("list_tables: 10,000-table schema, limit=10000 (all)", BIG, *_list("big", 10_000), 100),
    Case("describe_table s03.t500 (10 cols, 2 FKs)", SPREAD, *_describe("s03", "t500"), 20),
    Case("describe_table big.t5000 (10 cols, 2 FKs)", BIG, *_describe("big", "t5000"), 20),
]


@dataclass
class Result:
    case: Case
    raw_cold: float
    raw: tuple[float, float] | None  # None: only the cold call was made (see BUDGET_S)
    raw_runs: int = 0
    tool: tuple[float, float] = (0.0, 0.0)
    tool_runs: int = 0
    tool_error: str = ""  # the error the tool answered with, if it did
    tool_fn: float = 0.0  # medians of the stopwatches, see time_tool
    catalog_fn: float = 0.0
    catalog_per_call: float = 0.0
    wire_per_call: float = 0.0
    wire_critical_per_call: float = 0.0  # without the background session reset
    wire_detail: str = ""
    pgss_detail: str = ""

    @property
    def passed(self) -> bool:
        return (
            not self.tool_error
            and self.tool[0] <= self.case.target_ms
            and self.catalog_per_call == 1
        )

    @property
    def slow(self) -> bool:
        return bool(self.tool_error) or self.tool[0] > SLOW_MS


# --- client-side validation off -----------------------------------------------------------


async def _no_validation(self: ClientSession, name: str, result: CallToolResult) -> None:
    return None


ClientSession.validate_tool_result = _no_validation  # type: ignore[method-assign]


# --- timing --------------------------------------------------------------------------------


async def time_raw(dsn: str, case: Case) -> Result:
    """The first call on a fresh connection ("cold"), then WARMUP + RUNS within BUDGET_S."""
    conn = await asyncpg.connect(dsn, command_timeout=RAW_STATEMENT_TIMEOUT_S)
    try:
        start = time.perf_counter_ns()
        await conn.fetch(case.sql, *case.binds)
        cold = ms_since(start)
        if cold > BUDGET_S * 1000:
            return Result(case, cold, None)

        async def once() -> None:
            await conn.fetch(case.sql, *case.binds)

        samples = await repeat(once, warmup=WARMUP, runs=RUNS, budget_s=BUDGET_S)
        return Result(case, cold, summary(samples), raw_runs=len(samples))
    finally:
        await conn.close()


class ToolFailed(Exception):
    pass


async def call(client: Client, case: Case) -> CallToolResult:
    result = await client.call_tool(case.tool, case.arguments)
    if result.is_error:
        error = (result.structured_content or {}).get("error", {})
        raise ToolFailed(f"{error.get('code')}: {error.get('message')}")
    return result


async def time_tool(server: MCPServer[Any], case: Case, result: Result) -> str | None:
    """Time whole calls in-process, and with stopwatches the tool function (reached through
    the SDK's private tool manager) and the catalog function it calls (query + rows to dicts).
    Fills `result`; returns a cProfile report if the median misses the target. A tool error
    on the first call is recorded and ends the case."""
    tool = server._tool_manager.get_tool(case.tool)  # private; bench only
    assert tool is not None
    in_tool, in_catalog = Stopwatch(), Stopwatch()
    tool.fn = in_tool.wrap(tool.fn)
    with patched(catalog, case.tool, in_catalog.wrap):
        async with Client(server) as client:
            start = time.perf_counter_ns()
            try:
                check_shape(case, await call(client, case))
            except ToolFailed as exc:
                result.tool_error = f"{exc} (after {ms_since(start) / 1000:.1f} s)"
                return None
            samples = await repeat(
                lambda: call(client, case), warmup=WARMUP, runs=RUNS, budget_s=BUDGET_S
            )
            result.tool, result.tool_runs = summary(samples), len(samples)
            n = len(samples)
            result.tool_fn, result.catalog_fn = in_tool.median(n), in_catalog.median(n)
            missed = result.tool[0] > case.target_ms
            return (
                await profile(client, case, 1 if result.slow else PROFILED_CALLS)
                if missed
                else None
            )


def check_shape(case: Case, result: CallToolResult) -> None:
    """The tool answered the whole thing: every table listed, every column described."""
    body = result.structured_content or {}
    if case.tool == "list_tables":
        total = case.variant.tables_per_schema
        page = min(case.arguments.get("limit", DEFAULT_PAGE), total)
        assert body["total_count"] == total, body.get("total_count")
        assert len(body["tables"]) == page, len(body["tables"])
        assert body["has_more"] == (page < total), body.get("has_more")
    else:
        assert len(body["columns"]) == 10
        assert sum(c["foreign_key"] is not None for c in body["columns"]) == 2


async def profile(client: Client, case: Case, calls: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        await call(client, case)
    profiler.disable()
    return f"cProfile of {calls} in-process call(s):\n\n" + top_functions(profiler)


# The per-table expressions of LIST_TABLES that cost something, as written there (private
# templates of catalog.py; bench only).
_EXPRESSIONS = {
    "size from relpages (size_bytes)": catalog._SIZE.format(c="c"),
    "pg_description join (description)": """(SELECT d.description
        FROM pg_catalog.pg_description d WHERE d.objoid = c.oid
        AND d.classoid = 'pg_catalog.pg_class'::regclass AND d.objsubid = 0)""",
    "row estimate (estimated_row_count)": catalog._ROWS.format(c="c"),
    "column-count subquery (column_count)": """(SELECT count(*) FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)""",
    "primary-key EXISTS (has_primary_key)": """EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
        WHERE k.conrelid = c.oid AND k.contype = 'p')""",
    "partitions array (partitions)": catalog._PARTITIONS.format(c="c"),
}

# LIST_TABLES' two parts with the same binds: the schema's count (`counted`, binds $1-$3) and
# the page of oids joined back to pg_class (`page`, binds $1-$5), to which _EXPRESSIONS are
# added one at a time. _LISTED is LIST_TABLES' own filter (private; bench only).
_COUNT = f"""SELECT (SELECT count(*) FROM pg_catalog.pg_class c WHERE {catalog._LISTED})
    FROM pg_catalog.pg_namespace n WHERE n.nspname = $1"""
_PAGE = f"""SELECT c.oid{{}} FROM pg_catalog.pg_namespace n
    CROSS JOIN LATERAL (SELECT c.oid FROM pg_catalog.pg_class c WHERE {catalog._LISTED}
                        ORDER BY c.relname LIMIT $4 OFFSET $5) page
    JOIN pg_catalog.pg_class c ON c.oid = page.oid
    WHERE n.nspname = $1"""


async def expression_costs(dsn: str, case: Case, slow: bool) -> str:
    """PostgreSQL execution time of LIST_TABLES, of its count alone, of the bare page scan, and
    of each per-table expression over the page, minus the bare scan (EXPLAIN ANALYZE, TIMING
    OFF; best of 3 after 1, or a single run of the whole statement when `slow`)."""
    conn = await asyncpg.connect(dsn, command_timeout=RAW_STATEMENT_TIMEOUT_S)

    async def execution_ms(sql: str, *binds: Any, runs: int = 4) -> float:
        explain = f"EXPLAIN (ANALYZE, TIMING OFF, SUMMARY) {sql}"
        times = []
        for _ in range(runs):
            lines = [r[0] for r in await conn.fetch(explain, *binds)]
            times.append(float(next(x for x in lines if x.startswith("Execution")).split()[2]))
        return min(times[1:] or times)

    try:
        whole = await execution_ms(case.sql, *case.binds, runs=1 if slow else 4)
        count = await execution_ms(_COUNT, *case.binds[:3])
        base = await execution_ms(_PAGE.format(""), *case.binds)
        lines = [
            f"- whole statement: {whole:.1f} ms",
            f"- the schema's count alone (`counted`, once per call): {count:.1f} ms",
            f"- bare page scan of pg_class ({case.binds[3]} rows at most): {base:.1f} ms",
        ]
        for name, expr in _EXPRESSIONS.items():
            cost = await execution_ms(_PAGE.format(", " + expr), *case.binds) - base
            lines.append(f"- {name}: {cost:+.1f} ms")
    finally:
        await conn.close()
    return "\n".join(lines)


# --- counting round trips ------------------------------------------------------------------


async def count_statements(dsn: str, case: Case, result: Result) -> None:
    """A fresh server whose pooled connections count round trips; pg_stat_statements too.
    A slow case is counted over one call after one warm-up call."""
    label = "CATALOG " + case.tool.upper()
    counts = await count_round_trips(
        dsn,
        build_server(Settings.load(database={"dsn": dsn})),
        lambda client: call(client, case),
        {label: (case.sql, case.binds)},
        warmup=1 if result.slow else WARMUP,
        counted=1 if result.slow else CALLS_COUNTED,
    )
    result.wire_critical_per_call = counts.round_trips(background=False)
    result.wire_per_call = result.wire_critical_per_call + counts.round_trips(background=True)
    result.wire_detail = counts.wire_detail()
    result.catalog_per_call = counts.statement_calls(label)
    result.pgss_detail = counts.pgss_detail()


# --- driver --------------------------------------------------------------------------------


async def run_case(dsn: str, case: Case) -> tuple[Result, list[str]]:
    """Time, count and (on a miss) diagnose one case; returns the result and report lines."""
    result = await time_raw(dsn, case)
    profiled = await time_tool(build_server(Settings.load(database={"dsn": dsn})), case, result)
    raw = f"{result.raw[0]:.1f} ms" if result.raw else f"cold only, {result.raw_cold:.0f} ms"
    tool = result.tool_error or f"{result.tool[0]:.1f} ms"
    report = [f"\n## {case.label}: tool median {tool}, raw SQL {raw}"]
    if result.tool_error:
        report.append("The tool failed; not counted.")
    else:
        await count_statements(dsn, case, result)
        report.append(f"wire round trips per call: {result.wire_detail}")
        report.append(f"pg_stat_statements per call: {result.pgss_detail}")
    if profiled:
        report.append(f"\nTarget missed. {profiled}")
    if case.tool == "list_tables" and not result.passed:
        report.append("Per-table expressions in PostgreSQL (EXPLAIN ANALYZE):")
        report.append(await expression_costs(dsn, case, result.slow))
    return result, report


def _pair(value: tuple[float, float] | None, runs: int) -> str:
    return "-" if value is None else f"{value[0]:.1f} / {value[1]:.1f} ({runs})"


def table(results: list[Result]) -> str:
    lines = [
        "| case | raw SQL cold (ms) | raw SQL median / p95 (ms) (timed calls) "
        "| tool median / p95 (ms) (timed calls) | target | pass | catalog statements per call "
        "| wire round trips per call (on the critical path + in the background) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        tool = f"**{r.tool_error}**" if r.tool_error else _pair(r.tool, r.tool_runs)
        counted = not r.tool_error
        lines.append(
            f"| {r.case.label} | {r.raw_cold:.0f} | {_pair(r.raw, r.raw_runs)} | {tool} "
            f"| <= {r.case.target_ms:g} ms | {'yes' if r.passed else '**NO**'} "
            f"| {f'{r.catalog_per_call:g}' if counted else '-'} "
            + (
                f"| {r.wire_critical_per_call:g} + {r.wire_per_call - r.wire_critical_per_call:g} |"
                if counted
                else "| - |"
            )
        )
    return "\n".join(lines)


def split_table(results: list[Result]) -> str:
    """Where a tool call's time goes, medians in ms (each column contains the next)."""
    lines = [
        "| case | whole call | tool function | catalog function | SQL alone (raw) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        if r.tool_error:
            continue
        cells = (r.tool[0], r.tool_fn, r.catalog_fn, r.raw[0] if r.raw else r.raw_cold)
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
    print(f"\n{WARMUP} warm-up calls, then up to {RUNS} timed calls per cell, within a budget of")
    print(f"{BUDGET_S:g} s; in-process client with output validation off. 1-minute load average")
    print(f"{load_before:.2f} before, {load_after:.2f} after.\n")
    print(table(results))
    print("\nMedians (ms): whole in-process call > tool function (pool checkout, catalog")
    print("function, pydantic models; the session reset runs after, in the background) > catalog")
    print("function (the statement, rows to dicts);")
    print("the SQL alone on a plain connection for comparison.\n")
    print(split_table(results))


def main() -> None:
    with embedded_server(SETTINGS) as pg:
        asyncio.run(bench(pg))


if __name__ == "__main__":
    main()
