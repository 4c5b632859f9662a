"""Database health and workload statistics (analyze_db_health, get_top_queries): our own
statements over statistics views and catalogs, each pinned, never a table scanned or locked,
never anything changed (a finding's fix is text for the user).

- `findings`: what a check gives (`Finding`, `Outcome`).
- `indexes`, `tables`, `activity`: the checks, each one statement with its thresholds.
- `checks`: the runner (each check in its own savepoint) and the answer budget.
- `statements`: the top queries of pg_stat_statements.
- `advice`: index advice for one query, each candidate measured with HypoPG.
- `workload`: index advice for a workload, greedy under a size budget.

The rest of the server imports these names from here (the face); the modules are
imported on first use, so importing one part does not load the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pg_mcp_server.database import face

if TYPE_CHECKING:
    from pg_mcp_server.database.health.advice import (
        advise as advise,
    )
    from pg_mcp_server.database.health.checks import (
        CHECKS as CHECKS,
        PER_CHECK as PER_CHECK,
        run_checks as run_checks,
        within_budget as within_budget,
    )
    from pg_mcp_server.database.health.findings import (
        Finding as Finding,
        Outcome as Outcome,
    )
    from pg_mcp_server.database.health.statements import (
        SORTS as SORTS,
        top_queries as top_queries,
    )
    from pg_mcp_server.database.health.workload import (
        MAX_QUERIES as MAX_QUERIES,
        advise_workload as advise_workload,
    )

__getattr__ = face(
    __name__,
    {
        "advice": ["advise"],
        "checks": ["CHECKS", "PER_CHECK", "run_checks", "within_budget"],
        "findings": ["Finding", "Outcome"],
        "statements": ["SORTS", "top_queries"],
        "workload": ["MAX_QUERIES", "advise_workload"],
    },
)
