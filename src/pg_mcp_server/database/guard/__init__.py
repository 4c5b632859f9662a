"""The read-only guard (docs/security.md).

- `gate`: one SELECT and nothing else, parsed with pglast; the entry point (`SqlGuard`).
- `state`: the catalog facts kept current per call, and the relation locks taken first.
- `reach`: from a statement's names to every object whose code PostgreSQL could run.
- `rules`: how each object is judged (volatile, untrusted owner, refused built-ins, ...).
- `facts`: the catalog facts themselves, read from PostgreSQL (nothing here judges).

The rest of the server imports these names from here (the face); the modules are
imported on first use, so importing one part does not load the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pg_mcp_server.database import face

if TYPE_CHECKING:
    from pg_mcp_server.database.guard.facts import (
        OPEN_SCHEMA as OPEN_SCHEMA,
        TRUSTED_ROLES as TRUSTED_ROLES,
    )
    from pg_mcp_server.database.guard.gate import (
        SqlGuard as SqlGuard,
        quote_ident as quote_ident,
    )

__getattr__ = face(
    __name__,
    {
        "facts": ["OPEN_SCHEMA", "TRUSTED_ROLES"],
        "gate": ["quote_ident", "SqlGuard"],
    },
)
