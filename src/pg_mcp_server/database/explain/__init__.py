"""explain_query.

- `plans`: EXPLAIN behind the same guard, and warnings read from the plan's structure.
- `text`: PostgreSQL's text EXPLAIN format, written from its JSON format.

The rest of the server imports these names from here (the face); the modules are
imported on first use, so importing one part does not load the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pg_mcp_server.database import face

if TYPE_CHECKING:
    from pg_mcp_server.database.explain.plans import (
        explain as explain,
        refuse_hidden_rows as refuse_hidden_rows,
    )

__getattr__ = face(
    __name__,
    {
        "plans": ["explain", "refuse_hidden_rows"],
    },
)
