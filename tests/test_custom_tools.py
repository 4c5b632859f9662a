"""Custom tools (sql, pl-do, pl-func) through an MCP client session against real PostgreSQL:
arguments bound and checked first, output schemas from the described columns, read-only
unless the file and the operator both allow writes, timeouts that only lower the server's."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from customdefs import serve
from mcp import Client
from mcpclient import call, call_error, execute, fetch, records

from pg_mcp_server.config import Settings
from pg_mcp_server.server import build_server

ORDERS = """
tools:
  - name: orders_by_status
    title: Orders by status
    description: Orders in one status above a total, newest first.
    type: sql
    input_schema:
      type: object
      properties:
        min_total:
          type: number
          description: Smallest total_amount
        status:
          type: string
          enum: [pending, paid, shipped, delivered, cancelled, refunded]
        limit:
          type: integer
          default: 3
      required: [status]
    sql: |
      SELECT id, status, total_amount, placed_at, user_id = 1 AS first_user
      FROM orders
      WHERE total_amount >= COALESCE($1, 0) AND status = $2::order_status
      ORDER BY placed_at DESC, id
      LIMIT $3
"""


async def tools_by_name(client: Any) -> dict[str, Any]:
    return {t.name: t for t in (await client.list_tools()).tools}


async def test_sql_tool_binds_properties_in_order(demo_dsn: str, tmp_path: Path) -> None:
    async with serve(demo_dsn, tmp_path, ORDERS) as client:
        tool = (await tools_by_name(client))["orders_by_status"]
        assert tool.title == "Orders by status"
        assert tool.input_schema["required"] == ["status"]
        assert list(tool.input_schema["properties"]) == ["min_total", "status", "limit"]
        assert tool.annotations and tool.annotations.read_only_hint
        assert not tool.annotations.destructive_hint
        # The output schema comes from the statement PostgreSQL described at start; the client
        # checks every result against it.
        assert tool.output_schema is not None
        # Rows are arrays in the order of `columns`, as execute_query's are.
        rows_schema = tool.output_schema["properties"]["rows"]["items"]
        assert rows_schema["type"] == "array"
        assert rows_schema["minItems"] == rows_schema["maxItems"] == 5
        cells = rows_schema["prefixItems"]
        assert cells[0] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}  # id
        assert cells[4]["anyOf"][0] == {"type": "boolean"}  # first_user

        got = await call(client, "orders_by_status", status="paid", min_total=50)
        expected = await fetch(
            demo_dsn,
            "SELECT id FROM orders WHERE total_amount >= 50 AND status = 'paid' "
            "ORDER BY placed_at DESC, id LIMIT 3",
        )
        assert [r["id"] for r in records(got)] == [r["id"] for r in expected]
        assert all(isinstance(row, list) and len(row) == 5 for row in got["rows"])
        assert got["row_count"] == len(expected) and got["has_more"] is False
        assert [c["data_type"] for c in got["columns"]] == [
            "bigint",
            "public.order_status",
            "numeric",
            "timestamptz",
            "boolean",
        ]
        assert all(r["status"] == "paid" and r["total_amount"] >= 50 for r in records(got))
        # min_total left out is bound as NULL; limit falls back to the schema's default.
        everything = await call(client, "orders_by_status", status="paid", limit=100)
        (count,) = await fetch(demo_dsn, "SELECT count(*) FROM orders WHERE status = 'paid'")
        assert everything["row_count"] == min(100, count[0])


async def test_arguments_are_checked_before_any_sql_runs(demo_dsn: str, tmp_path: Path) -> None:
    # Were the SQL run, every call would fail on the missing setting instead.
    text = ORDERS.replace("SELECT id,", "SELECT current_setting('mcp.nothing') AS boom, id,")
    async with serve(demo_dsn, tmp_path, text) as client:
        cases: list[tuple[dict[str, Any], str, str]] = [
            ({"status": 7}, "status", "7 is not of type 'string'"),
            ({}, "(arguments)", "'status' is a required property"),
            ({"status": "lost"}, "status", "'lost' is not one of"),
            ({"status": "paid", "min_total": "a lot"}, "min_total", "is not of type 'number'"),
            ({"status": "paid", "limit": 2.5}, "limit", "is not of type 'integer'"),
            ({"status": "paid", "sort": "id"}, "sort", "is not an argument of orders_by_status"),
        ]
        for arguments, parameter, problem in cases:
            body = await call_error(client, "orders_by_status", **arguments)
            assert body["error"]["code"] == "PARAMETER_ERROR", arguments
            first = body["error"]["context"]["errors"][0]
            assert first["parameter"] == parameter and problem in first["problem"], first
        body = await call_error(client, "orders_by_status", status="paid")
        assert body["error"]["code"] == "INVALID_SQL" and "mcp.nothing" in body["error"]["message"]


async def test_sql_looking_arguments_are_values(demo_dsn: str, tmp_path: Path) -> None:
    text = """
    tools:
      - name: user_by_email
        type: sql
        input_schema:
          type: object
          properties:
            email: {type: string}
          required: [email]
        sql: SELECT id, email FROM users WHERE email = $1
    """
    (before,) = await fetch(demo_dsn, "SELECT count(*) FROM users")
    async with serve(demo_dsn, tmp_path, text) as client:
        for email in (
            "x' OR '1'='1",
            "'; DROP TABLE users; --",
            "$1",
            "anything'); DELETE FROM users; SELECT ('",
        ):
            got = await call(client, "user_by_email", email=email)
            assert records(got) == [], email
        (someone,) = await fetch(demo_dsn, "SELECT email FROM users ORDER BY id LIMIT 1")
        found = await call(client, "user_by_email", email=someone["email"])
        assert [r["email"] for r in records(found)] == [someone["email"]]
    assert (await fetch(demo_dsn, "SELECT count(*) FROM users"))[0] == before


WRITER = """
tools:
  - name: add_note
    type: sql
    {allow}
    input_schema:
      type: object
      properties:
        body: {{type: string}}
      required: [body]
    sql: INSERT INTO notes (body) VALUES ($1) RETURNING id, body
  - name: add_note_by_function
    type: sql
    input_schema:
      type: object
      properties:
        body: {{type: string}}
    sql: SELECT add_note($1) AS id
