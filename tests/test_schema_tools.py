"""Layer 1 against the four sample databases, compared with what pg_catalog says.

The expected values come from catalog queries written here, independently of the server's own
SQL, so a wrong join in the server shows up as a mismatch.
"""

from __future__ import annotations

import json

import asyncpg
import pytest
from mcpclient import call, connect, fetch

from pg_mcp_server.models.schema import (
    DescribeTableOutput,
    GetSampleRowsOutput,
    ListSchemasOutput,
    ListTablesOutput,
)

DATASETS = ["pagila", "chinook", "northwind", "adventureworks"]

TRUTH_TABLES = """
SELECT n.nspname AS schema, c.relname AS name, c.relkind::text AS kind
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
  AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
"""

TRUTH_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, NOT a.attnotnull AS nullable
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

TRUTH_CONSTRAINTS = """
SELECT conname, contype::text AS type,
       ARRAY(SELECT a.attname FROM unnest(conkey) WITH ORDINALITY u(n, o)
             JOIN pg_attribute a ON a.attrelid = conrelid AND a.attnum = u.n ORDER BY u.o) AS cols,
       confrelid::regclass::text AS ref
FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype IN ('p', 'f', 'u', 'c', 'x')
"""

TRUTH_INDEXES = """
SELECT i.indexrelid::regclass::text AS name, i.indisunique, i.indisprimary
FROM pg_index i WHERE i.indrelid = to_regclass($1)
"""


def qualified(schema: str, name: str) -> str:
    return '"' + schema.replace('"', '""') + '"."' + name.replace('"', '""') + '"'


@pytest.mark.parametrize("name", DATASETS)
async def test_list_schemas_and_tables_match_the_catalog(
    datasets: dict[str, str], name: str
) -> None:
    dsn = datasets[name]
    truth = await fetch(dsn, TRUTH_TABLES)
    by_schema: dict[str, list[asyncpg.Record]] = {}
    for row in truth:
        by_schema.setdefault(row["schema"], []).append(row)

    async with connect(dsn) as client:
        schemas = ListSchemasOutput.model_validate(await call(client, "list_schemas"))
        listed = {s.name: s for s in schemas.schemas}
        assert schemas.total_count == len(schemas.schemas)
        assert "public" in listed
        assert not any(s.startswith("pg_") or s == "information_schema" for s in listed)
        for schema, rows in by_schema.items():
            tables = [r for r in rows if r["kind"] in ("r", "p", "f")]
            views = [r for r in rows if r["kind"] in ("v", "m")]
            assert listed[schema].table_count == len(tables), schema
            assert listed[schema].view_count == len(views), schema

            everything = ListTablesOutput.model_validate(
                await call(client, "list_tables", schema_name=schema)
            )
            assert sorted(t.name for t in everything.tables) == sorted(r["name"] for r in rows)
            assert everything.total_count == len(rows)
            only_tables = ListTablesOutput.model_validate(
                await call(client, "list_tables", schema_name=schema, include_views=False)
            )
            assert sorted(t.name for t in only_tables.tables) == sorted(r["name"] for r in tables)


@pytest.mark.parametrize("name", DATASETS)
async def test_describe_every_table_matches_the_catalog(
    datasets: dict[str, str], name: str
) -> None:
    dsn = datasets[name]
    relations = await fetch(dsn, TRUTH_TABLES)
    assert relations
    async with connect(dsn) as client:
        for rel in relations:
            schema, table = rel["schema"], rel["name"]
            regclass = qualified(schema, table)
            out = DescribeTableOutput.model_validate(
                await call(client, "describe_table", table_name=table, schema_name=schema)
            )
            columns = await fetch(dsn, TRUTH_COLUMNS, regclass)
            assert [c.name for c in out.columns] == [c["attname"] for c in columns], regclass
            assert [c.data_type for c in out.columns] == [c["type"] for c in columns], regclass
            assert [c.is_nullable for c in out.columns] == [c["nullable"] for c in columns]

            constraints = await fetch(dsn, TRUTH_CONSTRAINTS, regclass)
            assert out.constraints is not None
            got = {c.name: c for c in out.constraints}
            assert set(got) == {c["conname"] for c in constraints}, regclass
            for c in constraints:
                assert got[c["conname"]].columns == list(c["cols"]), (regclass, c["conname"])
                if c["type"] == "f":
                    ref = got[c["conname"]]
                    assert ref.type == "FOREIGN KEY"
                    assert ref.referenced_table is not None
                    assert c["ref"].replace('"', "").endswith(ref.referenced_table)
                if c["type"] == "c":
                    assert got[c["conname"]].type == "CHECK"
                    assert (got[c["conname"]].definition or "").startswith("CHECK")
                if c["type"] == "p":
                    pk_cols = set(c["cols"])
                    assert {col.name for col in out.columns if col.is_primary_key} == pk_cols

            indexes = await fetch(dsn, TRUTH_INDEXES, regclass)
            assert out.indexes is not None
            assert {i.name for i in out.indexes} == {
                i["name"].split(".")[-1].strip('"') for i in indexes
            }, regclass
            assert all(i.columns for i in out.indexes)


