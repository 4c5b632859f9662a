"""What real databases hold: odd types, quoted names, no primary key, never analyzed, views."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from mcpclient import call, call_error, connect, execute, fetch, records

from pg_mcp_server.database.catalog import tables as catalog

SCHEMA = r"""
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE SCHEMA "Ünï Schema";
CREATE TABLE "Ünï Schema"."MixedCase" ("Id" int PRIMARY KEY, "naïve col" text);
COMMENT ON TABLE "Ünï Schema"."MixedCase" IS 'quoted names everywhere';
INSERT INTO "Ünï Schema"."MixedCase" VALUES (1, 'ça va');
CREATE TABLE types_t (
    id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    big numeric(30, 10), plain numeric, f float8, i8 bigint, ts timestamptz, d date,
    iv interval, u uuid, b bytea, arr int[], tarr text[], tsv tsvector, j jsonb, js json,
    e mood, moods mood[], dom posint, r int4range, addr inet, api_token text, m money,
    code char(3), name varchar(40),
    doubled int GENERATED ALWAYS AS (dom * 2) STORED,
    CONSTRAINT types_code_check CHECK (code <> 'XXX')
);
INSERT INTO types_t (big, plain, f, i8, ts, d, iv, u, b, arr, tarr, tsv, j, js, e, moods, dom,
                     r, addr, api_token, m, code, name)
VALUES (12345678901234567890.1234567890, 'NaN', 'Infinity', 9007199254740993,
        'infinity', '2024-02-29', '1 mon 2 days 03:04:05', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
        '\xdeadbeef', '{1,2,NULL}', '{"a b","c"}', 'fat:1 rat:2', '{"k": [1, 2.5, null]}',
        '{"x": 1}', 'happy', '{sad,ok}', 7, '[1,5)', '192.168.0.1/32', 'tok-123', 12.5, 'abc',
        repeat('z', 40)),
       (0.5, 1.25, -0.0, -1, '2024-01-01 12:00:00+00', '-infinity', '-1 day', NULL, '', '{}',
        '{}', '', '[]', 'null', 'sad', '{}', 1, 'empty', '::1', NULL, 0, NULL, NULL);
