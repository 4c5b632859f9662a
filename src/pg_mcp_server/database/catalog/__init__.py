"""The catalog tools' SQL: one pinned statement per tool over pg_catalog.

- `tables`: list_schemas, list_tables, describe_table.
- `keys`: foreign keys and the cached foreign-key graph.
- `joinpaths`, `joinsql`: find_join_path and the JOIN it writes.
- `search`: search_tables.
- `names`: schema and table names for completions and prompts.
- `server_info`: what the server resources report about PostgreSQL itself.
- `erd`: entity-relationship diagrams as Mermaid text.
- `pages`: catalog answers cut to the answer budget, and the cursor that continues them.

The rest of the server imports these names from here (the face); the modules are
imported on first use, so importing one part does not load the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pg_mcp_server.database import face

if TYPE_CHECKING:
    # modules the rest uses as namespaces (`catalog.describe_table`, `sqltree.walk`)
    from pg_mcp_server.database.catalog import (
        erd as erd,
        names as names,
        pages as pages,
        server_info as server_info,
        tables as tables,
    )
    from pg_mcp_server.database.catalog.joinpaths import (
        MAX_DEPTH as MAX_DEPTH,
        PATH_CAP as PATH_CAP,
        GraphCache as GraphCache,
        Path as Path,
        no_path as no_path,
    )
    from pg_mcp_server.database.catalog.joinsql import (
        countable as countable,
        fan_out_notes as fan_out_notes,
        join_sql as join_sql,
        orphans_sql as orphans_sql,
        unchecked_keys as unchecked_keys,
        unchecked_notes as unchecked_notes,
    )
    from pg_mcp_server.database.catalog.keys import (
        foreign_keys_of as foreign_keys_of,
    )
    from pg_mcp_server.database.catalog.names import (
        MAX_VALUES as MAX_VALUES,
        Names as Names,
        may_be_qualified as may_be_qualified,
        split_name as split_name,
    )
    from pg_mcp_server.database.catalog.search import (
        search_tables as search_tables,
    )
    from pg_mcp_server.database.catalog.tables import (
        SNAPSHOT as SNAPSHOT,
        SnapshotCache as SnapshotCache,
    )

__getattr__ = face(
    __name__,
    {
        "joinpaths": ["GraphCache", "MAX_DEPTH", "no_path", "Path", "PATH_CAP"],
        "joinsql": [
            "countable",
            "fan_out_notes",
            "join_sql",
            "orphans_sql",
            "unchecked_keys",
            "unchecked_notes",
        ],
        "keys": ["foreign_keys_of"],
        "names": ["MAX_VALUES", "may_be_qualified", "Names", "split_name"],
        "search": ["search_tables"],
        "tables": ["SNAPSHOT", "SnapshotCache"],
    },
    modules=["erd", "names", "pages", "server_info", "tables"],
)
