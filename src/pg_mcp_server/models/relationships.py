"""PRD 6.2 output models for the Layer 2 (relationship) tools; additive fields are marked."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ForeignKeyRelation(BaseModel):
    """A single foreign key relationship."""

    constraint_name: str
    from_schema: str
    from_table: str
    from_columns: list[str]
    to_schema: str
    to_table: str
    to_columns: list[str]
    on_update: str
    on_delete: str


class GetForeignKeysOutput(BaseModel):
    """Output for get_foreign_keys tool."""

    table_name: str
    schema_name: str
    outgoing: list[ForeignKeyRelation] = Field(
        description="Tables this table references (this table has the FK column)"
    )
    incoming: list[ForeignKeyRelation] = Field(
        description="Tables that reference this table (other tables have FK to this)"
    )
    outgoing_count: int
    incoming_count: int


class JoinStep(BaseModel):
    """A single step in a join path."""

    from_table: str
    from_schema: str
    from_column: str = Field(
        description="Join column on the from side (comma-separated if composite)"
    )
    to_table: str
    to_schema: str
    to_column: str = Field(description="Join column on the to side (comma-separated if composite)")
    join_type: str = Field(description="Suggested join type based on FK direction")
    constraint_name: str
    # additive
    from_columns: list[str] = Field(description="All join columns on the from side, in order")
    to_columns: list[str] = Field(description="All join columns on the to side, paired in order")
    direction: str = Field(
        description=(
            "'forward' when from_table holds the foreign key, 'reverse' when to_table does"
        )
    )


class JoinPath(BaseModel):
    """A complete path between two tables."""

    steps: list[JoinStep]
    depth: int
    sql_example: str = Field(description="Example JOIN clause for this path")


class FindJoinPathOutput(BaseModel):
    """Output for find_join_path tool."""

    from_table: str
    to_table: str
    paths: list[JoinPath]
    paths_found: int
    note: str | None = Field(
        description="Additional context (e.g., 'multiple paths found, showing shortest')"
    )
