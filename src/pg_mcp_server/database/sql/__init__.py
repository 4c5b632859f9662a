"""SQL as trees (pglast).

- `tree`: walking pglast's JSON parse trees.
- `refs`: every catalog object a statement can reach by name.
- `pinned`: our own SQL rewritten so that every name is pg_catalog's.

The rest of the server imports these names from here (the face); the modules are
imported on first use, so importing one part does not load the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pg_mcp_server.database import face

if TYPE_CHECKING:
    # modules the rest uses as namespaces (`catalog.describe_table`, `sqltree.walk`)
    from pg_mcp_server.database.sql import tree as tree
    from pg_mcp_server.database.sql.pinned import (
        Kind as Kind,
        UnpinnableSqlError as UnpinnableSqlError,
        pin as pin,
        pin_tree as pin_tree,
        qualify as qualify,
        statement as statement,
        unqualified_names as unqualified_names,
        written_qualified as written_qualified,
    )
    from pg_mcp_server.database.sql.refs import (
        Call as Call,
        Name as Name,
        Refs as Refs,
        cte_references as cte_references,
        plpgsql_refs as plpgsql_refs,
        refs_of as refs_of,
        select_refs as select_refs,
    )
    from pg_mcp_server.database.sql.tree import (
        names as names,
        parse as parse,
        walk as walk,
    )

__getattr__ = face(
    __name__,
    {
        "pinned": [
            "Kind",
            "pin",
            "pin_tree",
            "qualify",
            "statement",
            "UnpinnableSqlError",
            "unqualified_names",
            "written_qualified",
        ],
        "refs": [
            "Call",
            "cte_references",
            "Name",
            "plpgsql_refs",
            "Refs",
            "refs_of",
            "select_refs",
        ],
        "tree": ["names", "parse", "walk"],
    },
    modules=["tree"],
)
