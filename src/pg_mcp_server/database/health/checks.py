"""analyze_db_health's runner: each check in a savepoint of one read-only transaction, so a
check that fails (a view this server lacks, a privilege this role lacks, the statement
timeout) is rolled back and reported with its reason while the others run; then the findings
cut to the answer budget, the most severe first, with a count of the rest."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict

import asyncpg

from pg_mcp_server.database.health import activity, indexes, tables
from pg_mcp_server.database.health.findings import RANK, Check, Finding, Outcome

logger = logging.getLogger(__name__)

CHECKS: dict[str, Check] = {
    "invalid_indexes": indexes.invalid_indexes,
    "duplicate_indexes": indexes.duplicate_indexes,
    "redundant_indexes": indexes.redundant_indexes,
    "unused_indexes": indexes.unused_indexes,
    "index_bloat": indexes.index_bloat,
    "table_bloat": tables.table_bloat,
    "freeze_age": tables.freeze_age,
    "sequences": tables.sequences,
    "cache_hit": tables.cache_hit,
    "not_valid_constraints": tables.not_valid_constraints,
    "connections": activity.connections,
    "idle_in_transaction": activity.idle_in_transaction,
    "long_running_queries": activity.long_running_queries,
    "blocking_locks": activity.blocking_locks,
    "replication": activity.replication,
}

PER_CHECK = 20  # findings a check may show; the rest are counted

# Constant text with nothing to look up: pinned as written.
_SAVEPOINT = "SAVEPOINT pg_mcp_health"
_RELEASE = "RELEASE SAVEPOINT pg_mcp_health"
_ROLLBACK = "ROLLBACK TO SAVEPOINT pg_mcp_health"

_REASONS: dict[type[asyncpg.PostgresError], str] = {
    asyncpg.InsufficientPrivilegeError: "this role lacks a privilege it needs",
    asyncpg.UndefinedTableError: "a view it reads does not exist on this server",
    asyncpg.UndefinedFunctionError: "a function it calls does not exist on this server",
    asyncpg.UndefinedColumnError: "a column it reads does not exist on this server",
    asyncpg.QueryCanceledError: "it ran out of time (the statement timeout) or was cancelled",
    asyncpg.ObjectNotInPrerequisiteStateError: "the server is not set up for it",
}


def _reason(exc: asyncpg.PostgresError) -> str:
    why = next((r for cls, r in _REASONS.items() if isinstance(exc, cls)), "it failed")
    return f"{why}: {exc.sqlstate} {(exc.message or '')[:200]}"


async def run_checks(conn: asyncpg.Connection, names: list[str]) -> list[Outcome]:
    """Each named check, in the order given, on `conn` (inside a read-only transaction)."""
    outcomes = []
    for name in names:
        await conn.execute(_SAVEPOINT)
        try:
            outcome = await CHECKS[name](conn, PER_CHECK)
        except asyncpg.PostgresError as exc:
            await conn.execute(_ROLLBACK)
            logger.info("health check %s could not run: %s", name, exc.sqlstate)
            outcomes.append(Outcome(name, error=_reason(exc)))
            continue
        await conn.execute(_RELEASE)
        outcomes.append(outcome)
    return outcomes


def within_budget(outcomes: list[Outcome], budget_bytes: int) -> tuple[list[Finding], int]:
    """The findings that fit in `budget_bytes` of JSON, the most severe first (then in check
    order), and how many were left out for the budget."""
    ordered = sorted(
        (f for o in outcomes for f in o.findings),
        key=lambda f: RANK[f.severity],
    )
    kept: list[Finding] = []
    used = 0
    for finding in ordered:
        size = len(json.dumps(asdict(finding), default=str)) + 1
        if used + size > budget_bytes:
            break
        kept.append(finding)
        used += size
    return kept, len(ordered) - len(kept)
