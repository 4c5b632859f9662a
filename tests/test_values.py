"""Any type PostgreSQL can return comes back as JSON (issue 15 item 3): a table of types, each
value compared with what PostgreSQL itself makes of it (`to_json`), through execute_query and
get_sample_rows, as columns, whole-row references, records and arrays; and the structured
results validate against the tools' output schemas."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import jsonschema
import pytest_asyncio
from mcp import Client
from mcpclient import call, connect, execute, fetch, records
from pgbed import PgServer, server_features

TYPES = r"""
CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TYPE pair AS (k text, v numeric, at timestamptz, tags text[]);
CREATE DOMAIN checked_pair AS pair CHECK ((VALUE).k IS NOT NULL);
CREATE TABLE kinds (
  id int PRIMARY KEY, i2 int2, i8 int8, n numeric, n_big numeric, n_nan numeric, f4 float4,
  f8 float8, f8_inf float8, b bool, t text, vc varchar(10), ch char(3), nm name, qc "char",
  by bytea, d date, d_inf date, tm time, tz timetz, ts timestamp, tstz timestamptz,
  tstz_inf timestamptz, iv interval, iv_neg interval, u uuid, j json, jb jsonb, ip inet,
  net cidr, mac macaddr, mac8 macaddr8, bits bit(3), vbits varbit, m money, lsn pg_lsn,
  tsv tsvector, tsq tsquery, pt point, ln line, seg lseg, bx box, pth path, poly polygon,
  circ circle, r int4range, nr numrange, tr tstzrange, dr daterange, mr int4multirange,
  e mood, es mood[], dom posint, cp pair, cps pair[], dcp checked_pair, ia int[],
  grid int[], ta text[], ra int4range[], o oid, rc regclass, rt regtype,
  xid8v xid8, nul text
);
INSERT INTO kinds VALUES (
  1, -32768, 9007199254740993, 12.345, 12345678901234567890.123456789, 'NaN', 1.5, 0.1,
  '-Infinity', true, 'ça "va" \ fine', 'short', 'ab', 'pg_class', 'x',
  '\xdeadbeef', '2024-02-29', 'infinity', '13:14:15.5', '13:14:15+02', '2024-01-02 03:04:05.678',
  '2024-01-02 03:04:05+00', '-infinity', '1 year 2 mons 3 days 04:05:06.7', '-1 day +02:00',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"k": [1, 2.5, null], "s": "x"}',
  '{"b": 2, "a": [true]}', '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03',
  '08:00:2b:01:02:03:04:05', B'101', B'10', 12.5, '0/16B6C50', 'fat:1 rat:2',
  'fat & rat', '(1,2)', '{1,2,3}', '[(0,0),(1,1)]', '((0,0),(1,1))', '((0,0),(1,1),(2,0))',
  '((0,0),(1,0),(1,1))', '<(1,1),2>', '[1,5)', '(1.5,2.25]',
  '[2024-01-01 00:00:00+00,2024-02-01 00:00:00+00)', '[2024-01-01,2024-02-01)',
  '{[1,2),[5,7)}', 'ok', '{sad,ok}', 7, '(a,1.5,2024-01-01 00:00:00+00,"{x,y}")',
  ARRAY['(a,1,,)', '(b,2,,{})']::pair[], '(k,3,,)', '{1,NULL,3}', '{{1,2},{3,4}}',
  '{"a b",NULL,""}', ARRAY['[1,2)'::int4range, 'empty'], 4242,
  'pg_class', 'int4', '123', NULL
), (2, 0, 0, 0, -0.5, 1e-20, 0, 0, 'NaN', false, '', '', '', '', '', '', '2000-01-01',
  '-infinity', '00:00', '00:00+00', 'infinity', '2000-01-01 00:00:00+00', 'infinity', '0',
  '-1 mons -02:00:00.5', '00000000-0000-0000-0000-000000000000', 'null', '[]', '::1', '::/0',
  '00:00:00:00:00:00', '00:00:00:00:00:00:00:00', B'000', B'', 0, '0/0', '', 'a', '(0,0)',
  '{1,-1,0}', '[(0,0),(0,0)]', '((0,0),(0,0))', '[(0,0),(1,1)]', '((0,0))', '<(0,0),0>',
  'empty', 'empty', '(,)', '(,)', '{}', 'sad', '{}', 1, '(,,,)', '{}', '(z,0,,)', '{}',
  '{}', '{}', '{}', 0, '-', '-', '0', NULL
);
"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def kinds_dsn(pg: PgServer) -> AsyncIterator[str]:
    db = await pg.create_database("kinds")
    await execute(db.dsn, TYPES)
    extensions = (await server_features(pg)).extensions
    # Contrib types where contrib is installed (the pgserver wheel's 16 has none of it).
    for extension, column in (
        ("citext", "ci citext DEFAULT 'MiXeD'"),
        ("hstore", "h hstore DEFAULT 'a=>1, \"b c\"=>NULL'"),
    ):
        if extension in extensions:
            await execute(
                db.dsn, f"CREATE EXTENSION {extension}; ALTER TABLE kinds ADD COLUMN {column}"
            )
    if (await server_features(pg)).xml:
        await execute(db.dsn, "ALTER TABLE kinds ADD COLUMN x xml DEFAULT '<a b=\"1\">t</a>'")
    if "postgis" in (await server_features(pg)).extensions:
        await execute(
            db.dsn,
            "CREATE EXTENSION postgis; "
            "ALTER TABLE kinds ADD COLUMN geo geometry DEFAULT 'SRID=4326;POINT(1 2)'",
        )
    yield db.dsn
    await pg.drop_database(db.name)