async def test_describe_reports_foreign_keys_on_columns(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        film = DescribeTableOutput.model_validate(
            await call(client, "describe_table", table_name="film")
        )
    cols = {c.name: c for c in film.columns}
    fk = cols["language_id"].foreign_key
    assert fk is not None
    assert (fk.referenced_table, fk.referenced_column) == ("language", "language_id")
    assert fk.on_update == "CASCADE" and fk.on_delete == "RESTRICT"
    assert cols["film_id"].is_primary_key and cols["film_id"].is_unique
    assert cols["rating"].enum_values == ["G", "PG", "PG-13", "R", "NC-17"]
    assert cols["release_year"].domain_base_type == "integer"
    assert cols["rental_rate"].numeric_precision == 4 and cols["rental_rate"].numeric_scale == 2
    assert cols["title"].character_maximum_length is None  # text has no length limit
    assert film.type == "table" and film.estimated_row_count == 1000


async def test_partitioned_table_lists_its_partitions(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        listed = ListTablesOutput.model_validate(
            await call(client, "list_tables", name_pattern="payment%")
        )
        assert [t.name for t in listed.tables] == ["payment"]
        payment = listed.tables[0]
        assert payment.type == "partitioned table"
        assert payment.partitions is not None and len(payment.partitions) == 7
        assert payment.estimated_row_count == 16049
        assert payment.size_bytes and payment.size_bytes > 0

        described = DescribeTableOutput.model_validate(
            await call(client, "describe_table", table_name="payment")
        )
        assert described.partition_key == "RANGE (payment_date)"
        part = DescribeTableOutput.model_validate(
            await call(client, "describe_table", table_name=payment.partitions[0])
        )
        assert part.partition_of == "payment"


@pytest.mark.parametrize("name", DATASETS)
async def test_sample_rows_serialize_for_every_table(datasets: dict[str, str], name: str) -> None:
    dsn = datasets[name]
    relations = await fetch(dsn, TRUTH_TABLES)
    async with connect(dsn) as client:
        for rel in relations:
            out = GetSampleRowsOutput.model_validate(
                await call(
                    client,
                    "get_sample_rows",
                    table_name=rel["name"],
                    schema_name=rel["schema"],
                    limit=3,
                )
            )
            assert out.row_count == len(out.rows) <= 3
            json.dumps(out.rows, allow_nan=False)  # strict JSON: no NaN/Infinity literals
            for row in out.rows:
                assert list(row) == out.columns


async def test_sample_values_of_pagila_types(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        film = await call(client, "get_sample_rows", table_name="film", limit=1)
        staff = await call(client, "get_sample_rows", table_name="staff", limit=2)
        payment = await call(client, "get_sample_rows", table_name="payment", limit=1)
    row = film["rows"][0]
    assert row["film_id"] == 1
    assert row["rental_rate"] == 0.99  # numeric -> JSON number
    assert row["rating"] == "PG"  # enum
    assert isinstance(row["release_year"], int)  # domain over integer
    assert row["special_features"] == ["Deleted Scenes", "Behind the Scenes"]  # text[]
    assert "'academi':1" in row["fulltext"]  # tsvector as its text form
    assert row["last_update"].startswith("20") and "T" in row["last_update"]  # ISO timestamptz
    assert film["note"].startswith("first rows ordered by primary key")
    assert all(r["password"] == "[REDACTED]" for r in staff["rows"] if r["password"] is not None)
    assert "redacted sensitive columns: password" in staff["note"]
    assert isinstance(payment["rows"][0]["amount"], float)
