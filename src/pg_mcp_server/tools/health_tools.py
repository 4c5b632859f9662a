"""Database health: analyze_db_health and get_top_queries.

Thin wrappers over database/health: each runs our own pinned statements in one read-only
transaction (analyze_db_health each check in a savepoint of it), reads statistics views and
catalogs only, and never runs a fix.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated, Any, Literal

from mcp_types import CallToolResult
from pydantic import Field

from pg_mcp_server.app import AppContext
from pg_mcp_server.database.health import (
    CHECKS,
    MAX_QUERIES,
    Outcome,
    advise,
    advise_workload,
    run_checks,
    top_queries,
    within_budget,
)
from pg_mcp_server.errors import ParameterError
from pg_mcp_server.models.health import (
    AnalyzeDbHealthOutput,
    AnalyzeQueryIndexesOutput,
    CheckResult,
    Finding,
    GetTopQueriesOutput,
)
from pg_mcp_server.tools.registry import ToolDef, make_tool, ok

CheckName = Literal[
    "invalid_indexes",
    "duplicate_indexes",
    "redundant_indexes",
    "unused_indexes",
    "index_bloat",
    "table_bloat",
    "freeze_age",
    "sequences",
    "cache_hit",
    "not_valid_constraints",
    "connections",
    "idle_in_transaction",
    "long_running_queries",
    "blocking_locks",
    "replication",
]
SortBy = Literal["total_time", "mean_time", "calls", "rows", "shared_blks_read", "shared_blks_hit"]

ANALYZE_DB_HEALTH = """Database health from statistics views and catalogs (cheap, read-only):
findings, most severe first, each {check, severity, object, numbers, fix}; fix is a statement
for the user, never run here. `checks`: per check ok, findings or failed with the reason
(a missing privilege or view). Example: analyze_db_health(checks=["unused_indexes"])"""

GET_TOP_QUERIES = """Top statements of pg_stat_statements in this database by sort_by: text
(<= 500 chars), calls, total/mean ms, rows, shared blocks hit/read, hit_ratio. Counts this
server's own statements too. Example: get_top_queries(sort_by="mean_time", limit=5)"""

ANALYZE_QUERY_INDEXES = """Indexes that would speed up one SELECT (sql) or a workload (queries
and/or top_queries: pg_stat_statements' N costliest, weighted by calls), each measured with
HypoPG (hypothetical, nothing created): plan cost before/after, improvement factor, estimated
size, and the CREATE INDEX CONCURRENTLY statement for the user. Candidates: compared, joined and
ordered columns; for a workload picked greedily (most cost saved per byte) within
max_index_size_mb. Example: analyze_query_indexes(sql="SELECT * FROM orders WHERE status = $1",
params=["new"])"""

# Bytes for the keys around the findings and the counts that may still grow once cut.
_FRAME_BYTES = 200
_SHORT_TEXT = 60  # a pg_stat_statements text cut to this when the answer is over budget
MIB = 1024 * 1024


def _result(outcome: Outcome, shown: int) -> CheckResult:
    status = "failed" if outcome.error else "findings" if outcome.found else "ok"
    return CheckResult(
        check=outcome.check,
        status=status,
        found=outcome.found,
        omitted=outcome.found - shown,
        note=outcome.note,
        error=outcome.error,
    )


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _fit(found: dict[str, Any], room: int) -> None:
    """A workload's answer within `room` bytes: pg_stat_statements texts cut shorter first,
    then the statements' list, then the recommendations (the last picked first), each cut
    said in the note."""
    cuts = []
    if _size(found) > room:
        for query in found["queries"]:
            if "text" in query:
                query["text"] = query["text"][:_SHORT_TEXT]
    for key in ("queries", "recommendations"):
        listed = found[key]
        cut = 0
        while listed and _size(found) > room:
            listed.pop()
            cut += 1
        if cut:
            cuts.append(f"{cut} {key} not shown (the answer budget)")
    found["note"] = "; ".join([found["note"], *cuts] if found["note"] else cuts)


