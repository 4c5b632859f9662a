"""Bad input gets a PRD error code with a suggestion; the database is left exactly as it was."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from mcp import Client
from mcpclient import call, call_error, connect, execute, fetch, held_client, module_database
from pgbed import PgServer
from pglast import ast, enums, parse_sql

CANARY = """
CREATE TABLE canary (id serial PRIMARY KEY, secret_note text, body text);
INSERT INTO canary (secret_note, body) SELECT 'n' || g, 'row ' || g FROM generate_series(1, 50) g;
CREATE TABLE orders (id int PRIMARY KEY, status text);
CREATE TABLE order_items (id int PRIMARY KEY);
ANALYZE;
"""

STATE = """
SELECT (SELECT count(*) FROM canary) AS rows,
       (SELECT md5(string_agg(id || secret_note || body, ',' ORDER BY id)) FROM canary) AS digest,
       (SELECT last_value FROM canary_id_seq) AS seq,
       (SELECT count(*) FROM pg_class) AS relations,
       (SELECT count(*) FROM pg_largeobject_metadata) AS large_objects,
       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory') AS advisory_locks,
       (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
           AND state = 'idle in transaction') AS idle_in_tx
"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def canary_dsn(pg: PgServer) -> AsyncIterator[str]:
    """One database for the module: a test that changed it fails (state() before and after)."""
    async with module_database(pg, "canary", CANARY) as dsn:
        yield dsn


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(canary_dsn: str) -> AsyncIterator[Client]:
    """One server for the corpora of refused calls, which must keep it serving."""
    async with held_client(canary_dsn) as client:
        yield client


async def state(dsn: str) -> dict[str, Any]:
    (row,) = await fetch(dsn, STATE)
    return dict(row)


HOSTILE_WHERE = [
    ("1=1; DELETE FROM canary", {"WRITE_OPERATION_DENIED", "INVALID_SQL"}),
    ("1=1) UNION SELECT 1, 'x', 'y' FROM canary --", {"WRITE_OPERATION_DENIED", "INVALID_SQL"}),
    ("true) UNION (SELECT 1, 'x', 'y'", {"WRITE_OPERATION_DENIED"}),
    ("true) ORDER BY (1", {"WRITE_OPERATION_DENIED"}),
    ("true) LIMIT (1", {"WRITE_OPERATION_DENIED"}),
    ("true) GROUP BY (id", {"WRITE_OPERATION_DENIED"}),
    ("true) FOR UPDATE --", {"WRITE_OPERATION_DENIED", "INVALID_SQL"}),
    ("id IN (SELECT id FROM canary FOR UPDATE)", {"WRITE_OPERATION_DENIED"}),
    (
        "EXISTS (WITH d AS (DELETE FROM canary RETURNING 1) SELECT 1 FROM d)",
        {"WRITE_OPERATION_DENIED"},
    ),
    ("nextval('canary_id_seq') > 0", {"WRITE_OPERATION_DENIED"}),
    ("setval('canary_id_seq', 1000) > 0", {"WRITE_OPERATION_DENIED"}),
    ("set_config('statement_timeout', '1', false) IS NOT NULL", {"WRITE_OPERATION_DENIED"}),
    ("pg_advisory_lock(42) IS NOT NULL", {"WRITE_OPERATION_DENIED"}),
    ("lo_import('/etc/passwd') > 0", {"WRITE_OPERATION_DENIED"}),
    ("length(pg_read_file('/etc/passwd')) > 0", {"WRITE_OPERATION_DENIED"}),
    ("(SELECT count(*) FROM pg_ls_dir('.')) > 0", {"WRITE_OPERATION_DENIED"}),
    ("pg_notify('x', 'y') IS NULL", {"WRITE_OPERATION_DENIED"}),
    ("pg_terminate_backend(pg_backend_pid())", {"WRITE_OPERATION_DENIED"}),
    ("query_to_xml('delete from canary', true, true, '') IS NOT NULL", {"WRITE_OPERATION_DENIED"}),
    ("true /* DROP TABLE canary */", {"WRITE_OPERATION_DENIED"}),
    ("true -- ; DELETE FROM canary", {"WRITE_OPERATION_DENIED"}),
    ("no_such_column = 1", {"COLUMN_NOT_FOUND"}),
    ("id = ", {"INVALID_SQL"}),
    ("", {"INVALID_SQL"}),
    ("'unterminated", {"INVALID_SQL"}),
]


