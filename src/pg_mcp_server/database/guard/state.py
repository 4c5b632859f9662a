"""Keeping the guard's catalog facts current: one round trip per check.

While nothing has committed anywhere since a statement's plan was last found current (the
same snapshot), QUICK confirms it. Otherwise one statement on the caller's connection (CHECK)
reports the search
path, the trusted roles and a digest (row count and xmin sum) of exactly the catalog rows the
verdict rests on: the functions, operators and types the statement reached or may resolve its
names to, their domain constraints, aggregate and extension rows, every relation reached (its
row, columns, rule, policies, defaults, children, indexes), what the relation names resolve to,
and the user rows of the small catalogs (casts, operator classes and families, ranges). Any
CREATE, ALTER, DROP or GRANT there adds, removes or replaces such a row: the digest differs,
the facts are read again, and the verdict is made anew. On a database where something commits
all the time, QUICK is skipped while that goes on.

The check runs in the statement's own transaction, after ACCESS SHARE locks on every relation
the plan reaches (`GuardState._lock`): DDL on them in another session, committed or not, is
either waited for and then seen by the check, or must wait for the statement to end. So when
the digest matches, the relations are those PostgreSQL will use; objects that take no lock
(functions, operators, types) are as of the check, a round trip before the statement is
parsed (docs/security.md, "What the verdict covers").

Its size (~640 lines): the CHECK statement and the state that decides when to run it and
what to read again change together whenever the guard relies on a new fact.
"""

from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from pg_mcp_server.database.catalog import SNAPSHOT
from pg_mcp_server.database.guard.facts import (
    FIRST_USER_OID,
    NOT_A_TABLE_ROW_TYPE,
    RELATION_DIGEST,
    SMALL_CATALOGS,
    TRUSTED_ROLES,
    USER_OID,
    Catalog,
    Function,
    Operator,
    Relations,
    count_and_sum,
    rows,
    xmin,
)
from pg_mcp_server.database.guard.reach import Plan, plan
from pg_mcp_server.database.guard.rules import FUNCTION, OPERATOR, RELATION, ROW, TYPE, Judge
from pg_mcp_server.database.pool import (
    Prelude,
    Transaction,
    lock_wait_error,
    send_locks,
    transaction_of,
)
from pg_mcp_server.database.sql import Refs, statement
from pg_mcp_server.errors import WriteOperationDeniedError

logger = logging.getLogger(__name__)

# Rounds of (read what changed, check again) before giving up on a catalog that keeps moving.
MAX_ROUNDS = 8
_PLANS = 512


def _digest(xmins: Iterable[int | None]) -> str:
    values = [x for x in xmins if x is not None]
    return f"{len(values)}:{sum(values)}"


def _sum(rows: str) -> str:
    return f"(SELECT {count_and_sum('x')} FROM {rows})"


def _arg(n: int, array_type: str) -> str:
    """Parameter $n, hidden from the planner behind a subquery: the plan cannot depend on the
    values, so after five executions PostgreSQL keeps one generic plan and stops planning this
    long statement on every call. Names travel as text[]: asyncpg knows the types of text[] and
    oid[] by heart, and would otherwise look name[] up with a query of its own (see
    closure._driver_lookup)."""
    sent = "text" if array_type == "name" else array_type
    return f"((SELECT ${n}::pg_catalog.{sent}[])::pg_catalog.{array_type}[])"


def _pairs(n: int, table: str, name: str, namespace: str, where: str = "") -> str:
    """Rows of `table` (alias t) named by the (schema oid, name) pairs in $n and $n+1, one
    index lookup each."""
    return (
        f"ROWS FROM (pg_catalog.unnest({_arg(n, 'oid')}), pg_catalog.unnest({_arg(n + 1, 'name')}))"
        f" AS k(nsp, nm) CROSS JOIN LATERAL (SELECT t.oid, t.xmin FROM pg_catalog.{table} t"
        f" WHERE t.{name} = k.nm AND t.{namespace} = k.nsp{where} OFFSET 0) t"
    )


# Rows initdb made never change (see FIRST_USER_OID): name lookups digest only the others.
_USER_ROWS = f" AND t.oid >= {USER_OID}"
_USER_TYPES = f"{_USER_ROWS} AND {NOT_A_TABLE_ROW_TYPE}"
# (conrelid = 0, which domain constraints have, makes the lookup an index scan even for a
# generic plan that must assume any contypid, 0 included.)
_PROC_EXTENSION = " AND t.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND t.deptype = 'e'"

