"""Layer 1 against the four sample databases, compared with what pg_catalog says.

The answers are compact (keys at their default left out, facts stated once), so these tests
check that every fact of the PRD's models is still there: the expected values come from
catalog queries written here (information_schema where it has the fact), independently of the
server's own SQL, so a wrong join in the server, or a fact dropped by compaction, shows up.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import asyncpg
import pytest
from mcp import Client
from mcpclient import call, connect, fetch

from pg_mcp_server.models.schema import (
    ColumnInfo,
    DescribeTableOutput,
    GetSampleRowsOutput,
    ListSchemasOutput,
    ListTablesOutput,
)

DATASETS = ["pagila", "chinook", "northwind", "adventureworks"]
KINDS = {
    "r": "table",
    "p": "partitioned table",
    "v": "view",
    "m": "materialized view",
    "f": "foreign table",
}

TRUTH_TABLES = """
SELECT n.nspname AS schema, c.relname AS name, c.relkind::text AS kind,
       obj_description(c.oid, 'pg_class') AS description,
       EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'p') AS pk,
       (SELECT count(*) FROM pg_attribute a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
       CASE WHEN c.relkind = 'p' THEN (
           SELECT sum(CASE WHEN l.reltuples >= 0 THEN l.reltuples
                           ELSE pg_stat_get_live_tuples(l.oid) END)::bigint
           FROM pg_partition_tree(c.oid) t JOIN pg_class l ON l.oid = t.relid WHERE t.isleaf)
       WHEN c.relkind = 'v' THEN 0
       WHEN c.reltuples >= 0 THEN c.reltuples::bigint
       ELSE pg_stat_get_live_tuples(c.oid) END AS estimate,
       ARRAY(SELECT ch.relname::text FROM pg_inherits i JOIN pg_class ch ON ch.oid = i.inhrelid
             WHERE i.inhparent = c.oid ORDER BY ch.relname) AS partitions
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
  AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
"""

# information_schema's view of the columns, with pg_catalog for what it lacks.
# information_schema's view of the columns, with pg_catalog for what it lacks (and for
# materialized views, which it leaves out, its own rule: NOT NULL, or a NOT NULL domain).
TRUTH_COLUMNS = """
SELECT a.attname AS column_name, format_type(a.atttypid, a.atttypmod) AS type,
       coalesce(ic.is_nullable = 'YES', NOT (a.attnotnull OR (t.typtype = 'd' AND t.typnotnull)))
           AS nullable, ic.column_default,
       ic.data_type, ic.character_maximum_length, ic.numeric_precision, ic.numeric_scale,
       ic.identity_generation, ic.generation_expression,
       col_description(a.attrelid, a.attnum) AS comment,
       CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) END AS domain_base,
       ARRAY(SELECT e.enumlabel::text FROM pg_enum e
             WHERE e.enumtypid IN (t.oid, t.typbasetype, t.typelem)
             ORDER BY e.enumsortorder) AS labels
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN information_schema.columns ic
  ON ic.table_schema = $2 AND ic.table_name = $3 AND ic.column_name = a.attname
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

TRUTH_UNIQUE = """
SELECT a.attname FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indnkeyatts = 1 AND i.indpred IS NULL
"""

TRUTH_CONSTRAINTS = """
SELECT conname, contype::text AS type,
       ARRAY(SELECT a.attname::text FROM unnest(conkey) WITH ORDINALITY u(n, o)
             JOIN pg_attribute a ON a.attrelid = conrelid AND a.attnum = u.n ORDER BY u.o) AS cols,
       pg_get_constraintdef(oid, true) AS definition
FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype IN ('p', 'u', 'c', 'x')
"""

