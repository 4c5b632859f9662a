"""Where sensitive values come from, and the masks for what is shown outside rows (PRD 8.4's
redaction, followed to the source: database/rows/lineage.py follows a statement's outputs back to
these sources, and decides which outputs are redacted and which uses are refused).

A value is sensitive when it comes from a *sensitive source*: a column whose name matches the
sensitive pattern (MCP_SENSITIVE_COLUMN_PATTERN) in any relation a statement reads, a catalog
column that holds credentials (`CREDENTIAL_COLUMNS`, whatever the pattern), the value columns
of `pg_settings` for a role that may read credential settings (`SETTINGS_COLUMNS`), planner
statistics' sample values with redaction on (`STATISTICS_COLUMNS`), or a view's column computed
from one of those. What that takes from the catalog (relations' columns, views' definitions,
what functions in FROM return) is read by one statement (`RELATION_FACTS`) and kept until the
guard sees a relation change (`Facts`).

Outside rows: error messages of a statement that reads a sensitive source are scrubbed of the
values they quote (`scrub`), and settings shown by pg://settings have their passwords masked
(`mask_setting`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from pg_mcp_server.config import APPLICATION_NAME
from pg_mcp_server.database.rows.values import REDACTED
from pg_mcp_server.database.sql import names, statement, tree as sqltree
from pg_mcp_server.identity import current_identity

# Catalog columns that hold credentials (a foreign server's or user mapping's options may
# include `password`, a subscription's connection string too): always sensitive.
CREDENTIAL_COLUMNS: dict[tuple[str, str], frozenset[str]] = {
    ("pg_catalog", "pg_user_mapping"): frozenset({"umoptions"}),
    ("pg_catalog", "pg_user_mappings"): frozenset({"umoptions"}),
    ("pg_catalog", "pg_foreign_server"): frozenset({"srvoptions"}),
    ("pg_catalog", "pg_foreign_data_wrapper"): frozenset({"fdwoptions"}),
    ("pg_catalog", "pg_subscription"): frozenset({"subconninfo"}),
    ("pg_catalog", "pg_stat_wal_receiver"): frozenset({"conninfo"}),
    ("pg_catalog", "pg_authid"): frozenset({"rolpassword"}),
    ("pg_catalog", "pg_shadow"): frozenset({"passwd"}),
    ("pg_catalog", "pg_user"): frozenset({"passwd"}),
    ("pg_catalog", "pg_roles"): frozenset({"rolpassword"}),
    ("information_schema", "user_mapping_options"): frozenset({"option_value"}),
    ("information_schema", "foreign_server_options"): frozenset({"option_value"}),
    ("information_schema", "foreign_data_wrapper_options"): frozenset({"option_value"}),
    ("information_schema", "_pg_user_mappings"): frozenset({"umoptions"}),
    ("information_schema", "_pg_foreign_servers"): frozenset({"srvoptions"}),
    ("information_schema", "_pg_foreign_data_wrappers"): frozenset({"fdwoptions"}),
}
# Settings views whose value columns show credential settings (primary_conninfo's password) to
# a role that may read them (superuser, pg_read_all_settings); to other roles PostgreSQL does
# not show those settings at all.
SETTINGS_COLUMNS: dict[tuple[str, str], frozenset[str]] = {
    ("pg_catalog", "pg_settings"): frozenset({"setting", "reset_val", "boot_val"}),
    ("pg_catalog", "pg_file_settings"): frozenset({"setting"}),
}
# Planner statistics keep sample values of every column, sensitive ones too, and their
# average width (a one-row table's secret's length): with redaction on, those columns are
# sensitive (which column a row is about is not followed).
_VALUES = frozenset({"most_common_vals", "histogram_bounds", "most_common_elems", "avg_width"})
STATISTICS_COLUMNS: dict[tuple[str, str], frozenset[str]] = {
    ("pg_catalog", "pg_stats"): _VALUES,
    ("pg_catalog", "pg_stats_ext"): frozenset({"most_common_vals"}),
    ("pg_catalog", "pg_stats_ext_exprs"): _VALUES,
    ("pg_catalog", "pg_statistic"): frozenset(
        {"stawidth", *(f"stavalues{i}" for i in range(1, 6))}
    ),
    ("pg_catalog", "pg_statistic_ext_data"): frozenset({"stxdmcv", "stxdexpr"}),
}
SETTINGS_FUNCTIONS = frozenset({"current_setting", "pg_show_all_settings", "pg_file_settings"})
# Functions whose value is every row of the relation, schema or database (or query) they
# name, as XML: with redaction on, their values are sensitive, whatever they name (which
# columns the XML holds is not followed; select the columns instead). attack3 F20.
XML_READERS = frozenset(
    {
        "table_to_xml",
        "table_to_xml_and_xmlschema",
        "schema_to_xml",
        "schema_to_xml_and_xmlschema",
        "database_to_xml",
        "database_to_xml_and_xmlschema",
        "query_to_xml",
        "query_to_xml_and_xmlschema",
        "cursor_to_xml",
    }
)
# Settings that hold credentials; a caller's current_setting('<other>') is harmless.
CREDENTIAL_SETTINGS = frozenset({"primary_conninfo", "ssl_passphrase_command"})


# Relations by the names a statement gives them ($1 schemas or NULL, $2 names; an unqualified
# name is the first of its name on the search path, as PostgreSQL resolves it): their
# columns, and a view's definition. Looked up in the catalog rather than with to_regclass,
# which fails for a schema the role has no USAGE on, where a view's own relations may be. The
# names of the columns that functions called in FROM may return ($3 schemas or NULL, $4
# names: every overload's OUT and TABLE arguments and row type's columns); and whether this
# role may read credential settings.
RELATION_FACTS = statement(
    "rows.redaction.RELATION_FACTS",
    """
