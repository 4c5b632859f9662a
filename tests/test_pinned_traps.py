"""Traps planted on the search path (CVE-2018-1058): our own SQL never runs them.

A low-privilege role with CREATE on `public` plants operators and functions for the exact,
loosely typed signatures catalog SQL relies on (an implicit cast: real against integer, oid
against integer or regclass, name against text, bigint || text, ...). PostgreSQL prefers such
an exact match over the built-in that needs the cast, so an unpinned statement would run the
trap as the server's role. Each trap raises an exception carrying TRAP and its signature (it
writes nothing). The tests first prove every trap fires on the loosely typed expression it
was made for, then call every tool, resource, template, prompt and completion through an MCP
client: none may hit a trap, and every answer must be what it was before.

Traps named like the operators of asyncpg's own type lookup query (`=`, `<>`, `>`) are
planted apart: with those, the guard refuses every statement it judges (the driver might run
one of them, see closure._driver_lookup), so only the guarded tools' answers change; and none
of our statements may make the driver run that lookup. A third test records every statement
that reaches the database during a sweep and checks nothing in it is left unpinned; a fourth
compiles every statement of ours (the registry) with all the traps first on the search path
and shows that PostgreSQL resolved each to pg_catalog's objects only.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from asyncpg import introspection
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference, ResourceTemplateReference
from mcpclient import connect, execute, fetch
from pgbed import PgServer
from pglast import ast, parse_sql
from pglast.stream import RawStream

from pg_mcp_server.database.sql.pinned import generated, pin, statements, unpinned

TRAP = "PINNED TRAP"

FIXTURE = """
CREATE TYPE public.mood AS ENUM ('fine', 'grumpy');
CREATE TABLE public.customers (
    id int PRIMARY KEY, email text NOT NULL UNIQUE,
    kind text CHECK (kind IN ('shop', 'person')));
COMMENT ON TABLE public.customers IS 'people and shops who order';
COMMENT ON COLUMN public.customers.email IS 'where receipts go';
CREATE TABLE public.orders (
    id int PRIMARY KEY, customer_id int NOT NULL REFERENCES public.customers,
    mood public.mood, placed date, note text,
    total numeric(10, 2) GENERATED ALWAYS AS (id * 2) STORED);
CREATE INDEX orders_placed ON public.orders (placed) WHERE placed IS NOT NULL;
CREATE TABLE public.order_lines (
    order_id int REFERENCES public.orders, n int, qty int, PRIMARY KEY (order_id, n));
CREATE TABLE public.events (at date, v int) PARTITION BY RANGE (at);
CREATE TABLE public.events_2024 PARTITION OF public.events
    FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE VIEW public.big_orders AS SELECT * FROM public.orders WHERE total > 4;
CREATE TABLE public.big (id int PRIMARY KEY, v int);
INSERT INTO public.customers VALUES (1, 'a@x', 'shop'), (2, 'b@x', 'person');
INSERT INTO public.orders (id, customer_id, mood, placed, note)
    VALUES (1, 1, 'fine', '2024-02-01', pg_catalog.repeat('long ', 200)),
           (2, 1, 'grumpy', NULL, NULL), (3, 2, NULL, '2024-03-01', 'short');