# Foreign keys as get_foreign_keys reports them: a partitioned table's include those declared
# on its partitions (not the clones of its own), targets folded onto their root.
TRUTH_FOREIGN_KEYS = """
SELECT k.conname, dn.nspname AS to_schema, dst.relname AS to_table,
       confupdtype::text AS upd, confdeltype::text AS del,
       ARRAY(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY u(n, o)
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.o)
           AS cols,
       ARRAY(SELECT a.attname::text FROM unnest(k.confkey) WITH ORDINALITY u(n, o)
             JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n ORDER BY u.o)
           AS ref_cols
FROM pg_constraint k
JOIN pg_class src ON src.oid = to_regclass($1)
JOIN pg_class dst ON dst.oid = coalesce(pg_partition_root(k.confrelid), k.confrelid)
JOIN pg_namespace dn ON dn.oid = dst.relnamespace
WHERE k.contype = 'f' AND (k.conrelid = src.oid OR (src.relkind = 'p' AND k.conparentid = 0
      AND k.conrelid IN (SELECT relid FROM pg_partition_tree(src.oid))))
"""

TRUTH_INDEXES = """
SELECT ic.relname AS name, i.indisunique, i.indisprimary, am.amname,
       obj_description(i.indexrelid, 'pg_class') AS comment,
       ARRAY(SELECT CASE WHEN i.indkey[k - 1] > 0
                    THEN (SELECT a.attname::text FROM pg_attribute a
                          WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[k - 1])
                    ELSE pg_get_indexdef(i.indexrelid, k, true) END
             FROM generate_series(1, i.indnkeyatts) k ORDER BY k) AS cols,
       pg_get_indexdef(i.indexrelid) AS definition,
       -- What the answer's other keys say, written as a definition.
       format('CREATE %sINDEX %s ON %s USING %s (%s)',
              CASE WHEN i.indisunique THEN 'UNIQUE ' ELSE '' END, quote_ident(ic.relname),
              quote_ident(tn.nspname) || '.' || quote_ident(tc.relname), am.amname,
              (SELECT string_agg(pg_get_indexdef(i.indexrelid, k, false), ', ' ORDER BY k)
               FROM generate_series(1, i.indnkeyatts) k)) AS plain
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
JOIN pg_class tc ON tc.oid = i.indrelid JOIN pg_namespace tn ON tn.oid = tc.relnamespace
WHERE i.indrelid = to_regclass($1)
"""

RULES = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


def qualified(schema: str, name: str) -> str:
    return '"' + schema.replace('"', '""') + '"."' + name.replace('"', '""') + '"'


@pytest.mark.parametrize("name", DATASETS)
async def test_list_schemas_and_tables_carry_every_catalog_fact(
    datasets: dict[str, str], name: str
) -> None:
    dsn = datasets[name]
    truth = await fetch(dsn, TRUTH_TABLES)
    by_schema: dict[str, list[asyncpg.Record]] = defaultdict(list)
    for row in truth:
        by_schema[row["schema"]].append(row)

    async with connect(dsn) as client:
        schemas = ListSchemasOutput.model_validate(await call(client, "list_schemas"))
        listed = {s.name: s for s in schemas.schemas}
        assert schemas.total_count == len(schemas.schemas)
        assert "public" in listed
        assert not any(s.startswith("pg_") or s == "information_schema" for s in listed)
        for schema, rows in by_schema.items():
            tables = [r for r in rows if r["kind"] in ("r", "p", "f")]
            assert listed[schema].table_count == len(tables), schema
            assert listed[schema].view_count == len(rows) - len(tables), schema

            everything = ListTablesOutput.model_validate(
                await call(client, "list_tables", schema_name=schema)
            )
            assert everything.total_count == len(rows)
            got = {t.name: t for t in everything.tables}
            assert set(got) == {r["name"] for r in rows}
            for r in rows:
                t = got[r["name"]]
                assert t.type == KINDS[r["kind"]], r["name"]
                assert t.description == r["description"], r["name"]
                assert t.has_primary_key == r["pk"], r["name"]
                assert t.column_count == r["columns"], r["name"]
                assert t.estimated_row_count == r["estimate"], r["name"]
                assert (t.size_bytes or 0) > 0 or r["kind"] in ("v", "f"), r["name"]
                assert (t.partitions or []) == list(r["partitions"]), r["name"]
            only_tables = ListTablesOutput.model_validate(
                await call(client, "list_tables", schema_name=schema, include_views=False)
            )
            assert sorted(t.name for t in only_tables.tables) == sorted(r["name"] for r in tables)


