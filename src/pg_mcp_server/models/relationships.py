"""PRD 6.2 output models for the Layer 2 (relationship) tools, in compact form (see
models/compact.py); additive fields are marked.

A join path's steps are the PRD JoinStep facts without repeating them: `sql_example` names each
step's tables, columns and join type, `steps` the foreign key behind each join, in order.
"""

from __future__ import annotations

from pydantic import Field

from pg_mcp_server.models.compact import Compact


class ForeignKeyRelation(Compact):
    constraint_name: str
    from_schema: str
    from_table: str
    from_columns: list[str]
    to_schema: str
    to_table: str
    to_columns: list[str]
    on_update: str = "NO ACTION"
    on_delete: str = "NO ACTION"
    # additive: declared NOT VALID and never validated, so existing rows may break it
    not_valid: bool = False


class GetForeignKeysOutput(Compact):
    table_name: str
    schema_name: str
    outgoing: list[ForeignKeyRelation]  # this table holds the key
    incoming: list[ForeignKeyRelation]  # other tables reference this one
    outgoing_count: int  # all of them, on every page
    incoming_count: int
    # additive, when the keys do not all fit in one answer: outgoing then incoming, paged
    note: str | None = None
    next_cursor: str | None = None


class JoinPath(Compact):
    depth: int
    # FROM ... JOIN ... ON ...: JOIN where every row has a match, LEFT JOIN from the first
    # step where one may not; runs as-is after a select list.
    sql_example: str
    steps: list[str]  # the constraint behind each join, in order
    # additive: each step that can multiply rows, with its ratio from the statistics ...
    fan_out: list[str] = Field(default_factory=list)
    # ... and what that does to aggregates over the first table
    warning: str | None = None
    # additive: each step over a NOT VALID key (rows may break it): how many rows do, from a
    # count when the table is small enough to read, and how to keep them
    not_valid: list[str] = Field(default_factory=list)


class FindJoinPathOutput(Compact):
    from_table: str
    to_table: str
    paths: list[JoinPath]
    paths_found: int
    note: str | None = None
    diagram: str | None = None  # additive, with diagram=true: Mermaid erDiagram text