@pytest.mark.parametrize(("clause", "codes"), HOSTILE_WHERE)
async def test_hostile_where_clause_is_refused_and_nothing_changes(
    canary_dsn: str, served: Client, clause: str, codes: set[str]
) -> None:
    before = await state(canary_dsn)
    if clause == "":
        # An empty clause means "no filter"; whitespace with a comment must still parse.
        body = await call_error(
            served, "get_sample_rows", table_name="canary", where_clause="/* */ ;"
        )
    else:
        body = await call_error(served, "get_sample_rows", table_name="canary", where_clause=clause)
    assert body["error"]["code"] in codes, body
    # The server keeps serving after the refusal.
    assert (await call(served, "get_sample_rows", table_name="canary", limit=1))["rows"]
    assert await state(canary_dsn) == before


async def test_legitimate_where_clauses_work(canary_dsn: str) -> None:
    async with connect(canary_dsn) as client:
        for clause, expected in [
            ("id <= 3", 3),
            ("body LIKE 'row 1%' AND id > 10", 9),
            ("body = 'DELETE FROM canary; DROP TABLE canary'", 0),  # keywords in a string
            ("id IN (SELECT id FROM canary WHERE id % 10 = 0)", 5),
            ("lower(body) ~ '^row [0-9]$'", 9),
            ("id = 1 -- a plain comment", 1),
        ]:
            out = await call(
                client, "get_sample_rows", table_name="canary", where_clause=clause, limit=100
            )
            assert out["row_count"] == expected, clause
            assert "filtered by where_clause" in out["note"]


async def test_unknown_names_suggest_the_closest(canary_dsn: str) -> None:
    async with connect(canary_dsn) as client:
        body = await call_error(client, "describe_table", table_name="order")
        assert body["error"]["code"] == "TABLE_NOT_FOUND"
        assert body["error"]["suggestion"].startswith("Did you mean 'orders'")
        assert body["error"]["context"]["similar_tables"][0] == "orders"
        assert body["input_received"] == {"table_name": "order"}

        body = await call_error(client, "list_tables", schema_name="pubic")
        assert body["error"]["code"] == "SCHEMA_NOT_FOUND"
        assert "Did you mean 'public'" in body["error"]["suggestion"]

        body = await call_error(client, "describe_table", table_name="canary", schema_name="x")
        assert body["error"]["code"] == "SCHEMA_NOT_FOUND"

        body = await call_error(
            client, "get_sample_rows", table_name="canary", columns=["id", "bdy"]
        )
        assert body["error"]["code"] == "COLUMN_NOT_FOUND"
        assert "Did you mean 'body'" in body["error"]["suggestion"]


@pytest.mark.parametrize(
    ("tool", "arguments", "parameter"),
    [
        ("get_sample_rows", {"table_name": "canary", "limit": 0}, "limit"),
        ("get_sample_rows", {"table_name": "canary", "limit": 1000}, "limit"),
        ("get_sample_rows", {"table_name": "canary", "limit": "many"}, "limit"),
        ("get_sample_rows", {"table_name": "canary", "columns": "id"}, "columns"),
        ("get_sample_rows", {"limit": 3}, "table_name"),
        ("describe_table", {"table_name": ["canary"]}, "table_name"),
        ("list_schemas", {"include_system": "perhaps"}, "include_system"),
        ("list_tables", {"include_views": {"a": 1}}, "include_views"),
    ],
)
async def test_wrong_parameters_are_parameter_errors(
    served: Client, tool: str, arguments: dict[str, Any], parameter: str
) -> None:
    body = await call_error(served, tool, **arguments)
    assert body["error"]["code"] == "PARAMETER_ERROR"
    assert body["error"]["context"]["errors"][0]["parameter"] == parameter
    assert parameter in body["error"]["message"]