SELECT pg_catalog.json_build_object(
    'relations', (
        SELECT pg_catalog.json_agg(pg_catalog.json_build_array(
            i.n, s.nspname, c.relname,
            ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a
                  WHERE a.attrelid = c.oid AND a.attnum > 0::pg_catalog.int2
                    AND NOT a.attisdropped ORDER BY a.attnum),
            CASE WHEN c.relkind IN ('v', 'm') THEN pg_catalog.pg_get_viewdef(c.oid) END))
        FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]),
                        pg_catalog.unnest($2::pg_catalog.text[]))
             WITH ORDINALITY AS i(schema, name, n)
        CROSS JOIN LATERAL (
            SELECT c.oid, c.relname, c.relkind, c.relnamespace
            FROM pg_catalog.pg_class c
            JOIN pg_catalog.pg_namespace cs ON cs.oid = c.relnamespace
            WHERE c.relname = i.name
              AND CASE WHEN i.schema IS NULL
                       THEN cs.nspname = ANY (pg_catalog.current_schemas(true))
                       ELSE cs.nspname = i.schema END
            ORDER BY pg_catalog.array_position(pg_catalog.current_schemas(true), cs.nspname)
            LIMIT 1) c
        JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace),
    'functions', (
        SELECT pg_catalog.json_agg(pg_catalog.json_build_array(f.n, ARRAY(
            SELECT DISTINCT o.name FROM pg_catalog.pg_proc p
            JOIN pg_catalog.pg_namespace s ON s.oid = p.pronamespace
            CROSS JOIN LATERAL (
                SELECT a.name, a.mode
                FROM ROWS FROM (pg_catalog.unnest(p.proargnames),
                                pg_catalog.unnest(p.proargmodes::pg_catalog.text[]))
                     AS a(name, mode)
                UNION ALL
                SELECT a.attname::pg_catalog.text, 'o' FROM pg_catalog.pg_type t
                JOIN pg_catalog.pg_attribute a ON a.attrelid = t.typrelid
                WHERE t.oid = p.prorettype AND a.attnum > 0::pg_catalog.int2
                  AND NOT a.attisdropped) AS o(name, mode)
            WHERE p.proname = f.name AND o.mode IN ('o', 't', 'b')
              AND CASE WHEN f.schema IS NULL
                       THEN s.nspname = ANY (pg_catalog.current_schemas(true))
                       ELSE s.nspname = f.schema END)))
        FROM ROWS FROM (pg_catalog.unnest($3::pg_catalog.text[]),
                        pg_catalog.unnest($4::pg_catalog.text[]))
             WITH ORDINALITY AS f(schema, name, n)),
    'settings', pg_catalog.pg_has_role('pg_read_all_settings', 'USAGE'))
