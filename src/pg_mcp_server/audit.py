"""The audit line: one structured log line per tool call (logger `pg_mcp_server.audit`).

    audit caller=alice database=sales tool=execute_query sql=3f2a9c1e0b7d rows=12 outcome=ok ms=4.2

`caller` is the identity's user name, else the result owner (`local`, or `token:` and the start
of its token's hash); `sql` the first 12 hex digits of the SHA-256 of the SQL text, when the
call has SQL; `rows` when the answer says; `outcome` ok or the error's PRD code. Parameter
values (`params`) only with `auth.audit_parameters: true`: they are the data a caller looked for.
Switched by MCP_AUDIT_LOG (unset: on when the configuration file has `users:`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from typing import Any

from mcp_types import CallToolResult

from pg_mcp_server.identity import current_identity
from pg_mcp_server.results.owner import current_owner

logger = logging.getLogger("pg_mcp_server.audit")

SQL_ARGUMENTS = ("sql", "query")
NAME_CHARS = 100
PARAMS_CHARS = 1000  # of the arguments shown with auth.audit_parameters
_PLAIN = re.compile(r"^[A-Za-z0-9_.-]+$")  # of a tool name (a client may send anything)


def caller() -> str:
    identity = current_identity.get()
    if identity is not None:
        return identity.name
    owner = current_owner()
    return owner[:18] if owner.startswith("token:") else owner


def sql_hash(arguments: dict[str, Any]) -> str | None:
    for key in SQL_ARGUMENTS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return hashlib.sha256(value.encode()).hexdigest()[:12]
    return None


def outcome(result: CallToolResult) -> tuple[str, int | None]:
    """ok or the error's code, and the row count when the answer has one."""
    body = result.structured_content or {}
    if result.is_error:
        error = body.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        return str(code or "ERROR"), None
    rows = body.get("row_count")
    return "ok", rows if isinstance(rows, int) else None


def _plain(text: str) -> str:
    """As is when it is a plain name (every tool's is), else quoted: nothing a client sent
    (nor a user's name in the configuration file) can break the line into fields."""
    text = text[:NAME_CHARS]
    return text if _PLAIN.match(text) else json.dumps(text, ensure_ascii=True)


def log_call(
    tool: str,
    database: str | None,
    arguments: dict[str, Any],
    result: CallToolResult,
    elapsed_s: float,
    *,
    parameters: bool = False,
) -> None:
    done, rows = outcome(result)
    fields = [
        f"caller={_plain(caller())}",  # a configured user's name may be anything
        f"database={_plain(database) if database else '-'}",
        f"tool={_plain(tool)}",
    ]
    if (digest := sql_hash(arguments)) is not None:
        fields.append(f"sql={digest}")
    if rows is not None:
        fields.append(f"rows={rows}")
    fields += [f"outcome={done}", f"ms={elapsed_s * 1000:.1f}"]
    if parameters:
        # The values a caller passed (`params`, a table name, a search text ...); the SQL is
        # its hash above, and the line stays bounded.
        shown = {k: v for k, v in arguments.items() if k not in ("database", *SQL_ARGUMENTS)}
        text = json.dumps(shown, ensure_ascii=True, default=str)
        cut = text if len(text) <= PARAMS_CHARS else text[:PARAMS_CHARS] + "..."
        fields.append("params=" + json.dumps(cut, ensure_ascii=True))
    logger.info("audit %s", " ".join(fields))
