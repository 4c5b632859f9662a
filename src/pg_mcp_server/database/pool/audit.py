"""Start-up privilege audit: is the role the server logs in as really a reader?

The guard and the read-only transaction stop writes whatever the role, but a least-privilege
role is the backstop behind the backstop, so a role that could do more is reported: on stderr,
in the instructions the model reads, and (with MCP_REQUIRE_READ_ONLY_ROLE) as a refusal to start.
A superuser, or a member of pg_execute_server_program, pg_read_server_files or
pg_write_server_files, is refused at start unless MCP_ALLOW_PRIVILEGED_ROLE (`__main__`): one
statement past the guard would run programs or read files on the database host.
"""

from __future__ import annotations

import logging

import anyio

from pg_mcp_server.config import DatabaseSettings
from pg_mcp_server.database.pool.connect import connect

logger = logging.getLogger("pg_mcp_server")

FILE_ROLES = ["pg_read_server_files", "pg_write_server_files", "pg_execute_server_program"]

# Written pinned to pg_catalog (see pinned.py) by hand: it runs while the server starts,
# before pglast is imported.
AUDIT = """
SELECT current_user AS role,
       r.rolsuper AS superuser,
       ARRAY(SELECT p FROM pg_catalog.unnest($1::pg_catalog.text[]) AS p
             WHERE pg_catalog.pg_has_role(current_user, p, 'MEMBER')) AS file_roles,
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
        WHERE (c.relkind OPERATOR(pg_catalog.=) 'r' OR c.relkind OPERATOR(pg_catalog.=) 'p')
          AND n.nspname OPERATOR(pg_catalog.<>) 'information_schema'
          AND n.nspname OPERATOR(pg_catalog.!~) '^pg_'
          AND pg_catalog.has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE'))
           AS writable_tables
FROM pg_catalog.pg_roles r
WHERE r.rolname OPERATOR(pg_catalog.=) current_user
"""


async def audit_role(settings: DatabaseSettings) -> tuple[list[str], list[str]]:
    """What the role could do beyond reading, one sentence each (empty for a true reader), and
    which of those make it privileged: a superuser, or a member of a role that reads or writes
    the server's files or runs programs there (see `refusal`).

    On a connection of its own, not the pool's: the audit runs while the server starts, and
    the pool's modules (SQLAlchemy) would cost `initialize` more than the audit itself.
    Unnamed statements (no statement cache), so it is safe through a pooler too."""
    conn = await connect(settings, statement_cache_size=0)
    try:
        async with conn.transaction(readonly=True):
            await conn.execute(f"SET LOCAL statement_timeout = {int(settings.statement_timeout)}")
            row = await conn.fetchrow(AUDIT, FILE_ROLES)
    finally:
        # A server that stops at once (a short session) must not cut the close short.
        with anyio.CancelScope(shield=True), anyio.move_on_after(RoleAudit.WAIT_S):
            await conn.close()
    assert row is not None
    role = row["role"]
    privileged = privileges(role, row["superuser"], row["file_roles"])
    found = list(privileged)
    if row["writable_tables"]:
        found.append(f"role {role!r} can write to {row['writable_tables']} table(s)")
    return found, privileged


def privileges(role: str, superuser: bool, file_roles: list[str]) -> list[str]:
    """What makes `role` privileged (see `refusal`), one sentence each."""
    found = [f"role {role!r} is a superuser"] if superuser else []
    if file_roles:
        found.append(f"role {role!r} is a member of {', '.join(file_roles)}")
    return found


def refusal(privileged: list[str]) -> str:
    """The one line that says why the server does not start with a privileged role."""
    return (
        f"refusing to start: {'; '.join(privileged)}: with such a role, one statement that "
        "got past the guard runs shell commands on the database host (COPY ... TO PROGRAM) "
        "or reads its files. Connect as a role that can only SELECT (see README), or set "
        "MCP_ALLOW_PRIVILEGED_ROLE=true to serve anyway"
    )


class RoleAudit:
    """One server's audit, run in the background while the server starts to serve: its
    findings go to stderr as soon as they are known, and into the instructions of the
    `initialize` answers (see server.PgMcp._handshake), which wait for them at most `WAIT_S`
    seconds."""

    WAIT_S = 2.0

    def __init__(self) -> None:
        self.found: list[str] | None = None  # None until known (or when the database is down)
        self.privileged: list[str] = []  # those of `found` that refuse the start (refusal)
        self._done = anyio.Event()

    async def run_alone(self, settings: DatabaseSettings) -> list[str] | None:
        try:
            self.found, self.privileged = await audit_role(settings)
        except Exception as exc:
            # Where it tried, and why, in our words (translate): never the DSN or a password.
            from pg_mcp_server.database.pool.errors import translate

            known = translate(exc)
            if known is None:  # a bug: it must not take the server down with it
                logger.error("the privilege audit failed", exc_info=True)
            else:
                logger.warning(
                    "cannot reach PostgreSQL at start-up (%s): %s; the server is running and "
                    "connects again at every tool call",
                    settings.target().describe(),
                    known.message,
                )
        else:
            for line in self.found:
                logger.warning("privilege audit: %s; use a read-only role (see README)", line)
        finally:
            self._done.set()
        return self.found

    async def wait(self, timeout: float = WAIT_S) -> list[str]:
        with anyio.move_on_after(timeout):
            await self._done.wait()
        return self.found or []
