"""Foreign keys from `pg_constraint`, and the cached foreign-key graph.

Column pairs come from unnesting `conkey`/`confkey` together WITH ORDINALITY, so composite keys
keep their order (the information_schema join in the PRD mis-pairs them). Keys declared on
partitions are reported on the partitioned root; keys cloned from a parent's own key
(`conparentid <> 0`) are skipped so nothing is listed twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from pg_mcp_server.database.catalog import tables as catalog
from pg_mcp_server.database.catalog.tables import FK_ACTION, KEY_COLUMNS, SERVER_RUN, SNAPSHOT
from pg_mcp_server.database.sql import statement

# One row per foreign key, partitions folded onto their root; `{where}` narrows it.
FK_ROWS = f"""
SELECT DISTINCT ON (src.oid, dst.oid, from_columns, to_columns)
       k.conname AS constraint_name,
       sn.nspname AS from_schema, src.relname AS from_table, src.oid::bigint AS from_oid,
       dn.nspname AS to_schema, dst.relname AS to_table, dst.oid::bigint AS to_oid,
       {KEY_COLUMNS.format(key="conkey", rel="conrelid")} AS from_columns,
       {KEY_COLUMNS.format(key="confkey", rel="confrelid")} AS to_columns,
       {FK_ACTION.format(a="k.confupdtype")} AS on_update,
       {FK_ACTION.format(a="k.confdeltype")} AS on_delete,
       k.convalidated AS validated,
       -- The referencing table's row estimate, when it alone holds the key's rows: what
       -- counting a NOT VALID key's orphans would read (joinsql.orphan_count).
       CASE WHEN src.relkind = 'r' AND src.reltuples >= 0 THEN src.reltuples::bigint END
           AS from_rows,
       NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(k.conkey) AS u(n)
                   JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n
                   WHERE NOT a.attnotnull) AS not_null,
       -- A unique index within the key columns: one referencing row per referenced row.
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i
               WHERE i.indrelid = k.conrelid AND i.indisunique AND i.indpred IS NULL
                 AND (i.indkey::pg_catalog.int2[])[0:i.indnkeyatts - 1] OPERATOR(pg_catalog.<@)
                     k.conkey) AS from_unique,
       -- Whether SQL may name the table without its schema (the search path finds it).
       pg_catalog.pg_table_is_visible(src.oid) AS from_visible,
       pg_catalog.pg_table_is_visible(dst.oid) AS to_visible
FROM pg_catalog.pg_constraint k
JOIN pg_catalog.pg_class src
  ON src.oid = coalesce(pg_catalog.pg_partition_root(k.conrelid), k.conrelid)
JOIN pg_catalog.pg_namespace sn ON sn.oid = src.relnamespace
JOIN pg_catalog.pg_class dst
  ON dst.oid = coalesce(pg_catalog.pg_partition_root(k.confrelid), k.confrelid)
JOIN pg_catalog.pg_namespace dn ON dn.oid = dst.relnamespace
WHERE k.contype = 'f' AND k.conparentid = 0 {{where}}
ORDER BY src.oid, dst.oid, from_columns, to_columns, k.conname
"""

# The table's own keys and the keys pointing at it (or at any of its partitions). The keys are
# found through indexes, pg_constraint's on conrelid for outgoing ones and pg_depend's on the
# referenced object for incoming ones (pg_constraint has no index on confrelid), and handed to
# FK_ROWS as an array so that it, too, reads pg_constraint by oid instead of scanning it.
_BY_OID = "AND k.oid = ANY ((SELECT pg_catalog.array_agg(oid) FROM ks)::oid[])"
FOREIGN_KEYS_OF = statement(
    "catalog.keys.FOREIGN_KEYS_OF",
    f"""
