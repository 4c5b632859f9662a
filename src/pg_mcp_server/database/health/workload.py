"""analyze_query_indexes over a workload: the caller's queries and/or the costliest statements
of pg_stat_statements, indexes chosen greedily under a size budget, each measured with HypoPG.

Each statement is judged by the guard (and, with redaction on, refused where its plan would
tell a sensitive value, as explain_query refuses it) before its plan is asked; a refused one
is reported and left out. Nothing is ever run: a statement is prepared on the extended
protocol with its $n parameters' types left to PostgreSQL (pg_stat_statements' texts have
their constants replaced by $n) and planned with `EXPLAIN EXECUTE name(NULL, ...)` under
`plan_cache_mode = force_generic_plan`, so the plan is the generic one, which no value shapes
(NULL included); then deallocated. A hypothetical index does not invalidate a cached plan,
so each measurement prepares the statement anew. The whole call is one read-only
transaction: the setting goes with its rollback; the prepared statements, which outlive it,
are deallocated after each use (after a failure, once rolled back).

Candidates come from every planned statement's parse tree (advice.candidates, per statement),
merged; each is created once as a hypothetical index to learn its estimated size (those HypoPG
refuses are dropped). The greedy search: the workload's cost is the sum over its statements of
the plan's total cost, times its calls for a pg_stat_statements statement (once for the
caller's); each round adds the candidate, among those that fit in what is left of the size
budget and lower the workload's cost by at least MIN_GAIN of its cost without any new index,
that lowers it the most per byte of index; it stops when none does. A statement is planned
again only when an index on a table it names changed since (memo), or always when it names a
view or anything but a table, whose plan any index may change; after MAX_PLANS plans the
search stops with what it has picked, and says so.

Hypothetical indexes live in the backend, outside transactions: after the work, and after a
failure (under a savepoint rolled back first), `hypopg_reset()`; a session where that cannot
be confirmed (a cancelled call, a failed reset) is terminated, so the pool never gets it back.

Its size (~460 lines): reading the workload, judging each statement, the planner and the
greedy search share one transaction's state (the planner's memo and prepared statements, the
savepoints, the guard's record of what is locked) and one clean-up; split, each part would
take all of it as arguments.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from pg_mcp_server.database.explain import refuse_hidden_rows
from pg_mcp_server.database.guard import SqlGuard, quote_ident
from pg_mcp_server.database.health.advice import (
    Table,
    candidates,
    create_index,
    hypopg_of,
    statement_columns,
    tables_of,
)
from pg_mcp_server.database.health.statements import costliest
from pg_mcp_server.database.pool import (
    Database,
    StatementChangedError,
    transaction_of,
    translate,
)
from pg_mcp_server.database.rows import Shapes, judge_hidden, mask_query, rewrite, scrubbed
from pg_mcp_server.database.sql import statement, tree as sqltree
from pg_mcp_server.errors import DatabaseConnectionError, PgMcpError

MAX_QUERIES = 20  # the caller's, and as many of pg_stat_statements
MAX_CANDIDATES = 24
# Plans one call may ask for (each three round trips, ~1 ms on a small statement): the
# greedy search stops there, and says so, rather than run for minutes on a big workload.
MAX_PLANS = 3000
MIN_GAIN = 0.01  # of the workload's cost without new indexes: less is not worth an index
QUERY_CHARS = 20_000  # longer pg_stat_statements texts are left out
SHOWN_CHARS = 200  # of a pg_stat_statements text in the answer
_SCANNED = 5  # pg_stat_statements rows read per statement asked for (some are not SELECTs)
_SYSTEM = ("pg_catalog", "information_schema")

GENERIC = statement(
    "health.workload.GENERIC",
    "SELECT pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true)",
)

_SAVEPOINT = "SAVEPOINT pg_mcp_workload"
_ROLLBACK = "ROLLBACK TO SAVEPOINT pg_mcp_workload"
_RELEASE = "RELEASE SAVEPOINT pg_mcp_workload"
_STEP = "SAVEPOINT pg_mcp_workload_step"
_STEP_ROLLBACK = "ROLLBACK TO SAVEPOINT pg_mcp_workload_step"
_STEP_RELEASE = "RELEASE SAVEPOINT pg_mcp_workload_step"


@dataclass
class _Query:
    number: int  # its place in the answer, from 1
    sql: str
    weight: int = 1  # calls, for a pg_stat_statements statement
    queryid: str | None = None
    judged: str = ""  # as the guard judged it, written back from its parse tree
    params: int = 0
    tables: set[tuple[str, str]] = field(default_factory=set)
    opaque: bool = False
    cost: float = 0.0  # without new indexes
    refused: dict[str, str] | None = None
    not_planned: dict[str, str] | None = None

    @property
    def planned(self) -> bool:
        return self.refused is None and self.not_planned is None


@dataclass
class _Candidate:
    table: Table
    columns: list[str]
    size: int = 0

    @property
    def key(self) -> tuple[str, str, tuple[str, ...]]:
        return (self.table.schema, self.table.name, tuple(self.columns))

    @property
    def relation(self) -> tuple[str, str]:
        return (self.table.schema, self.table.name)


def _error(exc: PgMcpError) -> dict[str, str]:
    return {"code": exc.code, "message": exc.message}


class _Planner:
    """Generic plans' costs of the workload's statements, with hypothetical indexes."""

    def __init__(self, conn: asyncpg.Connection, hypopg: str) -> None:
        self.conn = conn
        self.hypopg = hypopg
        self.made = 0
        self.left: list[str] = []
        self.memo: dict[tuple[int, frozenset[Any]], float] = {}

    async def cost(self, query: _Query) -> float:
        self.made += 1
        name = quote_ident(f"pg_mcp_advice_{self.made}")
        # Held while it is used: the driver closes a statement nothing refers to.
        prepared = await self.conn.prepare(query.judged, name=f"pg_mcp_advice_{self.made}")
        nulls = ", ".join(["NULL"] * query.params)
        try:
            plan = await self.conn.fetchval(
                f"EXPLAIN (FORMAT JSON) EXECUTE {name}" + (f"({nulls})" if nulls else "")
            )
        except asyncpg.PostgresError:
            self.left.append(name)  # the transaction failed: deallocated after its rollback
            raise
        await self.conn.execute(f"DEALLOCATE {name}")
        del prepared
        document = json.loads(plan) if isinstance(plan, str) else plan
        return float(document[0]["Plan"]["Total Cost"])

    @property
    def spent(self) -> bool:
        return self.made >= MAX_PLANS

    async def tidy(self) -> None:
        """Deallocate the statements a failure left (prepared statements outlive a
        rollback); after the rollback."""
        while self.left:
            name = self.left.pop()
            await self.conn.execute(_STEP)
            try:
                await self.conn.execute(f"DEALLOCATE {name}")
            except asyncpg.InvalidSQLStatementNameError:
                await self.conn.execute(_STEP_ROLLBACK)  # gone with its failure already
            await self.conn.execute(_STEP_RELEASE)

    async def create(self, candidate: _Candidate) -> tuple[int, int]:
        row = await self.conn.fetchrow(
            f"SELECT indexrelid, {self.hypopg}.hypopg_relation_size(indexrelid) AS size "
            f"FROM {self.hypopg}.hypopg_create_index($1::pg_catalog.text)",
            create_index(candidate.table, candidate.columns),
        )
        assert row is not None
        return int(row["indexrelid"]), int(row["size"])

    async def drop(self, oid: int) -> None:
        await self.conn.execute(f"SELECT {self.hypopg}.hypopg_drop_index($1::pg_catalog.oid)", oid)

    async def reset(self) -> None:
        await self.conn.execute(f"SELECT {self.hypopg}.hypopg_reset()")

    async def costs(
        self, queries: list[_Query], chosen: list[_Candidate], trying: _Candidate | None
    ) -> dict[int, float]:
        """Each statement's cost with the `chosen` indexes (created) and `trying` (created
        here when a statement must be planned again, dropped after)."""
        out: dict[int, float] = {}
        todo = []
        for query in queries:
            known = [c.key for c in chosen if query.opaque or c.relation in query.tables]
            if trying is not None and (query.opaque or trying.relation in query.tables):
                known.append(trying.key)
            key = (query.number, frozenset(known))
            if key in self.memo:
                out[query.number] = self.memo[key]
            elif not known:
                out[query.number] = query.cost
            else:
                todo.append((query, key))
        if todo:
            # (after a failure the transaction is aborted: the caller resets every index)
            oid = (await self.create(trying))[0] if trying is not None else None
            for query, key in todo:
                out[query.number] = self.memo[key] = await self.cost(query)
            if oid is not None:
                await self.drop(oid)
        return out


async def _judge(
    conn: asyncpg.Connection,
    db: Database,
    guard: SqlGuard,
    planner: _Planner,
    query: _Query,
    shapes: Shapes | None,
    sensitive: re.Pattern[str] | None,
) -> None:
    """Judge, describe and plan `query` under a savepoint; a refusal or a failure is recorded
    on it, rolled back, and the guard's record of the transaction's locks and path put back as
    they were before (the rollback released what it took since)."""
    transaction = transaction_of(conn)
    locked = dict(transaction.locked) if transaction else {}
    path = transaction.search_path if transaction else None
    reads_sensitive = False
    await conn.execute(_STEP)
    try:
        # Planned as written back from the parse tree the guard judged (as explain_query
        # and execute_query run it), never as the caller typed it: where the two could read
        # a name apart (attack6), what is planned is what was judged.
        query.judged = rewrite.deparse(rewrite.parse(await guard.check(query.sql, conn)))
        await refuse_hidden_rows(conn, db)  # (its costs would tell what a policy hides)
        reads_sensitive = shapes is not None and await judge_hidden(
            conn, shapes, query.judged, sensitive, guard.state.relations.generation
        )
    except (DatabaseConnectionError, StatementChangedError):
        raise
    except PgMcpError as exc:
        query.refused = _error(exc)
    if query.planned:
        try:
            query.params = len((await db.describe(conn, query.judged)).get_parameters())
            query.cost = await planner.cost(query)
        except asyncpg.PostgresError as exc:
            mapped = (scrubbed(exc) if reads_sensitive else None) or translate(exc)
            if mapped is None or isinstance(mapped, DatabaseConnectionError):
                raise
            query.not_planned = _error(mapped)
    if query.planned:
        await conn.execute(_STEP_RELEASE)
        return
    await conn.execute(_STEP_ROLLBACK)
    await conn.execute(_STEP_RELEASE)
    await planner.tidy()
    if transaction is not None:
        transaction.locked.clear()
        transaction.locked.update(locked)
        transaction.search_path = path


async def _workload(
    conn: asyncpg.Connection, queries: list[str], top: int
) -> tuple[list[_Query], int]:
    """The caller's statements, then pg_stat_statements' `top` costliest SELECTs (read under
    a savepoint: finding the view sets the search path); and how many of those it skipped for
    not being one SELECT."""
    workload = [_Query(i + 1, sql) for i, sql in enumerate(queries)]
    skipped = 0
    if top:
        await conn.execute(_STEP)
        try:
            rows = await costliest(conn, min(top * _SCANNED, 100), QUERY_CHARS)
        finally:
            await conn.execute(_STEP_ROLLBACK)
            await conn.execute(_STEP_RELEASE)
        taken = 0
        for r in rows:
            if taken == top:
                break
            tree = sqltree.parse(r["query"])
            stmts = (tree or {}).get("stmts", [])
            if len(stmts) != 1 or "SelectStmt" not in stmts[0].get("stmt", {}):
                skipped += 1
                continue
            taken += 1
            number = len(workload) + 1
            queryid = str(r["queryid"]) if r["queryid"] is not None else None
            workload.append(_Query(number, r["query"], max(int(r["calls"]), 1), queryid))
    return workload, skipped


def _total(queries: list[_Query], costs: dict[int, float]) -> float:
    return sum(q.weight * costs[q.number] for q in queries)


async def advise_workload(
    conn: asyncpg.Connection,
    db: Database,
    guard: SqlGuard,
    queries: list[str],
    top: int,
    budget_bytes: int | None,
    shapes: Shapes | None = None,
    sensitive: re.Pattern[str] | None = None,
) -> dict[str, Any]:
    """The indexes the greedy search picks for the workload, in the order picked, each with
    the statements it improved then (cost before and after) and the workload's cost before
    and after it; every statement with its cost without and with them all (or why it was
    not planned). Inside the caller's read-only transaction."""
    found_ext = await hypopg_of(conn)
    planner = _Planner(conn, quote_ident(found_ext["schema"]))
    workload, skipped = await _workload(conn, queries, top)
    await conn.execute(GENERIC)
    await conn.execute(_SAVEPOINT)
    try:
        for query in workload:
            await _judge(conn, db, guard, planner, query, shapes, sensitive)
        planned = [q for q in workload if q.planned]
        found = await _candidates(conn, planned)
        picked, improved, costs = await _greedy(planner, planned, found, budget_bytes)
        await planner.reset()
    except (asyncpg.PostgresError, PgMcpError):
        try:
            await conn.execute(_ROLLBACK)
            await planner.reset()
            await planner.tidy()
        except BaseException:
            conn.terminate()
        raise
    except BaseException:
        # Cancelled (or worse) mid-statement: the reset cannot be confirmed, the session
        # goes, with every hypothetical index in it.
        conn.terminate()
        raise
    await conn.execute(_RELEASE)
    before = {q.number: q.cost for q in planned}
    recommendations = []
    total = _total(planned, before)
    for candidate, gains in zip(picked, improved, strict=True):
        after = total - sum(q.weight * (b - a) for q, b, a in gains)
        recommendations.append(
            {
                "table": f"{candidate.table.schema}.{candidate.table.name}",
                "columns": candidate.columns,
                "estimated_size_bytes": candidate.size,
                "create": create_index(candidate.table, candidate.columns, "CONCURRENTLY ") + ";",
                "workload_cost_before": round(total, 2),
                "workload_cost_after": round(after, 2),
                "queries": [
                    {"query": q.number, "cost_before": round(b, 2), "cost_after": round(a, 2)}
                    for q, b, a in gains
                ],
            }
        )
        total = after
    notes = []
    if skipped:
        notes.append(f"{skipped} of pg_stat_statements' costliest skipped: not one SELECT")
    if planner.spent:
        notes.append(f"search stopped after {MAX_PLANS} plans: more indexes may help")
    return {
        "cost": round(_total(planned, before), 2),
        "cost_after": round(_total(planned, costs), 2),
        "candidates": len(found),
        "recommendations": recommendations,
        "queries": [_shown(q, costs) for q in workload],
        "hypopg_version": found_ext["version"],
        "note": "; ".join(notes),
    }