""",
)

Key = tuple[str | None, str]  # a relation as the statement names it: (schema or None, name)
VIEW_DEPTH = 8  # views on views followed this deep; deeper ones count as sensitive


def quote(key: Key) -> str:
    def q(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    return q(key[1]) if key[0] is None else f"{q(key[0])}.{q(key[1])}"


@dataclass(frozen=True)
class Relation:
    schema: str
    name: str
    columns: tuple[str, ...]
    definition: dict[str, Any] | None  # a view's SELECT (pglast JSON), when it parses
    is_view: bool


@dataclass
class Facts:
    """Relations read so far, by the names statements gave them, and whether this role may
    read credential settings. Kept per server; dropped whenever `generation` (the guard's
    relation facts, which move when a relation the guard reached changes) moves."""

    relations: dict[Key, Relation | None] = field(default_factory=dict)
    functions: dict[Key, tuple[str, ...]] = field(default_factory=dict)
    # Statements whose rows are not shown (explain_query) that passed, and whether they
    # read a sensitive source, by SQL text (queries.judge_hidden).
    hidden: dict[str, bool] = field(default_factory=dict)
    settings: bool = False
    read_settings: bool = False
    generation: int | None = None

    def renew(self, generation: int | None) -> None:
        if generation != self.generation:
            self.relations.clear()
            self.functions.clear()
            self.hidden.clear()
            self.read_settings = False
            self.generation = generation

    async def read(self, conn: asyncpg.Connection, tree: dict[str, Any]) -> None:
        """Read what `tree` needs and is not known yet: the relations and FROM functions it
        names, those their views name, and so on (each level one statement; usually there is
        one). Another call may `renew` meanwhile: read again until all is there (lineage.py
        counts what is still missing as sensitive)."""
        for _ in range(3):
            await self._read(conn, tree)
            relations, functions = wanted(tree)
            if relations <= self.relations.keys() and functions <= self.functions.keys():
                return

    async def _read(self, conn: asyncpg.Connection, tree: dict[str, Any]) -> None:
        relations, functions = wanted(tree)
        for _ in range(VIEW_DEPTH):
            missing = sorted((k for k in relations if k not in self.relations), key=quote)
            calls = sorted((k for k in functions if k not in self.functions), key=quote)
            if not missing and not calls and self.read_settings:
                return
            value = await conn.fetchval(
                RELATION_FACTS,
                [k[0] for k in missing],
                [k[1] for k in missing],
                [k[0] for k in calls],
                [k[1] for k in calls],
            )
            document = sqltree.loads(value) if isinstance(value, str) else value
            self.settings = bool(document["settings"])
            self.read_settings = True
            relations, functions = set(), set()
            for k in missing:
                self.relations[k] = None
            for n, columns in document["functions"] or ():
                self.functions[calls[n - 1]] = tuple(columns)
            for n, schema, relname, columns, definition in document["relations"] or ():
                view = sqltree.parse(definition) if definition else None
                self.relations[missing[n - 1]] = Relation(
                    schema, relname, tuple(columns), view, definition is not None
                )
                if view is not None:
                    more = wanted(view)
                    relations |= more[0]
                    functions |= more[1]


def wanted(tree: Any) -> tuple[set[Key], set[Key]]:
    """The relations a tree names, and the functions it calls in FROM."""
    functions: set[Key] = set()
    for key, value in sqltree.walk(tree):
        if key == "RangeFunction" and isinstance(value, dict):
            for entry in value.get("functions", []):
                items = entry.get("List", {}).get("items", [])
                call = node(items[0]) if items else None
                if call and call[0] == "FuncCall":
                    parts = names(call[1].get("funcname", []))
                    functions.add((parts[-2] if len(parts) > 1 else None, parts[-1]))
    return _relation_keys(tree), functions


def _relation_keys(tree: Any) -> set[Key]:
    return {
        (v.get("schemaname"), v.get("relname", ""))
        for k, v in sqltree.walk(tree)
        if k == "RangeVar" and isinstance(v, dict)
    }


def node(value: Any) -> tuple[str, dict[str, Any]] | None:
    """(kind, body) of a pglast JSON node such as `{"ColumnRef": {...}}`, else None."""
    if isinstance(value, dict) and len(value) == 1:
        key, body = next(iter(value.items()))
        if key[:1].isupper() and isinstance(body, dict):
            return key, body
    return None


_QUOTED = re.compile(r'"(?:[^"]|"")*"')
_BYTES = re.compile(r"\b0x[0-9a-f]+(?: 0x[0-9a-f]+)*", re.IGNORECASE)
# Errors raised by code that is not PostgreSQL's (RAISE in a function, an extension's
# internal error): their text is anyone's, so none of it is shown.
_FOREIGN_TEXT = ("P0", "XX")


def scrub(message: str, sqlstate: str | None = None) -> str:
    """An error message with the values it may quote masked (`invalid input syntax for type
    integer: "[REDACTED]"`, the bytes of an invalid byte sequence): for statements that read
    a sensitive source."""
    if sqlstate and sqlstate.startswith(_FOREIGN_TEXT):
        return (
            f"The query failed (SQLSTATE {sqlstate}); the message is withheld because the "
            "query reads a sensitive column."
        )
    return _BYTES.sub(REDACTED, _QUOTED.sub(f'"{REDACTED}"', message))


# A password in a connection string: keyword/value (`password=x`, `password = 'a b'`) or URI
# (`postgresql://user:x@host`, `?password=x`).
_CONNINFO_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)
_URI_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@", re.IGNORECASE)
_WHOLLY_SECRET_SETTINGS = frozenset({"ssl_passphrase_command"})


def mask_setting(name: str, value: str | None) -> str | None:
    """A setting's value as it may be shown: a password in it masked (primary_conninfo's, or
    any other's that holds one), and a passphrase command not shown at all."""
    if not value:
        return value
    if name.lower() in _WHOLLY_SECRET_SETTINGS:
        return REDACTED
    masked = _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + REDACTED, value)
    return _URI_PASSWORD.sub(lambda m: m.group(1) + REDACTED + "@", masked)