CREATE TABLE nopk (a int, note text);
INSERT INTO nopk VALUES (2, 'two'), (1, 'one'), (3, repeat('long ', 200));
CREATE VIEW v_types AS SELECT id, e FROM types_t;
CREATE MATERIALIZED VIEW mv_types AS SELECT id FROM types_t;
CREATE SERVER files FOREIGN DATA WRAPPER file_fdw;
CREATE FOREIGN TABLE ft_empty (line text) SERVER files OPTIONS (filename '/dev/null');
CREATE TABLE big AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, 60000) g;
ALTER TABLE big ADD PRIMARY KEY (id);
ANALYZE big;
"""


@pytest_asyncio.fixture(loop_scope="session")
async def edge_dsn(scratch_dsn: str) -> AsyncIterator[str]:
    try:
        await execute(scratch_dsn, "CREATE EXTENSION file_fdw")
    except asyncpg.FeatureNotSupportedError:
        # The pgserver wheel (PostgreSQL 16) ships no foreign-data wrapper at all. One without a
        # handler still makes a foreign table the catalog lists; only reading it fails.
        await execute(scratch_dsn, "CREATE FOREIGN DATA WRAPPER file_fdw")
    await execute(scratch_dsn, SCHEMA)
    yield scratch_dsn


async def test_types_serialize_without_losing_meaning(edge_dsn: str) -> None:
    async with connect(edge_dsn) as client:
        out = await call(client, "get_sample_rows", table_name="types_t")
    first, second = records(out)
    assert first["big"] == "12345678901234567890.1234567890"  # too precise for a float
    assert second["big"] == 0.5 and second["plain"] == 1.25
    assert first["plain"] == "NaN" and first["f"] == "Infinity"
    assert first["i8"] == 9007199254740993  # bigint beyond 2**53 stays exact
    assert first["ts"] == "infinity" and second["d"] == "-infinity"
    assert second["ts"] == "2024-01-01T12:00:00+00:00"
    assert first["d"] == "2024-02-29"
    assert first["iv"] == "1 mon 2 days 03:04:05" and second["iv"] == "-1 days"
    assert first["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert base64.b64decode(first["b"]) == b"\xde\xad\xbe\xef" and second["b"] == ""
    assert first["arr"] == [1, 2, None] and first["tarr"] == ["a b", "c"]
    assert first["tsv"] == "'fat':1 'rat':2"
    assert first["j"] == {"k": [1, 2.5, None]} and first["js"] == {"x": 1}
    assert first["e"] == "happy" and first["moods"] == ["sad", "ok"]
    assert first["dom"] == 7 and first["doubled"] == 14
    assert first["r"] == "[1,5)" and second["r"] == "empty"
    assert first["addr"] == "192.168.0.1"  # PostgreSQL prints /32 hosts bare too
    assert first["api_token"] == "[REDACTED]" and second["api_token"] is None
    assert first["code"] == "abc"
    assert "bytea values are base64-encoded" in out["note"]


async def test_redaction_can_be_turned_off(edge_dsn: str) -> None:
    async with connect(edge_dsn, redact_sensitive_columns=False) as client:
        out = await call(client, "get_sample_rows", table_name="types_t", columns=["api_token"])
    assert records(out)[0]["api_token"] == "tok-123"
    assert "redacted" not in out["note"]


async def test_describe_reports_types_identity_generated_and_domains(edge_dsn: str) -> None:
    async with connect(edge_dsn) as client:
        out = await call(client, "describe_table", table_name="types_t")
    cols = {c["name"]: c for c in out["columns"]}
    assert cols["id"]["identity_generation"] == "ALWAYS"
    assert "* 2" in cols["doubled"]["generation_expression"]
    assert "default_value" not in cols["doubled"]
    assert cols["dom"]["data_type"] == "posint" and cols["dom"]["domain_base_type"] == "integer"
    assert cols["e"]["enum_values"] == ["sad", "ok", "happy"]
    assert cols["moods"]["data_type"] == "mood[]" and cols["moods"]["enum_values"]
    # Length, precision and scale are in the type, as PostgreSQL prints it.
    assert cols["big"]["data_type"] == "numeric(30,10)" and cols["plain"]["data_type"] == "numeric"
    assert cols["code"]["data_type"] == "character(3)"
    assert cols["name"]["data_type"] == "character varying(40)"
    checks = [c for c in out["constraints"] if c["type"] == "CHECK"]
    assert [c["name"] for c in checks] == ["types_code_check"]
    assert checks[0]["columns"] == ["code"]


async def test_quoted_non_ascii_names(edge_dsn: str) -> None:
    async with connect(edge_dsn) as client:
        schemas = await call(client, "list_schemas")
        assert "Ünï Schema" in [s["name"] for s in schemas["schemas"]]
        tables = await call(client, "list_tables", schema_name="Ünï Schema")
        assert [t["name"] for t in tables["tables"]] == ["MixedCase"]
        assert tables["tables"][0]["description"] == "quoted names everywhere"
        out = await call(client, "describe_table", table_name="MixedCase", schema_name="Ünï Schema")
        assert [c["name"] for c in out["columns"]] == ["Id", "naïve col"]
        rows = await call(
            client,
            "get_sample_rows",
            table_name="MixedCase",
            schema_name="Ünï Schema",
            where_clause="\"naïve col\" = 'ça va'",
        )
        assert records(rows) == [{"Id": 1, "naïve col": "ça va"}]
        body = await call_error(
            client, "describe_table", table_name="mixedcase", schema_name="Ünï Schema"
        )
        assert "'MixedCase'" in body["error"]["suggestion"]


async def test_table_without_primary_key_never_analyzed(edge_dsn: str) -> None:
    async with connect(edge_dsn) as client:
        listed = await call(client, "list_tables", name_pattern="nopk")
        info = listed["tables"][0]
        assert "has_primary_key" not in info  # false
        out = await call(client, "get_sample_rows", table_name="nopk")
    assert out["row_count"] == 3
    assert "no primary key" in out["note"]
    assert "values longer than 500 characters are cut" in out["note"]
    long = [r["note"] for r in records(out) if r["a"] == 3]
    assert long == ["long " * 100 + "...[cut: 1000 chars]"]


async def test_views_materialized_views_and_foreign_tables(edge_dsn: str) -> None:
    async with connect(edge_dsn) as client:
        listed = await call(client, "list_tables")
        kinds = {t["name"]: t for t in listed["tables"]}
        assert kinds["v_types"]["type"] == "view" and "size_bytes" not in kinds["v_types"]
        assert kinds["mv_types"]["type"] == "materialized view"
        assert kinds["ft_empty"]["type"] == "foreign table"
        assert "size_bytes" not in kinds["ft_empty"]
        no_views = await call(client, "list_tables", include_views=False)
        assert "v_types" not in {t["name"] for t in no_views["tables"]}
        view = await call(client, "describe_table", table_name="v_types")
        assert view["type"] == "view" and "FROM types_t" in view["view_definition"]
        assert view["indexes"] == [] and view["constraints"] == []
        rows = await call(client, "get_sample_rows", table_name="v_types", randomize=True)
        assert rows["row_count"] == 2
        # Foreign tables are refused unless allowed (see test_guard_objects.py).
        refused = await call_error(client, "get_sample_rows", table_name="ft_empty")
        assert refused["error"]["context"]["rule"] == "foreign_table"
    async with connect(edge_dsn, allow_foreign_tables=True) as client:
        (readable,) = await fetch(edge_dsn, "SELECT fdwhandler <> 0 FROM pg_foreign_data_wrapper")
        if readable[0]:
            assert (await call(client, "get_sample_rows", table_name="ft_empty"))["rows"] == []
        else:  # the server's own refusal, as a structured error
            error = (await call_error(client, "get_sample_rows", table_name="ft_empty"))["error"]
            assert "has no handler" in error["message"] and error["context"]["sqlstate"] == "55000"


async def test_randomized_sample_of_a_large_table_uses_tablesample(edge_dsn: str) -> None:
    async with connect(edge_dsn) as client:
        out = await call(client, "get_sample_rows", table_name="big", limit=7, randomize=True)
        assert out["row_count"] == 7
        assert "randomized" in out["note"] and "TABLESAMPLE" in out["note"]
        assert out["total_table_rows"] == 60000
        filtered = await call(
            client,
            "get_sample_rows",
            table_name="big",
            limit=5,
            randomize=True,
            where_clause="id < 20",
        )
        # A selective filter defeats the block sample; the full scan still finds the rows.
        assert filtered["row_count"] == 5
        assert all(r["id"] < 20 for r in records(filtered))


async def test_leave_out_indexes_and_constraints(edge_dsn: str) -> None:
    async with connect(edge_dsn) as client:
        out = await call(
            client,
            "describe_table",
            table_name="big",
            include_indexes=False,
            include_constraints=False,
        )
    assert "indexes" not in out and "constraints" not in out
    assert [c["name"] for c in out["columns"]] == ["id", "h"]


async def test_list_tables_pages_in_name_order(edge_dsn: str) -> None:
    async with connect(edge_dsn) as client:
        everything = await call(client, "list_tables")
        names = [t["name"] for t in everything["tables"]]
        assert names == sorted(names) and "has_more" not in everything
        total = everything["total_count"]
        assert total == len(names) >= 6
        pages: list[str] = []
        offset = 0
        while True:
            page = await call(client, "list_tables", limit=3, offset=offset)
            assert page["total_count"] == total
            pages += [t["name"] for t in page["tables"]]
            offset += 3
            if not page.get("has_more"):
                break
        assert pages == names
        beyond = await call(client, "list_tables", limit=3, offset=total + 5)
        assert beyond["tables"] == [] and beyond["total_count"] == total
        assert "has_more" not in beyond


async def test_describe_answers_are_reused_only_while_nothing_committed(
    scratch_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """describe_table keeps its answer with the snapshot it was read under; a commit anywhere
    (DDL here, from another session) makes it read again, and the row estimate and size, which
    VACUUM changes without committing anything, are read afresh every time."""
    await execute(scratch_dsn, "CREATE TABLE kept (id int PRIMARY KEY, a text)")
    reused: list[bool] = []
    original = catalog.describe_table

    async def spy(*args: Any, **kwargs: Any) -> Any:
        row = await original(*args, **kwargs)
        reused.append(row["doc"] is None)
        return row

    monkeypatch.setattr(catalog, "describe_table", spy)
    async with connect(scratch_dsn) as client:
        first = await call(client, "describe_table", table_name="kept")
        for _ in range(5):  # a commit elsewhere in the cluster (autovacuum) may intervene
            assert await call(client, "describe_table", table_name="kept") == first
        assert reused[0] is False and any(reused)
        other = await call(client, "describe_table", table_name="kept", include_indexes=False)
        assert "indexes" not in other or other["indexes"] in (None, [])
        await execute(
            scratch_dsn, "ALTER TABLE kept ADD COLUMN b int; COMMENT ON TABLE kept IS 'x'"
        )
        third = await call(client, "describe_table", table_name="kept")
        assert [c["name"] for c in third["columns"]] == ["id", "a", "b"]
        assert third["description"] == "x" and reused[-1] is False
        await execute(scratch_dsn, "INSERT INTO kept VALUES (0, 'v'); ANALYZE kept")
        await execute(scratch_dsn, "INSERT INTO kept SELECT g, 'v' FROM generate_series(1, 5000) g")
        before = await call(client, "describe_table", table_name="kept")
        await execute(scratch_dsn, "VACUUM kept")  # pg_class updated in place
        after = await call(client, "describe_table", table_name="kept")
        assert (before["estimated_row_count"], after["estimated_row_count"]) == (1, 5001)
        assert after["size_pretty"] != before["size_pretty"]
        volatile = ("estimated_row_count", "size_pretty", "stats_as_of")
        assert {k: v for k, v in after.items() if k not in volatile} == {
            k: v for k, v in before.items() if k not in volatile
        }
        await execute(scratch_dsn, "DROP TABLE kept")
        body = await call_error(client, "describe_table", table_name="kept")
        assert body["error"]["code"] == "TABLE_NOT_FOUND"


async def test_describe_reuse_follows_the_settings_that_shape_its_text(scratch_dsn: str) -> None:
    """Deparsed text (view definitions, defaults, index definitions) depends on session
    settings. A database-level setting reaches only new sessions, and nothing commits between
    the two calls below: the answer kept by an old session must not be reused by a new one."""
    await execute(
        scratch_dsn,
        "CREATE TABLE shaped (id int PRIMARY KEY); CREATE VIEW shaped_v AS SELECT id FROM shaped",
    )
    async with connect(scratch_dsn) as client:
        before = await call(client, "describe_table", table_name="shaped_v")
        assert '"shaped"' not in before["view_definition"]
        await execute(
            scratch_dsn,
            "DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET quote_all_identifiers = on', "
            "current_database()); END$$",
        )
        # Read again by a session that still has the old setting, and kept.
        again = await call(client, "describe_table", table_name="shaped_v")
        assert again["view_definition"] == before["view_definition"]
        await execute(
            scratch_dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'pg-mcp-server' AND datname = current_database()",
        )
        after = await call(client, "describe_table", table_name="shaped_v")
        assert '"shaped"' in after["view_definition"]


def test_the_describe_cache_is_bounded_in_entries_and_bytes() -> None:
    cache = catalog.SnapshotCache(size=3, max_bytes=1000)
    for n in range(5):
        cache.put(n, f"t{n}", {"n": n}, 100)
    assert [cache.get(n) is not None for n in range(5)] == [False, False, True, True, True]
    cache.put("big", "t", {}, 101)  # over a tenth of the budget: not kept
    assert cache.get("big") is None
    for n in range(5, 15):
        cache.put(n, "t", {}, 100)
    cache.put(3, "t3", {"n": 3}, 90)  # replacing an entry gives its bytes back
    assert cache.get(3) == ("t3", {"n": 3})
    assert cache._bytes <= 1000 and len(cache._entries) <= 3