def check_columns(regclass: str, columns: list[ColumnInfo], truth: list[asyncpg.Record]) -> None:
    assert [c.name for c in columns] == [t["column_name"] for t in truth], regclass
    for c, t in zip(columns, truth, strict=True):
        where = (regclass, c.name)
        assert c.data_type == t["type"], where
        assert c.is_nullable == t["nullable"], where
        assert c.default_value == t["column_default"], where
        assert c.description == t["comment"], where
        assert c.identity_generation == t["identity_generation"], where
        assert c.generation_expression == t["generation_expression"], where
        assert c.domain_base_type == t["domain_base"], where
        assert (c.enum_values or []) == list(t["labels"]), where
        # Length, precision and scale are read from the type as PostgreSQL prints it.
        spelled = c.domain_base_type or c.data_type
        if t["character_maximum_length"] is not None:
            assert f"({t['character_maximum_length']})" in spelled, where
        if t["data_type"] == "numeric" and t["numeric_precision"] is not None:
            assert f"({t['numeric_precision']},{t['numeric_scale']})" in spelled, where


def check_foreign_keys(regclass: str, out: DescribeTableOutput, truth: list[Any]) -> None:
    """Every key is in `constraints`, or, with one column, on that column, with its rules."""
    assert out.constraints is not None
    listed = {c.name: c for c in out.constraints if c.type == "FOREIGN KEY"}
    on_columns = {
        c.foreign_key.constraint_name: (c, c.foreign_key) for c in out.columns if c.foreign_key
    }
    names = {t["conname"] for t in truth}
    assert set(listed) | set(on_columns) <= names, regclass
    signatures = {
        (tuple(t["cols"]), t["to_schema"], t["to_table"], tuple(t["ref_cols"])) for t in truth
    }
    shown = set()
    for c in listed.values():
        assert c.referenced_table is not None and c.referenced_columns is not None
        shown.add(
            (tuple(c.columns), c.referenced_schema, c.referenced_table, tuple(c.referenced_columns))
        )
    for name, (column, fk) in on_columns.items():
        key = next(t for t in truth if t["conname"] == name)
        assert (fk.on_update, fk.on_delete) == (RULES[key["upd"]], RULES[key["del"]]), name
        if name not in listed:
            assert list(key["cols"]) == [column.name], name
            shown.add(
                ((column.name,), fk.referenced_schema, fk.referenced_table, (fk.referenced_column,))
            )
    assert shown == signatures, regclass


@pytest.mark.parametrize("name", DATASETS)
async def test_describe_carries_every_catalog_fact(datasets: dict[str, str], name: str) -> None:
    dsn = datasets[name]
    relations = await fetch(
        dsn,
        TRUTH_TABLES
        + " UNION ALL "
        + TRUTH_TABLES.replace("AND NOT c.relispartition", "AND c.relispartition"),
    )
    assert relations
    # One connection for the truth (six queries per relation): a connection per query cost
    # more than the describe calls under test (over 500 for AdventureWorks).
    truth = await asyncpg.connect(dsn)
    try:
        async with connect(dsn) as client:
            for rel in relations:
                await _check_described(client, truth, rel)
    finally:
        await truth.close()


