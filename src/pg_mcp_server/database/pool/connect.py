"""Opening a connection: the one place asyncpg.connect is called, for the pool and the
start-up audit alike, so that a host that never answers, a refused SSL upgrade, a certificate
that is not trusted and a password command that fails say so (tls.py, passcmd.py).

Light on purpose (asyncpg, the standard library and our errors only): the audit runs while
the server starts, before SQLAlchemy and pglast are imported.
"""

from __future__ import annotations

import ssl

import asyncpg

from pg_mcp_server import tls
from pg_mcp_server.config import APPLICATION_NAME, DatabaseSettings
from pg_mcp_server.errors import DatabaseConnectionError

# Statements longer than this are parsed and planned again on every call (asyncpg's default
# is 15 KiB; describe_table's own statement is 16 KB pinned: caching it took a warm describe
# of Pagila's film from 6.4-7.3 ms to 1.6-2.2 ms in process). 32 KiB keeps every statement of
# ours cached with room, and bounds what 100 cached statements per connection can hold.
MAX_CACHEABLE = 32 * 1024


async def connect(settings: DatabaseSettings, *, statement_cache_size: int) -> asyncpg.Connection:
    seconds = settings.connect_timeout
    kwargs = settings.connect_kwargs()
    plan = settings.tls()
    if plan is not None:
        kwargs["ssl"] = tls.context(plan)
    if settings.password_command is not None:
        from pg_mcp_server.database.pool import passcmd

        # Run here rather than as asyncpg's password callable: the command has a timeout of
        # its own, and its failure is not reported as the database's not answering.
        kwargs["password"] = await passcmd.password(
            settings.password_command,
            settings.password_command_timeout,
            settings.hidden_variables(),
        )
    try:
        return await asyncpg.connect(
            **kwargs,
            timeout=seconds,
            # Asked for at start-up, which wins over a role's or database's setting: the guard
            # parses SQL as PostgreSQL does with it on (see guard/state.py).
            server_settings={
                "application_name": APPLICATION_NAME,
                "standard_conforming_strings": "on",
            },
            statement_cache_size=statement_cache_size,
            max_cacheable_statement_size=MAX_CACHEABLE,
        )
    except TimeoutError:
        raise DatabaseConnectionError(
            f"The database did not answer within {seconds:g} s (PG_CONNECT_TIMEOUT).",
            suggestion="Check the host and port (something there accepts connections but does "
            "not answer as PostgreSQL), or raise PG_CONNECT_TIMEOUT.",
        ) from None
    except ssl.SSLError as exc:
        explained = tls.explain(exc, plan, _host(settings)) if plan is not None else None
        if explained is None:
            raise
        raise explained from None
    except asyncpg.InvalidAuthorizationSpecificationError as exc:
        refused = _refused(exc, settings, plan)
        if refused is None:
            raise
        raise refused from None
    except (asyncpg.ConnectionDoesNotExistError, ConnectionResetError):
        # TLS 1.3 checks a client certificate after the handshake: a server that refuses it
        # sends an alert and closes, and what arrives first here is usually the reset.
        if plan is None or plan.cert is None:
            raise
        raise tls.refused(plan.cert, "it closed the connection") from None
    except ConnectionError as exc:
        # asyncpg's words when the server answers "no SSL" to a connection that requires it;
        # left alone, that reads as "could not be reached".
        if "SSL" not in str(exc):
            raise
        raise DatabaseConnectionError(
            "The database server does not accept SSL connections, and the connection requires "
            "SSL (sslmode).",
            suggestion="Enable SSL on the server, or set PG_SSLMODE (or sslmode in the DSN) to "
            "prefer or disable if an unencrypted connection is acceptable.",
        ) from None


def _host(settings: DatabaseSettings) -> str:
    return settings.target().host or "localhost"


def _refused(
    exc: asyncpg.InvalidAuthorizationSpecificationError,
    settings: DatabaseSettings,
    plan: tls.TlsPlan | None,
) -> DatabaseConnectionError | None:
    """PostgreSQL's refusal of our credentials, naming which one when it is ours to name (a
    client certificate, or the command's password); None otherwise (errors.py words it)."""
    said = exc.message or ""
    if "certificate" in said:
        cert = plan.cert.named() if plan is not None and plan.cert is not None else "none given"
        return DatabaseConnectionError(
            f"PostgreSQL refused the client certificate (PG_SSLCERT: {cert}): {said}.",
            suggestion="With cert authentication the certificate's common name (CN) must be "
            "the database user's name (or be mapped to it in pg_ident.conf), and the server "
            "must trust its CA.",
        )
    if settings.password_command is not None and isinstance(exc, asyncpg.InvalidPasswordError):
        name = settings.password_command.split()[0]
        return DatabaseConnectionError(
            f"The database rejected the password PG_PASSWORD_COMMAND ({name}) printed.",
            suggestion="Check that the command makes a password (token) for this host, port "
            "and user, and that the role may log in with it.",
        )
    return None
