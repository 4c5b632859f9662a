"""The one settings object (PRD 4.3): environment (`PG_*`, `MCP_*`), `.env`, defaults.

Precedence is CLI flag > environment > `.env` > default: `__main__` passes CLI values as init
arguments, which pydantic-settings ranks above every other source. Every field has a
description, and `tests/test_config.py` checks that each is documented in the README.

Its size (~700 lines) is every setting with its validation and its message: the one
settings object.
"""

from __future__ import annotations

import dataclasses
import difflib
import getpass
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AliasChoices,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from pg_mcp_server import dsn as dsn_text, tls as tls_plan

APPLICATION_NAME = "pg-mcp-server"
# The name on PyPI ("pg-mcp-server" there is another project); the command is pg-mcp-server.
DISTRIBUTION = "postgres-mcp-layered"


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


class DatabaseSettings(BaseSettings):
    """PostgreSQL connection configuration."""

    model_config = SettingsConfigDict(
        env_prefix="PG_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
    )

    dsn: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("dsn", "PG_DSN", "DATABASE_URL"),
        description=(
            "Full connection URI or libpq key=value string (PG_DSN, or DATABASE_URL); "
            "takes precedence over the separate PG_* connection fields"
        ),
    )
    host: str = Field(
        default="localhost", description="Database host name, or a unix-socket directory"
    )
    port: int = Field(default=5432, ge=1, le=65535, description="Database port")
    database: str | None = Field(default=None, description="Database name")
    user: str | None = Field(default=None, description="Database user")
    password: SecretStr | None = Field(default=None, description="Database password")
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None = (
        Field(
            default=None,
            description="TLS mode as in libpq (use require or verify-full in production)",
        )
    )
    sslrootcert: str | None = Field(
        default=None,
        description=(
            "File of the CA certificates that sign the server's certificate (libpq's "
            "sslrootcert; `system`: the system's CAs, with verify-full); wins over sslrootcert "
            "in the DSN"
        ),
    )
    sslcert: str | None = Field(
        default=None,
        description="Client certificate file, for cert authentication (libpq's sslcert)",
    )
    sslkey: str | None = Field(
        default=None,
        description="The client certificate's private key file (libpq's sslkey; default: "
        "the key in the PG_SSLCERT file)",
    )
    sslpassword: SecretStr | None = Field(
        default=None,
        description="Passphrase of an encrypted PG_SSLKEY (a secret: never logged or echoed)",
    )
    password_command: str | None = Field(
        default=None,
        description=(
            "Command run (without a shell) for every new connection; the first line it prints "
            "is the password (a short-lived token: aws rds generate-db-auth-token, a vault "
            "client)"
        ),
    )
    password_command_timeout: float = Field(
        default=15.0,
        gt=0,
        le=300,
        description="Seconds PG_PASSWORD_COMMAND may run before it is killed",
    )

    pool_size: int = Field(default=5, ge=1, le=20, description="Connection pool size")
    pool_timeout: float = Field(
        default=30.0, gt=0, description="Seconds to wait for a pooled or new connection"
    )
    connect_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a new connection may take to be answered (a host that accepts "
        "and never answers fails after this, not after PG_POOL_TIMEOUT)",
    )

    pool_mode: Literal["auto", "session", "transaction"] = Field(
        default="auto",
        description=(
            "What is between the server and PostgreSQL: session (a direct connection or a "
            "session-mode pooler: sessions are read-only by default and reset after use), "
            "transaction (a transaction-mode pooler such as PgBouncer or Supavisor: every "
            "statement gets a read-only transaction of its own), or auto (detected at the "
            "first connection)"
        ),
    )

    statement_timeout: int = Field(
        default=30000,
        ge=1000,
        description="Statement timeout in milliseconds, applied to every transaction",
    )
    default_schema: str = Field(
        default="public", description="Schema used when a tool call names none"
    )

    # Variables a configuration file's `${VAR}` expansion read (they may hold secrets too):
    # kept, like secret_variables(), out of PG_PASSWORD_COMMAND's environment. Not a setting.
    _hidden_variables: frozenset[str] = PrivateAttr(default=frozenset())

    def hiding(self, names: Iterable[str]) -> DatabaseSettings:
        """A copy whose child processes (PG_PASSWORD_COMMAND) are also not given `names`."""
        copy = self.model_copy()
        copy._hidden_variables = self._hidden_variables | frozenset(names)
        return copy

    def hidden_variables(self) -> frozenset[str]:
        """What PG_PASSWORD_COMMAND's environment leaves out."""
        return secret_variables() | self._hidden_variables

    @field_validator("dsn")
    @classmethod
    def _dsn_works(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            dsn_text.to_uri(value.get_secret_value())  # raises DsnError (a ValueError)
        return value

    @model_validator(mode="after")
    def _credentials_and_tls_agree(self) -> DatabaseSettings:
        if self.password_command is not None:
            if self.password is not None:
                raise ValueError(
                    "PG_PASSWORD and PG_PASSWORD_COMMAND are both set: set one (the command "
                    "prints a fresh password for every connection)"
                )
            try:
                words = shlex.split(self.password_command)
            except ValueError as exc:
                raise ValueError(f"PG_PASSWORD_COMMAND cannot be split into words: {exc}") from None
            if not words:
                raise ValueError("PG_PASSWORD_COMMAND is empty")
        self.tls()  # raises ValueError for files under a mode that ignores them
        return self

    @model_validator(mode="after")
    def _need_a_target(self) -> DatabaseSettings:
        if self.dsn is None and not self.database:
            raise ValueError(
                "no database configured: set PG_DSN (or DATABASE_URL), or PG_DATABASE (with "
                "PG_HOST, PG_USER, PG_PASSWORD as needed; without PG_USER the user is PGUSER, "
                "else the OS user, as with psql), or pass --dsn, or run with --demo"
            )
        return self

    def default_user_note(self) -> str | None:
        """A start-up line when no user is named (PG_USER, or in the DSN): the driver then logs
        in as PGUSER, else as the OS user, as libpq does; say which, so it is no surprise."""
        if self.target().user:
            return None
        user = os.environ.get("PGUSER")
        source = "PGUSER"
        if not user:
            source = "the OS user"
            try:
                user = getpass.getuser()
            except (KeyError, OSError):  # no passwd entry (some containers)
                return "no database user given (PG_USER, or in PG_DSN): logging in as the OS user"
        return (
            f"no database user given (PG_USER, or in PG_DSN): logging in as {user!r} ({source}), "
            "as psql would"
        )

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `asyncpg.connect`; the DSN, when given, wins over the parts,
        except PG_PASSWORD, which keeps a password out of a DSN given on the command line."""
        if self.dsn is not None:
            kwargs: dict[str, Any] = {"dsn": dsn_text.to_uri(self.dsn.get_secret_value())}
        else:
            kwargs = {"host": self.host, "port": self.port, "database": self.database}
            if self.user:
                kwargs["user"] = self.user
        if self.password is not None:
            kwargs["password"] = self.password.get_secret_value()
        if self.sslmode is not None:
            kwargs["ssl"] = self.sslmode
        return kwargs

    def tls(self) -> tls_plan.TlsPlan | None:
        """The TLS plan (tls.py) when a verifying sslmode or a certificate file is configured,
        here or in the DSN; None otherwise, and asyncpg's own handling applies as before."""
        params = dsn_text.ssl_params(self.dsn.get_secret_value()) if self.dsn else {}
        if (
            not params
            and not (self.sslrootcert or self.sslcert or self.sslkey)
            and (self.sslmode not in tls_plan.VERIFYING)
        ):
            return None  # every connect asks: the common case costs no more than this
        given = {
            "sslmode": self.sslmode,
            "sslrootcert": self.sslrootcert,
            "sslcert": self.sslcert,
            "sslkey": self.sslkey,
            "sslpassword": self.sslpassword.get_secret_value() if self.sslpassword else None,
        }
        return tls_plan.plan(given, params)

    def target(self) -> dsn_text.Target:
        """Where the server connects (for messages: no password)."""
        if self.dsn is not None:
            found = dsn_text.target(self.dsn.get_secret_value())
        else:
            found = dsn_text.Target(self.host, str(self.port), self.database, self.user)
        source = "PG_PASSWORD" if self.password is not None else None
        if self.password_command is not None:
            source = f"PG_PASSWORD_COMMAND ({shlex.split(self.password_command)[0]})"
        if source is None:
            return found
        return dataclasses.replace(
            found, password_from=source, password_overridden=found.password_from is not None
        )


class ServerSettings(BaseSettings):
    """MCP server configuration."""

    model_config = SettingsConfigDict(
        env_prefix="MCP_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
    )

    transport: Literal["stdio", "http"] = Field(
        default="stdio", description="Transport: stdio (default) or http (Streamable HTTP)"
    )
    host: str = Field(
        default="127.0.0.1",
        description="HTTP bind address (loopback by default; containers set 0.0.0.0)",
    )
    port: int = Field(default=8080, ge=1, le=65535, description="HTTP port")

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        default="INFO", description="Logging level (logs go to stderr)"
    )
    log_format: Literal["auto", "json", "text"] = Field(
        default="auto",
        description="Log line format on stderr: text in a terminal and json otherwise (auto), "
        "or json, or text",
    )

    redact_sensitive_columns: bool = Field(
        default=True,
        description="Replace values of columns whose name matches the sensitive pattern",
    )
    sensitive_column_pattern: str = Field(
        default="password|secret|token",
        description="Case-insensitive regular expression naming sensitive columns",
    )

    block_keywords_in_comments: bool = Field(
        default=True,
        description="Refuse SQL whose comments contain write or session keywords",
    )
    max_rows: int = Field(
        default=10000,
        ge=1,
        le=1_000_000,
        description=(
            "Most rows one execute_query result holds (read once, answered page by page); "
            "callers may ask for fewer with `limit`"
        ),
    )
    max_result_bytes: int = Field(
        default=4_000_000,
        ge=1024,
        description=(
            "Most bytes of row JSON one execute_query result holds (never more than "
            "MCP_RESULT_STORE_BYTES); further rows are cut"
        ),
    )
    answer_budget_bytes: int = Field(
        default=80_000,
        ge=4096,
        description=(
            "Most bytes of a tool's text answer (about 20k tokens, under the 25k a client "
            "such as Claude Code accepts); what does not fit is paged"
        ),
    )
    max_value_chars: int = Field(
        default=500,
        ge=16,
        description="Longer text, bytea, json or array values are cut, with a marker",
    )
    result_store: str = Field(
        default="memory",
        description=(
            "Where paged results are held: memory (this process) or a redis:// or "
            "rediss:// URL (Redis or Valkey, shared by replicas)"
        ),
    )
    result_store_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description=(
            "Most bytes of paged results held at once (the least recently read result of the "
            "owner holding the most goes first)"
        ),
    )
    result_store_count: int = Field(
        default=200, ge=1, description="Most paged results held at once"
    )
    result_idle_seconds: float = Field(
        default=600.0,
        gt=0,
        description="A paged result not read for this long expires (RESULT_EXPIRED)",
    )
    trusted_roles: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "Comma-separated roles the guard trusts (besides superusers, the database's "
            "owner, the server's own role and extension members): their functions are taken "
            "as marked, and queries may read their relations and types"
        ),
    )
    allow_foreign_tables: bool = Field(
        default=False,
        description=(
            "Let queries read foreign tables (the remote side runs outside the read-only "
            "transaction, so a remote view or function there can change state)"
        ),
    )
    allow_open_schema_code: bool = Field(
        default=False,
        description=(
            "Let queries use functions and operators of a schema where roles that are not "
            "trusted may create objects (legacy CREATE rights on public): one planted there "
            "with a closer match of argument types, between the guard's check and the "
            "statement, would run as the server's role (refused otherwise, saying how to "
            "close the schema)"
        ),
    )
    allow_privileged_role: bool = Field(
        default=False,
        description=(
            "Serve even when the database role is a superuser or holds "
            "pg_execute_server_program, pg_read_server_files or pg_write_server_files "
            "(otherwise refused at start: with such a role, one statement past the guard "
            "runs shell commands through COPY ... TO PROGRAM)"
        ),
    )
    require_read_only_role: bool = Field(
        default=False,
        description=(
            "Refuse to start when the database role is a superuser, can write to tables or "
            "holds file/program privileges (otherwise only warn)"
        ),
    )

    auth_tokens: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description=(
            "Comma-separated bearer tokens accepted on /mcp over HTTP (empty: no authentication; "
            "then only a loopback bind is allowed unless MCP_ALLOW_UNAUTHENTICATED)"
        ),
    )
    allow_unauthenticated: bool = Field(
        default=False,
        description="Allow binding HTTP to a non-loopback address without MCP_AUTH_TOKENS",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1:*", "localhost:*", "[::1]:*"],
        description=(
            "Comma-separated Host header values accepted over HTTP (DNS-rebinding protection); "
            "'name:*' allows any port"
        ),
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        description="Comma-separated Origin header values accepted over HTTP (browsers send it)",
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=32,
        description=(
            "HTTP worker processes (uvicorn); each has its own pool of PG_POOL_SIZE connections. "
            "One uses one core: 2 on a 2-core machine nearly doubles calls per second"
        ),
    )
    max_request_bytes: int = Field(
        default=1_000_000, ge=1024, description="Largest HTTP request body accepted (bytes)"
    )
    max_concurrent_requests: int = Field(
        default=0,
        ge=0,
        description=(
            "HTTP requests served at once before new ones get 503 (0: four times PG_POOL_SIZE, "
            "or the sum of several databases' pool sizes); a request counts once its body is "
            "read, and subscriptions/listen streams not at all"
        ),
    )
    request_body_timeout: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description=(
            "Seconds an HTTP request's whole body may take to arrive; a slower one gets 408 and "
            "its connection is closed (it holds no request slot meanwhile)"
        ),
    )
    max_listen_streams: int = Field(
        default=100,
        ge=1,
        description=(
            "subscriptions/listen streams open at once over HTTP (long-lived: they have this "
            "pool of their own, not MCP_MAX_CONCURRENT_REQUESTS); one more gets 503 at once"
        ),
    )

    # Custom definitions (custom/): prompts, resources and tools from a YAML file.
    config_file: str | None = Field(
        default=None,
        description="YAML configuration file (or --config): server settings, several "
        "databases, users; see README, Several databases",
    )
    audit_log: bool | None = Field(
        default=None,
        description="One audit line per tool call on stderr (caller, database, tool, SQL hash, "
        "rows, outcome; never parameter values); unset: on when the configuration file has "
        "users:",
    )
    custom_definitions: str | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "custom_definitions",
            "MCP_CUSTOM_DEFINITIONS",
            "PG_MCP_CUSTOM_DEFINITIONS",
            "PGEDGE_CUSTOM_DEFINITIONS_PATH",
        ),
        description=(
            "Path of a YAML file of custom prompts, resources and tools (pgEdge's format); "
            "also PG_MCP_CUSTOM_DEFINITIONS or PGEDGE_CUSTOM_DEFINITIONS_PATH"
        ),
    )
    allowed_pl_languages: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["plpgsql"],
        description=(
            "Comma-separated procedural languages custom pl-do and pl-func tools may use "
            "('*': every language installed in the database)"
        ),
    )
    allow_write_tools: bool = Field(
        default=False,
        description=(
            "Let custom tools marked allow_writes: true write and commit (otherwise every "
            "custom tool runs read-only)"
        ),
    )

    # generate_embedding and similarity_search's query_text (src/pg_mcp_server/embeddings/).
    embedding_provider: Literal["local", "openai", "ollama", "none"] = Field(
        default="local",
        description=(
            "Who turns text into vectors: local (the wordllama model installed with the "
            "vectors extra, no service), openai (any OpenAI-compatible /v1/embeddings), "
            "ollama (/api/embed), or none"
        ),
    )
    embedding_url: str | None = Field(
        default=None,
        description=(
            "Base URL of the embedding service (default https://api.openai.com/v1 for openai, "
            "http://127.0.0.1:11434 for ollama)"
        ),
    )
    embedding_model: str | None = Field(
        default=None,
        description=(
            "Embedding model name (default text-embedding-3-small for openai, "
            "nomic-embed-text for ollama; the local model is fixed)"
        ),
    )
    embedding_api_key: SecretStr | None = Field(
        default=None,
        description="Bearer token for the embedding service (a secret: never logged or echoed)",
    )
    embedding_dimensions: int | None = Field(
        default=None,
        ge=1,
        le=16000,
        description=(
            "Dimensions every embedding must have (asked of openai as `dimensions`, the local "
            "model's 64, 128 or 256); an answer of another length is an error"
        ),
    )
    embedding_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="Seconds one embedding request may take",
    )
    embedding_retries: int = Field(
        default=3,
        ge=0,
        le=10,
        description=(
            "Retries of an embedding request answered 429 or 5xx or not connected, with "
            "exponential back-off (Retry-After honoured)"
        ),
    )
    embedding_batch_size: int = Field(
        default=64,
        ge=1,
        le=2048,
        description="Most texts sent in one embedding request",
    )

    @field_validator(
        "auth_tokens",
        "allowed_hosts",
        "allowed_origins",
        "trusted_roles",
        "allowed_pl_languages",
        mode="before",
    )
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("sensitive_column_pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value

    def sensitive_regex(self) -> re.Pattern[str] | None:
        if not self.redact_sensitive_columns or not self.sensitive_column_pattern:
            return None
        return re.compile(self.sensitive_column_pattern, re.IGNORECASE)


GROUPS = ("database", "server")
_PREFIX = {"DatabaseSettings": "PG_", "ServerSettings": "MCP_"}
# never echo what was given for these
_SECRET = {"dsn", "password", "sslpassword", "auth_tokens", "embedding_api_key"}


def describe_errors(exc: ValidationError, flags: dict[str, str] | None = None) -> list[str]:
    """One line per invalid setting, naming its variable (and flag, from `flags`): for a person
    who set `PG_PORT=abc`, "port: Input should be..." does not say which port."""
    lines = []
    for err in exc.errors(include_url=False):
        field = str(err["loc"][0]) if err["loc"] else ""
        if not field:
            where = ""
        else:
            name = "PG_DSN" if field == "dsn" else _PREFIX.get(exc.title, "") + field.upper()
            flag = (flags or {}).get(name)
            where = f"{name} (or {flag}): " if flag else f"{name}: "
        message = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]
        if field and field not in _SECRET and "input" in err and err["type"] != "value_error":
            message += f" (got {str(err['input'])[:40]!r})"
        lines.append(where + message)
    return lines


