"""Reading a caller's rows.

- `reader`: how rows are read, for every tool (`Reader`: guard, describe, wrap, bind, one
  round trip, PostgreSQL's JSON; custom SQL's rows as the driver decodes them).
- `output`: the budget rows are cut to (`has_more`, the notes) and the output dict.
- `rewrite`: the reading statement built around the caller's parse tree.
- `params`: `$n` parameters bound to the types PostgreSQL inferred.
- `values`: how a column's values become JSON (PostgreSQL's, and the driver's).
- `sampling`: get_sample_rows.
- `redaction`, `lineage`: where sensitive values come from and which outputs carry them.
- `hints`: errors that carry the fix.

The rest of the server imports these names from here (the face); the modules are
imported on first use, so importing one part does not load the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pg_mcp_server.database import face

if TYPE_CHECKING:
    # modules the rest uses as namespaces (`catalog.describe_table`, `sqltree.walk`)
    from pg_mcp_server.database.rows import rewrite as rewrite, values as values
    from pg_mcp_server.database.rows.hints import (
        Relation as Relation,
        column_hint as column_hint,
        function_hint as function_hint,
        relations as relations,
    )
    from pg_mcp_server.database.rows.output import (
        Budget as Budget,
        answer as answer,
    )
    from pg_mcp_server.database.rows.params import (
        bind as bind,
    )
    from pg_mcp_server.database.rows.reader import (
        QueryResult as QueryResult,
        Reader as Reader,
        Shapes as Shapes,
        judge_hidden as judge_hidden,
        query_hash as query_hash,
        scrubbed as scrubbed,
    )
    from pg_mcp_server.database.rows.redaction import (
        OTHER_CALLER as OTHER_CALLER,
        hides_statements_of as hides_statements_of,
        mask_query as mask_query,
        mask_setting as mask_setting,
    )
    from pg_mcp_server.database.rows.sampling import (
        sample_rows as sample_rows,
    )
    from pg_mcp_server.database.rows.values import (
        cut_marker as cut_marker,
        cut_text as cut_text,
        from_driver as from_driver,
        type_name as type_name,
    )

__getattr__ = face(
    __name__,
    {
        "hints": ["column_hint", "function_hint", "Relation", "relations"],
        "output": ["answer", "Budget"],
        "params": ["bind"],
        "reader": ["judge_hidden", "query_hash", "QueryResult", "Reader", "scrubbed", "Shapes"],
        "redaction": ["hides_statements_of", "mask_query", "mask_setting", "OTHER_CALLER"],
        "sampling": ["sample_rows"],
        "values": ["cut_marker", "cut_text", "from_driver", "type_name"],
    },
    modules=["rewrite", "values"],
)