async def test_unreachable_database_is_a_connection_error_and_the_server_lives(
    tmp_path: Any,
) -> None:
    dsn = f"postgresql://nobody:pw-not-shown@/nowhere?host={tmp_path}&port=5999"
    async with connect(dsn) as client:
        for _ in range(2):
            body = await call_error(client, "list_schemas")
            assert body["error"]["code"] == "CONNECTION_ERROR"
            text = str(body)
            assert "pw-not-shown" not in text and str(tmp_path) not in text


async def test_lost_connections_are_replaced(canary_dsn: str) -> None:
    async with connect(canary_dsn) as client:
        assert (await call(client, "list_schemas"))["total_count"] >= 1
        admin = await asyncpg.connect(canary_dsn)
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'pg-mcp-server'"
            )
        finally:
            await admin.close()
        assert killed >= 1
        # The dead connection is noticed (at checkout, or when the call fails on it and runs
        # again once) and replaced by a new one.
        assert (await call(client, "list_schemas"))["total_count"] >= 1


async def test_a_bad_value_in_the_query_is_not_called_a_parameter_error(demo_dsn: str) -> None:
    """PostgreSQL's class 22 (here a cast of a word to integer, and a division by zero) is
    about the statement; a value the driver cannot encode is about `params`."""
    async with connect(demo_dsn) as client:
        for sql in ("SELECT 'forty'::int", "SELECT 1 / 0"):
            body = await call_error(client, "execute_query", sql=sql)
            assert body["error"]["code"] == "INVALID_SQL", body
            assert "parameter" not in body["error"]["message"].lower()
            assert body["error"]["context"]["sqlstate"].startswith("22")
        body = await call_error(client, "execute_query", sql="SELECT $1::int", params=[2**40])
        assert body["error"]["code"] == "PARAMETER_ERROR"


async def test_a_column_the_driver_cannot_read_is_named_not_a_lost_connection(
    demo_dsn: str,
) -> None:
    """pg_stats' anyarray columns cannot be described by the driver: the answer says so and
    how to read them, instead of CONNECTION_ERROR."""
    async with connect(demo_dsn, redact_sensitive_columns=False) as client:
        sql = "SELECT histogram_bounds FROM pg_stats LIMIT 1"
        body = await call_error(client, "execute_query", sql=sql)
        assert body["error"]["code"] == "INVALID_SQL", body
        assert "::text" in body["error"]["suggestion"]
        out = await call(
            client, "execute_query", sql="SELECT histogram_bounds::text FROM pg_stats LIMIT 1"
        )
        assert out["row_count"] == 1


async def test_an_unpopulated_materialized_view_says_so_not_invalid_sql(
    served: Client, canary_dsn: str
) -> None:
    await execute(
        canary_dsn,
        "CREATE MATERIALIZED VIEW IF NOT EXISTS canary_later AS SELECT id FROM canary WITH NO DATA",
    )
    body = await call_error(served, "execute_query", sql="SELECT * FROM canary_later")
    error = body["error"]
    assert error["code"] == "NOT_POPULATED", error
    assert '"canary_later"' in error["message"]
    assert "describe_table" in error["suggestion"] and "REFRESH" in error["suggestion"]
    # what is there to use instead: its definition
    described = await call(served, "describe_table", table_name="canary_later")
    assert "canary" in json.dumps(described)


def test_a_where_clause_comes_back_as_the_one_expression_it_parses_to() -> None:
    """`a) OR (b` passes as one expression, `a OR b`; spliced before `AND <ours>` as written it
    would bind as `a OR (b AND <ours>)` (attack4): it comes back written from its parse tree."""
    from pg_mcp_server.database.guard.gate import check_where_clause

    clause = check_where_clause("id = 1) OR (id = 2", "canary")
    assert clause == "(id = 1 OR id = 2)"
    combined = parse_sql(f"SELECT 1 FROM canary WHERE {clause} AND id > 0")[0].stmt
    assert isinstance(combined, ast.SelectStmt) and isinstance(combined.whereClause, ast.BoolExpr)
    assert combined.whereClause.boolop == enums.BoolExprType.AND_EXPR