INSERT INTO public.order_lines VALUES (1, 1, 2), (1, 2, 1), (3, 1, 5);
INSERT INTO public.events VALUES ('2024-05-05', 1);
INSERT INTO public.big SELECT i, i % 7 FROM pg_catalog.generate_series(1, 20000) i;
-- order_lines stays unanalyzed (reltuples = -1): both row-estimate paths run
ANALYZE public.customers, public.orders, public.big, public.events;
-- No autoanalyze later (the inserts count as changes only once this commits, after the
-- ANALYZE): it would change the answers' stats_as_of between the two sweeps.
ALTER TABLE public.customers SET (autovacuum_enabled = off);
ALTER TABLE public.orders SET (autovacuum_enabled = off);
ALTER TABLE public.order_lines SET (autovacuum_enabled = off);
ALTER TABLE public.events_2024 SET (autovacuum_enabled = off);
ALTER TABLE public.big SET (autovacuum_enabled = off);
"""

# (operator, left, right, result, an expression that resolves to it once it is planted).
# Names asyncpg's type lookup query does not use: the guard lets agents' SQL through.
OPERATORS = [
    (">=", "real", "integer", "boolean", "1::real >= 0"),
    ("<", "real", "integer", "boolean", "1::real < 0"),
    ("<=", "real", "integer", "boolean", "1::real <= 0"),
    ("-", "integer", "real", "real", "1 - 1::real"),
    ("*", "real", "integer", "real", "1::real * 2"),
    (">=", "oid", "integer", "boolean", "1::oid >= 0"),
    ("||", "bigint", "text", "text", "1::bigint || ':'::text"),
    ("||", "text", "name", "text", "'a'::text || 'b'::name"),
    ("||", "text", "integer", "text", "'a'::text || 1"),
    ("~~", "name", "name", "boolean", "'a'::name LIKE 'a'::name"),
]
# (function, argument types, result, a call that resolves to it once it is planted)
FUNCTIONS = [
    ("quote_ident", "name", "text", "quote_ident('a'::name)"),
    ("lower", "name", "text", "lower('a'::name)"),
    ("unnest", "integer[]", "integer", "unnest(ARRAY[1])"),
    ("unnest", "smallint[]", "smallint", "unnest(ARRAY[1::int2])"),
    ("format_type", "oid, smallint", "text", "format_type(23::oid, 1::int2)"),
    ("strpos", "name, text", "integer", "strpos('a'::name, 'a'::text)"),
    ("left", "name, integer", "text", "left('a'::name, 1)"),
    ("array_position", "name[], name", "integer", "array_position(ARRAY['a'::name], 'a'::name)"),
]
# Names asyncpg's type lookup query uses (`t2.typbasetype != 0`, `=`, `>`): with any of
# them planted the guard refuses every statement it judges, since the driver might run it.
DRIVER_NAMES = [
    ("<>", "oid", "integer", "boolean", "1::oid <> 0"),
    ("=", "oid", "integer", "boolean", "1::oid = 0"),
    (">", "oid", "integer", "boolean", "1::oid > 0"),
    ("=", "oid", "regclass", "boolean", "1::oid = 'pg_class'::regclass"),
    ("=", "real", "integer", "boolean", "1::real = 0"),
    (">", "real", "integer", "boolean", "1::real > 0"),
    ("=", '"char"', "text", "boolean", """'r'::"char" = 'r'::text"""),
]


def _plant_sql(operators: list[tuple[str, str, str, str, str]], functions: list[Any]) -> str:
    statements = []
    for i, (op, left, right, result, _) in enumerate(operators):
        label = f"{TRAP} {op}({left}, {right})".replace("'", "''")
        statements.append(
            f"CREATE FUNCTION public.trap_op_{i}({left}, {right}) RETURNS {result} "
            f"LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '{label}'; END $$;"
            f"CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, "
            f"FUNCTION = public.trap_op_{i});"
        )
    for name, args, result, _ in functions:
        label = f"{TRAP} {name}({args})"
        returns = f"SETOF {result}" if name == "unnest" else result
        statements.append(
            f"CREATE FUNCTION public.{name}({args}) RETURNS {returns} "
            f"LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '{label}'; END $$;"
        )
    return "\n".join(statements)


def _as_role(dsn: str, role: str) -> str:
    return f"postgresql://{role}@{dsn.split('@', 1)[1]}"


# The one relation a statement of ours reads from an extension's schema
# (health.statements.TOP): a stand-in with its columns, so that the probe can resolve the
# statement (the sweep's get_top_queries still finds no extension installed).
PG_STAT_STATEMENTS = """
CREATE TABLE public.pg_stat_statements (
    queryid int8, userid oid, dbid oid, query text, calls int8, total_exec_time float8,
    mean_exec_time float8, rows int8, shared_blks_hit int8, shared_blks_read int8);