WITH target AS (
  SELECT c.oid, c.relkind FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')),
members AS (
  SELECT oid FROM target
  UNION
  SELECT t.relid FROM target CROSS JOIN LATERAL pg_catalog.pg_partition_tree(target.oid) t
  WHERE target.relkind = 'p'),
ks AS (
  SELECT k.oid FROM pg_catalog.pg_constraint k
  WHERE k.conrelid IN (SELECT oid FROM members) AND k.contype = 'f'
  UNION
  SELECT k.oid FROM pg_catalog.pg_depend d
  JOIN pg_catalog.pg_constraint k ON k.oid = d.objid
  WHERE d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
    AND d.refobjid IN (SELECT oid FROM members)
    AND d.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass
    AND k.contype = 'f' AND k.confrelid IN (SELECT oid FROM members)),
fk AS ({FK_ROWS.format(where=_BY_OID)})
SELECT EXISTS (SELECT 1 FROM target) AS found,
       coalesce((SELECT pg_catalog.json_agg(fk ORDER BY fk.constraint_name) FROM fk), '[]') AS keys
""",
)

# A fingerprint of everything the graph is made of. xmin changes whenever a row is inserted or
# replaced (ANALYZE/VACUUM update pg_class in place, which keeps it), and the counts catch
# deletions, so any DDL that adds, drops or renames a key, table, column or schema shows.
_FINGERPRINT = """
    (SELECT count(*)::text || ':' || coalesce(sum(xmin::text::bigint), 0)::text
     FROM pg_catalog.pg_constraint WHERE contype = 'f')
    || '/' || (SELECT count(*)::text || ':' || sum(xmin::text::bigint)::text
               FROM pg_catalog.pg_class)
    || '/' || (SELECT count(*)::text || ':' || sum(xmin::text::bigint)::text
               FROM pg_catalog.pg_attribute)
    || '/' || (SELECT count(*)::text || ':' || sum(xmin::text::bigint)::text
               FROM pg_catalog.pg_namespace)"""

_OID = """(SELECT c.oid FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = ${s} AND c.relname = ${t} AND c.relkind IN ('r', 'p', 'v', 'm', 'f'))"""

# How many rows of a referencing table share one key value, from the planner's statistics
# (pg_stats: n_distinct, negative when a fraction of the rows; null_frac): the rows a join from
# the referenced side brings per matched row. For several columns the most distinct one stands
# for the key, so the ratio is an upper bound. `${n}` is a JSON array of {"oid", "columns"}.
_FAN_OUT = """(SELECT coalesce(pg_catalog.json_agg(pg_catalog.json_build_object(
        'oid', w.oid, 'columns', w.columns, 'ratio', (
            SELECT CASE WHEN c.reltuples > 0 AND s.distinct_values > 0
                        THEN c.reltuples * (1 - s.null_frac) / s.distinct_values END
            FROM pg_catalog.pg_class c
            JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            -- An aggregate, so planned on its own with the names as parameters: pg_stats is
            -- then read through pg_class's index on the name, not scanned whole.
            CROSS JOIN LATERAL (
                SELECT max(st.null_frac) AS null_frac, max(CASE WHEN st.n_distinct < 0
                    THEN -st.n_distinct * c.reltuples ELSE st.n_distinct END) AS distinct_values
                FROM pg_catalog.pg_stats st
                WHERE st.schemaname = n.nspname AND st.tablename = c.relname
                  AND st.attname = ANY (w.columns) AND st.inherited = (c.relkind = 'p')) s
            WHERE c.oid = w.oid))), '[]')
    FROM pg_catalog.json_to_recordset(${n}::pg_catalog.json) AS w(oid oid, columns text[]))"""

FAN_OUT = statement("catalog.keys.FAN_OUT", f"SELECT {_FAN_OUT.format(n=1)} AS fan_out")

# One round trip: the statement's snapshot, the two tables' oids, the fan-out statistics of the
# keys in $7 (those the paths found in the cached graph walk backwards), the fingerprint only when
# the snapshot differs from the one the cached graph was checked under ($1), and the whole graph
# only when the fingerprint differs from the cached one ($2). Two snapshots with the same
# xmin:xmax:in-progress list see exactly the same committed transactions, hence the same catalog
# rows: while nothing in the cluster commits, the check scans no catalog at all. Both carry the
# server run (catalog.SERVER_RUN): a database rebuilt by the same script reaches the same
# snapshot, and the same xmins too, but not the same postmaster start or database oid. (Not on a hot
# standby, whose snapshots list in-progress transactions elsewhere: there the fingerprint is
# always computed.) Each CASE branch holds its subqueries, which PostgreSQL runs only when the
# branch is taken.
GRAPH = statement(
    "catalog.keys.GRAPH",
    f"""
WITH now AS MATERIALIZED (SELECT {SNAPSHOT} AS snapshot),
fp AS MATERIALIZED (
  SELECT CASE WHEN now.snapshot IS DISTINCT FROM $1 OR pg_catalog.pg_is_in_recovery()
              THEN {SERVER_RUN} || '/' || {_FINGERPRINT} END AS fingerprint
  FROM now)
SELECT now.snapshot, fp.fingerprint,
       {_OID.format(s=3, t=4)} AS from_oid,
       {_OID.format(s=5, t=6)} AS to_oid,
       CASE WHEN fp.fingerprint IS NOT NULL AND fp.fingerprint IS DISTINCT FROM $2 THEN
           (SELECT coalesce(pg_catalog.json_agg(fk), '[]') FROM ({FK_ROWS.format(where="")}) fk)
       END AS keys,
       {_FAN_OUT.format(n=7)} AS fan_out
FROM now, fp
""",
)


@dataclass(frozen=True)
class ForeignKey:
    constraint_name: str
    from_schema: str
    from_table: str
    from_oid: int
    to_schema: str
    to_table: str
    to_oid: int
    from_columns: tuple[str, ...]
    to_columns: tuple[str, ...]
    on_update: str
    on_delete: str
    validated: bool  # False: NOT VALID, existing rows may break it
    from_rows: int | None
    not_null: bool
    from_unique: bool
    from_visible: bool
    to_visible: bool

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> ForeignKey:
        return cls(
            **{
                **row,
                "from_columns": tuple(row["from_columns"]),
                "to_columns": tuple(row["to_columns"]),
            }
        )

    def relation(self) -> dict[str, Any]:
        """The PRD ForeignKeyRelation fields."""
        return {
            "constraint_name": self.constraint_name,
            "from_schema": self.from_schema,
            "from_table": self.from_table,
            "from_columns": list(self.from_columns),
            "to_schema": self.to_schema,
            "to_table": self.to_table,
            "to_columns": list(self.to_columns),
            "on_update": self.on_update,
            "on_delete": self.on_delete,
            "not_valid": not self.validated,
        }


async def foreign_keys_of(
    conn: asyncpg.Connection, schema: str, table: str
) -> tuple[list[ForeignKey], list[ForeignKey]]:
    """Outgoing and incoming keys of a table (one statement); TABLE_NOT_FOUND if none such."""
    row = await conn.fetchrow(FOREIGN_KEYS_OF, schema, table)
    assert row is not None
    if not row["found"]:
        raise await catalog.missing_table(conn, schema, table)
    keys = [ForeignKey.from_json(k) for k in row["keys"]]
    outgoing = [k for k in keys if (k.from_schema, k.from_table) == (schema, table)]
    incoming = [k for k in keys if (k.to_schema, k.to_table) == (schema, table)]
    return outgoing, incoming
