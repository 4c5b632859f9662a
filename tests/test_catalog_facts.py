"""Key facts an agent can trust (issue 23): every foreign key with all its columns wherever it
is shown, NOT VALID keys marked (and find_join_path's count of the rows that break one),
materialized views never refreshed, column comments in the schema map, search results with
`empty` and the primary key. Checked on a database built with each hard case, against
pg_catalog read here, independently of the server's SQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from mcp import Client
from mcpclient import call, call_error, execute, fetch, held_client, module_database
from pgbed import PgServer
from schemamap import map_line

from pg_mcp_server.database.rows import cut_marker
from pg_mcp_server.database.vectors import schema_vectors
from pg_mcp_server.models.relationships import FindJoinPathOutput, GetForeignKeysOutput
from pg_mcp_server.models.schema import (
    DescribeTableOutput,
    ForeignKeyRef,
    ListTablesOutput,
    SearchTablesOutput,
)

LONG = "Airport name as the FAA registry spells it, " * 3  # 132 characters

SETUP = f"""
CREATE SCHEMA other;
CREATE TABLE other.region (code text PRIMARY KEY);
CREATE TABLE airport (faa text PRIMARY KEY, name text);
COMMENT ON COLUMN airport.name IS '{LONG}';
CREATE TABLE weather (origin text, time_hour timestamptz, temp real,
                      PRIMARY KEY (origin, time_hour));
COMMENT ON COLUMN weather.temp IS 'Temperature, in degrees Fahrenheit';
CREATE TABLE flight (id int PRIMARY KEY, dest text NOT NULL, origin text NOT NULL,
                     time_hour timestamptz NOT NULL, region text REFERENCES other.region);
COMMENT ON COLUMN flight.dest IS 'Destination airport (FAA code)';
INSERT INTO airport VALUES ('JFK', 'Kennedy'), ('LGA', 'LaGuardia');
INSERT INTO weather VALUES ('JFK', '2013-01-01 05:00+00', 39);
-- A quarter of the flights go to an airport the table does not have: orphans.
INSERT INTO flight SELECT g, CASE WHEN g % 4 = 0 THEN 'XXX' ELSE 'LGA' END, 'JFK',
                          '2013-01-01 05:00+00', NULL
FROM generate_series(1, 100) g;
ALTER TABLE flight ADD CONSTRAINT flight_dest_fkey FOREIGN KEY (dest) REFERENCES airport
  NOT VALID;
-- origin is in two keys: its own and the two-column key to weather.
ALTER TABLE flight ADD CONSTRAINT flight_origin_fkey FOREIGN KEY (origin) REFERENCES airport;
ALTER TABLE flight ADD CONSTRAINT flight_weather_fkey FOREIGN KEY (origin, time_hour)
  REFERENCES weather;
ALTER TABLE flight ADD CONSTRAINT flight_id_check CHECK (id > 0) NOT VALID;
CREATE MATERIALIZED VIEW busy AS SELECT dest, count(*) FROM flight GROUP BY dest WITH NO DATA;
CREATE MATERIALIZED VIEW busy_now AS SELECT dest, count(*) FROM flight GROUP BY dest;
CREATE TABLE empty_thing (a int, b int, PRIMARY KEY (b, a));
CREATE TABLE "public.loans" (id int PRIMARY KEY, note text);
CREATE TABLE loans (id int PRIMARY KEY, amount numeric);
CREATE SCHEMA "Public";
CREATE TABLE "Public"."Loans" (id int, x text);
INSERT INTO other.region VALUES ('NE');
ANALYZE;
"""

TRUTH_KEYS = """
SELECT k.conname, c.relname::text AS tbl, pn.nspname::text AS ref_schema,
       p.relname::text AS ref_table, k.convalidated, p.relnamespace = c.relnamespace AS same,
       ARRAY(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY u(n, o)
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.o)
           AS cols,
       ARRAY(SELECT a.attname::text FROM unnest(k.confkey) WITH ORDINALITY u(n, o)
             JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n ORDER BY u.o)
           AS ref_cols
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_class p ON p.oid = k.confrelid JOIN pg_namespace pn ON pn.oid = p.relnamespace
WHERE k.contype = 'f'
"""

TRUTH_COLUMNS = """
SELECT c.relname::text AS tbl, a.attname::text AS name,
       format_type(a.atttypid, a.atttypmod) AS type,
       EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'p'
               AND a.attnum = ANY (k.conkey)) AS pk,
       col_description(c.oid, a.attnum) AS comment
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT attisdropped
WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'm')
ORDER BY c.relname, a.attnum
"""


# pgvector ships with the embedded 18 and the pgserver wheel's 16, not with Debian's 15.
VECTORS = """
CREATE EXTENSION vector;
CREATE SCHEMA vec;
CREATE TABLE vec.doc (id int PRIMARY KEY, body text, embedding vector(3), plain vector(3),
                      loose vector, l2 vector(2));
