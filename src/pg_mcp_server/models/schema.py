"""PRD 6.1 output models for the Layer 1 (schema discovery) tools, in compact form.

Every fact of the PRD's models is here, under the PRD's names; what changed is what an answer
leaves out (see models/compact.py): fields at their default, and facts stated elsewhere in
the same answer or a rendering of another field (a table's schema in list_tables is the
listing's, and its size_pretty a rendering of size_bytes; a column's length, precision and
scale are in its data_type, e.g. "character varying(45)", "numeric(4,2)"). Sample rows are
arrays in the order of `columns`. Fields marked additive are ours.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from pg_mcp_server.models.compact import Compact


class SchemaInfo(Compact):
    name: str
    owner: str
    description: str | None = None
    table_count: int = 0  # partitions are counted with their parent
    view_count: int = 0  # additive: views and materialized views


class ListSchemasOutput(Compact):
    schemas: list[SchemaInfo]
    total_count: int


class TableInfo(Compact):
    name: str
    type: str = "table"  # or 'partitioned table', 'view', 'materialized view', 'foreign table'
    description: str | None = None
    # Planner statistics (pg_class.reltuples), or the statistics collector's live tuples for a
    # never-analyzed table; absent (0) for views.
    estimated_row_count: int = 0
    # additive: true only when the table certainly has no rows (no page on disk) ...
    empty: bool = False
    # ... otherwise the count is an estimate made then (last ANALYZE or VACUUM, UTC); absent:
    # never made, or a view.
    stats_as_of: str | None = None
    size_bytes: int | None = None  # table, TOAST and indexes; absent for views
    has_primary_key: bool = False
    column_count: int = 0
    partitions: list[str] | None = None  # additive
    # additive: false for a materialized view holding no data (querying it fails: NOT_POPULATED)
    populated: bool = True
    # additive, with include_columns: a line per column (database/catalog/tables.py
    # column_lines): "name type[ PK][ -> [schema.]table.column][ -- comment]", a key of
    # several columns as " -> table(a, b) [key name with b]" on its first column and
    # " [in key name]" on the others, "NOT VALID" on a key never validated
    columns: list[str] | None = None


class ListTablesOutput(Compact):
    tables: list[TableInfo]
    schema_name: str
    total_count: int  # matching objects, all pages
    has_more: bool = False  # additive: call again with offset, or with cursor=next_cursor
    # additive, when more than this answer holds: what it holds, and the cursor to read on
    # (see database/catalog/pages.py)
    note: str | None = None
    next_cursor: str | None = None


class ForeignKeyRef(Compact):
    constraint_name: str
    referenced_schema: str
    referenced_table: str
    referenced_column: str  # the one this column is paired with
    # additive, only for a key of several columns: all of them, paired in order
    columns: list[str] | None = None
    referenced_columns: list[str] | None = None
    # additive: declared NOT VALID and never validated, so existing rows may break it
    not_valid: bool = False
    on_update: str = "NO ACTION"
    on_delete: str = "NO ACTION"


class VectorInfo(Compact):
    """additive: a pgvector column (vector, halfvec, sparsevec) and how to search it."""

    dimensions: int | None = None  # absent: any
    distance: str  # what its index serves (cosine, l2, ...); cosine without one
    operator: str  # to ORDER BY for that distance: <=>, <->, <#>, <+>
    index: str | None = None  # the HNSW or IVFFlat index a search uses
    partial_index: bool = False  # that index covers only the rows its predicate admits
    note: str | None = None  # when there is no such index


class ColumnInfo(Compact):
    name: str
    data_type: str  # with length, precision and scale: "character varying(45)"
    is_nullable: bool = True
    default_value: str | None = None
    description: str | None = None
    is_primary_key: bool = False
    is_unique: bool = False
    foreign_key: ForeignKeyRef | None = None  # one-column keys first, then by name
    # additive
    other_foreign_keys: list[ForeignKeyRef] | None = None  # the column's other keys
    enum_values: list[str] | None = None
    domain_base_type: str | None = None
    identity_generation: str | None = None  # 'ALWAYS' or 'BY DEFAULT': an identity column
    generation_expression: str | None = None
    vector: VectorInfo | None = None


class IndexInfo(Compact):
    name: str
    columns: list[str]  # or expressions, in key order
    is_unique: bool = False
    is_primary: bool = False
    index_type: str = "btree"
    description: str | None = None
    # additive: the CREATE INDEX statement, when it says more than the fields above
    definition: str | None = None


class ConstraintInfo(Compact):
    name: str
    type: str  # PRIMARY KEY, FOREIGN KEY, UNIQUE, CHECK, EXCLUDE
    columns: list[str] = Field(default_factory=list)
    definition: str | None = None  # CHECK and EXCLUDE
    referenced_table: str | None = None
    referenced_schema: str | None = None  # additive
    referenced_columns: list[str] | None = None  # additive, paired in order with columns
    not_valid: bool = False  # additive: NOT VALID (CHECK, FOREIGN KEY), existing rows unchecked


class DescribeTableOutput(Compact):
    table_name: str
    schema_name: str
    type: str = "table"
    description: str | None = None
    columns: list[ColumnInfo]
    indexes: list[IndexInfo] | None = None  # absent when not asked for
    constraints: list[ConstraintInfo] | None = None  # absent when not asked for
    # additive
    partitions: list[str] | None = None
    partition_key: str | None = None
    partition_of: str | None = None
    view_definition: str | None = None
    populated: bool = True  # additive: false for a materialized view holding no data
    # Last, as they are read afresh on every call: the same facts as in TableInfo.
    estimated_row_count: int = 0
    empty: bool = False  # additive
    stats_as_of: str | None = None  # additive
    size_pretty: str | None = None
    # additive, when the columns do not all fit in one answer: which this page holds, and the
    # cursor to the next (whose answer holds only table_name, schema_name and columns)
    note: str | None = None
    next_cursor: str | None = None


class GetSampleRowsOutput(Compact):
    table_name: str
    schema_name: str
    columns: list[str]
    rows: list[list[Any]]  # one value per column, in `columns` order
    row_count: int
    total_table_rows: int  # estimated
    note: str | None = None


class SearchMatch(Compact):
    schema_name: str
    table_name: str
    type: str = "table"
    description: str | None = None
    empty: bool = False  # additive: as in list_tables
    populated: bool = True  # additive: as in list_tables
    # additive: the primary key's columns, in key order (absent: none)
    primary_key: list[str] = Field(default_factory=list)
    # The matching columns (best first, at most 5), as in the schema map, with their comment.
    columns: list[str] = Field(default_factory=list)


class SearchTablesOutput(Compact):
    matches: list[SearchMatch]  # best first
    total_count: int  # tables that match at all
    # additive, when more tables match than this answer holds
    note: str | None = None
    next_cursor: str | None = None
