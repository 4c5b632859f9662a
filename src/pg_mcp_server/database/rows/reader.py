"""How a query runs: guard, describe, wrap, bind, one round trip, JSON from PostgreSQL.

1. The guard checks the caller's SQL (rewrite.py works only on what it let through).
2. The statement is described once (parameter types, column names and types); that shape is
   kept per SQL text (`Shapes`), so repeated SQL is not described again.
3. It runs inside the wrapper statement (rewrite.py): PostgreSQL returns one row holding the
   rows' JSON, cut at the row limit and the byte cap, and whether more rows exist. The wrapper
   is prepared once per connection (`Database.prepare`): a repeated query is one Bind/Execute,
   one round trip, on a warm connection.
4. When a table changed under a kept shape or statement, PostgreSQL says so (the wrapper's
   typed columns and sentinel, see rewrite.py); both are dropped and `Database.run` runs the
   call again.

Parameters are bound by the driver as the types PostgreSQL inferred (params.py), never spliced.

Its size (~470 lines) is the one `Reader` those steps share (the guard's verdict, the budgets,
redaction and the kept shapes travel together through one call), and the paged first answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from pglast import ast

from pg_mcp_server.database.guard import SqlGuard
from pg_mcp_server.database.pool import (
    Database,
    StatementChangedError,
    acting_role,
    translate,
)
from pg_mcp_server.database.rows import lineage, redaction, rewrite, values
from pg_mcp_server.database.rows.output import Budget, page_size
from pg_mcp_server.database.rows.params import bind
from pg_mcp_server.database.sql import tree as sqltree
from pg_mcp_server.errors import (
    DatabaseConnectionError,
    ParameterError,
    PgMcpError,
    QueryTimeoutError,
    closest,
    did_you_mean,
)

SHAPES = 512  # statements whose shape is kept (a few KB each) ...
SHAPE_SQL_CHARS = 32_768  # ... if their text is no longer than this
# Errors PostgreSQL gives when a kept wrapper no longer fits the caller's statement because
# the number of its columns changed: the sentinel is ambiguous, or the alias list too long.
_CHANGED = {"42702", "42P10"}
# How a cut value's mark begins (values.CUT_MARK): whether a page holds one, without decoding.
CUT_SIGN = values.CUT_MARK.split("{", 1)[0]


def query_hash(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()[:16]


@dataclass
class Shape:
    """What describing a statement told: its tree and columns, and the wrappers made for it."""

    tree: ast.SelectStmt
    columns: tuple[values.Column, ...]
    # It reads a sensitive source (redaction.py): its errors are scrubbed of values.
    reads_sensitive: bool = False
    generation: int | None = None  # of the relation facts its redaction was decided on
    wrappers: dict[tuple[int, int, int | None, int | None, frozenset[str]], str] = field(
        default_factory=dict
    )

    def __post_init__(self) -> None:
        # The type of each typed NULL of a wrapper (the column's, or its element type), and
        # the columns as the answer shows them, made once.
        self.typed_nulls = {
            f"t{i}": c.base.removesuffix("[]")
            for i, c in enumerate(self.columns, start=1)
            if c.typed
        }
        self.columns_json = json.dumps(
            [{"name": c.name, "data_type": c.data_type} for c in self.columns],
            separators=(",", ":"),
            ensure_ascii=False,
        )

    def matches(self, attributes: Sequence[Any]) -> bool:
        """Whether a wrapper prepared just now has these columns' types (its typed NULLs):
        another connection may have seen a table change and described it anew, this one not."""
        return all(self.typed_nulls.get(a.name, a.type.name) == a.type.name for a in attributes)

    def wrapper(
        self,
        limit: int,
        max_bytes: int,
        max_text: int | None,
        page_bytes: int | None = None,
        full: frozenset[str] = frozenset(),
    ) -> str:
        """The wrapper for these bounds; the columns named in `full` are never cut."""
        key = (limit, max_bytes, max_text, page_bytes, full)
        sql = self.wrappers.get(key)
        if sql is None:
            names = [c.name for c in self.columns]
            cell = (
                values.cells(self.columns, max_text=max_text)
                if not full
                else lambda i: values.cell(
                    self.columns[i - 1],
                    f"s.c{i}",
                    max_text=None if names[i - 1] in full else max_text,
                )
            )
            typed = [i for i, c in enumerate(self.columns, start=1) if c.typed]
            built = rewrite.build(
                self.tree,
                names,
                cell,
                typed=typed,
                limit=limit,
                max_bytes=max_bytes,
                page_bytes=page_bytes,
            )
            sql = self.wrappers[key] = built.sql
        return sql


class Shapes:
    """Shapes by SQL text, most recently used kept (one per server: sessions are alike),
    and the redaction facts, each apart for every role a call runs as (a caller's grant,
    SET LOCAL ROLE: pool.acting_role): the same text names another relation for another
    role ("$user" on the search path), and what a role may read differs (attack7 F1)."""

    def __init__(self, size: int = SHAPES) -> None:
        self._size = size
        self._items: OrderedDict[tuple[str | None, str], Shape] = OrderedDict()
        self._facts: dict[str | None, redaction.Facts] = {}

    @property
    def facts(self) -> redaction.Facts:
        """The redaction facts of the role the current block runs as."""
        role = acting_role.get()
        found = self._facts.get(role)
        if found is None:
            found = self._facts[role] = redaction.Facts()
        return found

    def get(self, sql: str) -> Shape | None:
        key = (acting_role.get(), sql)
        shape = self._items.get(key)
        if shape is not None:
            self._items.move_to_end(key)
        return shape

    def put(self, sql: str, shape: Shape) -> None:
        if len(sql) > SHAPE_SQL_CHARS:
            return  # described again each time, rather than holding megabytes of trees
        self._items[(acting_role.get(), sql)] = shape
        if len(self._items) > self._size:
            self._items.popitem(last=False)

    def drop(self, sql: str) -> None:
        self._items.pop((acting_role.get(), sql), None)


@dataclass
class Rows:
    shape: Shape
    rows: list[list[Any]]  # those of the first page (all of them without `page_bytes`)
    rows_json: str  # the same rows as compact JSON text, made by PostgreSQL
    read: int  # rows PostgreSQL produced, at most limit + 1
    cut_by_size: bool
    # The JSON text of each row kept beyond the first page (with `answer_bytes` only).
    rest: list[str] = field(default_factory=list)
    page_bytes: int | None = None

    @property
    def columns(self) -> tuple[values.Column, ...]:
        return self.shape.columns

    @property
    def kept(self) -> int:
        return len(self.rows) + len(self.rest)

    @property
    def has_more(self) -> bool:
        """More rows than were kept (beyond the limit or the byte cap), not further pages."""
        return self.read > self.kept


@dataclass(frozen=True)
class _Named:
    name: str


async def _redaction(
    conn: asyncpg.Connection,
    facts: redaction.Facts,
    sql: str,
    attributes: Sequence[Any] | None,
    sensitive: re.Pattern[str] | None,
) -> lineage.Verdict:
    tree = sqltree.parse(sql)
    assert tree is not None  # the guard parsed it
    await facts.read(conn, tree)
    names = None if attributes is None else [a.name for a in attributes]
    return lineage.judge(tree, names, sensitive, facts)


async def judge_hidden(
    conn: asyncpg.Connection,
    shapes: Shapes,
    sql: str,
    sensitive: re.Pattern[str] | None,
    generation: int | None,
) -> bool:
    """For a statement whose rows are not shown (explain_query): refuse a use of a sensitive
    value that the plan (row counts, an error) would tell; whether it reads one."""
    shapes.facts.renew(generation)
    known = shapes.facts.hidden.get(sql)  # refusals raise, so only passes are kept
    if known is None:
        verdict = await _redaction(conn, shapes.facts, sql, None, sensitive)
        known = verdict.reads_sensitive
        if len(sql) <= SHAPE_SQL_CHARS:
            if len(shapes.facts.hidden) >= SHAPES:
                shapes.facts.hidden.pop(next(iter(shapes.facts.hidden)))
            shapes.facts.hidden[sql] = known
    return known


def scrubbed(exc: asyncpg.PostgresError) -> PgMcpError | None:
    """The error of a statement that reads a sensitive source, without the values PostgreSQL
    quotes in it (`invalid input syntax for type integer: "<the value>"`) or its detail and
    hint, which may quote them too; None for errors that tell nothing of a value."""
    mapped = translate(exc)
    if mapped is None or isinstance(mapped, DatabaseConnectionError | QueryTimeoutError):
        return None
    context = {k: v for k, v in (mapped.context or {}).items() if k in ("sqlstate", "position")}
    clean: PgMcpError = type(mapped)(
        redaction.scrub(mapped.message, exc.sqlstate),
        suggestion=mapped.suggestion,
        context=context or None,
    )
    return clean


class _Changed(Exception):
    """A freshly prepared wrapper's typed NULLs disagree with the kept shape."""


