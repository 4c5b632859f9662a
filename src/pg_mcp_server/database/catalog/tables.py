"""Schema discovery queries: `pg_catalog` only, one round trip per tool call.

Each query is a module-level constant with `$n` binds. describe_table builds its whole answer
as JSON inside PostgreSQL, so columns, keys, indexes and constraints arrive in one statement.

Its size (~600 lines) is half SQL (about 290 lines), most of it describe_table's statement
and the parts it is made of.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import asyncpg

from pg_mcp_server.database.sql import statement
from pg_mcp_server.errors import (
    SchemaNotFoundError,
    TableNotFoundError,
    closest,
    did_you_mean,
)

RELKINDS_TABLES = ["r", "p", "f"]
RELKINDS_ALL = ["r", "p", "f", "v", "m"]

_TYPE_LABEL = """CASE {c}.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table'
    WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'f' THEN 'foreign table' END"""

FK_ACTION = """CASE {a} WHEN 'a' THEN 'NO ACTION' WHEN 'r' THEN 'RESTRICT' WHEN 'c' THEN 'CASCADE'
    WHEN 'n' THEN 'SET NULL' WHEN 'd' THEN 'SET DEFAULT' END"""

# Row estimate: planner statistics; a never-analyzed table (reltuples = -1) falls back to the
# statistics collector's live-tuple count. A partitioned table sums its leaf partitions.
_ROWS = """CASE
    WHEN {c}.relkind = 'p' THEN (
        SELECT coalesce(sum(CASE WHEN l.reltuples >= 0 THEN l.reltuples
            ELSE coalesce(pg_catalog.pg_stat_get_live_tuples(l.oid), 0) END), 0)
        FROM pg_catalog.pg_partition_tree({c}.oid) t JOIN pg_catalog.pg_class l ON l.oid = t.relid
        WHERE t.isleaf)::bigint
    WHEN {c}.relkind = 'v' THEN 0
    WHEN {c}.reltuples >= 0 THEN {c}.reltuples::bigint
    ELSE coalesce(pg_catalog.pg_stat_get_live_tuples({c}.oid), 0) END"""

# Relations another session holds, or waits to hold, in ACCESS EXCLUSIVE mode: measuring one
# (pg_relation_size and its kin open it) would wait for that session, and a role could hold
# its own table to hang every listing of its schema. Read once per statement (an InitPlan).
_HELD = """coalesce((SELECT pg_catalog.array_agg(k.relation) FROM pg_catalog.pg_locks k
    WHERE k.locktype = 'relation' AND k.mode = 'AccessExclusiveLock'
      AND k.database = (SELECT d.oid FROM pg_catalog.pg_database d
                        WHERE d.datname = pg_catalog.current_database())),
    ARRAY[]::pg_catalog.oid[])"""
_FREE = f"{{c}}.oid <> ALL ({_HELD})"

# Size from the planner's page counts (table, TOAST and indexes, as of the last VACUUM or
# ANALYZE): stat()ing every file costs ~40 us a table, too slow for big catalogs. A table
# never analyzed (reltuples = -1) has no page counts yet, so it is measured exactly (unless
# another session holds it: then the page counts, 0, stand).
_LEAF_SIZE = f"""CASE WHEN {{c}}.reltuples < 0 AND {_FREE}
    THEN pg_catalog.pg_total_relation_size({{c}}.oid)
    ELSE ({{c}}.relpages::bigint
          + coalesce((SELECT t.relpages FROM pg_catalog.pg_class t
                      WHERE t.oid = {{c}}.reltoastrelid), 0)
          + coalesce((SELECT sum(i.relpages) FROM pg_catalog.pg_index x
                      JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
                      WHERE x.indrelid = {{c}}.oid), 0))
         * pg_catalog.current_setting('block_size')::bigint END"""

_SIZE = f"""CASE
    WHEN {{c}}.relkind IN ('r', 'm') THEN {_LEAF_SIZE}
    WHEN {{c}}.relkind = 'p' THEN (
        SELECT coalesce(sum({_LEAF_SIZE.format(c="l")}), 0)
        FROM pg_catalog.pg_partition_tree({{c}}.oid) t
        JOIN pg_catalog.pg_class l ON l.oid = t.relid
        WHERE t.isleaf)::bigint
    END"""

# Direct partitions, named relative to the parent's schema.
_PARTITIONS = """CASE WHEN {c}.relkind = 'p' THEN ARRAY(
    SELECT CASE WHEN ch.relnamespace = {c}.relnamespace THEN ch.relname
                ELSE chn.nspname::text || '.' || ch.relname::text END
    FROM pg_catalog.pg_inherits i
    JOIN pg_catalog.pg_class ch ON ch.oid = i.inhrelid
    JOIN pg_catalog.pg_namespace chn ON chn.oid = ch.relnamespace
    WHERE i.inhparent = {c}.oid ORDER BY ch.relname) END"""


# Known empty: no page on disk (pg_relation_size, the main fork), so no row in any snapshot.
# relpages = 0 alone is no proof (a table never vacuumed has rows and relpages = 0), but
# relpages > 0 proves pages (only VACUUM and TRUNCATE take them away, and both update it): the
# file is looked at only where the estimate is 0 and relpages too, since that opens the
# relation (~15 us). A partitioned table is empty when every leaf is a plain table with no page.
_EMPTY = f"""CASE
    WHEN {{c}}.relkind IN ('r', 'm') THEN {{c}}.relispopulated AND {{c}}.relpages = 0
        AND {_FREE} AND pg_catalog.pg_relation_size({{c}}.oid) = 0
    WHEN {{c}}.relkind = 'p' THEN NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_partition_tree({{c}}.oid) t
        JOIN pg_catalog.pg_class l ON l.oid = t.relid
        WHERE t.isleaf AND (l.relkind <> 'r' OR l.relpages > 0
                            OR NOT {_FREE.format(c="l")}
                            OR pg_catalog.pg_relation_size(l.oid) > 0))
    ELSE false END"""

# When the planner's estimate was made: the last ANALYZE or VACUUM (either may set reltuples).
_STATS_AT = """GREATEST(pg_catalog.pg_stat_get_last_analyze_time({c}.oid),
    pg_catalog.pg_stat_get_last_autoanalyze_time({c}.oid),
    pg_catalog.pg_stat_get_last_vacuum_time({c}.oid),
    pg_catalog.pg_stat_get_last_autovacuum_time({c}.oid))"""

# ... in UTC to the minute; NULL while the estimate is not the planner's (never analyzed: the
# live-tuple count, read now). A partitioned table's is its oldest leaf's.
_STATS_AS_OF = f"""pg_catalog.to_char(CASE
    WHEN {{c}}.relkind IN ('r', 'm') AND {{c}}.reltuples >= 0 THEN {_STATS_AT.format(c="{c}")}
    WHEN {{c}}.relkind = 'p' THEN (
        SELECT min({_STATS_AT.format(c="l")})
        FROM pg_catalog.pg_partition_tree({{c}}.oid) t
        JOIN pg_catalog.pg_class l ON l.oid = t.relid
        WHERE t.isleaf AND l.reltuples >= 0)
    END AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI"Z"')"""

# The row facts of relation {c}: `estimated_row_count`, `empty` and `stats_as_of`, as a lateral
# subquery (OFFSET 0 keeps PostgreSQL from inlining it, which would evaluate each twice).
ROW_FACTS = f"""LATERAL (
    SELECT e.*, CASE WHEN NOT e.empty THEN {_STATS_AS_OF.format(c="{c}")} END AS stats_as_of
    FROM (SELECT r.estimated_row_count,
                 r.estimated_row_count = 0 AND {_EMPTY.format(c="{c}")} AS empty
          FROM (SELECT {_ROWS.format(c="{c}")} AS estimated_row_count OFFSET 0) r
          OFFSET 0) e) facts"""

# A key's columns, in key order: `key` is conkey or confkey, `rel` conrelid or confrelid.
KEY_COLUMNS = """ARRAY(SELECT a.attname FROM pg_catalog.unnest(k.{key}) WITH ORDINALITY AS u(n, o)
    JOIN pg_catalog.pg_attribute a ON a.attrelid = k.{rel} AND a.attnum = u.n ORDER BY u.o)"""

# The foreign keys of relation {c}, one row each. A partitioned table also has the keys
# declared on its partitions (not those cloned from its own: conparentid), as get_foreign_keys
# reports them; targets are folded onto their partitioned root the same way.
_FOREIGN_KEYS = f"""
    SELECT DISTINCT ON (dst.oid, from_columns, to_columns)
           k.conname, dst.relnamespace AS ref_namespace, dn.nspname AS ref_schema,
           dst.relname AS ref_table,
           {KEY_COLUMNS.format(key="conkey", rel="conrelid")} AS from_columns,
           {KEY_COLUMNS.format(key="confkey", rel="confrelid")} AS to_columns,
           {FK_ACTION.format(a="k.confupdtype")} AS on_update,
           {FK_ACTION.format(a="k.confdeltype")} AS on_delete,
           k.convalidated AS validated
    FROM pg_catalog.pg_constraint k
    JOIN pg_catalog.pg_class dst
      ON dst.oid = coalesce(pg_catalog.pg_partition_root(k.confrelid), k.confrelid)
    JOIN pg_catalog.pg_namespace dn ON dn.oid = dst.relnamespace
    -- conrelid = ANY (array): pg_constraint's index on conrelid finds them.
    WHERE k.contype = 'f' AND k.conrelid = ANY (CASE WHEN {{c}}.relkind = 'p'
            THEN ARRAY(SELECT t.relid FROM pg_catalog.pg_partition_tree({{c}}.oid) t)
            ELSE ARRAY[{{c}}.oid] END)
      AND (k.conrelid = {{c}}.oid OR k.conparentid = 0)
    ORDER BY dst.oid, from_columns, to_columns, k.conname"""


# Column comments in the schema map: at most this many characters, then the cut marker
# every tool uses (rows.values.cut_marker; written out here, as importing rows from here
# would make a cycle; tests/test_catalog_facts.py checks they agree).
COMMENT_CHARS = 80
CUT_MARK_SQL = "pg_catalog.format('...[cut: %s chars]', {length})"


def cut_comment(text: str, chars: str) -> str:
    """SQL for the comment `text` (a column: it is repeated) cut after `chars` characters (an
    integer: a bind, or a constant) and marked with its length, in PostgreSQL: a role that
    comments its own objects could otherwise make every listing read megabytes (attack4
    F-C). octet_length needs no detoasting, and most comments are short."""
    return f"""CASE WHEN pg_catalog.octet_length({text}) <= {chars} THEN {text}
        WHEN pg_catalog.length({text}) > {chars} THEN pg_catalog.left({text}, {chars})
            || {CUT_MARK_SQL.format(length=f"pg_catalog.length({text})")}
        ELSE {text} END"""


# A comment of object `oid` in catalog `catalog` (objsubid 0: not a column's), cut after
# `chars` characters as `cut_comment` does (obj_description reads it whole).
_OBJECT_COMMENT = """(SELECT {cut} FROM pg_catalog.pg_description od
    WHERE od.objoid = {oid} AND od.classoid = 'pg_catalog.{catalog}'::pg_catalog.regclass
      AND od.objsubid = 0)"""


def object_comment(oid: str, catalog: str, chars: str) -> str:
    return _OBJECT_COMMENT.format(
        cut=cut_comment("od.description", chars), oid=oid, catalog=catalog
    )


# A list of names `arr` (name[]), quoted where SQL needs it, from element `from` on.
_NAMES = """(SELECT pg_catalog.string_agg(pg_catalog.quote_ident(u.x), ', ' ORDER BY u.o)
    FROM pg_catalog.unnest({arr}) WITH ORDINALITY AS u(x, o) WHERE u.o >= {first})"""


def _key_text(c: str) -> str:
    """SQL for what foreign key `f` says on column `a`'s schema-map line. A one-column key:
    " -> [schema.]table.column"; a key of several columns, on its first column
    " -> [schema.]table(col1, col2) [key name with col2]" and on each other one
    " [in key name]", so that it never reads as a key of its own; "NOT VALID" marks a key
    whose existing rows were never checked."""
    target = f"""CASE WHEN f.ref_namespace <> {c}.relnamespace
                 THEN pg_catalog.quote_ident(f.ref_schema) || '.' ELSE '' END
            || pg_catalog.quote_ident(f.ref_table)"""
    unchecked = "CASE WHEN f.validated THEN '' ELSE '{}NOT VALID{}' END"
    return f"""CASE
        WHEN pg_catalog.cardinality(f.from_columns) = 1
        THEN ' -> ' || {target} || '.' || pg_catalog.quote_ident(f.to_columns[1])
             || {unchecked.format(" [", "]")}
        WHEN f.from_columns[1] = a.attname
        THEN ' -> ' || {target} || '(' || {_NAMES.format(arr="f.to_columns", first=1)}
             || ') [key ' || pg_catalog.quote_ident(f.conname) || ' with '
             || {_NAMES.format(arr="f.from_columns", first=2)} || {unchecked.format(", ", "")}
             || ']'
        ELSE ' [in key ' || pg_catalog.quote_ident(f.conname) || ']' END"""


# pgvector's types and its operator classes' distances, as vectors/columns.py has them for
# similarity_search (importing it here would make a cycle; tests/test_catalog_facts.py checks
# they agree).
VECTOR_TYPES = ("vector", "halfvec", "sparsevec")
DISTANCES = {
    "_l2_ops": ("<->", "l2"),
    "_cosine_ops": ("<=>", "cosine"),
    "_ip_ops": ("<#>", "negative_inner_product"),
    "_l1_ops": ("<+>", "l1"),
}
DEFAULT_DISTANCE = ("<=>", "cosine")

# pgvector columns (vectors/columns.py reads the same facts for similarity_search): the
# distance a column's HNSW or IVFFlat index serves, from its operator class's suffix
# (`vector_cosine_ops`), the index that is whole first; none: cosine, and a scan.
# (The types' oids are read once per statement, an InitPlan, not once per column.)
_VECTOR_NAMES = ", ".join(f"'{t}'" for t in VECTOR_TYPES)
_IS_VECTOR = f"""{{a}}.atttypid = ANY (ARRAY(SELECT t.oid FROM pg_catalog.pg_type t
    WHERE t.typname = ANY (ARRAY[{_VECTOR_NAMES}]::pg_catalog.name[])))"""
_SUFFIXES = "|".join(s.removeprefix("_").removesuffix("_ops") for s in DISTANCES)
_VECTOR_INDEX = f"""SELECT ic.relname AS name, am.amname AS method,
           i.indpred IS NOT NULL AS partial,
           pg_catalog.substring(oc.opcname, '_({_SUFFIXES})_ops$') AS kind
    FROM pg_catalog.pg_index i
    JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
    JOIN pg_catalog.pg_am am ON am.oid = ic.relam
    CROSS JOIN LATERAL pg_catalog.generate_series(0, i.indnkeyatts - 1) AS k(n)
    JOIN pg_catalog.pg_opclass oc ON oc.oid = i.indclass[k.n]
    WHERE i.indrelid = {{a}}.attrelid AND i.indkey[k.n] = {{a}}.attnum AND i.indisvalid
      AND am.amname = ANY (ARRAY['hnsw', 'ivfflat']::pg_catalog.name[])
      AND pg_catalog.substring(oc.opcname, '_({_SUFFIXES})_ops$') IS NOT NULL
    ORDER BY i.indpred IS NOT NULL, ic.relname LIMIT 1"""


def _by_kind(part: int) -> str:
    """SQL CASE: the distance's name (part 1) or operator (part 0) for index kind `v.kind`."""
    whens = " ".join(
        f"WHEN v.kind = '{suffix.removeprefix('_').removesuffix('_ops')}' THEN '{d[part]}'"
        for suffix, d in DISTANCES.items()
    )
    return f"CASE {whens} END"


def _vector_marker(a: str) -> str:
    """SQL for the schema map's mark on a vector column `a`: " [hnsw cosine <=>]" (the
    index's method, distance and operator), or " [no vector index]"; '' for other columns."""
    return f"""CASE WHEN {_IS_VECTOR.format(a=a)} THEN coalesce((
        SELECT ' [' || v.method || ' ' || {_by_kind(1)} || ' ' || {_by_kind(0)}
               || CASE WHEN v.partial THEN ', partial index' ELSE '' END || ']'
        FROM ({_VECTOR_INDEX.format(a=a)}) v), ' [no vector index]') ELSE '' END"""


def _vector_json(a: str) -> str:
    """SQL for describe_table's `vector` object of column `a` (NULL for other columns)."""
    operator, distance = DEFAULT_DISTANCE
    return f"""CASE WHEN {_IS_VECTOR.format(a=a)} THEN coalesce((
        SELECT pg_catalog.json_build_object(
            'dimensions', CASE WHEN {a}.atttypmod > 0 THEN {a}.atttypmod END,
            'distance', {_by_kind(1)}, 'operator', {_by_kind(0)}, 'index', v.name,
            'partial_index', v.partial)
        FROM ({_VECTOR_INDEX.format(a=a)}) v), pg_catalog.json_build_object(
            'dimensions', CASE WHEN {a}.atttypmod > 0 THEN {a}.atttypmod END,
            'distance', '{distance}', 'operator', '{operator}',
            'note', 'no vector index: similarity searches scan the table')) END"""


def column_lines(c: str, where: str = "", comment_chars: int = COMMENT_CHARS) -> str:
    """SQL for an array of relation `c`'s columns (those `where` also admits), in order, as
    the schema map shows them: "name type[ PK][ key ...][ -- comment]" (see `_key_text`),
    the comment cut after `comment_chars` characters and marked."""
    fks = _FOREIGN_KEYS.format(c=c)
    comment = "d.description"
    note = f"""coalesce(' -- ' || CASE WHEN pg_catalog.length({comment}) > {comment_chars}
                THEN pg_catalog.left({comment}, {comment_chars})
                     || {CUT_MARK_SQL.format(length=f"pg_catalog.length({comment})")}
                ELSE {comment} END, '')"""
    return f"""ARRAY(
    WITH fks AS ({fks})
    SELECT pg_catalog.quote_ident(a.attname) || ' '
           || pg_catalog.format_type(a.atttypid, a.atttypmod)
           || CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_constraint p
                   WHERE p.conrelid = {c}.oid AND p.contype = 'p'
                     AND a.attnum = ANY (p.conkey)) THEN ' PK' ELSE '' END
           || coalesce((SELECT pg_catalog.string_agg({_key_text(c)}, ''
                   ORDER BY pg_catalog.cardinality(f.from_columns), f.conname)
               FROM fks f WHERE a.attname = ANY (f.from_columns)), '')
           || {_vector_marker("a")}
           || {note}
    FROM pg_catalog.pg_attribute a
    LEFT JOIN pg_catalog.pg_description d
      ON d.objoid = a.attrelid AND d.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass
     AND d.objsubid = a.attnum
    WHERE a.attrelid = {c}.oid AND a.attnum > 0 AND NOT a.attisdropped {where}
    ORDER BY a.attnum)"""


LIST_SCHEMAS = statement(
    "catalog.tables.LIST_SCHEMAS",
    f"""
SELECT n.nspname AS name,
       pg_catalog.pg_get_userbyid(n.nspowner) AS owner,
       {object_comment("n.oid", "pg_namespace", "$2")} AS description,
       coalesce(k.tables, 0) AS table_count,
       coalesce(k.views, 0) AS view_count
FROM pg_catalog.pg_namespace n
LEFT JOIN (
    SELECT relnamespace,
           count(*) FILTER (WHERE relkind IN ('r', 'p', 'f') AND NOT relispartition) AS tables,
           count(*) FILTER (WHERE relkind IN ('v', 'm')) AS views
    FROM pg_catalog.pg_class
    GROUP BY relnamespace
) k ON k.relnamespace = n.oid
WHERE $1 OR (n.nspname !~ '^pg_' AND n.nspname <> 'information_schema')
ORDER BY n.nspname
""",
)

_LISTED = """c.relnamespace = n.oid AND c.relkind::text = ANY($2::text[])
    AND NOT c.relispartition AND ($3::text IS NULL OR c.relname ILIKE $3)"""

# One page of objects, the details computed for that page only (the schema map's column
# lines only when $6). When the schema exists but nothing is on the page there is one row of
# NULLs (the LEFT JOINs), with the total; when the schema does not exist there is no row at all.
LIST_TABLES = statement(
    "catalog.tables.LIST_TABLES",
    f"""
SELECT t.*, counted.total, counted.listing
FROM pg_catalog.pg_namespace n
-- Counted once for the schema (in the select list it would run once per row).
CROSS JOIN LATERAL (
    SELECT count(*)::int AS total,
           -- The listing's names in order: what a cursor into it must still see (pages.py).
           pg_catalog.md5(pg_catalog.array_agg(c.relname ORDER BY c.relname)::pg_catalog.text)
               AS listing
    FROM pg_catalog.pg_class c WHERE {_LISTED}
) counted
LEFT JOIN LATERAL (
    SELECT c.oid FROM pg_catalog.pg_class c WHERE {_LISTED}
    ORDER BY c.relname LIMIT $4 OFFSET $5
) page ON true
LEFT JOIN LATERAL (
    SELECT c.relname AS name,
           {_TYPE_LABEL.format(c="c")} AS type,
           {cut_comment("d.description", "$7")} AS description,
           facts.*,
           {_SIZE.format(c="c")} AS size_bytes,
           EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                   WHERE k.conrelid = c.oid AND k.contype = 'p') AS has_primary_key,
           (SELECT count(*) FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)::int AS column_count,
           {_PARTITIONS.format(c="c")} AS partitions,
           c.relispopulated AS populated,
           CASE WHEN $6 THEN {column_lines("c")} END AS columns
    FROM pg_catalog.pg_class c
    CROSS JOIN {ROW_FACTS.format(c="c")}
    LEFT JOIN pg_catalog.pg_description d
      ON d.objoid = c.oid AND d.classoid = 'pg_catalog.pg_class'::regclass AND d.objsubid = 0
    WHERE c.oid = page.oid
) t ON true
WHERE n.nspname = $1
ORDER BY t.name
""",
)

# This run of the server and this incarnation of the database. A snapshot means something
# only within one run: a database rebuilt by the same script (re-initialised, restored,
# upgraded, or another server behind the same address) reaches the same transaction ids and
# so the same snapshot text, but it starts a new postmaster; one dropped and created again
# in a running cluster gets a new oid. (Not pg_control_system(): managed services may
# refuse it.)
SERVER_RUN = """pg_catalog.date_part('epoch', pg_catalog.pg_postmaster_start_time())::text
    || '@' || (SELECT d.oid FROM pg_catalog.pg_database d
               WHERE d.datname = pg_catalog.current_database())::text"""

# The statement's snapshot in this server run: two statements that report the same one see
# the same committed transactions, hence the same catalog rows.
SNAPSHOT = f"pg_catalog.txid_current_snapshot()::text || '/' || {SERVER_RUN}"

# When two describe_table answers are the same: the same snapshot, and the same settings that
# shape deparsed text (pg_get_expr, pg_get_indexdef, pg_get_viewdef, format_type).
_DESCRIBE_TOKEN = f"""{SNAPSHOT} || '/'
    || pg_catalog.concat_ws('/', pg_catalog.current_setting('search_path'),
        pg_catalog.current_setting('TimeZone'), pg_catalog.current_setting('DateStyle'),
        pg_catalog.current_setting('IntervalStyle'),
        pg_catalog.current_setting('quote_all_identifiers'),
        pg_catalog.current_setting('bytea_output'),
        pg_catalog.current_setting('extra_float_digits'),
        pg_catalog.current_setting('lc_monetary'),
        pg_catalog.current_setting('standard_conforming_strings'))"""

# Everything describe_table returns, as one JSON document (NULL while `$5` is still the
# current token, see SnapshotCache), and apart from it what changes outside transactions; no
# row when there is no such relation. Nulls and defaults are left to the model (models.compact)
# to drop; an index's definition is given only when it says more than its other fields.
# pg_get_viewdef opens the view: while another session holds it (or waits to, see _HELD), its
# definition is not read and `definition_held` says so, rather than wait for that session.
DESCRIBE_TABLE = statement(
    "catalog.tables.DESCRIBE_TABLE",
    f"""
WITH tok AS MATERIALIZED (SELECT {_DESCRIBE_TOKEN} AS token),
rel AS (
    SELECT c.oid, c.relname, n.nspname, c.relkind, c.reltuples, c.relnamespace, c.relispartition,
           c.relpages, c.reltoastrelid, c.relispopulated
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
),
pk AS (
    SELECT k.conkey FROM pg_catalog.pg_constraint k, rel
    WHERE k.conrelid = rel.oid AND k.contype = 'p'
),
fks AS (SELECT f.* FROM rel CROSS JOIN LATERAL ({_FOREIGN_KEYS.format(c="rel")}) f),
-- Every key each column is in, one-column keys first: a key of several columns names all of
-- them (and `referenced_column` is the one this column is paired with).
colfk AS (
    SELECT u.attname, pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'constraint_name', f.conname, 'referenced_schema', f.ref_schema,
            'referenced_table', f.ref_table,
            'referenced_column', f.to_columns[u.o],
            'columns', CASE WHEN pg_catalog.cardinality(f.from_columns) > 1
                THEN f.from_columns END,
            'referenced_columns', CASE WHEN pg_catalog.cardinality(f.from_columns) > 1
                THEN f.to_columns END,
            'not_valid', NOT f.validated,
            'on_update', f.on_update, 'on_delete', f.on_delete)
        ORDER BY pg_catalog.cardinality(f.from_columns), f.conname) AS keys
    FROM fks f CROSS JOIN LATERAL pg_catalog.unnest(f.from_columns) WITH ORDINALITY AS u(attname, o)
    GROUP BY u.attname
),
uniq AS (
    SELECT i.indkey[0] AS attnum FROM pg_catalog.pg_index i, rel
    WHERE i.indrelid = rel.oid AND i.indisunique AND i.indnkeyatts = 1 AND i.indpred IS NULL
),
col AS (
    -- NOT NULL also when its domain says so (as information_schema.columns has it).
    SELECT a.attrelid, a.attnum, a.attname, a.atttypid, a.atttypmod,
           a.attnotnull OR (t.typtype = 'd' AND t.typnotnull) AS attnotnull,
           a.attidentity, a.attgenerated,
           pg_catalog.format_type(a.atttypid, a.atttypmod) AS data_type,
           pg_catalog.pg_get_expr(d.adbin, d.adrelid) AS expr,
           {cut_comment("cd.description", "$6")} AS description,
           CASE WHEN t.typtype = 'd'
                THEN pg_catalog.format_type(t.typbasetype, t.typtypmod) END AS domain_base,
           CASE WHEN t.typtype = 'e' THEN t.oid
                WHEN bt.typtype = 'e' THEN bt.oid
                WHEN et.typtype = 'e' THEN et.oid END AS enum_oid
    FROM rel
    JOIN pg_catalog.pg_attribute a ON a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped
    JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
    LEFT JOIN pg_catalog.pg_type bt ON bt.oid = t.typbasetype AND t.typtype = 'd'
    LEFT JOIN pg_catalog.pg_type et ON et.oid = t.typelem AND t.typcategory = 'A'
    LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    LEFT JOIN pg_catalog.pg_description cd
      ON cd.objoid = a.attrelid AND cd.classoid = 'pg_catalog.pg_class'::regclass
     AND cd.objsubid = a.attnum
)
SELECT CASE WHEN tok.token = $5 AND NOT pg_catalog.pg_is_in_recovery() THEN NULL
ELSE pg_catalog.json_build_object(
    'table_name', rel.relname,
    'schema_name', rel.nspname,
    'type', {_TYPE_LABEL.format(c="rel")},
    'description', {object_comment("rel.oid", "pg_class", "$6")},
    'columns', (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
        'name', col.attname,
        'data_type', col.data_type,
        'is_nullable', NOT col.attnotnull,
        'default_value', CASE WHEN col.attgenerated = '' THEN col.expr END,
        'description', col.description,
        'is_primary_key', EXISTS (SELECT 1 FROM pk WHERE col.attnum = ANY(pk.conkey)),
        'is_unique', EXISTS (SELECT 1 FROM uniq WHERE uniq.attnum = col.attnum),
        'foreign_key', (SELECT k.keys -> 0 FROM colfk k WHERE k.attname = col.attname),
        'other_foreign_keys', (SELECT CASE WHEN pg_catalog.jsonb_array_length(k.keys) > 1
            THEN k.keys - 0 END FROM colfk k WHERE k.attname = col.attname),
        'enum_values', CASE WHEN col.enum_oid IS NOT NULL THEN (
            SELECT pg_catalog.json_agg(e.enumlabel ORDER BY e.enumsortorder)
            FROM pg_catalog.pg_enum e WHERE e.enumtypid = col.enum_oid) END,
        'domain_base_type', col.domain_base,
        'identity_generation', CASE col.attidentity WHEN 'a' THEN 'ALWAYS'
            WHEN 'd' THEN 'BY DEFAULT' END,
        'generation_expression', CASE WHEN col.attgenerated <> '' THEN col.expr END,
        'vector', {_vector_json("col")}
        ) ORDER BY col.attnum), '[]') FROM col),
    'indexes', CASE WHEN $3 THEN (SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
        'name', x.relname,
        'columns', x.columns,
        'is_unique', x.indisunique,
        'is_primary', x.indisprimary,
        'index_type', x.amname,
        'description', {object_comment("x.indexrelid", "pg_class", "$6")},
        'definition', CASE WHEN x.definition <> pg_catalog.format(
                'CREATE %sINDEX %s ON %s.%s USING %s (%s)',
                CASE WHEN x.indisunique THEN 'UNIQUE ' ELSE '' END,
                pg_catalog.quote_ident(x.relname), pg_catalog.quote_ident(rel.nspname),
                pg_catalog.quote_ident(rel.relname), x.amname, x.plain)
            THEN x.definition END
        ) ORDER BY x.indisprimary DESC, x.relname), '[]')
        FROM (
            SELECT ic.relname, i.indexrelid, i.indisunique, i.indisprimary, am.amname,
                   pg_catalog.pg_get_indexdef(i.indexrelid) AS definition,
                   (SELECT pg_catalog.json_agg(CASE WHEN i.indkey[k - 1] > 0
                        THEN (SELECT a.attname FROM pg_catalog.pg_attribute a
                              WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[k - 1])
                        ELSE pg_catalog.pg_get_indexdef(i.indexrelid, k, true) END ORDER BY k)
                    FROM pg_catalog.generate_series(1, i.indnkeyatts) AS k) AS columns,
                   -- The key columns as a plain definition would print them.
                   (SELECT pg_catalog.string_agg(
                        pg_catalog.pg_get_indexdef(i.indexrelid, k, false), ', ' ORDER BY k)
                    FROM pg_catalog.generate_series(1, i.indnkeyatts) AS k) AS plain
            FROM pg_catalog.pg_index i
            JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
            JOIN pg_catalog.pg_am am ON am.oid = ic.relam
            WHERE i.indrelid = rel.oid) x) END,
    'constraints', CASE WHEN $4 THEN (SELECT coalesce(pg_catalog.json_agg(
        pg_catalog.json_build_object(
        'name', kc.name, 'type', kc.type, 'columns', kc.columns, 'definition', kc.definition,
        'referenced_table', kc.ref_table, 'referenced_schema', kc.ref_schema,
        'referenced_columns', kc.ref_columns, 'not_valid', kc.not_valid
        ) ORDER BY kc.rank, kc.name), '[]')
        FROM (
            SELECT k.conname AS name,
                   CASE k.contype WHEN 'p' THEN 'PRIMARY KEY' WHEN 'u' THEN 'UNIQUE'
                       WHEN 'c' THEN 'CHECK' WHEN 'x' THEN 'EXCLUDE' END AS type,
                   position(k.contype IN 'pufcx') AS rank,
                   {KEY_COLUMNS.format(key="conkey", rel="conrelid")} AS columns,
                   -- Only CHECK and EXCLUDE need their text (PRD: "for CHECK"); the others are
                   -- fully described by columns and references, and deparsing costs.
                   CASE WHEN k.contype IN ('c', 'x')
                        THEN pg_catalog.pg_get_constraintdef(k.oid, true) END AS definition,
                   NULL::name AS ref_table, NULL::name AS ref_schema, NULL::name[] AS ref_columns,
                   NOT k.convalidated AS not_valid
            FROM pg_catalog.pg_constraint k
            WHERE k.conrelid = rel.oid AND k.contype IN ('p', 'u', 'c', 'x')
            UNION ALL
            SELECT f.conname, 'FOREIGN KEY', 3, f.from_columns, NULL, f.ref_table, f.ref_schema,
                   f.to_columns, NOT f.validated
            FROM fks f
            -- A one-column key is shown on its column (foreign_key or other_foreign_keys).
            WHERE pg_catalog.cardinality(f.from_columns) > 1
            ) kc) END,
    'partitions', {_PARTITIONS.format(c="rel")},
    'partition_key', CASE WHEN rel.relkind = 'p'
        THEN pg_catalog.pg_get_partkeydef(rel.oid) END,
    'partition_of', CASE WHEN rel.relispartition THEN (
        SELECT CASE WHEN p.relnamespace = rel.relnamespace THEN p.relname
                    ELSE pn.nspname::text || '.' || p.relname::text END
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
        JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace
        WHERE i.inhrelid = rel.oid LIMIT 1) END,
    'view_definition', CASE WHEN rel.relkind IN ('v', 'm') AND {_FREE.format(c="rel")}
        THEN pg_catalog.pg_get_viewdef(rel.oid, true) END,
    'populated', rel.relispopulated
) END AS doc,
rel.relkind IN ('v', 'm') AND NOT {_FREE.format(c="rel")} AS definition_held,
tok.token,
facts.*,
pg_catalog.pg_size_pretty({_SIZE.format(c="rel")}) AS size_pretty
FROM rel CROSS JOIN {ROW_FACTS.format(c="rel")}, tok
""",
)

# What get_sample_rows needs before it can build its SELECT. (Names come back as text[]: for
# name[] asyncpg would run a type lookup query of its own, see closure._driver_lookup.)
TABLE_SHAPE = statement(
    "catalog.tables.TABLE_SHAPE",
    f"""
SELECT c.relkind::text AS relkind, c.relispopulated, c.relpages,
       {_ROWS.format(c="c")} AS estimated_rows,
       ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum) AS columns,
       ARRAY(SELECT a.attname::text
             FROM pg_catalog.pg_constraint k
             CROSS JOIN LATERAL pg_catalog.unnest(k.conkey) WITH ORDINALITY AS u(attnum, ord)
             JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum
             WHERE k.conrelid = c.oid AND k.contype = 'p'
             ORDER BY u.ord) AS primary_key
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
""",
)

# Only on the error path: what to suggest instead of a missing schema or table.
NEAR_NAMES = statement(
    "catalog.tables.NEAR_NAMES",
    """
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1) AS schema_exists,
       ARRAY(SELECT nspname::text FROM pg_catalog.pg_namespace
             WHERE nspname !~ '^pg_' AND nspname <> 'information_schema'
             ORDER BY nspname) AS schemas,
       ARRAY(SELECT c.relname::text FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
             ORDER BY c.relname) AS tables,
       ARRAY(SELECT n.nspname::text FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relname = $2 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
             ORDER BY n.nspname) AS schemas_with_table
""",
)


async def list_schemas(
    conn: asyncpg.Connection, include_system: bool, comment_chars: int
) -> list[dict[str, Any]]:
    """The schemas, their comments cut after `comment_chars` characters (see cut_comment)."""
    return [dict(r) for r in await conn.fetch(LIST_SCHEMAS, include_system, comment_chars)]


async def list_tables(
    conn: asyncpg.Connection,
    schema: str,
    include_views: bool,
    name_pattern: str | None,
    limit: int,
    offset: int,
    include_columns: bool,
    comment_chars: int,
) -> tuple[list[dict[str, Any]], int, str]:
    """One page of the schema's tables, the number of all that match, and the listing's
    fingerprint; comments cut after `comment_chars` characters (see cut_comment)."""
    kinds = RELKINDS_ALL if include_views else RELKINDS_TABLES
    rows = await conn.fetch(
        LIST_TABLES, schema, kinds, name_pattern, limit, offset, include_columns, comment_chars
    )
    if not rows:
        raise await missing_schema(conn, schema)
    tables = [
        {k: v for k, v in r.items() if k not in ("total", "listing")}
        for r in rows
        if r["name"] is not None
    ]
    return tables, rows[0]["total"], rows[0]["listing"] or ""


class SnapshotCache:
    """Answers built from the catalog, each kept with the token it was read under (see
    DESCRIBE_TABLE): most recently used first, at most `size` of them and `max_bytes` of
    answer text in all.

    Two statements with equal snapshots (`txid_current_snapshot()`) in the same server run
    see the same committed transactions, so the same catalog rows: an answer read under the
    token a later statement reports is still exact, apart from what changes outside
    transactions (the planner's page and row counts, the statistics collector's counts),
    which the statement reads afresh every time. On a hot standby it is never reused.
    Entries are shared with the answers made from them: nothing may change them."""

    def __init__(self, size: int = 256, max_bytes: int = 16_000_000) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self._bytes = 0
        self._entries: OrderedDict[Hashable, tuple[str, dict[str, Any], int]] = OrderedDict()

    def get(self, key: Hashable) -> tuple[str, dict[str, Any]] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0], entry[1]

    def put(self, key: Hashable, token: str, value: dict[str, Any], nbytes: int) -> None:
        """Keep `value` (whose answer text is `nbytes` long) unless it alone is over a
        tenth of the budget."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[2]
        if nbytes > self.max_bytes // 10:
            return
        self._entries[key] = (token, value, nbytes)
        self._bytes += nbytes
        while len(self._entries) > self.size or self._bytes > self.max_bytes:
            self._bytes -= self._entries.popitem(last=False)[1][2]


async def describe_table(
    conn: asyncpg.Connection,
    schema: str,
    table: str,
    include_indexes: bool,
    include_constraints: bool,
    *,
    comment_chars: int,
    known_token: str = "",
) -> asyncpg.Record:
    """The DESCRIBE_TABLE row: `doc` (the answer without its row estimate and size, comments
    cut after `comment_chars` characters), or NULL when `known_token` is still the current
    token (see SnapshotCache); `definition_held`, true for a view whose definition was not
    read (see DESCRIBE_TABLE); then `token`, `estimated_row_count` and `size_pretty`, always
    read afresh."""
    row = await conn.fetchrow(
        DESCRIBE_TABLE,
        schema,
        table,
        include_indexes,
        include_constraints,
        known_token,
        comment_chars,
    )
    if row is None:
        raise await missing_table(conn, schema, table)
    return row


async def table_shape(conn: asyncpg.Connection, schema: str, table: str) -> asyncpg.Record:
    row = await conn.fetchrow(TABLE_SHAPE, schema, table)
    if row is None:
        raise await missing_table(conn, schema, table)
    return row


async def _near_names(conn: asyncpg.Connection, schema: str, table: str) -> asyncpg.Record:
    """NEAR_NAMES, which runs after another statement on the same connection. Outside a
    transaction (Database.session()) that one committed on its own, and a function someone
    shadowed on the search path could have changed session settings in it; so this one gets
    an explicit read-only transaction of its own, whatever the session defaults now say."""
    if conn.is_in_transaction():
        row = await conn.fetchrow(NEAR_NAMES, schema, table)
    else:
        async with conn.transaction(readonly=True):
            row = await conn.fetchrow(NEAR_NAMES, schema, table)
    assert row is not None
    return row


async def missing_schema(conn: asyncpg.Connection, schema: str) -> SchemaNotFoundError:
    near = await _near_names(conn, schema, "")
    return _schema_error(schema, near["schemas"])


def _schema_error(schema: str, schemas: list[str]) -> SchemaNotFoundError:
    similar = closest(schema, schemas)
    return SchemaNotFoundError(
        f"Schema '{schema}' does not exist",
        suggestion=did_you_mean(similar, "Use list_schemas to see the available schemas."),
        context={"requested_schema": schema, "similar_schemas": similar},
    )


async def missing_table(
    conn: asyncpg.Connection, schema: str, table: str
) -> SchemaNotFoundError | TableNotFoundError:
    near = await _near_names(conn, schema, table)
    if not near["schema_exists"]:
        return _schema_error(schema, near["schemas"])
    similar = closest(table, near["tables"])
    elsewhere = [s for s in near["schemas_with_table"] if s != schema]
    then = "Use list_tables to see available tables."
    if elsewhere:
        then = f"A table named '{table}' exists in schema '{elsewhere[0]}'. " + then
    context: dict[str, Any] = {
        "requested_table": table,
        "requested_schema": schema,
        "similar_tables": similar,
    }
    if elsewhere:
        context["schemas_with_table"] = elsewhere
    return TableNotFoundError(
        f"Table '{table}' does not exist in schema '{schema}'",
        suggestion=did_you_mean(similar, then),
        context=context,
    )
