"""The rules the guard judges code by, over one catalog (database/guard/facts.py).

A function is unsafe when it is VOLATILE (apart from a few harmless built-ins), when a role that
is not trusted owns it (its marking is that role's promise, and that role can replace it at any
time), when it is one of the built-ins refused for what they do, when its SQL or PL/pgSQL body
cannot be read, or when it is a procedure. Some built-ins run the code of an object named in an
argument's value: called directly, they are allowed only where the statement passes a constant
(see database/guard/reach.py). What a statement reaches is database/guard/reach.py's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pg_mcp_server.database.guard.facts import (
    FIRST_USER_OID,
    Catalog,
    Function,
    Relations,
    TreeRefs,
    tree_refs,
)
from pg_mcp_server.database.sql import Refs, plpgsql_refs, refs_of, tree as sqltree

# Volatile, but harmless for a reader: nothing outlives the rolled-back transaction, nothing
# outside the database is touched, and pg_sleep is bounded by the statement timeout. Only
# built-ins (and extension members) of these names count: a user's `random` is judged as any.
HARMLESS_VOLATILE = frozenset(
    {
        "random",
        "random_normal",
        "array_sample",
        "array_shuffle",
        "clock_timestamp",
        "timeofday",
        "gen_random_uuid",
        "uuidv4",
        "uuidv7",
        "uuid_generate_v1",
        "uuid_generate_v1mc",
        "uuid_generate_v4",
        "pg_sleep",
        "pg_sleep_for",
        "pg_sleep_until",
        "pg_total_relation_size",
        "pg_relation_size",
        "pg_table_size",
        "pg_indexes_size",
        "pg_database_size",
        "pg_tablespace_size",
        "pg_partition_tree",
        "pg_partition_ancestors",
        "pg_is_in_recovery",
        "pg_jit_available",
        "pg_lock_status",
        "pg_blocking_pids",
        "pg_current_wal_lsn",
        "pg_last_xact_replay_timestamp",
        # behind harmless system views (pg_sequences, pg_prepared_xacts, pg_wait_events, ...)
        "pg_sequence_last_value",
        "pg_prepared_xact",
        "pg_get_wait_events",
        "pg_get_shmem_allocations",
        "pg_get_shmem_allocations_numa",
        "pg_get_backend_memory_contexts",
        "pg_get_aios",
        "pg_show_replication_origin_status",
        # pg_stat_statements reads statistics
        "pg_stat_statements",
        "pg_stat_statements_info",
        # TABLESAMPLE methods: the handler only hands PostgreSQL its callbacks
        "system",
        "bernoulli",
        "system_rows",
        "system_time",
    }
)
HARMLESS_PREFIXES = ("pg_stat_get_",)

# C functions (built in, or from an extension) refused for what they do whatever they are
# marked, by the C symbol that implements them (`prosrc`), so aliases are refused too.
# tests/test_guard_audit.py calls every non-volatile built-in it can and checks that whatever
# changes server state is in here.
REFUSED_SYMBOLS = {
    "pg_current_xact_id": "assigns a transaction ID on every call (it is marked STABLE)",
    "txid_current": "assigns a transaction ID on every call (it is marked STABLE)",
    **dict.fromkeys(
        (
            "query_to_xml",
            "query_to_xmlschema",
            "query_to_xml_and_xmlschema",
            "cursor_to_xml",
            "cursor_to_xmlschema",
            "ts_stat1",
            "ts_stat2",
            "connectby_text",
            "connectby_text_serial",
        ),
        "runs SQL given to it as text, which the guard cannot see",
    ),
}

# Built-ins that run the code of a relation, a schema's relations, the database's relations, a
# type or an SQL text named in an argument's value: allowed where the statement (or a view or
# SQL body) passes a constant the guard can check, refused anywhere else. By C symbol:
# (argument positions, argument names, what they name). The input and receive functions of
# types that take a type oid (record_in, domain_in, ...) count too: called directly, they run
# the code of the type that oid names.
NAMES_RELATION, NAMES_SCHEMA, NAMES_DATABASE = "relation", "schema", "database"
NAMES_TYPE, NAMES_TYPE_OID, NAMES_SQL = "type", "type oid", "sql"
Naming = tuple[tuple[int, ...], tuple[str | None, ...], str]
NAMING_SYMBOLS: dict[str, Naming] = {
    **dict.fromkeys(
        ("table_to_xml", "table_to_xmlschema", "table_to_xml_and_xmlschema"),
        ((0,), ("tbl",), NAMES_RELATION),
    ),
    **dict.fromkeys(
        ("schema_to_xml", "schema_to_xmlschema", "schema_to_xml_and_xmlschema"),
        ((0,), ("schema",), NAMES_SCHEMA),
    ),
    **dict.fromkeys(
        ("database_to_xml", "database_to_xmlschema", "database_to_xml_and_xmlschema"),
        ((), (), NAMES_DATABASE),
    ),
    "pg_input_is_valid": ((1,), ("type_name",), NAMES_TYPE),
    "pg_input_error_info": ((1,), ("type_name",), NAMES_TYPE),
    # tablefunc: crosstab(text), crosstab(text, int), crosstabN(text); crosstab(text, text)
    "crosstab": ((0,), (None,), NAMES_SQL),
    "crosstab_hash": ((0, 1), (None, None), NAMES_SQL),
}

FUNCTION, OPERATOR, TYPE, RELATION, ROW, FAMILY, CAST = (
    "function",
    "operator",
    "type",
    "relation",
    "row",
    "family",
    "cast",
)
Obj = tuple[str, int]
ALL_SCHEMAS = "*"  # database_to_xml: every schema a reader sees
_OID = 26  # pg_catalog.oid
_INTERNAL = 2281  # pg_catalog.internal
MISSING = "missing"  # (MISSING, type oid): a type not in the catalog, in Judge.clean's walk
DRIVER = "driver"  # (DRIVER, 0): the driver's own catalog query, see _driver_lookup


@dataclass(frozen=True)
class Refusal:
    rule: str
    reason: str  # what is wrong with the culprit
    chain: tuple[str, ...]  # from what the statement named down to the culprit
    suggestion: str = ""

    @property
    def message(self) -> str:
        culprit = self.chain[-1]
        if len(self.chain) == 1:
            return f"The {culprit} is not allowed: it {self.reason}."
        return (
            f"The {self.chain[0]} is not allowed: it runs {culprit}, which {self.reason} "
            f"(through {' -> '.join(self.chain)})."
        )


@dataclass
class Judge:
    """Static judgements over one `Catalog` (memoised), and statement plans."""

    catalog: Catalog
    allow_foreign_tables: bool = False
    allow_open_schema_code: bool = False  # see reach.run_path
    # For custom SQL (custom/check.py), already written with the schemas its names resolve to
    # and run without the open schemas on its path: those left off (no name kept there), and
    # only these rules' refusals counted (the rest of custom SQL is the operator's).
    custom: frozenset[str] | None = None
    _bodies: dict[int, Refs | str] = field(default_factory=dict)
    _trees: dict[tuple[str, int], TreeRefs] = field(default_factory=dict)
    _verdicts: dict[int, tuple[str, str] | None] = field(default_factory=dict)
    _unsafe_symbols: dict[str, bool] = field(default_factory=dict)
    _risky_casts: list[int] | None = None
    _clean: frozenset[Obj] | None = None

    # --- naming objects in messages ----------------------------------------------------

    def describe(self, obj: Obj, relations: Relations) -> str:
        kind, oid = obj
        c = self.catalog
        if kind == FUNCTION and oid in c.functions:
            f = c.functions[oid]
            args = ", ".join(c.type_name(t) for t in f.types[: f.nargs])
            what = "procedure" if f.kind == "p" else "function"
            return f"{what} {c.qualified(f.schema, f.name)}({args})"
        if kind == OPERATOR and oid in c.operators:
            o = c.operators[oid]
            args = ", ".join(c.type_name(t) if t else "NONE" for t in (o.left, o.right))
            return f"operator {c.qualified(o.schema, o.name)}({args})"
        if kind == TYPE and oid in c.types:
            label = {"d": "domain", "r": "range type", "m": "multirange type"}
            return f"{label.get(c.types[oid].kind, 'type')} {c.type_name(oid)}"
        if kind in (RELATION, ROW) and oid in relations.by_oid:
            r = relations.by_oid[oid]
            label = {"v": "view", "m": "materialized view", "f": "foreign table"}
            name = f"{label.get(r.kind, 'table')} {c.qualified(r.schema, r.name)}"
            return f"row type of {name}" if kind == ROW else name
        if kind == CAST:
            cast = next((x for x in c.casts if x.oid == oid), None)
            if cast is not None:
                return f"cast from {c.type_name(cast.source)} to {c.type_name(cast.target)}"
        if kind == FAMILY:
            return f"operator family {oid}"
        if kind == DRIVER:
            return "type lookup the database driver (asyncpg) runs for a result's types"
        return f"{kind} {oid}"

    # --- owners ----------------------------------------------------------------------

    def trusts(self, owner: int, oid: int) -> bool:
        """Whether objects `owner` owns may hold code the guard takes as it finds it: made by
        initdb, or owned by a trusted role (superusers, the database's owner, the server's
        own role, MCP_TRUSTED_ROLES)."""
        return oid < FIRST_USER_OID or owner in self.catalog.trusted_roles

    # --- functions -------------------------------------------------------------------

    def _trusted(self, f: Function) -> bool:
        """Made by initdb, owned by a trusted role, or a member of an extension a trusted role
        owns (its script's objects; the owner of an extension can add their own to it)."""
        trusted = self.catalog.trusted_roles
        return (
            f.oid < FIRST_USER_OID
            or f.owner in trusted
            or (f.extension_member and f.extension_owner in trusted)
        )

    def index_support(self, f: Function) -> bool:
        """Whether a function in an operator family is one only its index access method calls:
        it takes `internal`, which no SQL expression can produce (PostgreSQL lets only a
        function that takes `internal` return it), so the statement cannot call it, only the
        access method's C code can. pgvector's `ivfflat_*_support(internal)` are such, left
        VOLATILE because their CREATE FUNCTION says nothing; following them refused every
        query that uses a pgvector operator. Only a trusted function (operator families are
        changed by superusers only, but a superuser may add a function someone else owns)."""
        return self._trusted(f) and _INTERNAL in f.types[: f.nargs]

    def _harmless(self, f: Function) -> bool:
        return (f.oid < FIRST_USER_OID or (f.extension_member and self._trusted(f))) and (
            f.name in HARMLESS_VOLATILE or f.name.startswith(HARMLESS_PREFIXES)
        )

    def _symbol_unsafe(self, symbol: str) -> bool:
        """Whether a C symbol is unsafe, judged by the built-ins that use it (an untrusted
        role may own an internal function, such as its range type's constructor, but cannot
        choose what C code it runs)."""
        if symbol not in self._unsafe_symbols:
            builtins = [
                f
                for fs in self.catalog.functions_named.values()
                for f in fs
                if f.oid < FIRST_USER_OID and f.language == "internal" and f.source == symbol
            ]
            self._unsafe_symbols[symbol] = not builtins or any(
                f.volatility == "v" and not self._harmless(f) for f in builtins
            )
        return self._unsafe_symbols[symbol]

    def function_verdict(self, oid: int) -> tuple[str, str] | None:
        """(rule, reason) when the function itself is unsafe, whatever it calls."""
        if oid in self._verdicts:
            return self._verdicts[oid]
        f = self.catalog.functions.get(oid)
        verdict: tuple[str, str] | None = None
        if f is None:
            verdict = ("unknown_object", "is not in the catalog the guard read")
        elif f.kind == "p":
            verdict = ("procedure", "is a procedure")
        elif f.language in ("internal", "c") and f.source in REFUSED_SYMBOLS:
            verdict = ("refused_function", REFUSED_SYMBOLS[f.source])
        elif f.language == "internal" and not self._trusted(f):
            if self._symbol_unsafe(f.source or ""):
                verdict = ("untrusted_owner", f"is owned by role {f.owner_name!r}")
        elif not self._trusted(f):
            verdict = (
                "untrusted_owner",
                f"is owned by role {f.owner_name!r}, which is not trusted (its marking is that "
                "role's promise, and it can replace the function at any time)",
            )
        elif f.volatility == "v" and not self._harmless(f):
            verdict = ("volatile_function", "is VOLATILE: it may change the database or the server")
        elif isinstance(self.body(f), str):
            verdict = ("unanalysable_body", str(self.body(f)))
        self._verdicts[oid] = verdict
        return verdict

    def naming(self, oid: int) -> Naming | None:
        """(argument position, argument name, kind) when calling this function directly runs
        the code of an object named in an argument's value (see NAMING_SYMBOLS)."""
        f = self.catalog.functions.get(oid)
        if f is None or f.language not in ("internal", "c"):
            return None
        if f.source in NAMING_SYMBOLS:
            return NAMING_SYMBOLS[f.source]
        if oid in self.catalog.input_functions and _OID in f.types[: f.nargs]:
            return ((f.types.index(_OID),), (None,), NAMES_TYPE_OID)
        return None

    def body(self, f: Function) -> Refs | str | None:
        """The names an SQL body kept as text, or a PL/pgSQL body's static SQL, uses (they
        resolve when the function runs), or why they cannot be known."""
        if f.source is None or f.language not in ("sql", "plpgsql"):
            return None
        if f.oid not in self._bodies:
            body: Refs | str
            if f.language == "plpgsql":
                body = plpgsql_refs(f.source)
            else:
                tree = sqltree.parse(f.source)
                body = refs_of(tree) if tree else "has an SQL body the guard cannot parse"
            other = sorted(body.statements - {"SelectStmt"}) if isinstance(body, Refs) else []
            if other:
                body = f"has a body with {', '.join(other)} statements"
            self._bodies[f.oid] = body
        return self._bodies[f.oid]

    def tree(self, kind: str, oid: int, text: str) -> TreeRefs:
        """A catalog object's stored tree, read once."""
        if (kind, oid) not in self._trees:
            self._trees[(kind, oid)] = tree_refs(text)
        return self._trees[(kind, oid)]

    def function_path(self, f: Function, caller: tuple[int, ...]) -> tuple[int, ...]:
        """The schemas an SQL body's names resolve in: its own search_path, else the
        caller's, `caller` (pg_catalog first unless listed)."""
        if f.search_path is None:
            return caller
        names = [n.strip().strip('"') for n in f.search_path.split(",")]
        names = [self.catalog.role if n == "$user" else n for n in names]
        if "pg_catalog" not in names:
            names.insert(0, "pg_catalog")
        return tuple(self.catalog.schema_oids[n] for n in names if n in self.catalog.schema_oids)

    # --- reaching ----------------------------------------------------------------------

    def reuse_clean(self, other: Judge) -> None:
        self._clean = other._clean

    def risky_casts(self) -> list[int]:
        """Casts that may call unsafe code: made after initdb, or with an unsafe function."""
        if self._risky_casts is None:
            self._risky_casts = [
                i
                for i, cast in enumerate(self.catalog.casts)
                if cast.function
                and (cast.oid >= FIRST_USER_OID or self.function_verdict(cast.function))
            ]
        return self._risky_casts


def suggestion_for(rule: str) -> str:
    return {
        "untrusted_owner": "Ask an administrator to review it; if its owner is trusted, add "
        "that role to MCP_TRUSTED_ROLES.",
        "volatile_function": "Use only side-effect-free functions (stable or immutable ones, "
        "plus harmless volatile ones such as random() or clock_timestamp()) and objects "
        "built on them.",
    }.get(rule, "Leave it out of the query.")