async def _check_described(client: Client, truth: asyncpg.Connection, rel: asyncpg.Record) -> None:
    """describe_table's answer for one relation against the catalog's own."""
    schema, table = rel["schema"], rel["name"]
    regclass = qualified(schema, table)
    out = DescribeTableOutput.model_validate(
        await call(client, "describe_table", table_name=table, schema_name=schema)
    )
    assert (out.type, out.description) == (KINDS[rel["kind"]], rel["description"])
    assert out.estimated_row_count == rel["estimate"], regclass
    check_columns(regclass, out.columns, await truth.fetch(TRUTH_COLUMNS, regclass, schema, table))

    constraints = await truth.fetch(TRUTH_CONSTRAINTS, regclass)
    assert out.constraints is not None
    got = {c.name: c for c in out.constraints if c.type != "FOREIGN KEY"}
    assert set(got) == {c["conname"] for c in constraints}, regclass
    for c in constraints:
        mine = got[c["conname"]]
        assert mine.columns == list(c["cols"]), (regclass, c["conname"])
        assert (
            mine.type
            == {"p": "PRIMARY KEY", "u": "UNIQUE", "c": "CHECK", "x": "EXCLUDE"}[c["type"]]
        )
        assert mine.definition == (c["definition"] if c["type"] in "cx" else None)
        if c["type"] == "p":
            assert {col.name for col in out.columns if col.is_primary_key} == set(c["cols"])
    unique = {r["attname"] for r in await truth.fetch(TRUTH_UNIQUE, regclass)}
    assert {c.name for c in out.columns if c.is_unique} == unique, regclass
    check_foreign_keys(regclass, out, await truth.fetch(TRUTH_FOREIGN_KEYS, regclass))

    indexes = {i["name"]: i for i in await truth.fetch(TRUTH_INDEXES, regclass)}
    assert out.indexes is not None
    assert {i.name for i in out.indexes} == set(indexes), regclass
    for i in out.indexes:
        t = indexes[i.name]
        assert i.columns == list(t["cols"]), i.name
        assert (i.is_unique, i.is_primary) == (t["indisunique"], t["indisprimary"])
        assert (i.index_type, i.description) == (t["amname"], t["comment"]), i.name
        # The definition is left out only when it says nothing the other keys do not.
        assert i.definition == (None if t["definition"] == t["plain"] else t["definition"])


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
    assert cols["rental_rate"].data_type == "numeric(4,2)"
    assert film.type == "table" and film.estimated_row_count == 1000


async def test_partitioned_table_lists_its_partitions_and_their_keys(
    datasets: dict[str, str],
) -> None:
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
        # Pagila declares payment's foreign keys on each partition: they are payment's.
        targets = {
            c.name: c.foreign_key.referenced_table for c in described.columns if c.foreign_key
        }
        assert targets == {"customer_id": "customer", "staff_id": "staff", "rental_id": "rental"}
        part = DescribeTableOutput.model_validate(
            await call(client, "describe_table", table_name=payment.partitions[0])
        )
        assert part.partition_of == "payment"


STAND_IN = "runs function public.crosstab(text, text), which runs SQL built at run time"


@pytest.mark.parametrize("name", DATASETS)
async def test_sample_rows_serialize_for_every_table(datasets: dict[str, str], name: str) -> None:
    dsn = datasets[name]
    relations = await fetch(dsn, TRUTH_TABLES)
    async with connect(dsn) as client:
        for rel in relations:
            args = {"table_name": rel["name"], "schema_name": rel["schema"], "limit": 3}
            result = await client.call_tool("get_sample_rows", args)
            body = json.loads(result.content[0].text)  # type: ignore[union-attr]
            if result.is_error and STAND_IN in body["error"]["message"]:
                # Without contrib's tablefunc (the pgserver wheel's 16), the test bed's crosstab
                # stand-in runs its SQL text with EXECUTE, which the guard rightly refuses.
                assert body["error"]["context"]["rule"] == "unanalysable_body", body
                continue
            assert not result.is_error, body
            out = GetSampleRowsOutput.model_validate(body)
            assert out.row_count == len(out.rows) <= 3
            for row in out.rows:
                assert len(row) == len(out.columns)


async def test_sample_values_of_pagila_types(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        film = await call(client, "get_sample_rows", table_name="film", limit=1)
        staff = await call(client, "get_sample_rows", table_name="staff", limit=2)
        payment = await call(client, "get_sample_rows", table_name="payment", limit=1)

    def rows(out: dict[str, Any]) -> list[dict[str, Any]]:
        return [dict(zip(out["columns"], r, strict=True)) for r in out["rows"]]

    row = rows(film)[0]
    assert row["film_id"] == 1
    assert row["rental_rate"] == 0.99  # numeric -> JSON number
    assert row["rating"] == "PG"  # enum
    assert isinstance(row["release_year"], int)  # domain over integer
    assert row["special_features"] == ["Deleted Scenes", "Behind the Scenes"]  # text[]
    assert "'academi':1" in row["fulltext"]  # tsvector as its text form
    assert row["last_update"].startswith("20") and "T" in row["last_update"]  # ISO timestamptz
    assert film["note"].startswith("first rows ordered by primary key")
    assert all(r["password"] == "[REDACTED]" for r in rows(staff) if r["password"] is not None)
    assert "redacted sensitive columns: password" in staff["note"]
    assert isinstance(rows(payment)[0]["amount"], float)