"""
NOTES = """
CREATE TABLE notes (id serial PRIMARY KEY, body text NOT NULL);
CREATE FUNCTION add_note(text) RETURNS int LANGUAGE sql
    AS 'INSERT INTO notes (body) VALUES ($1) RETURNING id';
"""


async def test_a_tool_that_writes_is_not_offered_or_fails_read_only(
    scratch_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await execute(scratch_dsn, NOTES)
    caplog.set_level(logging.WARNING, logger="pg_mcp_server.custom.build")
    async with serve(scratch_dsn, tmp_path, WRITER.format(allow="")) as client:
        # Its statement writes and it may not: offered, it could only fail.
        assert "add_note" not in await tools_by_name(client)
        # A write PostgreSQL finds only when it runs is refused by the read-only transaction.
        body = await call_error(client, "add_note_by_function", body="hello")
        assert body["error"]["code"] == "WRITE_OPERATION_DENIED", body
        assert "read-only transaction" in body["error"]["message"]
        assert "allow_writes: true" in body["error"]["suggestion"]
    assert await fetch(scratch_dsn, "SELECT * FROM notes") == []
    (logged,) = [r.getMessage() for r in caplog.records if "add_note" in r.getMessage()]
    assert "tool 0 (add_note)" in logged and "sql writes (INSERT)" in logged


async def test_writes_need_the_file_and_the_operator(
    scratch_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await execute(scratch_dsn, NOTES)
    text = WRITER.format(allow="allow_writes: true")
    caplog.set_level(logging.WARNING, logger="pg_mcp_server.custom.build")
    async with serve(scratch_dsn, tmp_path, text) as client:
        # Not offered where it cannot write (nor callable: it is not a tool here).
        assert "add_note" not in await tools_by_name(client)
        assert (await client.call_tool("add_note", {"body": "hello"})).is_error
    assert await fetch(scratch_dsn, "SELECT * FROM notes") == []
    assert any(
        "add_note" in r.getMessage() and "MCP_ALLOW_WRITE_TOOLS is not true" in r.getMessage()
        for r in caplog.records
    )

    async with serve(scratch_dsn, tmp_path, text, allow_write_tools=True) as client:
        tools = await tools_by_name(client)
        annotations = tools["add_note"].annotations
        assert annotations and annotations.read_only_hint is False
        assert annotations.destructive_hint is True and annotations.idempotent_hint is False
        # Only the tool the file marks may write, whatever the operator allows.
        assert tools["add_note_by_function"].annotations.read_only_hint
        got = await call(client, "add_note", body="hello")
        assert got["status"] == "INSERT 0 1" and records(got)[0]["body"] == "hello"
        body = await call_error(client, "add_note_by_function", body="again")
        assert body["error"]["code"] == "WRITE_OPERATION_DENIED"
    assert [r["body"] for r in await fetch(scratch_dsn, "SELECT body FROM notes")] == ["hello"]


async def test_a_tool_timeout_only_lowers_the_servers(demo_dsn: str, tmp_path: Path) -> None:
    text = """
    tools:
      - name: quick
        type: sql
        timeout: 300ms
        sql: SELECT pg_sleep(5)
      - name: patient
        type: sql
        timeout: 1h
        sql: SELECT pg_sleep(5)
    """
    async with serve(demo_dsn, tmp_path, text) as client:
        body = await call_error(client, "quick")
        assert body["error"]["code"] == "QUERY_TIMEOUT"
        assert body["error"]["context"] == {"timeout_ms": 300}
    # The server's own limit (PG_STATEMENT_TIMEOUT) wins over the tool's hour.
    settings = Settings.load(
        database={"dsn": demo_dsn, "statement_timeout": 1000},
        server={"custom_definitions": str(tmp_path / "defs.yaml")},
    )
    async with Client(build_server(settings)) as client:
        body = await call_error(client, "patient")
        assert body["error"]["code"] == "QUERY_TIMEOUT"
        assert body["error"]["context"] == {"timeout_ms": 1000}


BLOAT = """
tools:
  - name: analyze_table_bloat
    description: Analyze table bloat and dead tuples
    type: pl-do
    language: plpgsql
    input_schema:
      type: object
      properties:
        schema_name:
          type: string
          description: Schema to analyze
      required: []
    code: |
      DECLARE
          rec RECORD;
          schema_filter text;
      BEGIN
          result := '[]'::jsonb;
          schema_filter := args->>'schema_name';

          FOR rec IN
              SELECT s.schemaname, s.relname,
                     s.n_dead_tup, s.n_live_tup
              FROM pg_stat_user_tables s
              WHERE schema_filter IS NULL
                 OR s.schemaname = schema_filter
              ORDER BY s.relname
              LIMIT 20
          LOOP
              result := result || jsonb_build_object(
                  'schema', rec.schemaname,
                  'table', rec.relname
              );
          END LOOP;

          PERFORM set_config(
              'mcp.tool_result', result::text, true
          );
      END;
  - name: echo
    type: pl-do
    language: plpgsql
    input_schema:
      type: object
      properties:
        words: {type: array, items: {type: string}}
        n: {type: integer}
    code: |
      BEGIN
        result := jsonb_build_object('args', args, 'twice', (args->>'n')::int * 2);
      END;
  - name: nothing
    type: pl-do
    language: plpgsql
    code: BEGIN PERFORM 1; END;
