"""Issue 16: tools that tell an agent what it needs the first time, on the sample databases.

A schema map in one call, errors that carry the fix, find_join_path that finds the path and
says when a join multiplies rows (ratios checked against count(*)s), empty as a fact, and a
search that finds where a thing lives.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from mcpclient import call, call_error, connect, execute, fetch
from schemamap import TRUTH_MAP, map_line

DATASETS = ["pagila", "chinook", "northwind", "adventureworks"]

# ---- 1. a schema map in one call -----------------------------------------------------------


@pytest.mark.parametrize("name", DATASETS)
async def test_schema_map_names_every_column_type_key_and_reference(
    datasets: dict[str, str], name: str
) -> None:
    dsn = datasets[name]
    async with connect(dsn) as client:
        for schema in (await call(client, "list_schemas"))["schemas"]:
            out = await call(
                client, "list_tables", schema_name=schema["name"], include_columns=True
            )
            assert "has_more" not in out  # at most 100 tables per schema here
            truth: dict[str, list[Any]] = {}
            for row in await fetch(dsn, TRUTH_MAP, schema["name"]):
                truth.setdefault(row["table"], []).append(row)
            assert {t["name"] for t in out["tables"]} == set(truth)
            for table in out["tables"]:
                lines, expected = table["columns"], truth[table["name"]]
                assert len(lines) == len(expected) == table["column_count"], table["name"]
                for line, row in zip(lines, expected, strict=True):
                    keys = [json.loads(k) for k in row["keys"]]
                    assert line == map_line(row["head"], row["pk"], keys, row["comment"])


async def test_schema_map_comes_in_pages(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        first = await call(client, "list_tables", include_columns=True, limit=5)
        second = await call(client, "list_tables", include_columns=True, limit=5, offset=5)
    assert first["has_more"] and len(first["tables"]) == 5 == len(second["tables"])
    assert first["tables"][-1]["name"] < second["tables"][0]["name"]
    assert all(t["columns"] for t in first["tables"] + second["tables"])


# ---- 2. errors that carry the fix ----------------------------------------------------------


async def test_a_missing_column_names_the_resolved_tables_columns(
    datasets: dict[str, str],
) -> None:
    dsn = datasets["chinook"]
    track = [r["attname"] for r in await fetch(dsn, COLUMNS, "track")]
    async with connect(dsn) as client:
        for tool in ("execute_query", "explain_query"):
            body = await call_error(
                client, tool, sql="SELECT t.duration_ms FROM track t JOIN album a USING (album_id)"
            )
            error = body["error"]
            assert error["code"] == "COLUMN_NOT_FOUND"
            # t is track: its columns, not album's, closest first.
            (table,) = error["context"]["tables"]
            assert table["table"] == "track" and table["alias"] == "t"
            assert sorted(table["columns"]) == sorted(track)
            assert table["columns"][0] == "milliseconds"
            assert error["suggestion"].startswith("Columns, closest first: track (t): milliseconds")

        body = await call_error(client, "execute_query", sql="SELECT milisecond FROM track")
        error = body["error"]
        # PostgreSQL's own hint comes first, then the columns.
        assert error["suggestion"].startswith(
            'Perhaps you meant to reference the column "track.milliseconds". Columns'
        )
        body = await call_error(
            client, "get_sample_rows", table_name="track", where_clause="duration > 0"
        )
        assert "track: " in body["error"]["suggestion"]
        assert sorted(body["error"]["context"]["tables"][0]["columns"]) == sorted(track)


COLUMNS = """SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0
AND NOT attisdropped ORDER BY attnum"""


async def test_a_missing_table_or_function_names_the_closest(datasets: dict[str, str]) -> None:
    async with connect(datasets["chinook"]) as client:
        body = await call_error(client, "execute_query", sql="SELECT * FROM trak")
        assert body["error"]["code"] == "TABLE_NOT_FOUND"
        assert body["error"]["context"]["similar_tables"][0] == "track"
        assert body["error"]["suggestion"].startswith("Did you mean 'track'")

        body = await call_error(client, "execute_query", sql="SELECT uper(name) FROM track")
        assert body["error"]["code"] == "INVALID_SQL"
        assert "upper" in body["error"]["context"]["similar_functions"]
        assert "'upper'" in body["error"]["suggestion"]

        # The name exists, with other argument types: say which.
        body = await call_error(client, "explain_query", sql="SELECT round(1.5::float8, 2)")
        signatures = body["error"]["context"]["signatures"]
        assert "round(numeric,integer)" in signatures
        assert "round(numeric,integer)" in body["error"]["suggestion"]
        assert body["error"]["suggestion"].startswith("No function matches")  # PostgreSQL's


# ---- 3 and 4. find_join_path finds the path, and says what multiplies rows ----------------


async def test_the_default_depth_finds_a_five_join_path(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        out = await call(client, "find_join_path", from_table="payment", to_table="category")
    (path,) = out["paths"]  # the one shortest; the longer ones are counted in the note
    assert path["depth"] == 5 and "of 6" in out["note"]
    assert path["sql_example"].startswith("FROM payment p JOIN rental r ON")
    assert path["fan_out"] == ["film -> film_category: 2.37 rows per film"]
    assert path["warning"].startswith("payment rows repeat ~2.37x")


async def test_aliases_are_readable(datasets: dict[str, str]) -> None:
    async with connect(datasets["chinook"]) as client:
        out = await call(client, "find_join_path", from_table="invoice_line", to_table="artist")
    sql = out["paths"][0]["sql_example"]
    assert sql == (
        "FROM invoice_line il JOIN track t ON il.track_id = t.track_id "
        "LEFT JOIN album al ON t.album_id = al.album_id "
        "LEFT JOIN artist ar ON al.artist_id = ar.artist_id"
    )
    assert "fan_out" not in out["paths"][0]  # every step goes to the referenced table


# (dataset, from, to): paths with a step from the referenced side that multiplies rows.
FAN_OUT = [
    ("pagila", "film", "actor"),
    ("pagila", "category", "film"),
    ("chinook", "artist", "track"),
    ("chinook", "genre", "invoice_line"),
    ("northwind", "customers", "order_details"),
]
_STEP = re.compile(r"^(\S+) -> (\S+): ([0-9.e+]+) rows per \1$")


@pytest.mark.parametrize(("name", "start", "goal"), FAN_OUT)
async def test_fan_out_ratios_match_the_counts(
    datasets: dict[str, str], name: str, start: str, goal: str
) -> None:
    dsn = datasets[name]
    async with connect(dsn) as client:
        out = await call(client, "find_join_path", from_table=start, to_table=goal)
    path = out["paths"][0]
    assert path["fan_out"], path
    product = 1.0
    for note in path["fan_out"]:
        parent, child, ratio = _STEP.match(note).groups()  # type: ignore[union-attr]
        (key,) = await fetch(
            dsn,
            """SELECT a.attname FROM pg_constraint k
               JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
               WHERE k.conrelid = $1::regclass AND k.confrelid = $2::regclass""",
            child,
            parent,
        )
        column = '"' + key["attname"] + '"'
        (counts,) = await fetch(
            dsn, f"SELECT count({column})::float8 / count(DISTINCT {column}) FROM {child}"
        )
        # Small tables are analyzed whole: the statistics give the counts' ratio.
        assert float(ratio) == pytest.approx(counts[0], rel=0.01), note
        product *= float(ratio)
    repeats = re.match(rf"^{start} rows repeat ~([0-9.e+]+)x", path["warning"])
    assert repeats and float(repeats[1]) == pytest.approx(product, rel=0.01)


# ---- 5. empty is a fact ----------------------------------------------------------------------

ROW_TRUTH = """
SELECT n.nspname AS schema, c.relname AS name, c.relispopulated AS populated,
       to_char(greatest(pg_stat_get_last_analyze_time(c.oid),
                        pg_stat_get_last_autoanalyze_time(c.oid),
                        pg_stat_get_last_vacuum_time(c.oid),
                        pg_stat_get_last_autovacuum_time(c.oid)) AT TIME ZONE 'UTC',
               'YYYY-MM-DD"T"HH24:MI"Z"') AS stats_at
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'm') AND NOT c.relispartition
  AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
