"""The configuration file (`--config FILE`, `MCP_CONFIG_FILE`): server settings, several
databases, users and authentication in one YAML file.

    server:      any MCP_* setting by its lowercase name (the file wins over the environment;
                 a flag wins over the file)
    databases:   a list; each entry a `name`, optionally `default: true` and a `description`,
                 its connection (`dsn`, or any PG_* setting by its lowercase name) and the
                 per-database server settings (PER_DATABASE), which override `server:`'s
    users:       identity.UserEntry entries
    auth:        identity.AuthSettings

Without `databases:` the PG_* environment is the one database, named "default". A database
entry takes nothing from the PG_* environment (PG_DSN would otherwise win over the entry's
own host): `${VAR}` in any string value is replaced by the environment variable VAR, which
is how a secret stays out of the file. Every problem is reported, one line each, naming the
file, the place in it (`databases[1].dsn`) and what is wrong; a secret's value never is.

Its size (~410 lines) is one file's every rule and message, read in one place, as config.py is
the environment's.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from pg_mcp_server.config import DatabaseSettings, ServerSettings, Settings
from pg_mcp_server.identity import AuthSettings, UserEntry

if TYPE_CHECKING:
    from pg_mcp_server.identity.access import Access

M = TypeVar("M", bound=BaseModel)
DEFAULT_NAME = "default"
NAME = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Server settings that may differ between databases: what a call may read and how it is
# judged. The rest (transport, HTTP, logging, the result store, tokens, embeddings) belong to
# the process and are given once, under `server:`.
PER_DATABASE = frozenset(
    {
        "max_rows",
        "max_result_bytes",
        "answer_budget_bytes",
        "max_value_chars",
        "trusted_roles",
        "allowed_pl_languages",
        "allow_open_schema_code",
        "allow_foreign_tables",
        "allow_privileged_role",
        "require_read_only_role",
        "allow_write_tools",
        "custom_definitions",
        "block_keywords_in_comments",
        "redact_sensitive_columns",
        "sensitive_column_pattern",
    }
)
# Never settable from the file itself.
_NOT_IN_FILE = frozenset({"config_file"})
ENTRY_KEYS = frozenset({"name", "default", "description"})
# A database's name starts its resources' URIs (pg://{name}/...): it may not be a word the
# built-in URIs start with.
RESERVED_NAMES = frozenset({"schemas", "settings", "stat", "system_info", "results", "queries"})
TOP_KEYS = ("server", "databases", "users", "auth")
# A database entry's files, relative to the configuration file when not absolute.
FILE_FIELDS = ("sslrootcert", "sslcert", "sslkey")
# Values never shown in a message (the pydantic error would echo them).
_SECRET_WORDS = ("dsn", "password", "token", "secret", "api_key")


class ConfigFileError(Exception):
    """The file cannot be served: one line per problem."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


