"""Entity-relationship diagrams as Mermaid `erDiagram` text (PRD 12.4, issue 23).

One statement reads a schema's tables (or one table and its neighbours: the tables it
references and those that reference it), their columns with key markers and comments, and
every foreign key among them with all its columns, whether PostgreSQL has validated it, and
whether its columns are NOT NULL and unique (which fix the cardinality drawn):

- `child }o--|| parent`: many rows to exactly one (NOT NULL key columns);
- `child }o--o| parent`: many to zero or one (a key column may be NULL: no parent);
- `|o` instead of `}o` on the child side when the key columns are unique (one to one);
- a dashed line (`..`) for a NOT VALID key: PostgreSQL has not checked the rows that were
  there when it was added, so an inner join on it may drop orphans.

Large schemas are cut to the `MAX_ENTITIES` most connected tables (then the rest by name),
and wide tables to `MAX_COLUMNS` columns (keys first); a `%%` comment and `note` say what was
left out. Names Mermaid cannot take as identifiers are drawn with an alias (`e3["a b"]`).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import asyncpg

from pg_mcp_server.database.catalog import tables as catalog
from pg_mcp_server.database.sql import statement

MAX_ENTITIES = 60
MAX_COLUMNS = 24
COMMENT_CHARS = 60  # (the statement reads one more, so a longer comment is known to be cut)

# $1 schema; $2 a table of it, or NULL for the whole schema; $3 the tables of a join path
# (oids), or NULL. The schema's tables (plain and
# partitioned parents, not partitions, not views: keys live on tables) and the tables of other
# schemas their keys reference, and the schema's keys; or the table, every table a key joins
# it to and the keys among them; or a join path's tables and the keys among them. Each key
# with all its columns in key order.
ERD = statement(
    "catalog.erd.ERD",
    """
WITH ns AS (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1),
focus AS (
  SELECT c.oid FROM pg_catalog.pg_class c
  WHERE c.relnamespace = (SELECT ns.oid FROM ns) AND c.relname = $2
    AND c.relkind IN ('r', 'p', 'f', 'v', 'm')
),
own AS (
  SELECT c.oid FROM pg_catalog.pg_class c
  WHERE $2::text IS NULL AND $3::oid[] IS NULL AND c.relnamespace = (SELECT ns.oid FROM ns)
    AND c.relkind IN ('r', 'p') AND NOT c.relispartition
),
chosen AS (
  SELECT o.oid FROM own o
  UNION
  SELECT k.confrelid FROM pg_catalog.pg_constraint k
  WHERE k.contype = 'f' AND k.conrelid IN (SELECT oid FROM own)
  UNION
  SELECT f.oid FROM focus f
  UNION
  SELECT p.oid FROM pg_catalog.unnest($3::oid[]) AS p(oid)
  UNION
  SELECT CASE WHEN k.conrelid = f.oid THEN k.confrelid ELSE k.conrelid END
  FROM pg_catalog.pg_constraint k JOIN focus f ON f.oid IN (k.conrelid, k.confrelid)
  WHERE k.contype = 'f'
),
keys AS (
  SELECT k.conname, k.conrelid, k.confrelid, k.convalidated,
         ARRAY(SELECT a.attname::text FROM pg_catalog.unnest(k.conkey) WITH ORDINALITY u(n, i)
               JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n
               ORDER BY u.i) AS columns,
         ARRAY(SELECT a.attname::text FROM pg_catalog.unnest(k.confkey) WITH ORDINALITY u(n, i)
               JOIN pg_catalog.pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n
               ORDER BY u.i) AS referenced,
         NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey)
                       AND NOT a.attnotnull) AS required,
         EXISTS (SELECT 1 FROM pg_catalog.pg_index x
                 WHERE x.indrelid = k.conrelid AND x.indisunique AND x.indpred IS NULL
                   AND x.indexprs IS NULL
                   AND (x.indkey::int2[])[0:x.indnkeyatts - 1] @> k.conkey
                   AND (x.indkey::int2[])[0:x.indnkeyatts - 1] <@ k.conkey) AS unique_columns
  FROM pg_catalog.pg_constraint k
  WHERE k.contype = 'f' AND k.conrelid IN (SELECT oid FROM chosen)
    AND k.confrelid IN (SELECT oid FROM chosen)
    AND ($2::text IS NOT NULL OR $3::oid[] IS NOT NULL OR k.conrelid IN (SELECT oid FROM own))
)
SELECT (SELECT ns.oid IS NOT NULL FROM ns) AS schema_exists,
       ($2::text IS NULL OR EXISTS (SELECT 1 FROM focus)) AS table_exists,
       (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
          'oid', c.oid, 'schema', n.nspname, 'name', c.relname,
          'columns', (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
              'name', a.attname, 'type', pg_catalog.format_type(a.atttypid, a.atttypmod),
              'pk', COALESCE(a.attnum = ANY (p.conkey), false),
              'comment', pg_catalog.left(pg_catalog.col_description(c.oid, a.attnum), 61))
              ORDER BY a.attnum)
            FROM pg_catalog.pg_attribute a
            LEFT JOIN pg_catalog.pg_constraint p ON p.conrelid = c.oid AND p.contype = 'p'
            WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped))
          ORDER BY n.nspname, c.relname)
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid IN (SELECT oid FROM chosen)) AS entities,
       (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
          'name', k.conname, 'child', k.conrelid, 'parent', k.confrelid,
          'columns', k.columns, 'referenced', k.referenced, 'validated', k.convalidated,
          'required', k.required, 'unique', k.unique_columns) ORDER BY k.conname)
        FROM keys k) AS keys