def _ours(exc: asyncpg.PostgresError) -> bool:
    """An error about the wrapper rather than the caller's SQL, which was described already: a
    column's type changed (the cached plan's result type), or their number (the sentinel is
    ambiguous, or the alias list too long). A caller's statement that a change broke gets
    these too; it is described again, and fails there with its own error."""
    return isinstance(exc, asyncpg.InvalidCachedStatementError) or exc.sqlstate in _CHANGED


@dataclass
class QueryResult:
    columns: tuple[values.Column, ...]
    columns_json: str
    rows: list[list[Any]]  # the first page's
    rows_json: str
    has_more: bool  # rows beyond those kept (the limit, the byte cap), not further pages
    elapsed_ms: float
    notes: list[str] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)  # each further kept row's JSON text
    page_bytes: int | None = None  # the rows' bytes a page holds

    @property
    def kept(self) -> int:
        return len(self.rows) + len(self.rest)


class Reader:
    """How rows are read, for every tool that returns them: made once per server from the
    pool, the guard, the budget (MCP_MAX_ROWS, MCP_MAX_RESULT_BYTES) and the redaction
    pattern, and holding the described statements (`shapes`).

    - `query` (execute_query) and `read` (get_sample_rows) pass the SQL through the guard,
      then `fetch` it: PostgreSQL makes the rows' JSON (values.py) inside the wrapper
      (rewrite.py), cut to the budget, sensitive columns redacted.
    - `driven` reads a statement custom/runner.py prepared and bound, whose values the driver
      decodes (values.from_driver), cut to the same budget (output.Budget.cut). Custom SQL is
      the operator's, checked at start and run on its own path and transaction (see
      custom/runner.py); it never reaches the guard, nor the shapes kept for the agent's SQL.
    """

    def __init__(
        self,
        db: Database,
        guard: SqlGuard,
        budget: Budget,
        *,
        sensitive: re.Pattern[str] | None,
        shapes: Shapes | None = None,
    ) -> None:
        self.db = db
        self.guard = guard
        self.budget = budget
        self.sensitive = sensitive
        self.shapes = Shapes() if shapes is None else shapes

    async def query(
        self,
        conn: asyncpg.Connection,
        sql: str,
        params: list[Any] | None,
        *,
        limit: int | None,
        answer_bytes: int | None = None,
        max_text: int | None = None,
        full: frozenset[str] = frozenset(),
    ) -> QueryResult:
        """execute_query: at most `limit` rows (never above the budget), with notes saying
        what was cut and which columns were redacted. With `answer_bytes` (the answer
        budget), the rows that fit a first answer are decoded and the others' JSON kept
        apart (`rest`), to be paged: all of them read here, by one statement."""
        limit = self.budget.limit(limit)
        run = await self.guard.check(sql, conn)  # (names qualified where its path needs it)
        started = time.perf_counter()
        result = await self.fetch(
            conn,
            run,
            params,
            limit=limit,
            max_text=max_text,
            answer_bytes=answer_bytes,
            full=full,
        )
        elapsed_ms = (time.perf_counter() - started) * 1000
        notes = self.budget.notes(
            read=result.read, kept=result.kept, limit=limit, cut_by_size=result.cut_by_size
        )
        if max_text and (CUT_SIGN in result.rows_json or any(CUT_SIGN in r for r in result.rest)):
            notes.append(
                f"values longer than {max_text} characters are cut, marked with their length; "
                "full_values=[column names] gives them whole"
            )
        redacted = values.redacted_names(result.columns, result.rows)
        if redacted:
            notes.append("redacted sensitive columns: " + ", ".join(redacted))
        return QueryResult(
            columns=result.columns,
            columns_json=result.shape.columns_json,
            rows=result.rows,
            rows_json=result.rows_json,
            has_more=result.has_more,
            elapsed_ms=elapsed_ms,
            notes=notes,
            rest=result.rest,
            page_bytes=result.page_bytes,
        )

    async def read(self, conn: asyncpg.Connection, sql: str, *, limit: int, max_text: int) -> Rows:
        """get_sample_rows: `sql` (no parameters) through the guard, then `fetch`ed with
        long text cut at `max_text` characters."""
        run = await self.guard.check(sql, conn)  # (names qualified where its path needs it)
        return await self.fetch(conn, run, None, limit=limit, max_text=max_text)

    async def fetch(
        self,
        conn: asyncpg.Connection,
        sql: str,
        params: Sequence[Any] | None,
        *,
        limit: int,
        max_text: int | None = None,
        answer_bytes: int | None = None,
        full: frozenset[str] = frozenset(),
    ) -> Rows:
        """At most `limit` rows of `sql` whose JSON fits in the budget's bytes; with
        `answer_bytes`, those whose JSON fits a first answer of that size (`page_bytes`) in
        `rows`, and the others' JSON in `rest`. `sql` is what
        the guard's check returned (`query` and `read` make sure of it; tests call this with
        their own SQL). Which columns are redacted is decided again when a relation the
        statement reads may have changed (the guard's relation facts' generation)."""
        generation = self.guard.state.relations.generation
        self.shapes.facts.renew(generation)
        shape = self.shapes.get(sql)
        if shape is None or shape.generation != generation:
            tree = rewrite.parse(sql) if shape is None else shape.tree
            attributes = (
                (await self.db.describe(conn, sql)).get_attributes()
                if shape is None
                else [_Named(c.name) for c in shape.columns]
            )
            verdict = await _redaction(conn, self.shapes.facts, sql, attributes, self.sensitive)
            columns = (
                values.columns_of(attributes, verdict.redacted)
                if shape is None
                else tuple(
                    dataclasses.replace(c, redacted=r)
                    for c, r in zip(shape.columns, verdict.redacted, strict=True)
                )
            )
            shape = Shape(tree, columns, verdict.reads_sensitive, generation)
            self.shapes.put(sql, shape)
        page_bytes = None if answer_bytes is None else page_size(answer_bytes, shape.columns_json)
        if full:
            _check_full(full, shape.columns)
        wrapper = shape.wrapper(limit, self.budget.bytes, max_text, page_bytes, full)
        try:
            stmt, fresh = await self.db.prepare(conn, wrapper)
            if fresh and not shape.matches(stmt.get_attributes()):
                raise _Changed
            row = await stmt.fetchrow(*bind(params, stmt.get_parameters()))
        except (asyncpg.PostgresError, _Changed) as exc:
            if isinstance(exc, asyncpg.PostgresError) and not _ours(exc):
                clean = scrubbed(exc) if shape.reads_sensitive else None
                if clean is not None:
                    raise clean from None
                raise
            self.shapes.drop(sql)
            self.db.forget(wrapper)
            raise StatementChangedError(
                "A table the query reads changed since the query was described"
            ) from None
        assert row is not None
        text = "[" + (row["rows"] or "") + "]"
        rows: list[list[Any]] = json.loads(text)
        read = int(row["total"])
        rest: list[str] = row["rest"] or []
        return Rows(
            shape=shape,
            rows=rows,
            rows_json=text,
            read=read,
            cut_by_size=int(row["kept"]) < min(read, limit),
            rest=rest,
            page_bytes=page_bytes,
        )

    async def driven(
        self,
        stmt: asyncpg.prepared_stmt.PreparedStatement,
        args: Sequence[Any],
        names: Sequence[str],
        *,
        whole: bool = False,
    ) -> Driven:
        """The rows of a statement the caller prepared (custom SQL), as dicts by column
        name, cut to the budget. `whole`: run the whole statement (a write) and keep its
        command tag; otherwise at most one row more than the budget is read."""
        status = None
        if whole:  # the whole command runs anyway; its tag says what it did
            records = await stmt.fetch(*args)
            status = stmt.get_statusmsg()
        else:
            cursor = await stmt.cursor(*args)
            records = await cursor.fetch(self.budget.rows + 1)
        rows = [
            dict(zip(names, [values.from_driver(v) for v in r.values()], strict=True))
            for r in records
        ]
        kept, notes = self.budget.cut(rows)
        return Driven(kept, bool(notes), notes, status)


def _check_full(full: frozenset[str], columns: Sequence[values.Column]) -> None:
    names = [c.name for c in columns]
    unknown = sorted(full - set(names))
    if unknown:
        raise ParameterError(
            f"full_values names columns the result does not have: {', '.join(unknown)[:200]}",
            suggestion=did_you_mean(
                closest(unknown[0], names), f"The result's columns: {', '.join(names)[:500]}."
            ),
            context={"parameter": "full_values"},
        )


@dataclass
class Driven:
    rows: list[dict[str, Any]]
    has_more: bool
    notes: list[str]
    status: str | None  # a write's command tag ("UPDATE 3")