"""


async def test_pl_do_gets_args_and_returns_its_result(demo_dsn: str, tmp_path: Path) -> None:
    async with serve(demo_dsn, tmp_path, BLOAT) as client:
        got = await call(client, "analyze_table_bloat", schema_name="public")
        tables = await fetch(
            demo_dsn,
            "SELECT relname FROM pg_stat_user_tables WHERE schemaname = 'public' "
            "ORDER BY relname LIMIT 20",
        )
        assert [t["table"] for t in got["result"]] == [r["relname"] for r in tables]
        assert {t["schema"] for t in got["result"]} == {"public"}
        assert (await call(client, "analyze_table_bloat", schema_name="nope"))["result"] == []
        # `result` set without set_config is returned too; arguments arrive as sent.
        words = ["it's", '"quoted"', "$$ DROP TABLE users $$", "\\"]
        echoed = await call(client, "echo", words=words, n=21)
        assert echoed["result"] == {"args": {"words": words, "n": 21}, "twice": 42}
        assert await call(client, "nothing") == {"result": None}


async def test_pl_do_cannot_commit_or_write(scratch_dsn: str, tmp_path: Path) -> None:
    await execute(scratch_dsn, NOTES)
    text = """
    tools:
      - name: commit
        type: pl-do
        language: plpgsql
        code: BEGIN INSERT INTO notes (body) VALUES ('x'); COMMIT; END;
      - name: write
        type: pl-do
        language: plpgsql
        code: BEGIN INSERT INTO notes (body) VALUES ('x'); END;
      - name: escape
        type: pl-do
        language: plpgsql
        code: |
          BEGIN
            SET TRANSACTION READ WRITE;
            INSERT INTO notes (body) VALUES ('x');
          END;
      - name: dynamic
        type: pl-do
        language: plpgsql
        code: BEGIN EXECUTE 'DROP TABLE notes'; END;
    """
    async with serve(scratch_dsn, tmp_path, text) as client:
        errors = {
            name: (await call_error(client, name))["error"]
            for name in ("commit", "write", "escape", "dynamic")
        }
    assert errors["write"]["code"] == "WRITE_OPERATION_DENIED"
    assert errors["dynamic"]["code"] == "WRITE_OPERATION_DENIED"
    # The INSERT comes first and is refused before the COMMIT is reached.
    assert errors["commit"]["code"] == "WRITE_OPERATION_DENIED"
    assert errors["escape"]["code"] == "INVALID_SQL"
    assert "read-write" in errors["escape"]["message"]
    assert await fetch(scratch_dsn, "SELECT * FROM notes") == []


async def test_pl_do_commit_alone_is_refused(scratch_dsn: str, tmp_path: Path) -> None:
    await execute(scratch_dsn, NOTES)
    text = """
    tools:
      - name: commit
        type: pl-do
        language: plpgsql
        allow_writes: true
        code: BEGIN INSERT INTO notes (body) VALUES ('x'); COMMIT; END;
    """
    async with serve(scratch_dsn, tmp_path, text, allow_write_tools=True) as client:
        body = await call_error(client, "commit")
    assert body["error"]["code"] == "INVALID_SQL"
    assert "end the transaction" in body["error"]["message"]
    assert await fetch(scratch_dsn, "SELECT * FROM notes") == []


COUNTS = """
tools:
  - name: get_table_row_counts
    description: Get row counts for tables in a schema
    type: pl-func
    language: plpgsql
    returns: "TABLE(schema_name text, table_name text, row_count bigint)"
    input_schema:
      type: object
      properties:
        schema_pattern:
          type: string
          description: Schema name pattern (LIKE wildcards)
      required: []
    code: |
      DECLARE
          tbl RECORD;
          cnt bigint;
          pattern text;
      BEGIN
          pattern := COALESCE(
              args->>'schema_pattern', 'public'
          );

          FOR tbl IN
              SELECT t.schemaname, t.tablename
              FROM pg_tables t
              WHERE t.schemaname LIKE pattern
              ORDER BY t.schemaname, t.tablename
          LOOP
              EXECUTE format(
                  'SELECT count(*) FROM %I.%I',
                  tbl.schemaname, tbl.tablename
              ) INTO cnt;
              schema_name := tbl.schemaname;
              table_name := tbl.tablename;
              row_count := cnt;
              RETURN NEXT;
          END LOOP;
      END;
  - name: summary
    type: pl-func
    language: plpgsql
    returns: jsonb
    input_schema:
      type: object
      properties:
        status: {type: string}
    code: |
      BEGIN
        RETURN jsonb_build_object('status', args->>'status', 'orders',
          (SELECT count(*) FROM orders WHERE status::text = args->>'status'));
      END;
  - name: double
    type: pl-func
    language: plpgsql
    returns: int
    input_schema:
      type: object
      properties:
        n: {type: integer}
    code: BEGIN RETURN (args->>'n')::int * 2; END;