def _expected(type_name: str, pg_json: Any, pg_text: str | None) -> Any:
    """What we return for a top-level value, from PostgreSQL's to_json of it: the same, except
    numeric (a JSON number only while a double holds it exactly) and bytea (base64)."""
    if pg_text is None:
        return None
    if type_name == "bytea":
        return base64.b64encode(bytes.fromhex(pg_text[2:])).decode()
    if type_name == "numeric":
        value = Decimal(pg_text)
        if value.is_finite() and Decimal(repr(float(value))) == value:
            return float(value)
        return pg_text
    return pg_json


async def test_every_type_matches_what_postgres_makes_of_it(kinds_dsn: str) -> None:
    columns = await fetch(
        kinds_dsn,
        "SELECT a.attname, format_type(a.atttypid, NULL) AS type, t.typname "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = 'kinds'::regclass AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum",
    )
    names = [c["attname"] for c in columns]
    # PostgreSQL's own JSON and text form of every value, read column by column.
    select = ", ".join(f"to_json({n})::text AS {n}_j, {n}::text AS {n}_t" for n in names)
    theirs = await fetch(kinds_dsn, f"SELECT {select} FROM kinds ORDER BY id")
    async with connect(kinds_dsn) as client:
        out = await call(client, "execute_query", sql="SELECT * FROM kinds ORDER BY id")
        sample = await call(client, "get_sample_rows", table_name="kinds")
        whole = await call(
            client,
            "execute_query",
            sql="SELECT k, row(k.id, k.cp, 'x') AS r FROM kinds k",
            full_values=["k", "r"],  # a whole row's JSON is longer than a cut value
        )
        await _validates(client, out, sample, whole)
    assert [c["name"] for c in out["columns"]] == names
    for index, row in enumerate(theirs):
        for position, column in enumerate(columns):
            name = column["attname"]
            pg_json = json.loads(row[f"{name}_j"]) if row[f"{name}_j"] is not None else None
            want = _expected(column["typname"], pg_json, row[f"{name}_t"])
            assert out["rows"][index][position] == want, (name, column["type"])
            assert records(sample)[index][name] == want, (name, column["type"])
    # Whole-row references and records are objects, exactly as PostgreSQL renders them.
    theirs_whole = await fetch(
        kinds_dsn,
        "SELECT to_json(k)::text AS k, to_json(row(k.id, k.cp, 'x'))::text AS r FROM kinds k",
    )
    assert [[json.loads(r["k"]), json.loads(r["r"])] for r in theirs_whole] == whole["rows"]
    assert [c["data_type"] for c in whole["columns"]] == ["public.kinds", "record"]


async def _validates(client: Client, *results: dict[str, Any]) -> None:
    schemas = {t.name: t.output_schema for t in (await client.list_tools()).tools}
    for result in results:
        tool = "get_sample_rows" if "table_name" in result else "execute_query"
        schema = schemas[tool]
        assert schema is not None
        jsonschema.validate(result, schema)


async def test_types_the_driver_cannot_read_inside_records(kinds_dsn: str) -> None:
    """A record or an array of them with tsvector, money, hstore, pg_lsn, bit... fields: the
    driver reads those only as text, so these used to fail (INTERNAL_ERROR) or come back
    garbled; PostgreSQL renders them now."""
    h = await fetch(
        kinds_dsn, "SELECT 1 FROM pg_attribute WHERE attrelid = 'kinds'::regclass AND attname = 'h'"
    )
    sql = (
        f"SELECT id, row(tsv, m, {'h, ' if h else ''}lsn, bits, mac8, rc) AS r, "
        "ARRAY[row(tsq, iv)] AS a, row(1, 'a', NULL) AS plain FROM kinds ORDER BY id"
    )
    async with connect(kinds_dsn) as client:
        out = await call(client, "execute_query", sql=sql)
    theirs = await fetch(
        kinds_dsn,
        "SELECT json_agg(json_build_array(q.id, q.r, q.a, q.plain) ORDER BY q.id)::text AS j "
        f"FROM ({sql}) q",
    )
    assert out["rows"] == json.loads(theirs[0]["j"])
    assert out["rows"][0][3] == {"f1": 1, "f2": "a", "f3": None}
