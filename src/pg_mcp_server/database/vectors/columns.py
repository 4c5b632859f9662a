"""pgvector columns and the distance their indexes support, read from the catalog.

A `vector`, `halfvec` or `sparsevec` column keeps its dimension in `atttypmod` (-1: any). An
HNSW or IVFFlat index on it is built for one distance, named by its operator class
(`vector_cosine_ops` ...): a query is answered from the index only when it orders by that
distance's operator, so similarity_search uses the operator of the column's index, and cosine
distance (`<=>`) when it has none.

One round trip: the table, its columns and their types, and its vector indexes with their
access method and operator classes (`TABLE_VECTORS`); or every vector column of a schema
(`SCHEMA_VECTORS`, for discovery).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from pg_mcp_server.database.sql import statement

VECTOR_TYPES = ("vector", "halfvec", "sparsevec")
# Operator class suffix -> (operator, what its value means)
DISTANCES = {
    "_l2_ops": ("<->", "l2"),
    "_cosine_ops": ("<=>", "cosine"),
    "_ip_ops": ("<#>", "negative_inner_product"),
    "_l1_ops": ("<+>", "l1"),
}
DEFAULT_DISTANCE = ("<=>", "cosine")

_COLUMNS = """
  (SELECT json_agg(json_build_object(
            'name', a.attname, 'attnum', a.attnum,
            'type', format_type(a.atttypid, a.atttypmod),
            'type_name', t.typname, 'type_schema', tn.nspname, 'typmod', a.atttypmod)
          ORDER BY a.attnum)
     FROM pg_attribute AS a
     JOIN pg_type AS t ON t.oid = a.atttypid
     JOIN pg_namespace AS tn ON tn.oid = t.typnamespace
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
  (SELECT json_agg(json_build_object(
            'name', ic.relname, 'method', am.amname, 'attnum', i.indkey[k.n],
            'opclass', oc.opcname, 'partial', i.indpred IS NOT NULL)
          ORDER BY ic.relname)
     FROM pg_index AS i
     JOIN pg_class AS ic ON ic.oid = i.indexrelid
     JOIN pg_am AS am ON am.oid = ic.relam
     CROSS JOIN LATERAL generate_series(0, i.indnkeyatts - 1) AS k(n)
     JOIN pg_opclass AS oc ON oc.oid = i.indclass[k.n]
    WHERE i.indrelid = c.oid AND i.indisvalid AND am.amname IN ('hnsw', 'ivfflat')) AS indexes
"""

TABLE_VECTORS = statement(
    "vectors.columns.TABLE_VECTORS",
    f"""
SELECT c.relkind::text AS kind, {_COLUMNS}
  FROM pg_class AS c
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
""",
)

SCHEMA_VECTORS = statement(
    "vectors.columns.SCHEMA_VECTORS",
    f"""
SELECT c.relname AS table_name, c.relkind::text AS kind, {_COLUMNS}
  FROM pg_class AS c
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
   AND EXISTS (SELECT 1 FROM pg_attribute AS a JOIN pg_type AS t ON t.oid = a.atttypid
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                  AND t.typname IN ('vector', 'halfvec', 'sparsevec'))
 ORDER BY c.relname
""",
)


@dataclass(frozen=True)
class VectorIndex:
    name: str
    method: str  # hnsw, ivfflat
    opclass: str  # vector_cosine_ops, halfvec_l2_ops, ...
    operator: str | None  # its distance operator; None for one we do not know
    distance: str | None
    partial: bool  # used only when the query's filter implies its predicate


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # as format_type shows it: vector(256)
    type_name: str
    type_schema: str
    dimensions: int | None  # a vector column's atttypmod, None when any
    indexes: tuple[VectorIndex, ...] = ()

    @property
    def is_vector(self) -> bool:
        return self.type_name in VECTOR_TYPES

    def distance(self) -> tuple[str, str, VectorIndex | None]:
        """(operator, distance name, index): the first whole index's, else a partial one's,
        else cosine and no index."""
        usable = [i for i in self.indexes if i.operator is not None]
        for index in sorted(usable, key=lambda i: i.partial):
            assert index.operator is not None and index.distance is not None
            return index.operator, index.distance, index
        return *DEFAULT_DISTANCE, None

    def describe(self) -> dict[str, Any]:
        """What discovery shows of a vector column."""
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        out["dimensions"] = self.dimensions
        out["indexes"] = [
            {
                "name": i.name,
                "method": i.method,
                "opclass": i.opclass,
                "distance": i.distance,
                "operator": i.operator,
                **({"partial": True} if i.partial else {}),
            }
            for i in self.indexes
        ]
        operator, distance, index = self.distance()
        out["search_distance"] = distance
        out["search_operator"] = operator
        if index is None:
            out["note"] = "no vector index: searches scan the table (cosine distance)"
        return out


@dataclass(frozen=True)
class Table:
    kind: str  # relkind
    columns: tuple[Column, ...] = field(default=())

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    @property
    def vectors(self) -> list[Column]:
        return [c for c in self.columns if c.is_vector]


def _index(raw: dict[str, Any]) -> VectorIndex:
    operator, distance = next(
        (d for suffix, d in DISTANCES.items() if raw["opclass"].endswith(suffix)), (None, None)
    )
    return VectorIndex(
        raw["name"], raw["method"], raw["opclass"], operator, distance, bool(raw["partial"])
    )


def _json(value: Any) -> list[dict[str, Any]]:
    """A json column as the pool's codec decoded it (or its text, on a bare connection)."""
    if value is None:
        return []
    return json.loads(value) if isinstance(value, str) else list(value)


def _table(kind: str, columns_json: Any, indexes_json: Any) -> Table:
    indexes = _json(indexes_json)
    columns = []
    for raw in _json(columns_json):
        vector = raw["type_name"] in VECTOR_TYPES
        columns.append(
            Column(
                name=raw["name"],
                type=raw["type"],
                type_name=raw["type_name"],
                type_schema=raw["type_schema"],
                dimensions=raw["typmod"] if vector and raw["typmod"] > 0 else None,
                indexes=tuple(_index(i) for i in indexes if i["attnum"] == raw["attnum"])
                if vector
                else (),
            )
        )
    return Table(kind, tuple(columns))


async def table_vectors(conn: asyncpg.Connection, schema: str, table: str) -> Table | None:
    """The table's columns with their vector facts; None when there is no such relation."""
    row = await conn.fetchrow(TABLE_VECTORS, schema, table)
    if row is None:
        return None
    return _table(row["kind"], row["columns"], row["indexes"])


async def schema_vectors(conn: asyncpg.Connection, schema: str) -> dict[str, list[Column]]:
    """Every relation of `schema` that has vector columns -> those columns (discovery: what
    list_tables, describe_table and search_tables can show of them)."""
    rows = await conn.fetch(SCHEMA_VECTORS, schema)
    return {r["table_name"]: _table(r["kind"], r["columns"], r["indexes"]).vectors for r in rows}