"""


@pytest_asyncio.fixture(loop_scope="session")
async def bed(pg: PgServer) -> AsyncIterator[tuple[str, str]]:
    """A database with FIXTURE, and the DSN of a role that may create objects in public."""
    db = await pg.create_database("pinned")
    planter = f"pinned_planter_{secrets.token_hex(4)}"
    await execute(
        db.dsn,
        FIXTURE
        + PG_STAT_STATEMENTS
        + f"CREATE ROLE {planter} LOGIN; GRANT CREATE ON SCHEMA public TO {planter};",
    )
    try:
        yield db.dsn, _as_role(db.dsn, planter)
    finally:
        await pg.drop_database(db.name)
        await execute(pg.admin_dsn, f"DROP ROLE {planter}")


TABLE = ResourceTemplateReference(uri="pg://schemas/{schema}/tables/{table}")
ANALYZE = PromptReference(name="analyze-table")
# Pinned agent SQL: the guard leaves pg_catalog's operators alone even with traps around.
GT = "OPERATOR(pg_catalog.>)"

TOOL_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("list_schemas", {}),
    ("list_schemas", {"include_system": True}),
    ("list_tables", {"schema_name": "public"}),
    ("list_tables", {"schema_name": "public", "include_columns": True, "name_pattern": "%ord%"}),
    ("list_tables", {"schema_name": "pubic"}),  # missing: the closest names
    ("search_tables", {"query": "customer orders receipts"}),
    ("describe_table", {"table_name": "orders"}),
    ("describe_table", {"table_name": "customers"}),
    ("describe_table", {"table_name": "events"}),
    ("describe_table", {"table_name": "order_lines"}),
    ("describe_table", {"table_name": "big_orders"}),
    ("describe_table", {"table_name": "ordrs"}),  # missing
    ("get_sample_rows", {"table_name": "orders"}),
    ("get_sample_rows", {"table_name": "order_lines", "where_clause": f"qty {GT} 1"}),
    ("get_sample_rows", {"table_name": "big", "randomize": True, "limit": 3}),
    ("get_foreign_keys", {"table_name": "orders"}),
    ("find_join_path", {"from_table": "customers", "to_table": "order_lines"}),
    ("find_join_path", {"from_table": "customers", "to_table": "nowhere"}),
    ("execute_query", {"sql": "SELECT id, email FROM public.customers ORDER BY id"}),
    ("execute_query", {"sql": "SELECT id, mood FROM public.orders ORDER BY id"}),
    ("execute_query", {"sql": "SELECT nosuch FROM public.orders"}),  # the column hint
    ("explain_query", {"sql": "SELECT v FROM public.big"}),
    ("explain_query", {"sql": f"SELECT v FROM public.big WHERE v {GT} 3", "analyze": True}),
    ("read_resource", {"uri": "pg://schemas/public/tables/orders"}),
    # No pgvector here: the catalog read and its error (test_vectors.py covers the search).
    ("similarity_search", {"table_name": "orders", "column": "mood", "query_vector": [1.0]}),
    ("generate_embedding", {"text": "orders"}),
    ("analyze_db_health", {}),
    ("get_top_queries", {}),  # no pg_stat_statements here: the error naming the fix
    ("analyze_query_indexes", {"sql": "SELECT v FROM public.big"}),  # nor HypoPG
]
# The calls meant to fail (the closest names, the column hint): every other one must answer.
EXPECTED_ERRORS = {
    'list_tables {"schema_name": "pubic"}',
    'describe_table {"table_name": "ordrs"}',
    'find_join_path {"from_table": "customers", "to_table": "nowhere"}',
    'execute_query {"sql": "SELECT nosuch FROM public.orders"}',
    "pg://results/none/1",  # no such result held (RESULT_EXPIRED)
    'similarity_search {"table_name": "orders", "column": "mood", "query_vector": [1.0]}',
    "get_top_queries {}",
    'analyze_query_indexes {"sql": "SELECT v FROM public.big"}',
}
PROMPTS: list[tuple[str, dict[str, str]]] = [
    ("explore-database", {"schema": "public"}),
    ("analyze-table", {"table": "orders", "schema": "public"}),
    ("write-query", {"question": "orders per customer"}),
    ("generate-report", {"topic": "orders"}),
    ("find-data", {"description": "email addresses"}),
]
# Answers that differ from call to call whatever is planted: only their success is compared.
_VOLATILE_RESOURCES = {
    "pg://system_info",
    "pg://stat/activity",
    "pg://stat/replication",
    "pg://queries/recent",
}
_VOLATILE_KEYS = {"execution_time_ms", "actual_time_ms", "plan"}


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE_KEYS}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


async def sweep(client: Client) -> dict[str, Any]:
    """Every tool, resource, template, prompt and completion once: label -> what came back
    (a result, or the error's text). Fails if the server offers one the sweep leaves out."""
    tools = {t.name for t in (await client.list_tools()).tools}
    assert tools == {name for name, _ in TOOL_CALLS}, "a tool the sweep does not call"
    prompts = {p.name for p in (await client.list_prompts()).prompts}
    assert prompts == {name for name, _ in PROMPTS}, "a prompt the sweep does not get"
    # Every resource listed, and every template for the orders table.
    listed = (await client.list_resource_templates()).resource_templates
    templates = [
        t.uri_template.format(schema="public", table="orders", id="none", page="1") for t in listed
    ]
    resources = [str(r.uri) for r in (await client.list_resources()).resources] + templates
    out: dict[str, Any] = {}
    for name, arguments in TOOL_CALLS:
        result = await client.call_tool(name, arguments)
        body = json.loads(result.content[0].text)  # type: ignore[union-attr]
        if arguments.get("randomize"):  # other rows each time
            body.pop("rows", None)
        if name == "analyze_db_health" and not result.is_error:
            # Statistics move from call to call: compared is which checks could not run.
            body = [c["check"] for c in body["checks"] if c["status"] == "failed"]
        label = f"{name} {json.dumps(arguments)}"
        out[label] = (result.is_error, _stable(body))
    for uri in resources:
        try:
            read = await client.read_resource(uri, cache_mode="bypass")
            text = read.contents[0].text  # type: ignore[union-attr]
            if read.contents[0].mime_type != "application/json":  # a diagram
                out[uri] = text
            else:
                out[uri] = "ok" if uri in _VOLATILE_RESOURCES else _stable(json.loads(text))
        except MCPError as exc:
            out[uri] = f"error: {exc.error.message} {exc.error.data}"
    for name, arguments in PROMPTS:
        try:
            prompt = await client.get_prompt(name, arguments)
            out[f"prompt {name}"] = [m.model_dump(mode="json") for m in prompt.messages]
        except MCPError as exc:
            out[f"prompt {name}"] = f"error: {exc.error.message} {exc.error.data}"
    for ref, argument, value, context in (
        (TABLE, "schema", "pu", None),
        (TABLE, "table", "ord", {"schema": "public"}),
        (TABLE, "table", "ORDER_li", {"schema": "public"}),
        (ANALYZE, "table", "cu", {"schema": "public"}),
        (ANALYZE, "schema", "", None),
    ):
        try:
            done = await client.complete(ref, {"name": argument, "value": value}, context)
            got: Any = done.completion.model_dump(mode="json")
        except MCPError as exc:
            got = f"error: {exc.error.message} {exc.error.data}"
        out[f"complete {ref.type} {argument}={value!r}"] = got
    return out


def _errors(answers: dict[str, Any]) -> set[str]:
    """The calls that failed."""
    return {
        label
        for label, answer in answers.items()
        if (isinstance(answer, tuple) and answer[0])
        or (isinstance(answer, str) and answer.startswith("error:"))
    }


def _hits(answers: dict[str, Any]) -> dict[str, list[str]]:
    """Which calls ran which trap (from the text of what came back)."""
    found: dict[str, list[str]] = {}
    for label, answer in answers.items():
        text = json.dumps(answer)
        if TRAP in text:
            marks = {text[i : text.find(")", i) + 1] for i in _positions(text, TRAP)}
            found[label] = sorted(marks)
    return found


def _positions(text: str, part: str) -> list[int]:
    out, i = [], text.find(part)
    while i >= 0:
        out.append(i)
        i = text.find(part, i + 1)
    return out


async def _prove_live(dsn: str, expressions: list[str]) -> None:
    """Each trap fires on the loosely typed expression it was planted for, as the server's
    role: what our SQL would run if it were not pinned."""
    for expression in expressions:
        with pytest.raises(Exception, match=TRAP):
            await fetch(dsn, f"SELECT {expression}")


async def test_no_trap_is_hit_and_every_answer_stays(bed: tuple[str, str]) -> None:
    dsn, planter = bed
    async with connect(dsn) as client:
        before = await sweep(client)
    assert _errors(before) == EXPECTED_ERRORS
    await execute(planter, _plant_sql(OPERATORS, FUNCTIONS))
    await _prove_live(dsn, [e for *_, e in OPERATORS] + [e for *_, e in FUNCTIONS])
    async with connect(dsn) as client:  # a fresh server: nothing cached, new connections
        after = await sweep(client)
    assert _hits(after) == {}
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert changed == {}


async def test_the_driver_lookup_trap_is_never_reached(bed: tuple[str, str]) -> None:
    """With traps named like the operators of asyncpg's own type lookup query (one of them,
    `oid <> integer`, it would run), the guard refuses every statement it judges whose path
    keeps public (where the planter may create objects; one that needs nothing there runs
    without it, where the traps are not found, and answers as before); nothing else changes,
    and none of our statements makes the driver look a type up."""
    dsn, planter = bed
    async with connect(dsn) as client:
        before = await sweep(client)
    assert _errors(before) == EXPECTED_ERRORS
    await execute(planter, _plant_sql(DRIVER_NAMES, []))
    await _prove_live(dsn, [e for *_, e in DRIVER_NAMES])
    async with connect(dsn) as client:
        after = await sweep(client)
    assert _hits(after) == {}
    guarded = (
        "execute_query",
        "explain_query",
        "get_sample_rows",
        "pg://schemas/public/tables/orders/sample",
    )
    for label, answer in after.items():
        if label.startswith(guarded) and answer != before[label]:
            if label.startswith("pg://"):
                assert "WRITE_OPERATION_DENIED" in answer or "type lookup" in answer, answer
            else:
                assert answer[0] and answer[1]["error"]["code"] == "WRITE_OPERATION_DENIED", answer
        else:
            assert answer == before[label], label


async def test_every_statement_we_send_is_pinned(
    bed: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What reaches the database during a sweep, recorded by asyncpg's query logger on every
    connection the server opens (SQL built at run time too): nothing in it is looked up on
    the search path, and none of it was pinned while the server ran. The driver's own type
    lookup (asyncpg's SQL, which the guard checks with every statement it judges) ran only
    for the enum of the agents' results, never for a result of ours."""
    dsn, _ = bed
    sent: list[tuple[str, Any]] = []
    open_connection = asyncpg.connect

    async def recorded(*args: Any, **kwargs: Any) -> asyncpg.Connection:
        conn = await open_connection(*args, **kwargs)
        conn.add_query_logger(lambda logged: sent.append((logged.query, logged.args)))
        return conn

    prepare = asyncpg.Connection.prepare

    async def prepared(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        sent.append((query, None))  # (the query logger sees only what runs unprepared)
        return await prepare(self, query, *args, **kwargs)

    monkeypatch.setattr(asyncpg, "connect", recorded)
    monkeypatch.setattr(asyncpg.Connection, "prepare", prepared)
    before = pin.cache_info()
    async with connect(dsn) as client:
        assert _errors(await sweep(client)) == EXPECTED_ERRORS
    monkeypatch.undo()
    after = pin.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses), "pinned at run time"
    assert any("pg_catalog.pg_class" in q for q, _ in sent), "the recorder saw our statements"
    assert any("string_agg" in q for q, _ in sent), "... and the statements that read rows"
    lookups = {introspection.INTRO_LOOKUP_TYPES, introspection.INTRO_LOOKUP_TYPES_13}
    looked_up = {oid for q, args in sent if q in lookups for oid in args[0]}
    mood = (await fetch(dsn, "SELECT 'public.mood'::regtype::oid AS oid"))[0]["oid"]
    assert looked_up <= {mood}, "the driver looked up a type of one of our results"
    driver = lookups | {q for q, _ in sent if "set_config('jit'" in q}
    # SQLAlchemy's dialect asks this once per pool: a function without arguments, which a
    # planted one could only shadow from a schema listed before pg_catalog.
    driver.add("select current_schema()")
    # (The agents' statements of the sweep name nothing either: they are written pinned.)
    # (TABLESAMPLE SYSTEM stays: pglast cannot print its method qualified, and its exact
    # signature, system(internal), is one only a C function can have.)
    left = {
        q[:200]: found
        for q, _ in sent
        if q not in driver
        and (found := [u for u in unpinned(q) if u != "tablesample method system"])
    }
    assert left == {}


# What a name lookup finds: a statement may depend on no object of these but pg_catalog's.
_LOOKED_UP = ("pg_proc", "pg_operator", "pg_type", "pg_collation")
_DEPENDS_ON = pin(f"""
SELECT pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0) AS object
FROM pg_catalog.pg_depend d
WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = $1
  AND d.refclassid::pg_catalog.regclass::pg_catalog.text = ANY ('{{{",".join(_LOOKED_UP)}}}')
  AND d.refobjid <> $2
ORDER BY 1
""")
_PARAMETER_TYPES = pin(
    "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = 'pinned_probe'"
)


async def _resolved_to(conn: asyncpg.Connection, text: str) -> list[str]:
    """The functions, operators, types and collations other than pg_catalog's built-in ones
    that the SELECTs of `text` resolve to on `conn`'s search path. PostgreSQL records what a
    SQL-standard function body (BEGIN ATOMIC) resolved to in pg_depend, all but the objects
    initdb made (it never records those): each SELECT becomes the body of a temporary probe
    function, in a transaction rolled back."""
    found: list[str] = []
    for raw in parse_sql(text):
        if not isinstance(raw.stmt, ast.SelectStmt):
            continue  # SET, DISCARD, ...: nothing is looked up by name
        sql = RawStream()(raw.stmt)
        transaction = conn.transaction()
        await transaction.start()
        try:
            # What custom/resolve.py's PROBE_OID looks up: a function of the session's.
            await conn.execute(
                "CREATE FUNCTION pg_temp.mcp_probe() RETURNS integer LANGUAGE sql RETURN 1"
            )
            context = await conn.fetchval("SELECT 'pg_temp.mcp_probe'::pg_catalog.regproc::oid")
            await conn.execute(f"PREPARE pinned_probe AS {sql}")
            types = await conn.fetchval(_PARAMETER_TYPES)
            await conn.execute("DEALLOCATE pinned_probe")
            await conn.execute(
                f"CREATE FUNCTION pg_temp.pinned_probe({', '.join(types)}) RETURNS SETOF record"
                f" LANGUAGE sql BEGIN ATOMIC {sql}; END"
            )
            oid = await conn.fetchval("SELECT 'pg_temp.pinned_probe'::pg_catalog.regproc::oid")
            found += [r["object"] for r in await conn.fetch(_DEPENDS_ON, oid, context)]
        finally:
            await transaction.rollback()
    return found


async def test_every_statement_of_ours_resolves_to_pg_catalog_only(bed: tuple[str, str]) -> None:
    """With every trap planted in a schema first on the search path, each statement of ours
    (every one registered, as sent) depends on nothing but pg_catalog's built-in functions,
    operators, types and collations. The same probe over the SQL as written, before pin(),
    finds traps: the probe sees what it is looking for."""
    dsn, planter = bed
    await execute(planter, _plant_sql(OPERATORS + DRIVER_NAMES, FUNCTIONS))
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET search_path = public, pg_catalog")
        sent = {name: await _resolved_to(conn, text) for name, (_, text) in generated().items()}
        written = {name: await _resolved_to(conn, sql) for name, sql in statements().items()}
    finally:
        await conn.close()
    assert sent.keys() == statements().keys()
    assert {name: found for name, found in sent.items() if found} == {}
    trapped = {name for name, found in written.items() if found}
    assert {"catalog.tables.DESCRIBE_TABLE", "guard.state.CHECK", "pool.engine.CANCEL"} <= trapped
    assert "operator >=(real,integer)" in written["catalog.tables.DESCRIBE_TABLE"]
