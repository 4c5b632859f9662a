"""The connection pool.

- `connect`: the one place a connection is opened (timeouts and SSL refusals said plainly).
- `audit`: the start-up audit of the server's role (privileged roles refused).
- `engine`: the pool and the ways a tool uses a connection: one explicit read-only
  transaction with the guard's locks sent with BEGIN, the session reset after use.
- `errors`: driver, pool and network failures translated to ours (`translate`).

The rest of the server imports these names from here (the face); the modules are
imported on first use, so importing one part does not load the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pg_mcp_server.database import face

if TYPE_CHECKING:
    from pg_mcp_server.database.pool.audit import (
        RoleAudit as RoleAudit,
        refusal as refusal,
    )
    from pg_mcp_server.database.pool.engine import (
        Assumed as Assumed,
        Database as Database,
        Prelude as Prelude,
        StatementChangedError as StatementChangedError,
        Transaction as Transaction,
        acting_role as acting_role,
        lock_wait_error as lock_wait_error,
        request_backends as request_backends,
        send_locks as send_locks,
        transaction_of as transaction_of,
    )
    from pg_mcp_server.database.pool.errors import (
        translate as translate,
    )

__getattr__ = face(
    __name__,
    {
        "audit": ["refusal", "RoleAudit"],
        "engine": [
            "acting_role",
            "Assumed",
            "Database",
            "lock_wait_error",
            "Prelude",
            "request_backends",
            "send_locks",
            "StatementChangedError",
            "Transaction",
            "transaction_of",
        ],
        "errors": ["translate"],
    },
)