"""


@pytest.mark.parametrize("name", DATASETS)
async def test_empty_is_flagged_for_the_empty_tables_only(
    datasets: dict[str, str], name: str
) -> None:
    dsn = datasets[name]
    truth = await fetch(dsn, ROW_TRUTH)
    flagged = 0
    async with connect(dsn) as client:
        for schema in {r["schema"] for r in truth}:
            listed = await call(client, "list_tables", schema_name=schema)
            facts = {t["name"]: t for t in listed["tables"]}
            for row in (r for r in truth if r["schema"] == schema):
                table = facts[row["name"]]
                source = f'"{schema}"."{row["name"]}"'
                if not row["populated"]:  # a materialized view never refreshed: not empty
                    assert "empty" not in table, source
                    continue
                (count,) = await fetch(dsn, f"SELECT count(*) FROM {source}")
                # The datasets are loaded once and analyzed: every empty table has no page.
                assert table.get("empty", False) == (count[0] == 0), source
                flagged += table.get("empty", False)
                if not table.get("empty") and table["stats_as_of"] != row["stats_at"]:
                    # Autovacuum may have come by since the truth was read: read it again.
                    (again,) = [
                        r
                        for r in await fetch(dsn, ROW_TRUTH)
                        if r["name"] == row["name"] and r["schema"] == schema
                    ]
                    assert table["stats_as_of"] == again["stats_at"], source
    assert flagged == {"pagila": 0, "chinook": 0, "northwind": 2, "adventureworks": 25}[name]


EMPTY_SCHEMA = """
CREATE TABLE never_filled (id int) WITH (autovacuum_enabled = false);
CREATE TABLE filled (id int) WITH (autovacuum_enabled = false);
INSERT INTO filled VALUES (1), (2);
CREATE TABLE emptied (id int) WITH (autovacuum_enabled = false);
INSERT INTO emptied VALUES (1);
DELETE FROM emptied;
CREATE TABLE parts (id int) PARTITION BY RANGE (id);
CREATE TABLE parts_a PARTITION OF parts FOR VALUES FROM (0) TO (10);
CREATE TABLE parts_b PARTITION OF parts FOR VALUES FROM (10) TO (20);
"""


async def test_empty_only_when_certain_and_estimates_say_their_age(scratch_dsn: str) -> None:
    await execute(scratch_dsn, EMPTY_SCHEMA)
    async with connect(scratch_dsn) as client:

        async def facts() -> dict[str, dict[str, Any]]:
            return {t["name"]: t for t in (await call(client, "list_tables"))["tables"]}

        now = await facts()
        assert now["never_filled"].get("empty") and now["parts"].get("empty")
        # Rows were written: pages exist, whatever the statistics say (nothing analyzed yet).
        assert "empty" not in now["filled"] and "empty" not in now["emptied"]
        assert "stats_as_of" not in now["filled"]  # never analyzed: the live-tuple count
        await execute(scratch_dsn, "INSERT INTO parts VALUES (15); ANALYZE filled")
        now = await facts()
        assert "empty" not in now["parts"]
        (stats,) = await fetch(
            scratch_dsn,
            "SELECT to_char(last_analyze AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI\"Z\"') "
            "FROM pg_stat_user_tables WHERE relname = 'filled'",
        )
        assert now["filled"]["stats_as_of"] == stats[0]
        assert now["filled"]["estimated_row_count"] == 2
        described = await call(client, "describe_table", table_name="never_filled")
        assert described["empty"] is True and "estimated_row_count" not in described


# ---- 6. find where a thing lives -----------------------------------------------------------


async def test_search_finds_tables_by_column_names(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        out = await call(client, "search_tables", query="Which table has customer emails?")
    first = out["matches"][0]
    assert (first["schema_name"], first["table_name"]) == ("public", "customer")
    assert "email text" in first["columns"]
    assert {m["table_name"] for m in out["matches"]} >= {"customer", "staff"}  # staff.email
    assert out["total_count"] >= len(out["matches"])


async def test_search_finds_a_column_by_a_word_of_its_comment(datasets: dict[str, str]) -> None:
    dsn = datasets["adventureworks"]
    async with connect(dsn) as client:
        # "expiration" is in no name: only in the comments of creditcard's expmonth and expyear.
        out = await call(client, "search_tables", query="card expiration", limit=3)
    assert len(out["matches"]) <= 3
    first = out["matches"][0]
    assert (first["schema_name"], first["table_name"]) == ("sales", "creditcard")
    assert any(c.startswith("expmonth smallint -- ") for c in first["columns"])
    (row,) = await fetch(dsn, "SELECT col_description('sales.creditcard'::regclass, 4)")
    assert "expiration" in row[0].lower()


async def test_search_needs_a_word(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        body = await call_error(client, "search_tables", query="which table has the?")
    assert body["error"]["code"] == "PARAMETER_ERROR"