def health_tools() -> list[ToolDef]:
    async def analyze_db_health(
        app: AppContext,
        checks: Annotated[
            list[CheckName] | None, Field(description="Which checks; default all")
        ] = None,
    ) -> Annotated[CallToolResult, AnalyzeDbHealthOutput]:
        names: list[str] = list(dict.fromkeys(checks)) if checks else list(CHECKS)
        outcomes = await app.db.run(lambda conn: run_checks(conn, names), explicit=True)
        # The statuses are always answered; the findings share what they leave.
        frame = len(json.dumps([_result(o, 0).dump() for o in outcomes])) + _FRAME_BYTES
        kept, _ = within_budget(outcomes, app.settings.server.answer_budget_bytes - frame)
        shown: dict[str, int] = {}
        for finding in kept:
            shown[finding.check] = shown.get(finding.check, 0) + 1
        severities: dict[str, int] = {}
        for outcome in outcomes:
            for finding in outcome.findings:
                severities[finding.severity] = severities.get(finding.severity, 0) + 1
        results = [_result(o, shown.get(o.check, 0)) for o in outcomes]
        return ok(
            AnalyzeDbHealthOutput(
                findings=[Finding(**asdict(f)) for f in kept],
                checks=results,
                severities=severities,
                omitted=sum(r.omitted for r in results),
            )
        )

    async def get_top_queries(
        app: AppContext,
        sort_by: SortBy = "total_time",
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
    ) -> Annotated[CallToolResult, GetTopQueriesOutput]:
        found = await app.db.run(lambda conn: top_queries(conn, sort_by, limit), explicit=True)
        # Within the answer budget: the queries that fit, in order, and a note on the rest.
        room = app.settings.server.answer_budget_bytes - _FRAME_BYTES * 2
        kept: list[dict[str, Any]] = []
        for query in found["queries"]:
            room -= len(json.dumps(query, separators=(",", ":"), ensure_ascii=False)) + 1
            if room < 0:
                break
            kept.append(query)
        cut = len(found["queries"]) - len(kept)
        found["queries"] = kept
        note = f"{cut} more within limit not shown (the answer budget)" if cut else ""
        return ok(GetTopQueriesOutput(sort_by=sort_by, note=note, **found))

    async def analyze_query_indexes(
        app: AppContext,
        sql: Annotated[str | None, Field(description="One SELECT")] = None,
        params: Annotated[list[Any] | None, Field(description="Values for $n placeholders")] = None,
        queries: Annotated[list[str] | None, Field(max_length=MAX_QUERIES)] = None,
        top_queries: Annotated[int, Field(ge=0, le=MAX_QUERIES)] = 0,
        max_index_size_mb: Annotated[float | None, Field(gt=0)] = None,
    ) -> Annotated[CallToolResult, AnalyzeQueryIndexesOutput]:
        if not queries and not top_queries:
            if sql is None:
                raise ParameterError(
                    "Nothing to advise on: give sql, or a workload (queries, top_queries).",
                    suggestion='For example sql="SELECT * FROM orders WHERE status = $1".',
                )
            if max_index_size_mb is not None:
                raise ParameterError(
                    "max_index_size_mb bounds a workload's indexes (queries, top_queries).",
                    suggestion="Pass the query in queries=[...] to advise it under a budget.",
                    context={"max_index_size_mb": max_index_size_mb},
                )
            one, shapes, sensitive = sql, app.shapes, app.sensitive
            found = await app.db.run(
                lambda conn: advise(conn, app.db, app.guard, one, params, shapes, sensitive),
                explicit=True,
                prelude=lambda: app.guard.prelude(one),
            )
            return ok(AnalyzeQueryIndexesOutput(**found))
        if sql is not None or params is not None:
            raise ParameterError(
                "sql and params are for one query; a workload's statements go in queries "
                "(their $n placeholders are planned generic, with no values).",
                suggestion="Put the statement in queries=[...] and leave params out.",
            )
        budget = int(max_index_size_mb * MIB) if max_index_size_mb is not None else None
        found = await app.db.run(
            lambda conn: advise_workload(
                conn,
                app.db,
                app.guard,
                queries or [],
                top_queries,
                budget,
                app.shapes,
                app.sensitive,
            ),
            explicit=True,
        )
        _fit(found, app.settings.server.answer_budget_bytes - _FRAME_BYTES)
        return ok(AnalyzeQueryIndexesOutput(**found))

    return [
        make_tool(
            analyze_query_indexes,
            name="analyze_query_indexes",
            title="Index advice",
            description=ANALYZE_QUERY_INDEXES,
        ),
        make_tool(
            analyze_db_health,
            name="analyze_db_health",
            title="Database health",
            description=ANALYZE_DB_HEALTH,
        ),
        make_tool(
            get_top_queries,
            name="get_top_queries",
            title="Top queries",
            description=GET_TOP_QUERIES,
        ),
    ]