class Settings(BaseSettings):
    """Root settings combining all configuration."""

    model_config = SettingsConfigDict(extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The groups read PG_* / MCP_* themselves; the root must not parse unrelated variables
        # such as DATABASE or SERVER (common in deployment environments) as JSON.
        return (init_settings,)

    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)

    @classmethod
    def load(
        cls,
        database: dict[str, Any] | None = None,
        server: dict[str, Any] | None = None,
    ) -> Settings:
        """Read the environment and `.env`, with `database`/`server` overrides taking precedence."""
        db_overrides = {k: v for k, v in (database or {}).items() if v is not None}
        srv_overrides = {k: v for k, v in (server or {}).items() if v is not None}
        return cls(
            database=DatabaseSettings(**db_overrides),
            server=ServerSettings(**srv_overrides),
        )


def _holds_secret(annotation: object) -> bool:
    return annotation is SecretStr or any(_holds_secret(a) for a in get_args(annotation))


def secret_variables() -> frozenset[str]:
    """Every environment variable that may hold one of our secrets: the settings typed
    SecretStr (with their aliases), MCP_RESULT_STORE (a redis:// URL's password) and libpq's
    PGPASSWORD. Kept from the environment of a child such as PG_PASSWORD_COMMAND."""
    names = {"MCP_RESULT_STORE", "PGPASSWORD"}
    for model, prefix in ((DatabaseSettings, "PG_"), (ServerSettings, "MCP_")):
        for field_name, field in model.model_fields.items():
            if not _holds_secret(field.annotation):
                continue
            names.add(f"{prefix}{field_name.upper()}")
            alias = field.validation_alias
            if isinstance(alias, AliasChoices):
                names.update(a for a in alias.choices if isinstance(a, str) and a.isupper())
    return frozenset(names)


def setting_names() -> list[str]:
    """Every environment variable a setting reads (its aliases included), sorted."""
    names = {"DATABASE_URL"}
    for model, prefix in ((DatabaseSettings, "PG_"), (ServerSettings, "MCP_")):
        for field_name, field in model.model_fields.items():
            names.add(f"{prefix}{field_name.upper()}")
            alias = field.validation_alias
            if isinstance(alias, AliasChoices):
                names.update(a for a in alias.choices if isinstance(a, str) and a.isupper())
    return sorted(names)


# Prefixes of variables that start like a setting but belong to something else (the test
# suite's server choice, CI).
_NOT_SETTINGS = ("PG_TEST_", "PG_MCP_CI_")


def unknown_settings(environ: Mapping[str, str]) -> list[str]:
    """One line per PG_* / MCP_* variable that no setting reads (a misspelt one is otherwise
    silently ignored), naming the closest known setting."""
    known = setting_names()
    lines = []
    for name in sorted(environ):
        if not name.startswith(("PG_", "MCP_")) or name.startswith(_NOT_SETTINGS):
            continue
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else "; see README, Configuration"
        lines.append(f"{name} is not a setting and is ignored{hint}")
    return lines
