"""Secrets never reach a client: redaction follows a value to its source column (through
aliases, expressions, subqueries, CTEs, views and whole-row references), a use that would
tell a sensitive value is refused, errors do not echo one, and credential settings and
catalog columns are masked in every tool and resource (database/rows/redaction.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from eventually import eventually
from mcp import Client
from mcpclient import (
    call,
    call_error,
    connect,
    execute,
    fetch,
    held_client,
    module_database,
    records,
)
from pgbed import PgServer

SETUP = r"""
CREATE TABLE users (id int PRIMARY KEY, name text, password_hash text, note text);
INSERT INTO users VALUES (1, 'ann', 'hunter2', 'n1'), (2, 'bob', NULL, 'n2');
CREATE TABLE orders (id int PRIMARY KEY, user_id int, total int);
INSERT INTO orders VALUES (10, 1, 5), (11, 2, 7);
-- A view that renames the sensitive column, one that computes on it, one that does not
-- read it: only the first two carry it.
CREATE VIEW logins AS SELECT id, password_hash AS h FROM users;
CREATE VIEW hashed AS SELECT id, password_hash::int AS n FROM users;
CREATE VIEW names AS SELECT id, name FROM users;
CREATE TABLE creds (id int, secret_key text);
INSERT INTO creds SELECT g, 'hunter2' FROM generate_series(1, 50) g;
ANALYZE creds;
CREATE TABLE sessions (token text PRIMARY KEY, user_id int);
INSERT INTO sessions VALUES ('tok-a', 1);
CREATE FUNCTION all_users() RETURNS SETOF users STABLE LANGUAGE sql
    AS 'SELECT * FROM users';