CREATE INDEX doc_embedding_idx ON vec.doc USING hnsw (embedding vector_cosine_ops);
CREATE INDEX doc_l2_part_idx ON vec.doc USING ivfflat (l2 vector_l2_ops) WHERE id > 0;
COMMENT ON COLUMN vec.doc.embedding IS 'Body embedding';
INSERT INTO vec.doc (id, body, embedding) VALUES (1, 'east', '[1,0,0]'), (2, 'north', '[0,1,0]');
"""


@pytest_asyncio.fixture(scope="module")
async def dsn(pg: PgServer) -> AsyncIterator[str]:
    async with module_database(pg, "facts", SETUP) as made:
        available = await fetch(made, "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if available:
            await execute(made, VECTORS)
        yield made


async def vectors_or_skip(dsn: str, pg: PgServer) -> None:
    if not await fetch(dsn, "SELECT 1 FROM pg_extension WHERE extname = 'vector'"):
        assert pg.source == "pg15", "pgvector ships with every other test server"
        pytest.skip("Debian's PostgreSQL 15 has no pgvector")


@pytest_asyncio.fixture(scope="module")
async def client(dsn: str) -> AsyncIterator[Client]:
    async with held_client(dsn) as held:
        yield held


def expected_line(column: Any, keys: list[Any]) -> str:
    """The schema map's line for a column (schemamap.map_line) from the catalog's facts."""
    mine = [
        {
            "conname": k["conname"],
            "cols": k["cols"],
            "ref_cols": k["ref_cols"],
            "validated": k["convalidated"],
            "target": ("" if k["same"] else f"{k['ref_schema']}.") + k["ref_table"],
        }
        for k in keys
        if k["tbl"] == column["tbl"] and column["name"] in k["cols"]
    ]
    return map_line(f"{column['name']} {column['type']}", column["pk"], mine, column["comment"])


async def test_schema_map_shows_each_key_whole_and_marks_not_valid(
    client: Client, dsn: str
) -> None:
    keys = await fetch(dsn, TRUTH_KEYS)
    maps: dict[str, dict[str, list[str] | None]] = {}
    for schema in ("public", "other"):
        columns = await fetch(dsn, TRUTH_COLUMNS, schema)
        listed = ListTablesOutput.model_validate(
            await call(client, "list_tables", schema_name=schema, include_columns=True)
        )
        maps[schema] = got = {t.name: t.columns for t in listed.tables}
        want: dict[str, list[str] | None] = {}
        for column in columns:
            lines = want.setdefault(column["tbl"], [])
            assert lines is not None
            lines.append(expected_line(column, keys))
        assert got == want, schema
    flight = dict(
        zip(
            ["id", "dest", "origin", "time_hour", "region"],
            maps["public"]["flight"] or [],
            strict=True,
        )
    )
    # The wording itself, once, as docs/tools.md documents it.
    assert flight["origin"] == (
        "origin text -> airport.faa -> weather(origin, time_hour) "
        "[key flight_weather_fkey with time_hour]"
    )
    assert flight["time_hour"] == "time_hour timestamp with time zone [in key flight_weather_fkey]"
    assert (
        flight["dest"] == "dest text -> airport.faa [NOT VALID] -- Destination airport (FAA code)"
    )
    assert flight["region"] == "region text -> other.region.code"
    name = (maps["public"]["airport"] or [])[1]
    assert name == f"name text -- {LONG[:80]}...[cut: {len(LONG)} chars]"


def key_facts(ref: ForeignKeyRef, column: str) -> tuple[Any, ...]:
    columns = ref.columns or [column]
    referenced = ref.referenced_columns or [ref.referenced_column]
    assert ref.referenced_column == referenced[columns.index(column)]
    return (
        ref.constraint_name,
        tuple(columns),
        ref.referenced_table,
        tuple(referenced),
        ref.not_valid,
    )


async def test_describe_names_every_key_of_a_column_with_all_its_columns(
    client: Client, dsn: str
) -> None:
    keys = [k for k in await fetch(dsn, TRUTH_KEYS) if k["tbl"] == "flight"]
    out = DescribeTableOutput.model_validate(
        await call(client, "describe_table", table_name="flight")
    )
    for column in out.columns:
        refs = ([column.foreign_key] if column.foreign_key else []) + (
            column.other_foreign_keys or []
        )
        got = [key_facts(r, column.name) for r in refs]
        want = [
            (
                k["conname"],
                tuple(k["cols"]),
                k["ref_table"],
                tuple(k["ref_cols"]),
                not k["convalidated"],
            )
            for k in sorted(keys, key=lambda k: (len(k["cols"]), k["conname"]))
            if column.name in k["cols"]
        ]
        assert got == want, column.name
        # one-column keys carry no column lists: their column is the list
        for r in refs:
            assert (r.columns is None) == (len(r.referenced_columns or [0]) == 1)
    assert out.constraints is not None
    listed = {c.name: c for c in out.constraints}
    several = {k["conname"]: k for k in keys if len(k["cols"]) > 1}
    assert {n for n, c in listed.items() if c.type == "FOREIGN KEY"} == set(several)
    weather = listed["flight_weather_fkey"]
    assert (weather.columns, weather.referenced_columns) == (
        ["origin", "time_hour"],
        ["origin", "time_hour"],
    )
    assert listed["flight_id_check"].not_valid and not listed["flight_pkey"].not_valid


async def test_get_foreign_keys_marks_not_valid_keys(client: Client, dsn: str) -> None:
    keys = {k["conname"]: k for k in await fetch(dsn, TRUTH_KEYS) if k["tbl"] == "flight"}
    out = GetForeignKeysOutput.model_validate(
        await call(client, "get_foreign_keys", table_name="flight")
    )
    assert {k.constraint_name: k.not_valid for k in out.outgoing} == {
        name: not k["convalidated"] for name, k in keys.items()
    }
    raw = await call(client, "get_foreign_keys", table_name="airport")
    assert [k.get("not_valid") for k in raw["incoming"]] == [True, None]


async def test_join_path_over_a_not_valid_key_says_how_many_rows_it_drops(
    client: Client, dsn: str
) -> None:
    orphans = await fetch(
        dsn,
        "SELECT count(*) AS n FROM flight f WHERE NOT EXISTS "
        "(SELECT 1 FROM airport a WHERE a.faa = f.dest)",
    )
    count = orphans[0]["n"]
    assert count == 25
    out = FindJoinPathOutput.model_validate(
        await call(client, "find_join_path", from_table="flight", to_table="airport")
    )
    by_key = {p.steps[0]: p for p in out.paths}
    dest = by_key["flight_dest_fkey"]
    # Rows may not match: a LEFT JOIN, and a note with the count, how they are kept.
    assert dest.sql_example == "FROM flight f LEFT JOIN airport a ON f.dest = a.faa"
    assert dest.not_valid == [
        f"flight_dest_fkey is NOT VALID: {count} flight rows reference no airport; "
        "the LEFT JOIN here keeps them; an inner JOIN would drop them"
    ]
    origin = by_key["flight_origin_fkey"]
    assert origin.sql_example == "FROM flight f JOIN airport a ON f.origin = a.faa"
    assert origin.not_valid == []
    back = FindJoinPathOutput.model_validate(
        await call(client, "find_join_path", from_table="airport", to_table="flight")
    )
    reverse = {p.steps[0]: p for p in back.paths}["flight_dest_fkey"]
    assert reverse.not_valid == [
        f"flight_dest_fkey is NOT VALID: {count} flight rows reference no airport; "
        "a join from airport never reaches them: start from flight to see them"
    ]


async def test_unpopulated_materialized_view_is_marked(client: Client, dsn: str) -> None:
    truth = {
        r["relname"]: r["relispopulated"]
        for r in await fetch(
            dsn, "SELECT relname::text, relispopulated FROM pg_class WHERE relkind = 'm'"
        )
    }
    assert truth == {"busy": False, "busy_now": True}
    listed = await call(client, "list_tables", name_pattern="busy%")
    assert {t["name"]: t.get("populated", True) for t in listed["tables"]} == truth
    found = SearchTablesOutput.model_validate(await call(client, "search_tables", query="busy"))
    assert {m.table_name: m.populated for m in found.matches} == truth
    described = await call(client, "describe_table", table_name="busy")
    assert described["populated"] is False
    assert "populated" not in await call(client, "describe_table", table_name="busy_now")


async def test_search_results_carry_empty_and_the_primary_key(client: Client) -> None:
    found = SearchTablesOutput.model_validate(
        await call(client, "search_tables", query="empty thing")
    )
    first = found.matches[0]
    assert (first.table_name, first.empty, first.primary_key) == ("empty_thing", True, ["b", "a"])
    flights = SearchTablesOutput.model_validate(await call(client, "search_tables", query="dest"))
    flight = next(m for m in flights.matches if m.table_name == "flight")
    assert (flight.empty, flight.primary_key) == (False, ["id"])
    assert flight.columns == [
        "dest text -> airport.faa [NOT VALID] -- Destination airport (FAA code)"
    ]


async def test_qualified_names_are_split_as_postgresql_parses_them(client: Client) -> None:
    async def described(**arguments: Any) -> tuple[str, str, list[str]]:
        out = DescribeTableOutput.model_validate(await call(client, "describe_table", **arguments))
        return out.schema_name, out.table_name, [c.name for c in out.columns]

    # A table named with a dot is found by its exact name first.
    assert await described(table_name="public.loans") == ("public", "public.loans", ["id", "note"])
    assert await described(table_name="other.region") == ("other", "region", ["code"])
    assert await described(table_name='"Public"."Loans"') == ("Public", "Loans", ["id", "x"])
    # Unquoted parts fold to lower case, as in SQL.
    assert await described(table_name="Public.Loans") == ("public", "loans", ["id", "amount"])
    assert await described(table_name='"Loans"', schema_name="Public") == (
        "Public",
        "Loans",
        ["id", "x"],
    )
    assert await described(table_name="other.region", schema_name="other") == (
        "other",
        "region",
        ["code"],
    )
    sample = await call(client, "get_sample_rows", table_name="other.region")
    assert (sample["schema_name"], sample["table_name"], sample["rows"]) == (
        "other",
        "region",
        [["NE"]],
    )
    keys = GetForeignKeysOutput.model_validate(
        await call(client, "get_foreign_keys", table_name="other.region")
    )
    assert [k.constraint_name for k in keys.incoming] == ["flight_region_fkey"]
    path = FindJoinPathOutput.model_validate(
        await call(client, "find_join_path", from_table="public.flight", to_table="other.region")
    )
    assert path.paths[0].steps == ["flight_region_fkey"]


async def test_a_qualified_name_against_another_schema_name_is_refused(client: Client) -> None:
    body = await call_error(
        client, "describe_table", table_name="other.region", schema_name="Public"
    )
    error = body["error"]
    assert error["code"] == "PARAMETER_ERROR"
    assert "schema_name='other', table_name='region'" in error["suggestion"]
    assert error["context"]["schema_name"] == "other"


TRUTH_VECTOR_INDEXES = """
SELECT a.attname::text AS column_name, ic.relname::text AS index, am.amname::text AS method,
       oc.opcname::text AS opclass, i.indpred IS NOT NULL AS partial
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
JOIN pg_opclass oc ON oc.oid = i.indclass[0]
WHERE i.indrelid = 'vec.doc'::regclass AND am.amname IN ('hnsw', 'ivfflat')
"""


async def test_vector_columns_show_their_search_in_discovery(
    client: Client, dsn: str, pg: PgServer
) -> None:
    await vectors_or_skip(dsn, pg)
    indexes = {r["column_name"]: r for r in await fetch(dsn, TRUTH_VECTOR_INDEXES)}
    assert indexes["embedding"]["opclass"] == "vector_cosine_ops"
    assert indexes["l2"]["opclass"] == "vector_l2_ops" and indexes["l2"]["partial"]
    out = DescribeTableOutput.model_validate(
        await call(client, "describe_table", table_name="doc", schema_name="vec")
    )
    facts = {c.name: c.vector.dump() if c.vector else None for c in out.columns}
    assert facts == {
        "id": None,
        "body": None,
        "embedding": {
            "dimensions": 3,
            "distance": "cosine",
            "operator": "<=>",
            "index": indexes["embedding"]["index"],
        },
        "plain": {
            "dimensions": 3,
            "distance": "cosine",
            "operator": "<=>",
            "note": "no vector index: similarity searches scan the table",
        },
        "loose": {
            "distance": "cosine",
            "operator": "<=>",
            "note": "no vector index: similarity searches scan the table",
        },
        "l2": {
            "dimensions": 2,
            "distance": "l2",
            "operator": "<->",
            "index": indexes["l2"]["index"],
            "partial_index": True,
        },
    }
    # The same facts similarity_search reads (vectors.schema_vectors), column by column.
    conn = await asyncpg.connect(dsn)
    try:
        searched = {c.name: c.describe() for c in (await schema_vectors(conn, "vec"))["doc"]}
    finally:
        await conn.close()
    for name, seen in searched.items():
        mine = facts[name]
        assert mine is not None
        assert (mine["distance"], mine["operator"]) == (
            seen["search_distance"],
            seen["search_operator"],
        )
        assert mine.get("dimensions") == seen["dimensions"], name
        assert mine.get("index") == next((i["name"] for i in seen["indexes"]), None), name
    listed = await call(client, "list_tables", schema_name="vec", include_columns=True)
    assert listed["tables"][0]["columns"] == [
        "id integer PK",
        "body text",
        "embedding vector(3) [hnsw cosine <=>] -- Body embedding",
        "plain vector(3) [no vector index]",
        "loose vector [no vector index]",
        "l2 vector(2) [ivfflat l2 <->, partial index]",
    ]
    for word in ("embeddings", "vector", "semantic", "similar"):
        found = SearchTablesOutput.model_validate(
            await call(client, "search_tables", query=f"{word} search")
        )
        doc = next(m for m in found.matches if m.table_name == "doc")
        assert "embedding vector(3) [hnsw cosine <=>] -- Body embedding" in doc.columns, word
        assert "plain vector(3) [no vector index]" in doc.columns, word


def test_the_catalog_knows_pgvector_as_similarity_search_does() -> None:
    from pg_mcp_server.database.catalog import tables
    from pg_mcp_server.database.vectors import columns

    assert tables.VECTOR_TYPES == columns.VECTOR_TYPES
    assert tables.DISTANCES == columns.DISTANCES
    assert tables.DEFAULT_DISTANCE == columns.DEFAULT_DISTANCE
    assert tables.CUT_MARK_SQL.format(length="n") == (
        "pg_catalog.format('" + cut_marker(0).replace("0", "%s") + "', n)"
    )


async def test_similarity_search_takes_a_qualified_name(
    client: Client, dsn: str, pg: PgServer
) -> None:
    await vectors_or_skip(dsn, pg)
    out = await call(
        client,
        "similarity_search",
        table_name="vec.doc",
        column="embedding",
        query_vector=[1, 0, 0],
        limit=1,
        columns=["id", "body"],
    )
    assert out["rows"][0][:2] == [1, "east"]


def test_a_key_on_a_table_too_big_to_read_is_said_not_counted() -> None:
    """The note when the count is not made (pure: which note the facts give)."""
    from pg_mcp_server.database.catalog import joinsql
    from pg_mcp_server.database.catalog.joinpaths import Edge, Graph
    from pg_mcp_server.database.catalog.keys import ForeignKey

    def key(rows: int | None) -> ForeignKey:
        return ForeignKey(
            "flight_dest_fkey", "public", "flight", 1, "public", "airport", 2,
            ("dest",), ("faa",), "NO ACTION", "NO ACTION", validated=False, from_rows=rows,
            not_null=True, from_unique=False, from_visible=True, to_visible=True,
        )  # fmt: skip

    big = key(joinsql.ORPHAN_SCAN_ROWS + 1)
    graph = Graph([big])
    assert not joinsql.countable(big)
    assert joinsql.unchecked_notes(graph, [Edge(big, True)], {}) == [
        f"flight_dest_fkey is NOT VALID: some flight rows may reference no airport (not "
        f"counted: about {joinsql.ORPHAN_SCAN_ROWS + 1} rows to read); the LEFT JOIN here "
        "keeps them; an inner JOIN would drop them"
    ]
    partitioned = key(None)
    assert joinsql.unchecked_notes(Graph([partitioned]), [Edge(partitioned, True)], {}) == [
        "flight_dest_fkey is NOT VALID: some flight rows may reference no airport (not "
        "counted); the LEFT JOIN here keeps them; an inner JOIN would drop them"
    ]
    capped: dict[str, int | None] = {"flight_dest_fkey": joinsql.ORPHAN_CAP}
    assert joinsql.unchecked_notes(graph, [Edge(big, True)], capped)[0].startswith(
        f"flight_dest_fkey is NOT VALID: at least {joinsql.ORPHAN_CAP} flight rows"
    )