class _FileDatabase(DatabaseSettings):
    """A database entry's connection: only what the entry says (no PG_* environment, no
    `.env`), validated by DatabaseSettings' own rules."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


@dataclass(frozen=True)
class DatabaseEntry:
    """One database the server serves."""

    name: str
    settings: Settings
    description: str | None = None
    default: bool = False


@dataclass(frozen=True)
class ServerConfig:
    """What the server serves: its databases (in the file's order), users and auth."""

    databases: dict[str, DatabaseEntry]
    users: tuple[UserEntry, ...] = ()
    auth: AuthSettings = field(default_factory=AuthSettings)
    path: str | None = None
    # The environment variables the file names (${VAR}): taken out of the environment once
    # read, and kept from PG_PASSWORD_COMMAND's, like the secret settings' own.
    variables: frozenset[str] = frozenset()

    @property
    def default(self) -> str | None:
        """The database a call that names none uses: the one marked `default`, or the only
        one; None when several are configured and none is the default."""
        marked = [e.name for e in self.databases.values() if e.default]
        if marked:
            return marked[0]
        if len(self.databases) == 1:
            return next(iter(self.databases))
        return None

    @property
    def settings(self) -> Settings:
        """The server-wide settings (transport, HTTP, logging ...): the default database's,
        else the first's (the per-database ones differ only in PER_DATABASE)."""
        return self.databases[self.default or next(iter(self.databases))].settings

    @property
    def several(self) -> bool:
        return len(self.databases) > 1

    @property
    def audit(self) -> bool:
        """Whether each tool call is logged (MCP_AUDIT_LOG; unset: when there are users)."""
        chosen = self.settings.server.audit_log
        return bool(self.users) if chosen is None else chosen

    def access(self) -> Access | None:
        """Who callers are and what each is shown (identity/access.py); None without users
        or an auth section, today's behaviour."""
        if not self.users and self.auth == AuthSettings():
            return None
        from pg_mcp_server.identity.access import Access

        return Access(self.users, self.auth)

    def with_settings(self, settings: Settings) -> ServerConfig:
        """The one database served with `settings` instead (--demo's DSN)."""
        entry = self.databases[self.default or next(iter(self.databases))]
        databases = {entry.name: dataclasses.replace(entry, settings=settings)}
        return dataclasses.replace(self, databases=databases)

    @classmethod
    def single(cls, settings: Settings) -> ServerConfig:
        """The environment-variables case: one database, "default"."""
        return cls({DEFAULT_NAME: DatabaseEntry(DEFAULT_NAME, settings, default=True)})


def load(
    path: str,
    server_overrides: dict[str, Any] | None = None,
    database_overrides: dict[str, Any] | None = None,
) -> ServerConfig:
    """Read and check the file; ConfigFileError names every problem. `server_overrides`
    (flags) win over the file; `database_overrides` (--dsn) apply only without `databases:`."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigFileError([f"{path}: cannot be read ({exc.strerror or exc})"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(file)"
        problem = _unquoted(getattr(exc, "problem", None) or "not valid YAML")
        raise ConfigFileError([f"{path}: {where}: {problem}"]) from None
    return _Reader(path, server_overrides or {}, database_overrides or {}).read(raw)


class _Reader:
    def __init__(self, path: str, server_overrides: dict[str, Any], db_overrides: dict[str, Any]):
        self.path = path
        self.base = os.path.dirname(os.path.abspath(path))
        self.server_overrides = {k: v for k, v in server_overrides.items() if v is not None}
        self.db_overrides = {k: v for k, v in db_overrides.items() if v is not None}
        self.problems: list[str] = []
        self.variables: set[str] = set()
        self.values: set[str] = set()  # theirs: never echoed, wherever they end up

    def problem(self, where: str, what: str) -> None:
        self.problems.append(f"{self.path}: {where}: {what}")

    def read(self, raw: Any) -> ServerConfig:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ConfigFileError([f"{self.path}: (file): must be a mapping of {TOP_KEYS}"])
        self.unknown_keys(raw, TOP_KEYS, "")
        raw = self.expanded(raw, "")
        hidden = frozenset(self.variables)
        server = self.mapping(raw.get("server"), "server")
        server = self.known_settings(server, "server", set(ServerSettings.model_fields))
        databases = {
            name: dataclasses.replace(entry, settings=_hiding(entry.settings, hidden))
            for name, entry in self.databases(raw.get("databases"), server).items()
        }
        users = self.models(raw.get("users"), "users", UserEntry)
        auth = AuthSettings()
        if raw.get("auth") is not None:
            auth = self.model(raw["auth"], "auth", AuthSettings) or auth
        self.check_users(users, databases, auth)
        if self.problems:
            raise ConfigFileError(self.problems)
        return ServerConfig(databases, tuple(users), auth, self.path, hidden)

    # --- the parts

    def databases(self, raw: Any, server: dict[str, Any]) -> dict[str, DatabaseEntry]:
        if raw is None:
            settings = self.settings("databases", self.db_overrides, server, env=True)
            if settings is None:
                return {}
            return {DEFAULT_NAME: DatabaseEntry(DEFAULT_NAME, settings, default=True)}
        if self.db_overrides:
            self.problem("databases", "--dsn cannot be combined with a databases: list")
        if not isinstance(raw, list) or not raw:
            self.problem("databases", "must be a non-empty list of database entries")
            return {}
        found: dict[str, DatabaseEntry] = {}
        defaults: list[str] = []
        allowed = ENTRY_KEYS | set(DatabaseSettings.model_fields) | PER_DATABASE
        for i, entry in enumerate(raw):
            where = f"databases[{i}]"
            if not isinstance(entry, dict):
                self.problem(where, "must be a mapping with at least `name` and `dsn`")
                continue
            self.unknown_keys(entry, allowed, where, also=set(ServerSettings.model_fields))
            name = entry.get("name")
            if not isinstance(name, str) or not NAME.match(name):
                self.problem(
                    f"{where}.name", "is required: letters, digits, '_' and '-', at most 63"
                )
                continue
            if name in RESERVED_NAMES:
                self.problem(
                    f"{where}.name",
                    f"{name!r} starts built-in resource URIs (pg://{name}/...): choose another",
                )
                continue
            if name in found:
                self.problem(f"{where}.name", f"{name!r} is the name of an earlier entry")
                continue
            default = entry.get("default", False)
            if not isinstance(default, bool):
                self.problem(f"{where}.default", "must be true or false")
                default = False
            description = entry.get("description")
            if description is not None and not isinstance(description, str):
                self.problem(f"{where}.description", "must be a string")
                description = None
            connection = {k: v for k, v in entry.items() if k in DatabaseSettings.model_fields}
            for key in FILE_FIELDS:
                value = connection.get(key)
                if isinstance(value, str) and value != "system":  # libpq's: the system's CAs
                    connection[key] = os.path.join(self.base, os.path.expanduser(value))
            own = {k: v for k, v in entry.items() if k in PER_DATABASE}
            settings = self.settings(where, connection, {**server, **own}, env=False)
            if settings is None:
                continue
            if default:
                defaults.append(name)
            found[name] = DatabaseEntry(name, settings, description, default)
        if len(defaults) > 1:
            self.problem("databases", f"only one may be `default: true`, not {defaults}")
        return found

    def settings(
        self, where: str, connection: dict[str, Any], server: dict[str, Any], *, env: bool
    ) -> Settings | None:
        server = dict(server)
        if isinstance(server.get("custom_definitions"), str):  # the file's: relative to it
            server["custom_definitions"] = os.path.join(self.base, server["custom_definitions"])
        server.update(self.server_overrides)
        made_db: DatabaseSettings | None = None
        made_server: ServerSettings | None = None
        try:
            made_db = DatabaseSettings(**connection) if env else _FileDatabase(**connection)
        except ValidationError as exc:
            what = "(PG_* environment)" if env else where
            self.validation(exc, what)
        try:
            made_server = ServerSettings(**server)
        except ValidationError as exc:
            self.validation(exc, where if not env else "server")
        if made_db is None or made_server is None:
            return None
        return Settings(database=made_db, server=made_server)

    def models(self, raw: Any, where: str, model: type[UserEntry]) -> list[UserEntry]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.problem(where, "must be a list")
            return []
        made = [self.model(item, f"{where}[{i}]", model) for i, item in enumerate(raw)]
        return [m for m in made if m is not None]

    def model(self, raw: Any, where: str, model: type[M]) -> M | None:
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            self.validation(exc, where, model)
            return None

    def check_users(
        self, users: list[UserEntry], databases: dict[str, DatabaseEntry], auth: AuthSettings
    ) -> None:
        names = [u.name for u in users]
        for i, user in enumerate(users):
            if user.name in names[:i]:
                self.problem(f"users[{i}].name", f"{user.name!r} is the name of an earlier user")
            for db in user.databases:
                if db != "*" and databases and db not in databases:
                    hint = _did_you_mean(db, list(databases))
                    self.problem(f"users[{i}].databases", f"no database named {db!r}{hint}")
        for kind, values in (
            ("subject", [u.subject for u in users]),
            ("token", [u.token.get_secret_value() if u.token else None for u in users]),
        ):
            for i, value in enumerate(values):
                if value is not None and value in values[:i]:
                    # a token's value is never shown: only that it repeats
                    self.problem(f"users[{i}].{kind}", f"is the {kind} of an earlier user")
        if auth.oauth is not None and not users:
            self.problem("auth.oauth", "needs users: a token's subject names a user entry")
        if auth.stdio_user is not None and auth.stdio_user not in names:
            hint = _did_you_mean(auth.stdio_user, names)
            self.problem("auth.stdio_user", f"no user named {auth.stdio_user!r}{hint}")

    # --- helpers

    def mapping(self, raw: Any, where: str) -> dict[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.problem(where, "must be a mapping")
            return {}
        return raw

    def known_settings(self, raw: dict[str, Any], where: str, known: set[str]) -> dict[str, Any]:
        self.unknown_keys(raw, known - _NOT_IN_FILE, where)
        return {k: v for k, v in raw.items() if k in known and k not in _NOT_IN_FILE}

    def unknown_keys(
        self, raw: dict[Any, Any], known: Any, where: str, also: set[str] | None = None
    ) -> None:
        for key in raw:
            place = f"{where}.{key}" if where else str(key)
            if key in known:
                continue
            if also and key in also:
                self.problem(place, "is a server-wide setting: give it under `server:`")
            else:
                hint = _did_you_mean(str(key), sorted(known))
                self.problem(place, f"is not a known key{hint}")

    def expanded(self, value: Any, where: str) -> Any:
        """`${VAR}` replaced in every string value (never in keys)."""
        if isinstance(value, dict):
            return {k: self.expanded(v, _join(where, str(k))) for k, v in value.items()}
        if isinstance(value, list):
            return [self.expanded(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if not isinstance(value, str) or "${" not in value:
            return value

        def variable(match: re.Match[str]) -> str:
            name = match.group(1)
            if not _VARIABLE_NAME.match(name):
                self.problem(where, f"${{{name[:40]}}} is not an environment variable's name")
                return ""
            self.variables.add(name)
            found = os.environ.get(name)
            if found is None:
                self.problem(where, f"environment variable {name} is not set")
                return ""
            if found:
                self.values.add(found)
            return found

        return _VARIABLE.sub(variable, value)

    def validation(
        self, exc: ValidationError, where: str, model: type[BaseModel] | None = None
    ) -> None:
        for err in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in err["loc"])
            place = _join(where, loc) if loc else where
            if err["type"] == "extra_forbidden" and model is not None:
                known = _fields_at(model, err["loc"][:-1])
                self.problem(place, "is not a known key" + _did_you_mean(str(loc), known))
                continue
            message = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]
            secret = any(word in place.lower() for word in _SECRET_WORDS)
            # a ${VAR}'s value is a secret wherever it was put (a typo puts it anywhere)
            secret = secret or any(v in str(err.get("input")) for v in self.values)
            if "input" in err and not secret and err["type"] != "value_error":
                message += f" (got {str(err['input'])[:40]!r})"
            self.problem(place, message)


def _hiding(settings: Settings, names: frozenset[str]) -> Settings:
    if not names:
        return settings
    return settings.model_copy(update={"database": settings.database.hiding(names)})


def _unquoted(problem: str) -> str:
    """A YAML error's problem without the text it quotes: an unquoted value that starts
    with `*`, `&` or `!` (a password's first character) is quoted back as an alias, an
    anchor or a tag. A quoted character ('\t', '@') says which one is wrong and stays."""
    return re.sub(r"'[^']{3,}'", "'...'", problem)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _did_you_mean(given: str, known: list[str]) -> str:
    last = given.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(last, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names of the model at `loc` inside `model` (for a did-you-mean)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not _is_model(current):
            continue
        info = current.model_fields.get(str(part))
        if info is None:  # a mapping's key (users[0].databases.sales)
            continue
        annotation = info.annotation
        args = getattr(annotation, "__args__", ())
        current = next((a for a in args if _is_model(a)), annotation)
    return list(current.model_fields) if _is_model(current) else []


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)
