"""PRD 6.1 output models for the Layer 1 (schema discovery) tools.

The PRD's fields come first, unchanged; fields after the `# additive` marker in a model are
ours, added where they help an agent write a correct query.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class SchemaInfo(BaseModel):
    """Information about a database schema."""

    name: str = Field(description="Schema name")
    owner: str = Field(description="Schema owner")
    description: str | None = Field(description="Schema comment/description")
    table_count: int = Field(
        description="Number of tables in schema (partitions are counted with their parent)"
    )
    # additive
    view_count: int = Field(default=0, description="Number of views and materialized views")


class ListSchemasOutput(BaseModel):
    """Output for list_schemas tool."""

    schemas: list[SchemaInfo]
    total_count: int


class TableInfo(BaseModel):
    """Information about a database table."""

    name: str = Field(description="Table name")
    schema_name: str = Field(description="Schema containing the table")
    type: str = Field(
        description=(
            "Object type: 'table', 'partitioned table', 'view', 'materialized view' "
            "or 'foreign table'"
        )
    )
    description: str | None = Field(description="Table comment/description")
    estimated_row_count: int = Field(
        description=(
            "Estimated row count from the planner statistics (pg_class.reltuples), or from "
            "pg_stat live tuples for a never-analyzed table; 0 for views"
        )
    )
    size_bytes: int | None = Field(
        description=(
            "Table size in bytes with TOAST and indexes, from the planner's page counts "
            "(exact for never-analyzed tables); null for views and foreign tables"
        )
    )
    size_pretty: str | None = Field(description="Human-readable size (e.g., '1.2 MB')")
    has_primary_key: bool = Field(description="Whether table has a primary key")
    column_count: int = Field(description="Number of columns")
    # additive
    partitions: list[str] | None = Field(
        default=None,
        description="For a partitioned table: its partitions (they are not listed separately)",
    )


class ListTablesOutput(BaseModel):
    """Output for list_tables tool."""

    tables: list[TableInfo]
    schema_name: str
    total_count: int = Field(description="Number of matching objects (all pages)")
    # additive
    has_more: bool = Field(
        default=False, description="More objects follow this page: call again with offset"
    )


class ForeignKeyRef(BaseModel):
    """Foreign key reference information."""

    constraint_name: str
    referenced_schema: str
    referenced_table: str
    referenced_column: str
    on_update: str
    on_delete: str


class ColumnInfo(BaseModel):
    """Detailed information about a table column."""

    name: str = Field(description="Column name")
    data_type: str = Field(description="PostgreSQL data type")
    is_nullable: bool = Field(description="Whether column allows NULL")
    default_value: str | None = Field(description="Default value expression")
    description: str | None = Field(description="Column comment")
    is_primary_key: bool = Field(description="Part of primary key")
    is_unique: bool = Field(description="Has unique constraint")
    foreign_key: ForeignKeyRef | None = Field(description="FK reference if applicable")
    character_maximum_length: int | None = Field(description="Max length for char types")
    numeric_precision: int | None = Field(description="Precision for numeric types")
    numeric_scale: int | None = Field(description="Scale for numeric types")
    # additive
    enum_values: list[str] | None = Field(
        default=None, description="Allowed labels when the type (or its base/element) is an enum"
    )
    domain_base_type: str | None = Field(
        default=None, description="The underlying type when data_type is a domain"
    )
    is_identity: bool = Field(default=False, description="Identity column")
    identity_generation: str | None = Field(
        default=None, description="'ALWAYS' or 'BY DEFAULT' for identity columns"
    )
    generation_expression: str | None = Field(
        default=None, description="Expression of a generated column"
    )


class IndexInfo(BaseModel):
    """Information about a table index."""

    name: str = Field(description="Index name")
    columns: list[str] = Field(description="Indexed columns (or expressions), in key order")
    is_unique: bool = Field(description="Whether index enforces uniqueness")
    is_primary: bool = Field(description="Whether this is the primary key index")
    index_type: str = Field(description="Index type (btree, hash, gin, etc.)")
    description: str | None = Field(description="Index comment")
    # additive
    definition: str | None = Field(
        default=None, description="CREATE INDEX statement (shows INCLUDE and WHERE parts)"
    )


class ConstraintInfo(BaseModel):
    """Information about a table constraint."""

    name: str = Field(description="Constraint name")
    type: str = Field(
        description="Constraint type (PRIMARY KEY, FOREIGN KEY, UNIQUE, CHECK, EXCLUDE)"
    )
    columns: list[str] = Field(description="Columns involved")
    definition: str | None = Field(
        description="Constraint definition (for CHECK and EXCLUDE; null for the others)"
    )
    referenced_table: str | None = Field(description="Referenced table (for FK)")
    # additive
    referenced_schema: str | None = Field(default=None, description="Referenced schema (for FK)")
    referenced_columns: list[str] | None = Field(
        default=None, description="Referenced columns, paired in order with columns (for FK)"
    )


class DescribeTableOutput(BaseModel):
    """Output for describe_table tool."""

    table_name: str
    schema_name: str
    type: str = Field(description="'table', 'partitioned table', 'view', 'materialized view' ...")
    description: str | None
    columns: list[ColumnInfo]
    indexes: list[IndexInfo] | None
    constraints: list[ConstraintInfo] | None
    estimated_row_count: int
    size_pretty: str | None
    # additive
    partitions: list[str] | None = Field(
        default=None, description="Partitions of a partitioned table"
    )
    partition_key: str | None = Field(default=None, description="PARTITION BY clause")
    partition_of: str | None = Field(
        default=None, description="Parent table when this table is a partition"
    )
    view_definition: str | None = Field(
        default=None, description="SELECT text of a view or materialized view"
    )


class GetSampleRowsOutput(BaseModel):
    """Output for get_sample_rows tool."""

    table_name: str
    schema_name: str
    columns: list[str]
    rows: list[dict[str, Any]]
    row_count: int
    total_table_rows: int = Field(description="Estimated number of rows in the table")
    note: str | None = Field(
        description="Additional context about the sample (e.g., 'randomized', 'filtered')"
    )