"""


async def test_pl_func_returns_rows_or_a_value(demo_dsn: str, tmp_path: Path) -> None:
    async with serve(demo_dsn, tmp_path, COUNTS) as client:
        tools = await tools_by_name(client)
        row = tools["get_table_row_counts"].output_schema["properties"]["rows"]["items"]
        assert row["type"] == "array" and len(row["prefixItems"]) == 3
        assert tools["double"].output_schema["properties"]["result"] == {
            "anyOf": [{"type": "integer"}, {"type": "null"}]
        }
        got = await call(client, "get_table_row_counts", schema_pattern="public")
        for r in records(got):
            (n,) = await fetch(demo_dsn, f'SELECT count(*) FROM public."{r["table_name"]}"')
            assert r["row_count"] == n[0]
        assert {r["table_name"] for r in records(got)} >= {"users", "orders", "payments"}
        summary = await call(client, "summary", status="paid")
        (paid,) = await fetch(demo_dsn, "SELECT count(*) FROM orders WHERE status = 'paid'")
        assert summary == {"result": {"status": "paid", "orders": paid[0]}}
        assert await call(client, "double", n=21) == {"result": 42}
    # The temporary function went with its transaction, every time.
    assert await fetch(demo_dsn, "SELECT oid FROM pg_proc WHERE proname = 'mcp_tool'") == []


async def test_pl_func_cannot_write(scratch_dsn: str, tmp_path: Path) -> None:
    await execute(scratch_dsn, NOTES)
    text = """
    tools:
      - name: writer
        type: pl-func
        language: plpgsql
        returns: int
        code: |
          BEGIN
            INSERT INTO notes (body) VALUES ('x');
            RETURN 1;
          END;
      - name: escape
        type: pl-func
        language: plpgsql
        returns: int
        code: |
          BEGIN
            SET TRANSACTION READ WRITE;
            INSERT INTO notes (body) VALUES ('x');
            RETURN 1;
          END;
    """
    async with serve(scratch_dsn, tmp_path, text) as client:
        assert (await call_error(client, "writer"))["error"]["code"] == "WRITE_OPERATION_DENIED"
        assert (await call_error(client, "escape"))["error"]["code"] == "INVALID_SQL"
    async with serve(
        scratch_dsn,
        tmp_path,
        text.replace("returns: int", "returns: int\n        allow_writes: true", 1),
        allow_write_tools=True,
    ) as client:
        for _ in range(3):  # committed calls, on pooled connections that stay open
            assert await call(client, "writer") == {"result": 1}
        # The function is dropped before the commit: none is left in those sessions.
        assert await fetch(scratch_dsn, "SELECT oid FROM pg_proc WHERE proname = 'mcp_tool'") == []
    assert len(await fetch(scratch_dsn, "SELECT * FROM notes")) == 3


async def test_rows_are_bounded(demo_dsn: str, tmp_path: Path) -> None:
    text = """
    tools:
      - name: series
        type: sql
        sql: SELECT g AS n, repeat('x', 100) AS pad FROM generate_series(1, 50) g
    """
    async with serve(demo_dsn, tmp_path, text, max_rows=10) as client:
        got = await call(client, "series")
        assert [r["n"] for r in records(got)] == list(range(1, 11))
        assert got["has_more"] is True and "MCP_MAX_ROWS" in got["note"]
    async with serve(demo_dsn, tmp_path, text, max_result_bytes=1024) as client:
        got = await call(client, "series")
        assert 1 <= got["row_count"] < 10 and got["has_more"] is True
        assert "MCP_MAX_RESULT_BYTES" in got["note"]


async def test_a_custom_select_answers_as_execute_query_does(demo_dsn: str, tmp_path: Path) -> None:
    """One output dict and one budget (database/rows/output.py) for both ways rows are read:
    the same SELECT as a custom tool and through execute_query gives the same columns, rows
    and cut, for types whose values both make alike (rows/values.py says which)."""
    sql = (
        "SELECT g AS n, 1::numeric / 3 AS third, round(g::numeric / 3, 4) AS approx, "
        "g::numeric / 4 AS quarter, 'x' || g AS label, "
        "g % 2 = 0 AS even, ARRAY[g, NULL] AS pair, DATE '2024-01-01' + g AS day "
        "FROM generate_series(1, 30) g ORDER BY g"
    )
    text = f"tools:\n  - name: same\n    type: sql\n    sql: |\n      {sql}\n"
    async with serve(demo_dsn, tmp_path, text, max_rows=10) as client:
        custom = await call(client, "same")
        ours = await call(client, "execute_query", sql=sql)
    assert custom["row_count"] == 10 and custom["has_more"] is True
    assert custom["rows"][0] == [
        1,
        "0.33333333333333333333",
        0.3333,
        0.25,
        "x1",
        False,
        [1, None],
        "2024-01-02",
    ]
    for key in ("columns", "rows", "row_count", "has_more"):
        assert custom[key] == ours[key], key


async def test_a_changed_table_is_reported_not_sent(scratch_dsn: str, tmp_path: Path) -> None:
    await execute(scratch_dsn, NOTES + "INSERT INTO notes (body) VALUES ('a');")
    text = """
    tools:
      - name: notes
        type: sql
        sql: SELECT * FROM notes
    """
    async with serve(scratch_dsn, tmp_path, text) as client:
        assert records(await call(client, "notes")) == [{"id": 1, "body": "a"}]
        await execute(scratch_dsn, "ALTER TABLE notes ADD COLUMN extra int DEFAULT 7")
        body = await call_error(client, "notes")
        assert body["error"]["code"] == "INVALID_SQL"
        assert "changed since the definitions were loaded" in body["error"]["message"]
        assert "reloads the definitions" in body["error"]["suggestion"]


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        ("BEGIN RAISE EXCEPTION 'no such customer: %', args->>'id'; END;", "no such customer: 7"),
        ("BEGIN PERFORM 1 / 0; END;", "division by zero"),
    ],
)
async def test_errors_in_code_come_back_structured(
    demo_dsn: str, tmp_path: Path, code: str, problem: str
) -> None:
    text = f"""
    tools:
      - name: failing
        type: pl-do
        language: plpgsql
        input_schema:
          type: object
          properties:
            id: {{type: integer}}
        code: "{code}"
    """
    async with serve(demo_dsn, tmp_path, text) as client:
        body = await call_error(client, "failing", id=7)
    assert problem in body["error"]["message"]


async def test_columns_the_driver_gives_as_numbers_or_lists_fit_the_schema(
    demo_dsn: str, tmp_path: Path
) -> None:
    """The client checks every result against the output schema made from the described
    columns: a transaction id or an LSN comes as a number, a geometric value or a multirange
    as a list, bits as their digits; each is declared so (they were all "string")."""
    text = """
    tools:
      - name: odd_types
        type: sql
        sql: |
          SELECT '7'::xid8 AS x8, '0/10'::pg_lsn AS lsn, '(1,2)'::point AS pt,
                 '((0,0),(1,1))'::box AS bx, '[(0,0),(1,1)]'::path AS open_path,
                 '((0,0),(1,0),(0,1))'::polygon AS tri, B'101' AS bits,
                 '{[1,2],[5,6]}'::int4multirange AS spans, NULL::point AS nothing
    """
    async with serve(demo_dsn, tmp_path, text) as client:
        schema = (await tools_by_name(client))["odd_types"].output_schema
        assert schema is not None
        cells = schema["properties"]["rows"]["items"]["prefixItems"]
        assert cells[0]["anyOf"][0] == {"type": "integer"}
        assert cells[2]["anyOf"][0] == {"type": "array"}
        (row,) = records(await call(client, "odd_types"))
        assert row["x8"] == 7 and row["lsn"] == 16
        assert row["pt"] == [1.0, 2.0] and row["bx"] == [[1.0, 1.0], [0.0, 0.0]]
        assert row["open_path"] == [[0.0, 0.0], [1.0, 1.0]]
        assert row["tri"] == [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
        assert row["bits"] == "101"
        assert row["spans"] == ["[1,3)", "[5,7)"] and row["nothing"] is None