""",
)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Diagram:
    mermaid: str  # the erDiagram text, without a Markdown fence
    entities: list[str]  # qualified names drawn
    relationships: list[tuple[str, str, str]]  # (child, parent, key name) drawn
    left_out: list[str]  # qualified names not drawn

    def markdown(self, title: str) -> str:
        note = ""
        if self.left_out:
            note = (
                f"\n\n{len(self.left_out)} more tables are not drawn (the most connected come "
                "first): "
                + ", ".join(self.left_out[:50])
                + ("..." if len(self.left_out) > 50 else "")
            )
        return f"# {title}\n\n```mermaid\n{self.mermaid}\n```{note}\n"


async def diagram(conn: asyncpg.Connection, schema: str, table: str | None = None) -> Diagram:
    """The diagram of `schema`, or of `table` in it and its neighbours; SCHEMA_NOT_FOUND or
    TABLE_NOT_FOUND (with the closest names) when there is no such thing."""
    row = await conn.fetchrow(ERD, schema, table, None)
    assert row is not None
    if not row["schema_exists"] or not row["table_exists"]:
        if table is None:
            raise await catalog.missing_schema(conn, schema)
        raise await catalog.missing_table(conn, schema, table)
    # json comes decoded on the pool's connections (pool/engine.py sets the codec)
    return draw(row["entities"] or [], row["keys"] or [], schema)


async def path_diagram(conn: asyncpg.Connection, schema: str, tables: list[int]) -> Diagram:
    """The tables of a join path (oids, found in the catalog just before) and the keys among
    them; names of `schema` drawn unqualified."""
    row = await conn.fetchrow(ERD, schema, None, tables)
    assert row is not None
    return draw(row["entities"] or [], row["keys"] or [], schema)


def draw(entities: list[dict[str, Any]], keys: list[dict[str, Any]], schema: str) -> Diagram:
    degree: dict[int, int] = {e["oid"]: 0 for e in entities}
    for k in keys:
        degree[k["child"]] += 1
        degree[k["parent"]] += 1
    ranked = sorted(entities, key=lambda e: (-degree[e["oid"]], e["schema"], e["name"]))
    shown = {e["oid"] for e in ranked[:MAX_ENTITIES]}

    def qualified(e: dict[str, Any]) -> str:
        return e["name"] if e["schema"] == schema else f"{e['schema']}.{e['name']}"

    plain = {qualified(e) for e in entities if _IDENT.match(qualified(e))}
    aliases = (f"e{n}" for n in itertools.count() if f"e{n}" not in plain)
    ids: dict[int, str] = {}
    lines = ["erDiagram"]
    for e in entities:
        if e["oid"] not in shown:
            continue
        name = qualified(e)
        ident = name if name in plain else next(aliases)
        ids[e["oid"]] = ident
        key_columns = {c for k in keys if k["child"] == e["oid"] for c in k["columns"]}
        head = ident if ident == name else f'{ident}["{_label(name)}"]'
        lines.append(f"    {head} {{")
        columns = e["columns"] or []
        ordered = sorted(columns, key=lambda c: not (c["pk"] or c["name"] in key_columns))
        for c in ordered[:MAX_COLUMNS]:
            marks = ",".join(
                m for m, on in (("PK", c["pk"]), ("FK", c["name"] in key_columns)) if on
            )
            comment = c["comment"] or ""
            if len(comment) > COMMENT_CHARS:
                comment = comment[: COMMENT_CHARS - 1] + "…"
            attribute = f"        {_type(c['type'])} {_word(c['name'])}"
            attribute += f" {marks}" if marks else ""
            attribute += f' "{_label(comment)}"' if comment else ""
            lines.append(attribute)
        if len(columns) > MAX_COLUMNS:
            more = len(columns) - MAX_COLUMNS
            lines.append(f'        more columns "{more} more: see describe_table"')
        lines.append("    }")
    relationships: list[tuple[str, str, str]] = []
    by_oid = {e["oid"]: e for e in entities}
    for k in keys:
        if k["child"] not in shown or k["parent"] not in shown:
            continue
        child_end = "|o" if k["unique"] else "}o"
        parent_end = "||" if k["required"] else "o|"
        line = "--" if k["validated"] else ".."
        label = ", ".join(k["columns"]) + ("" if k["validated"] else " (NOT VALID)")
        ends = f"{child_end}{line}{parent_end}"
        lines.append(f'    {ids[k["child"]]} {ends} {ids[k["parent"]]} : "{_label(label)}"')
        relationships.append(
            (qualified(by_oid[k["child"]]), qualified(by_oid[k["parent"]]), k["name"])
        )
    left_out = sorted(qualified(e) for e in entities if e["oid"] not in shown)
    if left_out:
        lines.append(
            f"    %% {len(left_out)} tables not drawn: the {MAX_ENTITIES} most connected are"
        )
    return Diagram(
        mermaid="\n".join(lines),
        entities=[qualified(e) for e in entities if e["oid"] in shown],
        relationships=relationships,
        left_out=left_out,
    )


_SHORT = {
    "timestamp with time zone": "timestamptz",
    "timestamp without time zone": "timestamp",
    "time with time zone": "timetz",
    "time without time zone": "time",
    "character varying": "varchar",
    "character": "char",
    "double precision": "float8",
    "bit varying": "varbit",
}


def _type(text: str) -> str:
    """A column's type as a diagram shows it: without its modifier (`numeric`, not
    `numeric(10,2)`, which Mermaid cannot take), in PostgreSQL's short spelling."""
    base = re.sub(r"\(.*?\)", "", text)
    array = base.endswith("[]")
    base = base.removesuffix("[]").strip()
    return _word(_SHORT.get(base, base)) + ("[]" if array else "")


def _word(text: str) -> str:
    """A type or column name as Mermaid takes it: letters, digits, `_`, `-`, `[]`, `()`."""
    word = re.sub(r"[^A-Za-z0-9_\-\[\]()]+", "_", text).strip("_")
    return word if word and not word[0].isdigit() else f"_{word}"


def _label(text: str) -> str:
    """Text inside Mermaid's double quotes, which it cannot escape."""
    return text.replace('"', "'").replace("\n", " ")
