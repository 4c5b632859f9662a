"""Planted objects (issue 12): a low-privilege role plants each kind of object around a
side-effect function; the server's role is a superuser, so only the guard stands in the way.

Every attack first runs directly (no guard, a read-only transaction rolled back) to prove it
really changes server state, unless it is marked as refused only by caution; then, through an
MCP client, it must be refused with a message that names the object and the rule, by
execute_query and by plain explain_query alike, and nothing may change: no transaction ID
consumed, statistics not reset, the remote sequence and the tables as they were. The same kinds
built from safe parts are served. Objects created or changed while the server runs are judged
by the next call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from guardbed import (
    EXTENSION,
    FOREIGN,
    FOREIGN_WRAPPER,
    HANDOVER,
    NO_HANDLER_WRAPPER,
    OWNED,
    PLANT,
    REMOTE,
    SPANS,
    TABLEFUNC,
    Bed,
    fdw_options,
    planter_role,
)
from mcp import Client
from mcpclient import call, call_error, connect, execute, held_client, records
from pgbed import PgServer, server_features


@dataclass(frozen=True)
class Attack:
    name: str
    sql: str
    culprit: str  # what the message must name
    rule: str
    real: bool = True  # running it directly changes state (False: refused by caution)
    plan_time: bool = False  # plain EXPLAIN already runs the planted code
    xml: bool = False  # needs a server built with libxml to be real
    since: int = 0  # the PostgreSQL major version that has what it uses
    extension: bool = False  # needs the planter's pg_trgm (a trusted extension)
    tablefunc: bool = False  # needs tablefunc
    # Found by an unqualified name in public, where the planter may create objects: the
    # statement runs without public on its path (no trusted candidate there), so PostgreSQL
    # never finds it and says so (docs/security.md, "Schemas anyone may create in").
    off_path: bool = False

    @property
    def id(self) -> str:
        return self.name


A = Attack
UNTRUSTED = "untrusted_owner"
OPEN_BODY = "open_schema_body"
# (A schema's or the database's relations are all checked; the foreign table is found first.)
ATTACKS = [
    A("operator", "SELECT 1 === 2", "planter.op_fn", UNTRUSTED, plan_time=True),
    A(
        "operator_qualified",
        "SELECT 1 OPERATOR(public.===) 2",
        "planter.op_fn",
        UNTRUSTED,
        plan_time=True,
    ),
    A(
        "order_by_using",
        "SELECT id FROM planter.levels ORDER BY lvl USING OPERATOR(planter.>>>)",
        "planter.level_",
        UNTRUSTED,
    ),
    A(
        "order_by_default_operator_class",
        "SELECT id FROM planter.levels ORDER BY lvl",
        "planter.level_",
        UNTRUSTED,
    ),
    A(
        "cast_explicit",
        "SELECT (1::planter.boxed).v",
        "planter.to_boxed",
        UNTRUSTED,
        plan_time=True,
    ),
    A(
        "cast_implicit",
        "SELECT public.grade_label(1)",
        "planter.to_grade",
        UNTRUSTED,
        plan_time=True,
    ),
    A(
        "domain_check_literal",
        "SELECT '1'::planter.pos",
        "planter.check_fn",
        UNTRUSTED,
        plan_time=True,
    ),
    A("domain_check_cast", "SELECT 1::planter.pos", "planter.check_fn", UNTRUSTED, plan_time=True),
    A(
        "range_constructor",
        "SELECT planter.floatrange(1, 2)",
        "planter.diff",
        UNTRUSTED,
        real=False,
    ),
    A(
        "range_literal",
        "SELECT '[1,2)'::planter.floatrange",
        "planter.diff",
        UNTRUSTED,
        real=False,
    ),
    A(
        "multirange",
        "SELECT planter.floatmultirange(planter.floatrange(1, 2))",
        "planter.diff",
        UNTRUSTED,
        real=False,
    ),
    A(
        "range_selectivity",
        "SELECT * FROM public.spans WHERE r && planter.floatrange(1, 2)",
        "planter.diff",
        UNTRUSTED,
        plan_time=True,
    ),
    A(
        "sql_body_text",
        "SELECT public.trusted_equal(1, 2)",
        # its body's === resolves when it runs, on a path with public, where the planter may
        # create objects: refused before the planted function is reached (F3)
        "public.trusted_equal",
        OPEN_BODY,
        plan_time=True,
    ),
    A(
        "sql_body_atomic",
        "SELECT public.trusted_atomic(1)",
        "planter.op_fn",
        UNTRUSTED,
        plan_time=True,
    ),
    A("plpgsql_body", "SELECT public.trusted_plpgsql(1)", "planter.effect", UNTRUSTED),
    A(
        "plpgsql_dynamic_sql",
        "SELECT public.trusted_dynamic('SELECT pg_catalog.pg_current_xact_id()::text::bigint')",
        "public.trusted_dynamic",
        "unanalysable_body",
    ),
    A("stable_liar_untrusted", "SELECT planter.liar()", "planter.liar", UNTRUSTED, plan_time=True),
    A(
        "immutable_liar_untrusted",
        "SELECT planter.effect()",
        "planter.effect",
        UNTRUSTED,
        plan_time=True,
    ),
    A(
        "stable_liar_trusted_owner",
        "SELECT public.trusted_liar()",
        "pg_catalog.pg_stat_reset",
        "volatile_function",
    ),
    A(
        "shadowing_builtin",
        "SELECT lower(1)",
        "public.lower",
        UNTRUSTED,
        plan_time=True,
        off_path=True,
    ),
    A(
        "index_expression",
        "SELECT * FROM planter.indexed WHERE id = 1",
        "planter.index_fn",
        UNTRUSTED,
        plan_time=True,
    ),
    A(
        "member_of_untrusted_extension",
        "SELECT planter.member()",
        "planter.member",
        UNTRUSTED,
        plan_time=True,
        extension=True,
    ),
    A(
        "view_operator",
        "SELECT * FROM planter.v_operator",
        "planter.op_fn",
        UNTRUSTED,
        plan_time=True,
    ),
    A("view_cast", "SELECT * FROM planter.v_cast", "planter.to_boxed", UNTRUSTED, plan_time=True),
    A(
        "view_domain",
        "SELECT * FROM planter.v_domain",
        "planter.check_fn",
        UNTRUSTED,
        plan_time=True,
    ),
    A("view_range", "SELECT * FROM planter.v_range", "planter.diff", UNTRUSTED, real=False),
    A(
        "view_sql_body",
        "SELECT * FROM planter.v_body",
        "public.trusted_equal",
        OPEN_BODY,
        plan_time=True,
    ),
    A("view_sorted", "SELECT * FROM planter.v_sorted", "planter.level_", UNTRUSTED),
    A("view_over_view", "SELECT * FROM planter.v_view", "planter.op_fn", UNTRUSTED, plan_time=True),
    A(
        "view_xid",
        "SELECT * FROM planter.v_xid",
        "pg_catalog.pg_current_xact_id",
        "refused_function",
    ),
    A(
        "table_to_xml",
        "SELECT table_to_xml('planter.v_operator', true, false, '')",
        "planter.op_fn",
        UNTRUSTED,
        xml=True,
    ),
    A(
        "table_to_xml_and_xmlschema",
        "SELECT table_to_xml_and_xmlschema('planter.v_operator'::regclass, true, false, '')",
        "planter.op_fn",
        UNTRUSTED,
        xml=True,
    ),
    A(
        "table_to_xml_named_argument",
        "SELECT table_to_xml(tbl => 'planter.v_xid', nulls => true, tableforest => false, "
        "targetns => '')",
        "pg_current_xact_id",
        "refused_function",
        xml=True,
    ),
    A(
        "table_to_xml_not_a_constant",
        "SELECT table_to_xml(c.oid::regclass, true, false, '') FROM pg_class c "
        "WHERE c.relname = 'v_operator'",
        "table_to_xml",
        "names_object_at_run_time",
        xml=True,
    ),
    A(
        "schema_to_xml",
        "SELECT schema_to_xml('planter', true, false, '')",
        "planter.remote_",
        "foreign_table",
        xml=True,
    ),
    A(
        "schema_to_xml_and_xmlschema",
        "SELECT schema_to_xml_and_xmlschema('planter', true, false, '')",
        "planter.remote_",
        "foreign_table",
        xml=True,
    ),
    A(
        "database_to_xml",
        "SELECT database_to_xml(true, false, '')",
        "planter.remote_",
        "foreign_table",
        xml=True,
    ),
    A(
        "database_to_xml_and_xmlschema",
        "SELECT database_to_xml_and_xmlschema(true, false, '')",
        "planter.remote_",
        "foreign_table",
        xml=True,
    ),
    A(
        "input_is_valid_names_a_domain",
        "SELECT pg_input_is_valid('1', 'planter.pos')",
        "planter.check_fn",
        UNTRUSTED,
        since=16,
    ),
    A(
        "crosstab_sql_text",
        "SELECT * FROM crosstab('SELECT ''r''::text, ''c''::text, (1 === 2)::text') "
        "AS ct(r text, c text)",
        "planter.op_fn",
        UNTRUSTED,
        tablefunc=True,
    ),
    A(
        "crosstab_sql_text_not_a_constant",
        "SELECT * FROM crosstab((SELECT 'SELECT 1')) AS ct(r text, c text)",
        "crosstab",
        "names_object_at_run_time",
        real=False,
        tablefunc=True,
    ),
    A(
        "view_of_crosstab",
        "SELECT * FROM planter.v_crosstab",
        "planter.op_fn",
        UNTRUSTED,
        tablefunc=True,
    ),
    A("foreign_table", "SELECT * FROM planter.remote_trap", "remote_trap", "foreign_table"),
    # (Through the planter's view, postgres_fdw would connect as the planter and need a password.)
    A(
        "view_of_foreign_table",
        "SELECT * FROM planter.v_remote",
        "remote_trap",
        "foreign_table",
        real=False,
    ),
    A(
        "foreign_partition",
        "SELECT * FROM planter.parted",
        "parted_remote",
        "foreign_table",
    ),
    A("xid_from", "SELECT * FROM pg_current_xact_id()", "pg_current_xact_id", "refused_function"),
    A(
        "xid_where",
        "SELECT 1 WHERE txid_current() > 0",
        "txid_current",
        "refused_function",
    ),
    A(
        "xid_cte",
        "WITH x AS (SELECT txid_current() AS t) SELECT * FROM x",
        "txid_current",
        "refused_function",
    ),
    A(
        "xid_per_row",
        "SELECT pg_current_xact_id() FROM generate_series(1, 3)",
        "pg_current_xact_id",
        "refused_function",
    ),
    A("xid_trusted_wrapper", "SELECT public.xid_wrapper()", "txid_current", "refused_function"),
    A("xid_alias_by_symbol", "SELECT public.my_xid()", "public.my_xid", "refused_function"),
    # Whatever they hold today, the planter can add code to these at any moment.
    A("owned_table", "SELECT * FROM planter.own_table", "planter.own_table", UNTRUSTED, real=False),
    A("owned_view", "SELECT * FROM planter.own_view", "planter.own_view", UNTRUSTED, real=False),
    A(
        "owned_table_in_a_join",
        "SELECT * FROM (VALUES (1)) v(id) JOIN planter.own_table o USING (id)",
        "planter.own_table",
        UNTRUSTED,
        real=False,
    ),
    A("owned_domain", "SELECT 5::planter.own_pos AS v", "planter.own_pos", UNTRUSTED, real=False),
    A(
        "owned_operator_of_a_builtin_function",
        "SELECT 1 OPERATOR(planter.#-#) 2 AS v",
        "planter.#-#",
        UNTRUSTED,
        real=False,
    ),
    A(
        "owned_enum",
        "SELECT 'calm'::planter.own_mood AS v",
        "planter.own_mood",
        UNTRUSTED,
        real=False,
    ),
    A(
        "owned_composite",
        "SELECT ('(7)'::text::planter.own_boxed).v AS v",
        "planter.own_boxed",
        UNTRUSTED,
        real=False,
    ),
]

# get_sample_rows(schema, table) of a planted relation: (name, table, culprit, rule)
SAMPLES = [
    ("view", "v_operator", "planter.op_fn", UNTRUSTED),
    ("xid_view", "v_xid", "pg_current_xact_id", "refused_function"),
    ("foreign_table", "remote_trap", "remote_trap", "foreign_table"),
    ("sorted_view", "v_sorted", "planter.level_", UNTRUSTED),
    ("owned_table", "own_table", "planter.own_table", UNTRUSTED),
]

SAFE: list[tuple[str, str, list[dict[str, Any]] | None]] = [
    ("operator_of_builtin_function", "SELECT 1 OPERATOR(planter.#+#) 2 AS v", [{"v": 3}]),
    ("domain_with_immutable_check", "SELECT 5::planter.safe_pos AS v", [{"v": 5}]),
    ("io_cast", "SELECT ('(7)'::text::planter.safe_boxed).v AS v", [{"v": 7}]),
    ("range_type", "SELECT planter.safe_range(1, 5)::text AS v", [{"v": "[1,5)"}]),
    (
        "multirange_type",
        "SELECT planter.safe_multirange(planter.safe_range(1, 5))::text AS v",
        [{"v": "{[1,5)}"}],
    ),
    ("view_over_safe_parts", "SELECT id, next_id FROM planter.safe_view ORDER BY id", None),
    ("table_of_safe_types", "SELECT p, r::text FROM planter.safe_things ORDER BY p", None),
    (
        "order_by_using_builtin",
        "SELECT x FROM (VALUES (2), (1), (3)) v(x) ORDER BY x USING >",
        [{"x": 3}, {"x": 2}, {"x": 1}],
    ),
    ("trusted_sql_function", "SELECT public.trusted_double(21) AS v", [{"v": 42}]),
    ("trusted_plpgsql_function", "SELECT public.trusted_safe_plpgsql(2) AS v", [{"v": 6}]),
    (
        "builtin_ranges",
        "SELECT int4range(1, 5) @> 3 AS a, '[2020-01-01,2021-01-01)'::tstzrange "
        "@> '2020-06-01'::timestamptz AS b, int4multirange(int4range(1, 2)) IS NOT NULL AS c",
        [{"a": True, "b": True, "c": True}],
    ),
    ("qualified_builtin", "SELECT pg_catalog.lower('X') AS v", [{"v": "x"}]),
    # public.=(int, int) exists, planted, but pg_catalog's of the same signature hides it
    ("hidden_operator", "SELECT 1 = 1 AS v, 2 IN (1, 2) AS w", [{"v": True, "w": True}]),
    (
        "catalog_table",
        "SELECT count(*) AS n FROM pg_catalog.pg_class WHERE relname = 'spans'",
        [{"n": 1}],
    ),
]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def bed(pg: PgServer) -> AsyncIterator[Bed]:
    db = await pg.create_database("guard")
    remote = await pg.create_database("guard_remote")
    role = planter_role()
    try:
        await execute(db.dsn, PLANT.format(role=role))
        await execute(db.dsn, SPANS)
        await execute(remote.dsn, REMOTE)
        server, mapping = fdw_options(pg.admin_dsn, remote.name)
        try:
            await execute(db.dsn, FOREIGN_WRAPPER.format(server=server, mapping=mapping))
            fdw = True
        except asyncpg.FeatureNotSupportedError:  # no postgres_fdw on this server
            await execute(db.dsn, NO_HANDLER_WRAPPER)
            fdw = False
        await execute(db.dsn, FOREIGN.format(role=role))
        try:
            await execute(db.dsn, EXTENSION.format(role=role))
            extension = True
        except asyncpg.PostgresError:  # no pg_trgm on this server
            extension = False
        try:
            await execute(db.dsn, TABLEFUNC.format(role=role))
            tablefunc = True
        except asyncpg.PostgresError:  # no tablefunc on this server
            tablefunc = False
        await execute(db.dsn, HANDOVER.format(role=role))
        await execute(db.dsn, OWNED.format(role=role))
        xml = (await server_features(pg)).xml
        conn = await asyncpg.connect(db.dsn)
        version = conn.get_server_version().major
        await conn.close()
        yield Bed(db.dsn, remote.dsn, role, xml, version, extension, tablefunc, fdw)
    finally:
        await pg.drop_database(db.name)
        await pg.drop_database(remote.name)
        await execute(pg.admin_dsn, f'DROP ROLE IF EXISTS "{role}"')


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def client(bed: Bed) -> AsyncIterator[Client]:
    """A server that accepts the risk of code in an open schema (public is open here, and
    the DBA's trusted objects are in it), so that each rule is seen refusing its attack."""
    async with held_client(bed.dsn, allow_open_schema_code=True) as held:
        yield held


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def strict(bed: Bed) -> AsyncIterator[Client]:
    """A server with the default settings."""
    async with held_client(bed.dsn) as held:
        yield held


async def run_directly(dsn: str, sql: str) -> None:
    """The statement without the guard, read-only and rolled back, as the server would."""
    conn = await asyncpg.connect(dsn)
    try:
        tx = conn.transaction(readonly=True)
        await tx.start()
        try:
            await conn.fetch(sql)
        finally:
            await tx.rollback()
    finally:
        await conn.close()


def _changes(before: dict[str, Any], after: dict[str, Any], burnt: list[int]) -> list[str]:
    found = [f"{k}: {before[k]!r} -> {after[k]!r}" for k in before if before[k] != after[k]]
    return found + ([f"transaction IDs consumed: {burnt}"] if burnt else [])


def _refused(error: dict[str, Any], culprit: str, rule: str) -> None:
    assert error["code"] == "WRITE_OPERATION_DENIED", error
    assert error["context"]["rule"] == rule, error
    assert culprit in error["message"], error
    assert culprit in error["context"]["culprit"], error


@pytest.mark.parametrize("attack", [pytest.param(a, id=a.id) for a in ATTACKS])
async def test_by_default_no_attack_runs(bed: Bed, strict: Client, attack: Attack) -> None:
    """With the default settings each attack is refused, by its own rule or as code of the
    open schema (`open_schema_code`), or names what is not found off that schema; nothing
    changes."""
    before, xid = await bed.state(), await bed.next_xid()
    body = await call_error(strict, "execute_query", sql=attack.sql)
    error = body["error"]
    assert error["code"] == "WRITE_OPERATION_DENIED" or (
        error["code"] in ("INVALID_SQL", "TABLE_NOT_FOUND") and "not exist" in error["message"]
    ), body
    assert _changes(before, await bed.state(), await bed.burnt_xids(xid)) == []


@pytest.mark.parametrize("tool", ["execute_query", "explain_query"])
@pytest.mark.parametrize("attack", [pytest.param(a, id=a.id) for a in ATTACKS])
async def test_planted_object_is_refused_and_changes_nothing(
    bed: Bed, client: Client, attack: Attack, tool: str
) -> None:
    explain = tool == "explain_query"
    if (
        bed.version < attack.since
        or (attack.extension and not bed.extension)
        or (attack.tablefunc and not bed.tablefunc)
    ):
        # What it uses does not exist here: PostgreSQL says so.
        body = await call_error(client, tool, sql=attack.sql)
        assert body["error"]["code"] in ("INVALID_SQL", "TABLE_NOT_FOUND"), body
        return
    # Proved real first, where it can run here (a foreign table needs postgres_fdw).
    runs = (bed.xml or not attack.xml) and (bed.fdw or "remote" not in attack.culprit)
    if (attack.plan_time if explain else attack.real) and runs:
        before, xid = await bed.state(), await bed.next_xid()
        await run_directly(bed.dsn, f"EXPLAIN {attack.sql}" if explain else attack.sql)
        changed = _changes(before, await bed.state(), await bed.burnt_xids(xid))
        assert changed, "the planted attack did nothing: this test would prove nothing"

    before, xid = await bed.state(), await bed.next_xid()
    if attack.off_path and explain and not attack.plan_time:
        await call(client, tool, sql=attack.sql)  # planned, never run: nothing to find
    elif attack.off_path:
        body = await call_error(client, tool, sql=attack.sql)
        assert body["error"]["code"] == "INVALID_SQL", body
        assert "does not exist" in body["error"]["message"], body
    else:
        body = await call_error(client, tool, sql=attack.sql)
        _refused(body["error"], attack.culprit, attack.rule)
    assert _changes(before, await bed.state(), await bed.burnt_xids(xid)) == []


@pytest.mark.parametrize(("name", "table", "culprit", "rule"), SAMPLES, ids=[s[0] for s in SAMPLES])
async def test_sample_of_planted_relation_is_refused_and_changes_nothing(
    bed: Bed, client: Client, name: str, table: str, culprit: str, rule: str
) -> None:
    before, xid = await bed.state(), await bed.next_xid()
    body = await call_error(
        client, "get_sample_rows", schema_name="planter", table_name=table, limit=5
    )
    _refused(body["error"], culprit, rule)
    assert _changes(before, await bed.state(), await bed.burnt_xids(xid)) == []


@pytest.mark.parametrize(("name", "sql", "rows"), SAFE, ids=[s[0] for s in SAFE])
async def test_the_same_kinds_from_safe_parts_are_served(
    client: Client, name: str, sql: str, rows: list[dict[str, Any]] | None
) -> None:
    out = await call(client, "execute_query", sql=sql)
    if rows is not None:
        assert records(out) == rows
    plan = await call(client, "explain_query", sql=sql)
    assert plan["plan"]


async def test_crosstab_of_constant_safe_sql_is_served(bed: Bed, client: Client) -> None:
    sql = (
        "SELECT * FROM crosstab('SELECT ''r''::text, ''c''::text, ''v''::text') "
        "AS ct(r text, c text)"
    )
    if bed.tablefunc:
        assert records(await call(client, "execute_query", sql=sql)) == [{"r": "r", "c": "v"}]
    else:  # PostgreSQL: no such function
        body = await call_error(client, "execute_query", sql=sql)
        assert body["error"]["code"] == "INVALID_SQL", body


async def test_safe_view_is_sampled(client: Client) -> None:
    out = await call(
        client, "get_sample_rows", schema_name="planter", table_name="safe_view", limit=5
    )
    assert [r["id"] for r in records(out)] == [1, 2]


async def test_xml_of_a_safe_view_is_checked_not_refused(bed: Bed, client: Client) -> None:
    result = await client.call_tool(
        "execute_query",
        {"sql": "SELECT table_to_xml('planter.safe_view', true, false, '') AS x"},
    )
    if bed.xml:
        assert not result.is_error, result.content
    else:  # refused by PostgreSQL (no libxml), not by the guard
        body = result.structured_content or {}
        assert body["error"]["code"] == "INVALID_SQL", body


async def test_unqualified_name_refusal_says_how_to_qualify(bed: Bed, client: Client) -> None:
    """A lower(int) an untrusted role owns, in a schema on the path only trusted roles may
    create in, is a candidate for lower('X') too (the guard cannot know the argument's
    type): refused, with the way around it. The planted public.lower(int) is not: public,
    where the planter may create, is left off the statement's path."""
    sql = "SELECT lower('X')"
    assert records(await call(client, "execute_query", sql=sql)) == [{"lower": "x"}]
    path = "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I {}', current_database()); END $$"
    await execute(
        bed.dsn,
        "CREATE SCHEMA hinted; GRANT USAGE ON SCHEMA hinted TO PUBLIC; "
        "CREATE FUNCTION hinted.lower(int) RETURNS text IMMUTABLE LANGUAGE sql "
        "AS 'SELECT $1::text'; "
        f'ALTER FUNCTION hinted.lower(int) OWNER TO "{bed.role}"; '
        + path.format('SET search_path = "$user", public, hinted'),
    )
    try:
        async with connect(bed.dsn) as hinted:  # new sessions: the database's path
            body = await call_error(hinted, "execute_query", sql=sql)
        assert body["error"]["context"]["culprit"].startswith("function hinted.lower("), body
        assert "pg_catalog.lower" in body["error"]["suggestion"]
    finally:
        await execute(bed.dsn, path.format("RESET search_path") + "; DROP SCHEMA hinted CASCADE")


async def test_foreign_tables_are_read_when_allowed(bed: Bed) -> None:
    if not bed.fdw:
        pytest.skip("postgres_fdw is not installed on this PostgreSQL: nothing to read through")
    async with connect(bed.dsn, allow_foreign_tables=True) as allowed:
        out = await call(allowed, "execute_query", sql="SELECT id FROM planter.remote_plain")
        assert sorted(r["id"] for r in records(out)) == [1, 2]


DEEP = [
    ("nested_subqueries", "SELECT " + "(SELECT " * 1000 + "1" + ")" * 1000),
    ("union_arms", " UNION ".join(f"SELECT {n}" for n in range(1000))),
    ("operator_chain", "SELECT " + " + ".join(["1"] * 1000)),
    ("nested_5000", "SELECT " + "(SELECT " * 5000 + "1" + ")" * 5000),
]


@pytest.mark.parametrize("tool", ["execute_query", "explain_query"])
@pytest.mark.parametrize(("name", "sql"), DEEP, ids=[d[0] for d in DEEP])
async def test_deeply_nested_input_is_invalid_sql(
    client: Client, tool: str, name: str, sql: str
) -> None:
    body = await call_error(client, tool, sql=sql)
    assert body["error"]["code"] == "INVALID_SQL", body["error"]
    assert body["error"]["context"]["rule"] in ("too_deep", "syntax"), body["error"]


async def test_deeply_nested_where_clause_is_invalid_sql(client: Client) -> None:
    clause = "id IN " + "(SELECT " * 1000 + "1" + ")" * 1000
    body = await call_error(
        client,
        "get_sample_rows",
        schema_name="planter",
        table_name="safe_things",
        where_clause=clause,
    )
    assert body["error"]["code"] == "INVALID_SQL", body["error"]
