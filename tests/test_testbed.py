"""The test bed itself: every dataset loads completely and the demo database is as designed."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from pgbed import PgServer

from pg_mcp_server.demo import load_demo

# Schemas that belong to PostgreSQL, not to the dataset.
_USER_NS = "n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'"


async def _fetchrow(dsn: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchrow(sql, *args)
    finally:
        await conn.close()


async def _fetch(dsn: str, sql: str, *args: Any) -> list[Any]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


# (top-level tables, partitions, foreign keys, largest table, its row count):
# the figures of the datasets' upstream sources (tests/datasets/*/SOURCE.md).
EXPECTED_SHAPE = {
    "chinook": (11, 0, 11, "public.playlist_track", 8715),
    "northwind": (14, 0, 13, "public.order_details", 2155),
    "pagila": (15, 7, 36, "public.payment", 16049),
    "adventureworks": (68, 0, 90, "person.businessentity", 20777),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_SHAPE))
async def test_dataset_shape(datasets: dict[str, str], name: str) -> None:
    tables, partitions, fks, largest, largest_rows = EXPECTED_SHAPE[name]
    row = await _fetchrow(
        datasets[name],
        f"""
        SELECT
          count(*) FILTER (WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition) AS tables,
          count(*) FILTER (WHERE c.relispartition) AS partitions,
          (SELECT count(*) FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace
            WHERE co.contype = 'f' AND {_USER_NS}) AS fks,
          count(*) FILTER (WHERE c.relkind = 'r' AND NOT EXISTS (
            SELECT 1 FROM pg_constraint pk WHERE pk.conrelid = c.oid AND pk.contype = 'p'))
            AS without_pk
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p') AND {_USER_NS}
        """,
    )
    assert (row["tables"], row["partitions"], row["fks"]) == (tables, partitions, fks)
    assert row["without_pk"] == 0  # README: every table has a primary key
    counted = await _fetchrow(datasets[name], f"SELECT count(*) AS n FROM {largest}")
    assert counted["n"] == largest_rows


async def test_datasets_are_analyzed(datasets: dict[str, str]) -> None:
    # reltuples is -1 for a never-analyzed table; discovery tools rely on the estimates.
    row = await _fetchrow(
        datasets["chinook"],
        "SELECT reltuples FROM pg_class WHERE oid = 'public.playlist_track'::regclass",
    )
    assert row["reltuples"] == 8715


async def test_adventureworks_comments(datasets: dict[str, str]) -> None:
    row = await _fetchrow(
        datasets["adventureworks"],
        f"""
        SELECT count(*) AS n FROM pg_description d
        JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND d.objoid = c.oid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p') AND {_USER_NS}
        """,
    )
    assert row["n"] == 427


DEMO_TABLES = {"users", "addresses", "products", "orders", "order_items", "payments"}


async def test_demo_tables_have_rows_and_comments(demo_dsn: str) -> None:
    rows = await _fetch(
        demo_dsn,
        """
        SELECT c.relname, obj_description(c.oid, 'pg_class') AS comment,
               (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0
                  AND NOT a.attisdropped) AS n_cols,
               (SELECT count(*) FROM pg_description d WHERE d.objoid = c.oid
                  AND d.classoid = 'pg_class'::regclass AND d.objsubid > 0) AS n_col_comments
        FROM pg_class c
        WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
        """,
    )
    by_name = {row["relname"]: row for row in rows}
    assert set(by_name) == DEMO_TABLES
    total = 0
    for name, row in by_name.items():
        assert row["comment"], name
        assert row["n_col_comments"] * 2 > row["n_cols"], f"{name}: most columns commented"
        counted = await _fetchrow(demo_dsn, f"SELECT count(*) AS n FROM {name}")
        assert counted["n"] > 0, name
        total += counted["n"]
    assert 2000 <= total <= 20000  # "a few thousand rows"


async def test_demo_has_the_advertised_features(demo_dsn: str) -> None:
    row = await _fetchrow(
        demo_dsn,
        """
        SELECT
          (SELECT format_type(atttypid, atttypmod) FROM pg_attribute
            WHERE attrelid = 'users'::regclass AND attname = 'password_hash') AS password_hash,
          (SELECT count(*) FROM pg_type WHERE typname = 'order_status' AND typtype = 'e') AS enums,
          (SELECT count(*) FROM pg_constraint WHERE contype = 'f'
            AND cardinality(conkey) = 2) AS composite_fks,
          (SELECT count(*) FROM pg_constraint WHERE contype = 'f'
            AND confdeltype = 'n') AS set_null,
          (SELECT count(*) FROM pg_constraint WHERE contype = 'c'
            AND connamespace = 'public'::regnamespace) AS checks,
          (SELECT count(*) FROM pg_constraint WHERE contype = 'u'
            AND connamespace = 'public'::regnamespace) AS uniques,
          (SELECT count(*) FROM pg_index i JOIN pg_description d ON d.objoid = i.indexrelid
            WHERE NOT i.indisprimary) AS commented_indexes,
          (SELECT array_agg(DISTINCT format_type(atttypid, atttypmod)) FROM pg_attribute
            WHERE attrelid IN (SELECT oid FROM pg_class
                               WHERE relnamespace = 'public'::regnamespace)) AS types
        """,
    )
    assert row["password_hash"] == "text"
    assert row["enums"] == 1
    assert row["composite_fks"] >= 1
    assert row["set_null"] >= 1
    assert row["checks"] >= 5
    assert row["uniques"] >= 2
    assert row["commented_indexes"] >= 2
    assert {"jsonb", "numeric(10,2)", "timestamp with time zone"} <= set(row["types"])


_TABLE_DIGEST = "SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) AS digest FROM {} t"


async def test_demo_data_is_deterministic(demo_dsn: str, scratch_dsn: str) -> None:
    await load_demo(scratch_dsn)
    for table in sorted(DEMO_TABLES):
        first = await _fetchrow(demo_dsn, _TABLE_DIGEST.format(table))
        second = await _fetchrow(scratch_dsn, _TABLE_DIGEST.format(table))
        assert first["digest"] == second["digest"], table


async def test_scratch_database_is_empty(pg: PgServer, scratch_dsn: str) -> None:
    row = await _fetchrow(
        scratch_dsn,
        f"""
        SELECT current_database() AS db,
               (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE {_USER_NS}) AS relations
        """,
    )
    assert row["db"].startswith("pgmcp_scratch_")
    assert row["relations"] == 0
    assert pg.dsn(row["db"]) == scratch_dsn