SEARCH_PATH = statement(
    "guard.state.SEARCH_PATH",
    """SELECT pg_catalog.current_schemas(true)::pg_catalog.text[] AS path,
    pg_catalog.current_setting('standard_conforming_strings') AS strings""",
)

# The statement's snapshot in this server run (see catalog.SNAPSHOT): while it stays the one a
# plan was last found current at, nothing has committed anywhere since, and QUICK suffices.
QUICK = statement(
    "guard.state.QUICK",
    f"""SELECT {SNAPSHOT} AS snapshot,
    pg_catalog.current_schemas(true)::pg_catalog.text[] AS path,
    pg_catalog.pg_is_in_recovery() AS standby""",
)


def _each(n: int, table: str, column: str, where: str = "") -> str:
    """Rows of `table` (alias t) whose `column` is one of the oids in $n, one index lookup
    each: OFFSET 0 keeps the planner from flattening the lookup into a join, which a generic
    plan, not knowing how many keys there are, may make a scan of the whole catalog."""
    return (
        f"pg_catalog.unnest({_arg(n, 'oid')}) AS k(o) CROSS JOIN LATERAL"
        f" (SELECT k.o AS oid, t.xmin FROM pg_catalog.{table} t WHERE t.{column} = k.o{where}"
        " OFFSET 0) t"
    )


def _objects(n: int, table: str, name: str, namespace: str, where: str) -> str:
    """Rows of `table` by oid ($n) or by (schema, name) ($n+1, $n+2), each row once."""
    return f"""(
    SELECT t.oid, {xmin("t")} FROM {_each(n, table, "oid")}
    UNION
    SELECT t.oid, {xmin("t")} FROM {_pairs(n + 1, table, name, namespace, where)}) s(oid, x)"""


_FUNCTION_ROWS = _objects(2, "pg_proc", "proname", "pronamespace", _USER_ROWS)
_OPERATOR_ROWS = _objects(5, "pg_operator", "oprname", "oprnamespace", _USER_ROWS)
_TYPE_ROWS = _objects(8, "pg_type", "typname", "typnamespace", _USER_TYPES)
_AGGREGATE_ROWS = f"""(
    SELECT {xmin("t")} FROM {_each(2, "pg_aggregate", "aggfnoid")}) s(x)"""
_EXTENSION_ROWS = f"""(
    SELECT {xmin("t")}
    FROM {_each(2, "pg_depend", "objid", _PROC_EXTENSION)}) s(x)"""
_DOMAIN_ROWS = f"""(
    SELECT {xmin("t")}
    FROM {_each(8, "pg_constraint", "contypid", " AND t.conrelid = 0::pg_catalog.oid")}) s(x)"""
_RELATIONS = f"""ARRAY(
    SELECT (SELECT {RELATION_DIGEST} FROM pg_catalog.pg_class c WHERE c.oid = k.oid)
    FROM pg_catalog.unnest({_arg(11, "oid")}) WITH ORDINALITY AS k(oid, i) ORDER BY k.i)"""
_NAMED = f"""(
    SELECT pg_catalog.json_agg(pg_catalog.json_build_array(k.nsp::bigint, k.nm, t.oid::bigint))
    FROM {_pairs(12, "pg_class", "relname", "relnamespace")})"""
# Relations of the schemas a statement reads whole (schema_to_xml, database_to_xml: '*'):
# lateral, so that for the usual empty list nothing is scanned.
_IN_SCHEMA = f"""(
    SELECT pg_catalog.json_agg(pg_catalog.json_build_array(s.nm, c.oid::bigint))
    FROM pg_catalog.unnest({_arg(14, "text")}) AS s(nm)
    CROSS JOIN LATERAL (
        SELECT n.oid FROM pg_catalog.pg_namespace n
        WHERE n.nspname = s.nm
           OR (s.nm = '*' AND NOT pg_catalog.starts_with(n.nspname::pg_catalog.text, 'pg_')
               AND n.nspname <> 'information_schema') OFFSET 0) n
    CROSS JOIN LATERAL (
        SELECT c.oid FROM pg_catalog.pg_class c
        WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'm', 'v', 'p', 'f') OFFSET 0) c)"""