CREATE FOREIGN DATA WRAPPER dummy;
CREATE SERVER remote FOREIGN DATA WRAPPER dummy OPTIONS (host 'db.example', password 'srvpw42');
CREATE USER MAPPING FOR current_user SERVER remote OPTIONS (user 'u', password 'fdwpw42');
"""
SECRETS = ("hunter2", "srvpw42", "fdwpw42")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def rdsn(pg: PgServer) -> AsyncIterator[str]:
    """One database for the module: no test writes to it (the settings test changes a
    server-wide setting and resets it)."""
    async with module_database(pg, "redaction", SETUP) as dsn:
        yield dsn


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def served(rdsn: str) -> AsyncIterator[Client]:
    """One server for the module's corpora of queries, one call per case, as an agent's
    session makes them: building a server and its first call cost ~0.5 s per test."""
    async with held_client(rdsn) as client:
        yield client


def _clean(out: Any) -> None:
    text = json.dumps(out)
    for secret in SECRETS:
        assert secret not in text, f"{secret} reached the client: {text}"


REDACTED_QUERIES = [
    ("alias", "SELECT id, password_hash AS s FROM users ORDER BY id", ["s"]),
    ("qualified", "SELECT u.id, u.password_hash AS x FROM users u ORDER BY u.id", ["x"]),
    ("subquery", "SELECT s.p FROM (SELECT password_hash AS p FROM users) s", ["p"]),
    ("cte", "WITH c(v) AS (SELECT password_hash FROM users) SELECT v AS out FROM c", ["out"]),
    ("whole_row", "SELECT u FROM users u ORDER BY id", ["u"]),
    ("row_to_json", "SELECT row_to_json(u) AS j FROM users u ORDER BY id", ["j"]),
    ("to_jsonb_star", "SELECT to_jsonb(u.*) AS j FROM users u ORDER BY id", ["j"]),
    ("row_constructor", "SELECT ROW(u.*) AS r FROM users u ORDER BY id", ["r"]),
    ("json_object", "SELECT json_build_object('k', password_hash) AS j FROM users", ["j"]),
    ("scalar_subquery", "SELECT (SELECT password_hash FROM users WHERE id = 1) AS q", ["q"]),
    ("row_field", "SELECT (u).password_hash AS p FROM users u", ["p"]),
    ("case_branch", "SELECT CASE WHEN id = 1 THEN password_hash END AS c FROM users", ["c"]),
    ("coalesce", "SELECT coalesce(password_hash, 'none') AS c FROM users", ["c"]),
    ("union_all", "SELECT name FROM users UNION ALL SELECT password_hash FROM users", ["name"]),
    ("function_row", "SELECT row_to_json(f) AS j FROM all_users() f", ["j"]),
    ("function_star", "SELECT * FROM all_users() ORDER BY id", ["password_hash"]),
    (
        "function_subquery",
        "SELECT to_json(t) AS j FROM (SELECT * FROM all_users()) t",
        ["j"],
    ),
    ("view_rename", "SELECT h FROM logins ORDER BY id", ["h"]),
    ("view_star", "SELECT * FROM logins ORDER BY id", ["h"]),
    (
        "user_mapping",
        "SELECT umoptions FROM pg_user_mappings WHERE srvname = 'remote'",
        ["umoptions"],
    ),
    ("user_mapping_catalog", "SELECT m.umoptions AS o FROM pg_user_mapping m", ["o"]),
    ("server_options", "SELECT srvoptions FROM pg_foreign_server", ["srvoptions"]),
    (
        "statistics",
        "SELECT attname, to_json(most_common_vals) AS v FROM pg_stats WHERE tablename = 'creds'",
        ["v"],
    ),
    (
        "statistics_width",
        "SELECT attname, avg_width AS w FROM pg_stats WHERE tablename = 'creds'",
        ["w"],
    ),
    (
        "info_schema_options",
        "SELECT option_name, option_value FROM information_schema.user_mapping_options",
        ["option_value"],
    ),
]


@pytest.mark.parametrize(
    ("label", "sql", "redacted"), REDACTED_QUERIES, ids=[q[0] for q in REDACTED_QUERIES]
)
async def test_a_sensitive_value_is_redacted_wherever_it_goes(
    served: Client, label: str, sql: str, redacted: list[str]
) -> None:
    out = await call(served, "execute_query", sql=sql)
    _clean(out)
    names = [c["name"] for c in out["columns"]]
    for row in out["rows"]:
        for name, value in zip(names, row, strict=True):
            if name in redacted:
                assert value in ("[REDACTED]", None), (label, name, value)
    assert any(v == "[REDACTED]" for row in out["rows"] for v in row), label
    assert "redacted sensitive columns" in out["note"]


async def test_nulls_stay_null_and_other_columns_are_unchanged(rdsn: str) -> None:
    async with connect(rdsn) as client:
        out = await call(
            client,
            "execute_query",
            sql="SELECT u.*, o.total FROM users u JOIN orders o ON o.user_id = u.id ORDER BY u.id",
        )
    assert records(out) == [
        {"id": 1, "name": "ann", "password_hash": "[REDACTED]", "note": "n1", "total": 5},
        {"id": 2, "name": "bob", "password_hash": None, "note": "n2", "total": 7},
    ]


ORDINARY = [
    ("SELECT id, name FROM users ORDER BY id", [[1, "ann"], [2, "bob"]]),
    ("SELECT upper(name) AS n FROM users WHERE name LIKE 'a%'", [["ANN"]]),
    ("SELECT count(*) FROM users WHERE password_hash IS NOT NULL", [[1]]),
    ("SELECT count(password_hash) AS c FROM users", [[1]]),
    (
        "SELECT u.name, sum(o.total) AS t FROM users u JOIN orders o ON o.user_id = u.id "
        "GROUP BY u.name ORDER BY 1",
        [["ann", 5], ["bob", 7]],
    ),
    ("WITH c AS (SELECT id, name FROM users) SELECT name FROM c ORDER BY id", [["ann"], ["bob"]]),
    ("SELECT name FROM names ORDER BY id", [["ann"], ["bob"]]),
    ("SELECT DISTINCT name FROM users ORDER BY name", [["ann"], ["bob"]]),
    ("SELECT name FROM users UNION SELECT 'x' ORDER BY 1", [["ann"], ["bob"], ["x"]]),
    ("SELECT srvname FROM pg_foreign_server", [["remote"]]),
    ("SELECT f.name FROM all_users() f ORDER BY f.id", [["ann"], ["bob"]]),
    ("SELECT g FROM generate_series(1, 2) g", [[1], [2]]),
    ("SELECT (u).id FROM users u WHERE id = 1", [[1]]),
    (
        "SELECT CASE WHEN password_hash IS NULL THEN 'none' ELSE name END AS c FROM users "
        "ORDER BY id",
        [["ann"], ["none"]],
    ),
]


@pytest.mark.parametrize(("sql", "rows"), ORDINARY)
async def test_ordinary_queries_are_unchanged(served: Client, sql: str, rows: list[Any]) -> None:
    out = await call(served, "execute_query", sql=sql)
    assert out["rows"] == rows
    assert "redacted" not in (out.get("note") or "")


REFUSED = [
    ("expression", "SELECT upper(password_hash) FROM users", "password_hash"),
    ("cast_error", "SELECT password_hash::int FROM users", "password_hash"),
    ("where", "SELECT id FROM users WHERE password_hash LIKE 'h%'", "password_hash"),
    ("where_whole_row", "SELECT id FROM users u WHERE u::text LIKE '%hunter%'", "u"),
    ("order_by", "SELECT id FROM users ORDER BY password_hash", "password_hash"),
    ("order_by_position", "SELECT password_hash FROM users ORDER BY 1", "password_hash"),
    ("group_by", "SELECT count(*) FROM users GROUP BY password_hash", "password_hash"),
    ("distinct", "SELECT DISTINCT password_hash FROM users", "password_hash"),
    ("intersect", "SELECT password_hash FROM users INTERSECT SELECT 'hunter2'", "password_hash"),
    ("in_subquery", "SELECT 'hunter2' IN (SELECT password_hash FROM users)", "password_hash"),
    ("exists", "SELECT EXISTS (SELECT 1 FROM users WHERE password_hash = 'x')", "password_hash"),
    ("case_error", "SELECT CASE WHEN password_hash > 'h' THEN 1/0 END FROM users", "password_hash"),
    ("join_on", "SELECT o.id FROM orders o JOIN users u ON u.password_hash = 'x'", "password_hash"),
    ("view_column", "SELECT id FROM logins WHERE h = 'hunter2'", "h"),
    (
        "join_using",  # a dictionary attack in one call: the matching guess comes back
        "SELECT u.name, g.guess FROM users u JOIN (SELECT x AS password_hash, x AS guess "
        "FROM (VALUES ('123456'), ('hunter2')) t(x)) g USING (password_hash)",
        "password_hash",
    ),
    (
        "natural_join",
        "SELECT name FROM users NATURAL JOIN (SELECT 'hunter2' AS password_hash) g",
        "password_hash",
    ),
    (
        "options",
        "SELECT srvname FROM pg_user_mappings WHERE umoptions::text LIKE '%fdw%'",
        "umoptions",
    ),
    ("distinct_count", "SELECT count(DISTINCT password_hash) FROM users", "password_hash"),
    (  # attack3 F20: every row of the table as XML, then picked out of it
        "xml_of_a_table",
        "SELECT xpath('//password_hash/text()', table_to_xml('users', true, false, '')) AS t",
        "table_to_xml(...)",
    ),
]


@pytest.mark.parametrize(("label", "sql", "column"), REFUSED, ids=[q[0] for q in REFUSED])
async def test_a_use_that_would_tell_the_value_is_refused(
    served: Client, label: str, sql: str, column: str
) -> None:
    body = await call_error(served, "execute_query", sql=sql)
    _clean(body["error"])
    assert body["error"]["code"] == "PERMISSION_DENIED", label
    assert body["error"]["context"]["rule"] == "sensitive_column"
    assert body["error"]["context"]["column"].endswith(column)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT table_to_xml('users', true, false, '') AS x",
        "SELECT schema_to_xml('public', true, false, '') AS x",
        "SELECT database_to_xml(true, false, '') AS x",
        "SELECT * FROM table_to_xml('users', true, false, '') AS x",
    ],
)
async def test_a_table_as_xml_is_redacted(served: Client, sql: str) -> None:
    """attack3 F20: table_to_xml and its kin return every column of what they name; which
    ones is not followed, so their value is redacted, or the use refused (in FROM), and an
    error on the way is scrubbed. Without libxml PostgreSQL refuses the call."""
    result = await served.call_tool("execute_query", {"sql": sql})
    out = result.structured_content
    assert out is not None
    _clean(out)  # no secret, whatever the outcome
    if not result.is_error:
        assert out["rows"] == [["[REDACTED]"]], out
        assert "redacted sensitive columns" in out["note"], out


async def test_where_clause_cannot_be_an_oracle(rdsn: str) -> None:
    async with connect(rdsn) as client:
        body = await call_error(
            client, "get_sample_rows", table_name="users", where_clause="password_hash LIKE 'h%'"
        )
        assert body["error"]["context"]["rule"] == "sensitive_column"
        out = await call(
            client, "get_sample_rows", table_name="users", where_clause="password_hash IS NULL"
        )
    assert records(out) == [{"id": 2, "name": "bob", "password_hash": None, "note": "n2"}]


async def test_sample_of_a_table_keyed_by_a_sensitive_column(rdsn: str) -> None:
    async with connect(rdsn) as client:
        out = await call(client, "get_sample_rows", table_name="sessions")
    assert records(out) == [{"token": "[REDACTED]", "user_id": 1}]
    assert "primary key is sensitive" in out["note"]


async def test_sample_of_a_catalog_with_credentials(rdsn: str) -> None:
    async with connect(rdsn) as client:
        out = await call(
            client, "get_sample_rows", schema_name="pg_catalog", table_name="pg_user_mappings"
        )
        _clean(out)
        assert records(out)[0]["umoptions"] == "[REDACTED]"
        result = await client.read_resource(
            "pg://schemas/pg_catalog/tables/pg_user_mapping/sample", cache_mode="bypass"
        )
    text = result.contents[0].text  # type: ignore[union-attr]
    _clean(text)
    assert "[REDACTED]" in text


async def test_an_error_never_echoes_a_sensitive_value(rdsn: str) -> None:
    # The view casts the hash (the owner's expression, so not refused); the cast fails on
    # 'hunter2', and PostgreSQL's message would quote it.
    direct = await fetch(rdsn, "SELECT 1")
    assert direct
    async with connect(rdsn) as client:
        body = await call_error(client, "execute_query", sql="SELECT n FROM hashed")
    _clean(body)
    assert 'invalid input syntax for type integer: "[REDACTED]"' in body["error"]["message"]


async def test_explain_is_no_oracle_and_its_errors_are_scrubbed(rdsn: str) -> None:
    async with connect(rdsn) as client:
        for analyze in (False, True):
            body = await call_error(
                client,
                "explain_query",
                sql="SELECT 1 FROM users WHERE password_hash LIKE 'h%'",
                analyze=analyze,
            )
            assert body["error"]["context"]["rule"] == "sensitive_column"
        body = await call_error(client, "explain_query", sql="SELECT n FROM hashed", analyze=True)
        _clean(body)
        assert '"[REDACTED]"' in body["error"]["message"]
        out = await call(client, "explain_query", sql="SELECT * FROM users", analyze=True)
    assert out["plan"]


async def test_errors_of_ordinary_queries_keep_their_values(rdsn: str) -> None:
    async with connect(rdsn) as client:
        body = await call_error(client, "execute_query", sql="SELECT name::int FROM users")
    assert '"ann"' in body["error"]["message"]


async def test_credential_settings_are_masked(rdsn: str) -> None:
    conninfo = "host=primary.example user=rep password=hunter2 port=5432"
    await execute(rdsn, f"ALTER SYSTEM SET primary_conninfo = '{conninfo}'")
    await execute(rdsn, "SELECT pg_reload_conf()")
    try:

        async def reloaded() -> bool:  # new sessions see it once the postmaster has read it
            rows = await fetch(
                rdsn, "SELECT setting FROM pg_settings WHERE name = 'primary_conninfo'"
            )
            return bool(rows[0]["setting"] == conninfo)

        await eventually(reloaded, what="the reloaded primary_conninfo")
        async with connect(rdsn) as client:
            for uri in ("pg://settings", "pg://settings/all"):
                result = await client.read_resource(uri, cache_mode="bypass")
                document = json.loads(result.contents[0].text)  # type: ignore[union-attr]
                shown = {s["name"]: s["value"] for s in document["settings"]}
                assert shown["primary_conninfo"] == (
                    "host=primary.example user=rep password=[REDACTED] port=5432"
                )
            out = await call(
                client,
                "execute_query",
                sql="SELECT name, setting FROM pg_settings WHERE name = 'primary_conninfo'",
            )
            _clean(out)
            assert out["rows"] == [["primary_conninfo", "[REDACTED]"]]
            out = await call(
                client, "execute_query", sql="SELECT current_setting('primary_conninfo') AS c"
            )
            _clean(out)
            assert out["rows"] == [["[REDACTED]"]]
            out = await call(client, "execute_query", sql="SELECT current_setting('work_mem') AS w")
            assert out["rows"][0][0] != "[REDACTED]"
    finally:
        await execute(rdsn, "ALTER SYSTEM RESET primary_conninfo")
        await execute(rdsn, "SELECT pg_reload_conf()")


async def test_activity_masks_passwords_in_other_sessions_statements(rdsn: str) -> None:
    other = await asyncpg.connect(rdsn)
    try:
        # Its last statement stays in pg_stat_activity while it is idle.
        await other.execute("SELECT 1 AS x -- ALTER ROLE r PASSWORD 'hunter2'")
        async with connect(rdsn) as client:
            result = await client.read_resource("pg://stat/activity", cache_mode="bypass")
        text = result.contents[0].text  # type: ignore[union-attr]
        _clean(text)
        assert "PASSWORD '[REDACTED]'" in text
    finally:
        await other.close()


def test_scrub() -> None:
    from pg_mcp_server.database.rows.redaction import scrub

    assert scrub('invalid input syntax for type integer: "hunter2"', "22P02") == (
        'invalid input syntax for type integer: "[REDACTED]"'
    )
    assert "0x" not in scrub('invalid byte sequence for encoding "UTF8": 0xc3 0x28', "22021")
    assert "hunter2" not in scrub("bad value hunter2", "P0001")


def test_mask_query() -> None:
    from pg_mcp_server.database.rows.redaction import mask_query

    assert mask_query("ALTER ROLE x PASSWORD 'hunter2'") == "ALTER ROLE x PASSWORD '[REDACTED]'"
    assert "fdwpw42" not in (
        mask_query("CREATE USER MAPPING FOR u SERVER s OPTIONS (user 'u', password 'fdwpw42')")
        or ""
    )
    assert "pw" not in (mask_query("SELECT dblink('host=h password=pw', 'x')") or "")
    assert mask_query("SELECT 1") == "SELECT 1"


def test_mask_setting() -> None:
    from pg_mcp_server.database.rows.redaction import mask_setting

    assert mask_setting("primary_conninfo", "host=a password='x y' user=b") == (
        "host=a password=[REDACTED] user=b"
    )
    assert mask_setting("x", "postgresql://rep:pw@h/db") == "postgresql://rep:[REDACTED]@h/db"
    assert mask_setting("ssl_passphrase_command", "echo pw") == "[REDACTED]"
    assert mask_setting("work_mem", "4MB") == "4MB"