def _shown(query: _Query, costs: dict[int, float]) -> dict[str, Any]:
    shown: dict[str, Any] = {"query": query.number}
    if query.queryid is not None:
        text = mask_query(query.sql) or ""
        shown |= {"queryid": query.queryid, "calls": query.weight, "text": text[:SHOWN_CHARS]}
    if query.refused is not None:
        shown["refused"] = query.refused
    elif query.not_planned is not None:
        shown["not_planned"] = query.not_planned
    else:
        shown |= {"cost_before": round(query.cost, 2), "cost_after": round(costs[query.number], 2)}
    return shown


async def _candidates(conn: asyncpg.Connection, planned: list[_Query]) -> list[_Candidate]:
    """Each planned statement's candidates (costliest statement first, so that the cap keeps
    theirs), merged; the relations each statement names recorded on it."""
    found: dict[tuple[str, str, tuple[str, ...]], _Candidate] = {}
    for query in sorted(planned, key=lambda q: -q.weight * q.cost):
        tables, query.opaque = await tables_of(conn, statement_columns(query.judged))
        query.tables = {(t.schema, t.name) for t in tables}
        for table, columns in candidates([t for t in tables if t.schema not in _SYSTEM]):
            candidate = _Candidate(table, columns)
            found.setdefault(candidate.key, candidate)
    return list(found.values())[:MAX_CANDIDATES]