CHECK = statement(
    "guard.state.CHECK",
    f"""
SELECT {SNAPSHOT} AS snapshot,
       pg_catalog.current_schemas(true)::pg_catalog.text[] AS path,
       {TRUSTED_ROLES.format(names=_arg(1, "text"))} AS trusted,
       {SMALL_CATALOGS} AS small,
       {_sum(_FUNCTION_ROWS)} AS functions,
       {_sum(_AGGREGATE_ROWS)} AS aggregates,
       {_sum(_EXTENSION_ROWS)} AS extensions,
       {_sum(_OPERATOR_ROWS)} AS operators,
       {_sum(_TYPE_ROWS)} AS types,
       {_sum(_DOMAIN_ROWS)} AS domains,
       {_RELATIONS} AS relations,
       {_NAMED} AS named,
       {_IN_SCHEMA} AS in_schema
""",
)


# Relations a statement's parse can lock (the rest, sequences and composite types, run no
# code of their own).
_LOCKABLE = frozenset("rpvmf")
# Tables the role may SELECT are locked with LOCK TABLE, which also locks their inheritance
# children and partitions, whatever the role may do with those, at about a microsecond each.
# The others are locked by our own statement that PostgreSQL parses and rewrites (taking
# ACCESS SHARE on every relation it names, and on what a view reads, until the transaction
# ends) but never plans or runs: no privilege is needed, and it works for views, materialized
# views and foreign tables. (LOCK TABLE refuses the latter two, and on a view checks its
# owner's privileges on what it reads; the parse costs ~15 us a relation, too much for every
# partition of a large table.)
_TABLES = frozenset("rp")
_LOCK_TABLE = "LOCK TABLE {} IN ACCESS SHARE MODE"
_PARSE = "PREPARE pg_mcp_server_lock AS SELECT FROM {}; DEALLOCATE pg_mcp_server_lock"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# The session's own path again, before the guard reads anything that depends on the path
# (the catalog, a view's definition): the server never sets search_path for a session, so
# DEFAULT is the path the session started with.
_SESSION_PATH = "SET LOCAL search_path TO DEFAULT"


def _open_warning(catalog: Catalog) -> str:
    """One line: the open schemas (on the search path, or on a function's own), by whom, and
    the fix."""
    found = []
    for nsp, roles in sorted(catalog.open_schemas.items()):
        more = f" and {len(roles) - 5} more" if len(roles) > 5 else ""
        found.append(f"{catalog.schemas.get(nsp, nsp)!s} (by {', '.join(roles[:5])}{more})")
    first = catalog.schemas.get(min(catalog.open_schemas), "public")
    return (
        "guard: roles that are not trusted may create objects in schemas on the search path "
        "or on a function's own: "
        f"{'; '.join(found)}. Statements run without those schemas on their path unless they "
        "use a trusted object there, and then an object planted there between the check and "
        "the statement could run: revoke it (REVOKE CREATE ON SCHEMA "
        f"{_quoted(first)} FROM PUBLIC, or from those roles) or trust the roles "
        "(MCP_TRUSTED_ROLES)"
    )


def _set_path(names: Iterable[str]) -> str:
    """`SET LOCAL search_path` to these schemas, as current_schemas(true) names them. A
    session's temporary schema is named `pg_temp` (its own, whatever its number: behind a
    transaction pooler the next statement may be on another server connection, where
    `pg_temp_3` is another session's schema and would be searched for functions too)."""
    return "SET LOCAL search_path TO " + ", ".join(
        _quoted("pg_temp" if n.startswith("pg_temp_") else n) for n in names
    )


@dataclass
class _Checked:
    """A plan with the CHECK arguments and the answers that would mean "nothing changed"."""

    plan: Plan
    arguments: list[Any]
    expected: dict[str, Any]
    # The relations to lock before CHECK: oid -> (key, qualified name). A lock is taken by
    # name, so it holds the oid the facts name only if that relation's row (its digest) and
    # its schema's name were, when it was taken, the ones CHECK then finds: the key holds
    # both, a transaction records the keys it locked, and a relation whose key moved since
    # (renamed, re-read) is locked again.
    locks: dict[int, tuple[str, str]] = field(default_factory=dict)
    verified: str | None = None  # the snapshot at which CHECK last found it current
    # `SET LOCAL search_path` to the path the plan was walked under (closure.run_path), None
    # when that is the session's; and that path as current_schemas(true) then names it.
    search_path: str | None = None
    path_names: list[str] = field(default_factory=list)

    def to_lock(self, locked: dict[int, str]) -> dict[int, tuple[str, str]]:
        return {o: kn for o, kn in self.locks.items() if locked.get(o) != kn[0]}