# A password written in SQL: `PASSWORD 'x'` (CREATE/ALTER ROLE), `password 'x'` (user mapping
# and server OPTIONS), `password='x'` (a dblink connection string literal's own quotes aside).
_SQL_PASSWORD = re.compile(r"(password\s*=?\s*)'(?:[^']|'')*'", re.IGNORECASE)


OTHER_CALLER = "<another caller's statement>"


def hides_statements_of(conn: asyncpg.Connection) -> Callable[[str | None, str | None], bool]:
    """Whether the statement text of another session, by its user, is hidden from the
    current caller. With users (identity/), every pooled session is the login role's whatever
    role a call SETs, so PostgreSQL shows a user whose grant runs as the login role every
    other user's statements in flight (attack7 F3): the login role's sessions other than the
    caller's own are hidden then (every other one, when the server did not report the
    session's user, as behind some poolers). So are the sessions of every pool of this
    server's, by their application_name, whatever role they log in as: with several
    databases another database's pool may log in as another role, whose statements a role
    with pg_read_all_stats sees (attack8 F6). Called with a session's user and its
    application_name. Without an identity nothing is hidden here."""
    if current_identity.get() is None:
        return lambda user, application: False
    login = getattr(conn.get_settings(), "session_authorization", None)
    return lambda user, application: (
        login is None or user == login or application == APPLICATION_NAME
    )


def mask_query(text: str | None) -> str | None:
    """Another session's statement text as pg://stat/activity shows it: passwords written in
    it (a role's, a user mapping's, one in a connection string) masked."""
    if not text:
        return text
    masked = _SQL_PASSWORD.sub(lambda m: f"{m.group(1)}'{REDACTED}'", text)
    masked = _CONNINFO_PASSWORD.sub(lambda m: m.group(1) + REDACTED, masked)
    return _URI_PASSWORD.sub(lambda m: m.group(1) + REDACTED + "@", masked)