async def _greedy(
    planner: _Planner,
    planned: list[_Query],
    found: list[_Candidate],
    budget_bytes: int | None,
) -> tuple[list[_Candidate], list[list[tuple[_Query, float, float]]], dict[int, float]]:
    """The greedy search (module docstring). Sizes first: each candidate created once (under
    a savepoint: HypoPG refuses some, a point column's btree say), dropped; refused ones out."""
    usable = []
    for candidate in found:
        await planner.conn.execute(_STEP)
        try:
            oid, candidate.size = await planner.create(candidate)
            await planner.drop(oid)
        except asyncpg.QueryCanceledError:
            raise  # the statement timeout or a cancel: the call fails, not the candidate
        except asyncpg.PostgresError:
            await planner.conn.execute(_STEP_ROLLBACK)
            await planner.conn.execute(_STEP_RELEASE)
            await planner.reset()  # nothing chosen yet: only what the failure left
            continue
        await planner.conn.execute(_STEP_RELEASE)
        usable.append(candidate)
    found[:] = usable
    current = {q.number: q.cost for q in planned}
    floor = MIN_GAIN * _total(planned, current)
    left = budget_bytes if budget_bytes is not None else None
    chosen: list[_Candidate] = []
    improved: list[list[tuple[_Query, float, float]]] = []
    remaining = list(usable)
    while remaining and floor > 0 and not planner.spent:
        best: tuple[float, float, _Candidate, dict[int, float]] | None = None
        for candidate in remaining:
            if planner.spent:
                break  # this round's best so far still counts
            if left is not None and candidate.size > left:
                continue
            costs = await planner.costs(planned, chosen, candidate)
            gain = _total(planned, current) - _total(planned, costs)
            if gain < floor:
                continue
            rank = (gain / max(candidate.size, 1), gain)
            if best is None or rank > best[:2]:
                best = (*rank, candidate, costs)
        if best is None:
            break
        candidate, costs = best[2], best[3]
        await planner.create(candidate)  # kept: the next rounds measure with it
        chosen.append(candidate)
        remaining.remove(candidate)
        if left is not None:
            left -= candidate.size
        improved.append(
            [
                (q, current[q.number], costs[q.number])
                for q in planned
                if costs[q.number] < current[q.number]
            ]
        )
        current = costs
    return chosen, improved, current