@dataclass
class GuardState:
    """The catalog facts (`Catalog`, `Relations`), their judge, and statement plans."""

    trusted_roles: tuple[str, ...] = ()
    allow_foreign_tables: bool = False
    allow_open_schema_code: bool = False
    custom: frozenset[str] | None = None  # see Judge.custom
    judge: Judge = field(default_factory=lambda: Judge(Catalog()))
    relations: Relations = field(default_factory=Relations)
    _plans: OrderedDict[tuple[Refs, int, int], _Checked] = field(default_factory=OrderedDict)
    _generation: int = 0
    _busy: bool = False  # the snapshot moved at the last check
    # Relations a lock found gone (renamed, dropped, their schema renamed): read again, with
    # the catalog, before the next plan.
    _gone: set[int] = field(default_factory=set)
    # Sessions whose search path was found to search pg_catalog first.
    _sessions: weakref.WeakSet[asyncpg.Connection] = field(default_factory=weakref.WeakSet)
    _open_logged: dict[int, tuple[str, ...]] = field(default_factory=dict)

    def prelude(self, refs: Refs) -> Prelude | None:
        """The locks a statement's last verified plan needs, to send with its transaction's
        BEGIN (one round trip fewer); None when there is no such plan yet."""
        if not self.judge.catalog.loaded:
            return None
        key = (refs, self.judge.catalog.generation, self.relations.generation)
        checked = self._plans.get(key)
        if checked is None or checked.verified is None or self._gone:
            return None
        if not checked.locks and checked.search_path is None:
            return None
        return self._prelude(checked.locks, checked.search_path)

    def _prelude(
        self, locks: dict[int, tuple[str, str]], search_path: str | None = None
    ) -> Prelude:
        named = {oid: how[6:] for oid, (_, how) in locks.items() if not how.startswith("under")}
        tables = sorted({name for oid, name in named.items() if locks[oid][1][:5] == "table"})
        parsed = sorted({name for oid, name in named.items() if locks[oid][1][:5] == "parse"})
        sql = [_LOCK_TABLE.format(", ".join(tables))] if tables else []
        sql += [_PARSE.format(", ".join(parsed))] if parsed else []
        sql += [search_path] if search_path else []
        return Prelude(
            "; ".join(sql),
            {oid: key for oid, (key, _) in locks.items()},
            named,
            lambda: self._gone.update(locks),
            search_path,
        )

    async def _lock(
        self,
        conn: asyncpg.Connection,
        locks: dict[int, tuple[str, str]],
        locked: dict[int, str],
        timeout_ms: int | None,
        search_path: str | None = None,
    ) -> None:
        """Take ACCESS SHARE on the relations a plan reaches, before the check that confirms
        it: a concurrent CREATE OR REPLACE VIEW, ALTER, DROP, RENAME or policy change holds
        ACCESS EXCLUSIVE until it commits, so this waits for it (up to the call's timeout),
        and the check that follows, a statement with a snapshot of its own, sees what it
        committed. Once granted, nothing can change these relations until the transaction
        ends."""
        if not locks:
            return
        prelude = self._prelude(locks, search_path)
        await send_locks(conn, prelude.sql, prelude, timeout_ms)
        locked.update(prelude.locked)

    async def plan(self, refs: Refs, conn: asyncpg.Connection) -> Plan:
        """The plan of `refs`, made from facts the check has just found current, with every
        relation it reaches locked (ACCESS SHARE, until the transaction ends) before that
        check: what was judged is what the statement runs (see _lock)."""
        transaction = transaction_of(conn)
        involved: set[int] = set()
        try:
            return await self._plan(refs, conn, transaction, involved)
        except asyncpg.QueryCanceledError:
            # Reading the facts waits for locks too (a view's definition is read with the
            # relations it reads locked): say so when that is what the timeout ended.
            if transaction is None:
                raise
            error = await lock_wait_error(conn, involved, transaction.timeout_ms)
            if error is None:
                raise
            raise error from None

    async def _plan(
        self,
        refs: Refs,
        conn: asyncpg.Connection,
        transaction: Transaction | None,
        involved: set[int],
    ) -> Plan:
        if transaction is None and not conn.is_in_transaction():
            raise RuntimeError("the guard's verdict needs the statement's own transaction")
        # (in a transaction the engine did not begin, nothing records what is locked: locked
        # again at each check, which is harmless)
        locked = transaction.locked if transaction is not None else {}
        timeout_ms = transaction.timeout_ms if transaction is not None else None
        # Which search path holds in the transaction (a prelude may have set the plan's).
        path = transaction if transaction is not None else Transaction(conn, 0)
        await self._search_path_first(conn)
        if self._gone:
            gone, self._gone = self._gone, set()
            await self._session_path(conn, path)
            await self._reload(conn)
            await self.relations.read(conn, gone, set())
        reread_for_types = False
        for _ in range(MAX_ROUNDS):
            if not self.judge.catalog.loaded:
                await self._session_path(conn, path)
                await self._reload(conn)
            checked = self._checked(refs)
            plan = checked.plan
            involved |= plan.missing_relations | set(plan.user_oids(RELATION, ROW))
            if plan.missing_relations or plan.missing_types:
                await self._session_path(conn, path)
                await self.relations.read(conn, plan.missing_relations, plan.missing_types)
                if plan.missing_types - set(self.relations.by_row_type):
                    if reread_for_types:  # a type nowhere: the guard refuses it
                        return plan
                    reread_for_types = True
                    await self._reload(conn)
                continue
            to_lock = checked.to_lock(locked)
            confirm = checked.verified is not None and not self._busy
            # The plan's path goes with its locks when QUICK is to confirm it (no round trip
            # of its own; QUICK expects it, see _expected_path).
            with_path = (
                checked.search_path
                if to_lock and confirm and path.search_path != checked.search_path
                else None
            )
            await self._lock(conn, to_lock, locked, timeout_ms, with_path)
            if with_path is not None:
                path.search_path = with_path
            if confirm:
                quick = await conn.fetchrow(QUICK)
                assert quick is not None
                if (
                    quick["snapshot"] == checked.verified
                    and quick["path"] == self._expected_path(checked, path)
                    and not quick["standby"]
                ):
                    await self._run_path(conn, path, checked)
                    return plan
            if path.search_path != checked.search_path:  # (set for another plan)
                await self._session_path(conn, path)
            row = await conn.fetchrow(CHECK, *checked.arguments)
            assert row is not None
            # Commits keep moving the snapshot: skip QUICK while that goes on.
            self._busy = checked.verified is not None and row["snapshot"] != checked.verified
            if await self._changed(row, checked, conn, path):
                continue
            checked.verified = row["snapshot"]
            await self._run_path(conn, path, checked)
            return plan
        raise WriteOperationDeniedError(
            "The database catalog kept changing while the query was checked.",
            suggestion="Try again in a moment.",
            context={"rule": "catalog_changing"},
        )

    @staticmethod
    def _expected_path(checked: _Checked, path: Transaction) -> list[str] | None:
        """What current_schemas(true) says in the transaction while the plan holds: the
        session's path, or the plan's where the prelude set it (None: some other path, set
        for another plan; the check then reads the session's again)."""
        if path.search_path is None:
            return list(checked.expected["path"])
        return checked.path_names if path.search_path == checked.search_path else None

    @staticmethod
    async def _session_path(conn: asyncpg.Connection, path: Transaction) -> None:
        """Back to the session's search path, for reading the facts (see _SESSION_PATH)."""
        if path.search_path is not None:
            await conn.execute(_SESSION_PATH)
            path.search_path = None

    @staticmethod
    async def _run_path(conn: asyncpg.Connection, path: Transaction, checked: _Checked) -> None:
        """Set the search path the plan was walked under, for the statement (a round trip,
        unless the prelude did it with BEGIN): it was judged on that path, not the session's
        (see closure.run_path)."""
        if checked.plan.refusal is None and path.search_path != checked.search_path:
            await conn.execute(checked.search_path or _SESSION_PATH)
            path.search_path = checked.search_path

    async def _search_path_first(self, conn: asyncpg.Connection) -> None:
        """Refuse a session whose search path puts a schema before pg_catalog: an object there
        with a built-in's signature would take its place in every query, the guard's own and
        the driver's. A session keeps its search path (RESET ALL restores the one it started
        with), so each is asked once, by a statement with no operator in it."""
        if conn in self._sessions:
            return
        row = await conn.fetchrow(SEARCH_PATH)
        assert row is not None
        path = row["path"]
        # The guard parses with PostgreSQL's own parser as of standard_conforming_strings = on
        # (connect.py asks for it at start-up, which a role's or database's setting does not
        # override): with it off, 'a\' ends elsewhere, and what the guard judged as one string
        # constant would be SQL to PostgreSQL.
        if row["strings"] != "on":
            raise WriteOperationDeniedError(
                "The session runs with standard_conforming_strings off: backslashes in string "
                "constants would then end them where the guard's parser does not.",
                suggestion="Leave standard_conforming_strings on (PostgreSQL's default) for the "
                "server's role and database.",
                context={"rule": "standard_conforming_strings"},
            )
        first = next((s for s in path if not s.startswith("pg_temp")), "pg_catalog")
        if first != "pg_catalog":
            raise WriteOperationDeniedError(
                f"The session's search_path puts {first!r} before pg_catalog: objects there "
                "would take the place of PostgreSQL's own, also in the queries the server and "
                "its driver run.",
                suggestion="List pg_catalog first in the role's or database's search_path, or "
                "leave it out (PostgreSQL then searches it first).",
                context={"rule": "search_path", "search_path": list(path)},
            )
        self._sessions.add(conn)

    async def _reload(self, conn: asyncpg.Connection) -> None:
        self._generation += 1
        catalog = await Catalog.read(conn, self.trusted_roles, self._generation)
        if catalog.generation > self.judge.catalog.generation:  # keep the newest
            judge = Judge(
                catalog,
                allow_foreign_tables=self.allow_foreign_tables,
                allow_open_schema_code=self.allow_open_schema_code,
                custom=self.custom,
            )
            # Which built-ins are clean depends only on the built-ins and on the user rows of
            # the small catalogs (an operator family a superuser extended): reuse it.
            if self.judge.catalog.loaded and catalog.small == self.judge.catalog.small:
                judge.reuse_clean(self.judge)
            self.judge = judge
            if catalog.open_schemas != self._open_logged:
                self._open_logged = catalog.open_schemas
                if catalog.open_schemas:
                    logger.warning("%s", _open_warning(catalog))

    def _checked(self, refs: Refs) -> _Checked:
        key = (refs, self.judge.catalog.generation, self.relations.generation)
        checked = self._plans.get(key)
        if checked is None:
            made = plan(self.judge, refs, self.relations)
            checked = self._arguments(made)
            if made.complete:
                self._plans[key] = checked
                while len(self._plans) > _PLANS:
                    self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return checked

    def _locks(self, rels: list[int]) -> dict[int, tuple[str, str]]:
        """oid -> (key, how it is locked: 'table <name>', 'parse <name>' or 'under <key>' for
        a child that LOCK TABLE on an ancestor locks)."""
        catalog = self.judge.catalog
        by_oid = self.relations.by_oid
        locks: dict[int, tuple[str, str]] = {}
        for oid in rels:
            rel = by_oid[oid]
            schema = catalog.schemas.get(rel.schema)
            # Only in schemas the role may name (USAGE): a relation a view reads in a schema
            # the role cannot use is locked by the view's own lock (the rewriter locks what a
            # view reads, whoever may name it). A schema created since the catalog was read
            # is seen by CHECK, and the next plan locks the relation.
            if rel.kind in _LOCKABLE and schema is not None and rel.schema in catalog.usable:
                name = f"{_quoted(schema)}.{_quoted(rel.name)}"
                how = "table" if rel.kind in _TABLES and rel.selectable else "parse"
                locks[oid] = (f"{rel.digest}/{how} {name}", f"{how} {name}")
        # Children of a table locked with LOCK TABLE are locked with it (the parent's digest
        # covers its pg_inherits rows: attached or detached since, it is locked again).
        reached = set(rels)
        todo = [(o, k) for o, (k, how) in locks.items() if how.startswith("table ")]
        while todo:
            parent, key = todo.pop()
            for child in by_oid[parent].children if parent in by_oid else ():
                if child in by_oid and child in reached:
                    locks[child] = (f"{by_oid[child].digest}/under {key}", f"under {key}")
                    todo.append((child, key))
        return locks

    def _arguments(self, plan: Plan) -> _Checked:
        c = self.judge.catalog
        lookups = plan.lookups
        functions = plan.user_oids(FUNCTION)
        operators = plan.user_oids(OPERATOR)
        types = plan.user_oids(TYPE)
        rels = [o for o in plan.user_oids(RELATION, ROW) if o in self.relations.by_oid]

        def pairs(keys: set[tuple[int, str]]) -> tuple[list[int], list[str]]:
            ordered = sorted(keys)
            return [k[0] for k in ordered], [k[1] for k in ordered]

        def named(objects: Iterable[Function | Operator], nsp: int) -> dict[int, int]:
            return {o.oid: o.xmin for o in objects if o.schema == nsp and o.oid >= FIRST_USER_OID}

        fn_rows = {oid: c.functions[oid].xmin for oid in functions if oid in c.functions}
        for nsp, name in lookups.functions:
            fn_rows |= named(c.functions_named.get(name, ()), nsp)
        op_rows = {oid: c.operators[oid].xmin for oid in operators if oid in c.operators}
        for nsp, name in lookups.operators:
            op_rows |= named(c.operators_named.get(name, ()), nsp)
        type_rows = {oid: c.types[oid].xmin for oid in types if oid in c.types}
        for key in lookups.types:
            typ = c.types_named.get(key)
            if typ is not None and typ.oid >= FIRST_USER_OID:
                type_rows[typ.oid] = typ.xmin
        known = [c.functions[o] for o in functions if o in c.functions]
        expected = {
            "path": list(c.path_names),
            "trusted": list(c.trusted_roles),
            "small": c.small,
            "functions": _digest(fn_rows.values()),
            "aggregates": _digest(f.aggregate_xmin for f in known),
            "extensions": _digest(f.extension_xmin for f in known),
            "operators": _digest(op_rows.values()),
            "types": _digest(type_rows.values()),
            "domains": _digest(x for t in types for _, x in c.domain_checks.get(t, ())),
            "relations": [self.relations.by_oid[o].digest for o in rels],
        }
        arguments = [
            list(c.trusted_names),
            functions,
            *pairs(lookups.functions),
            operators,
            *pairs(lookups.operators),
            types,
            *pairs(lookups.types),
            rels,
            *pairs(lookups.relations),
            sorted(lookups.schemas),
        ]
        run_names = [c.schemas[nsp] for nsp in plan.path if nsp in c.schemas]
        search_path = None if plan.path == c.path else _set_path(run_names)
        return _Checked(plan, arguments, expected, self._locks(rels), None, search_path, run_names)

    async def _changed(
        self, row: asyncpg.Record, checked: _Checked, conn: asyncpg.Connection, path: Transaction
    ) -> bool:
        """Bring the facts up to date with what CHECK found; True when anything moved. (CHECK
        ran on the plan's path when that was set: the facts are read on the session's.)"""
        expected = checked.expected
        catalog_parts = [
            k for k in expected if k not in ("relations", "path") and row[k] != expected[k]
        ]
        if row["path"] != self._expected_path(checked, path):
            catalog_parts.append("path")
        if catalog_parts:
            logger.debug("guard: catalog changed (%s); reading it again", ", ".join(catalog_parts))
            await self._session_path(conn, path)
            await self._reload(conn)
            return True
        rels, rel_schemas, rel_names, schemas = checked.arguments[10:14]
        stale = {
            oid
            for oid, now, then in zip(rels, row["relations"], expected["relations"], strict=True)
            if now != then
        }
        named: dict[tuple[int, str], set[int]] = {
            key: set() for key in zip(rel_schemas, rel_names, strict=True)
        }
        for nsp, name, oid in rows(row["named"]):
            named[(nsp, name)].add(oid)
        in_schema: dict[str, set[int]] = {schema: set() for schema in schemas}
        for schema, oid in rows(row["in_schema"]):
            in_schema[schema].add(oid)
        moved = self.relations.resolved(named, in_schema)
        if stale:
            await self._session_path(conn, path)
            await self.relations.read(conn, stale, set())
        return moved or bool(stale)
