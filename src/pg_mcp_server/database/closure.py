"""Which code a statement can make PostgreSQL run, and whether all of it is safe for a reader.

From the names a statement uses (database/sqlrefs.py), every object PostgreSQL might resolve
them to is a seed; from each object, every object whose code PostgreSQL may run on its behalf
is reached in turn: a view's query, an operator's function (and the ones the planner calls for
it: selectivity, commutator, negator, its operator families), a type's I/O, subscript and range
functions, its domain constraints, the operator families that sort and hash it, a function's
default arguments and SQL body, an aggregate's support functions, a table's policies, virtual
generated columns, children and index families, and the casts between types in play.

A function is unsafe when it is VOLATILE (apart from a few harmless built-ins), when a role that
is not trusted owns it (its marking is that role's promise, and that role can replace it at any
time), when it is one of the built-ins refused for what they do, or when it is a procedure. A
foreign table is unsafe unless the operator allows them: the remote side is not under our
read-only transaction. The statement is refused when anything it can reach is unsafe; the
refusal names the chain from what the statement named down to the culprit.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from asyncpg import introspection

from pg_mcp_server.database import sqltree
from pg_mcp_server.database.safety import (
    FIRST_USER_OID,
    Catalog,
    Function,
    Operator,
    Relations,
    TreeRefs,
    tree_refs,
)
from pg_mcp_server.database.sqlrefs import Call, Refs, plpgsql_refs, refs_of

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
            "crosstab",
            "crosstab_hash",
            "connectby_text",
            "connectby_text_serial",
        ),
        "runs SQL given to it as text, which the guard cannot see",
    ),
}
# tablefunc's SQL-text functions by name, for servers where a stand-in takes their place.
REFUSED_NAMES = frozenset({"crosstab", "crosstab2", "crosstab3", "crosstab4", "connectby"})

# Built-ins that run the code of a relation, a schema's relations, the database's relations or a
# type named in an argument's value: allowed where the statement passes a constant the guard
# can check, refused anywhere else. By C symbol: (argument position, argument name, what it
# names). The input and receive functions of types that take a type oid (record_in, range_in,
# domain_in, ...) count too: called directly, they run the code of the type that oid names.
NAMES_RELATION, NAMES_SCHEMA, NAMES_DATABASE, NAMES_TYPE, NAMES_TYPE_OID = "r", "s", "d", "t", "o"
NAMING_SYMBOLS: dict[str, tuple[int, str | None, str]] = {
    **dict.fromkeys(
        ("table_to_xml", "table_to_xmlschema", "table_to_xml_and_xmlschema"),
        (0, "tbl", NAMES_RELATION),
    ),
    **dict.fromkeys(
        ("schema_to_xml", "schema_to_xmlschema", "schema_to_xml_and_xmlschema"),
        (0, "schema", NAMES_SCHEMA),
    ),
    **dict.fromkeys(
        ("database_to_xml", "database_to_xmlschema", "database_to_xml_and_xmlschema"),
        (0, None, NAMES_DATABASE),
    ),
    "pg_input_is_valid": (1, "type_name", NAMES_TYPE),
    "pg_input_error_info": (1, "type_name", NAMES_TYPE),
}
_NAMES_AT_RUN_TIME = "reads the relation, schema or type named in an argument's value"

# Argument types through which `x.f` / `(x).f` can call f with a row.
_ROW_ARGUMENTS = frozenset(
    {"record", "anyelement", "anycompatible", "anynonarray", "anycompatiblenonarray"}
)

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
class Lookups:
    """Names resolved for a statement, as (schema oid, name) pairs per kind."""

    functions: set[tuple[int, str]] = field(default_factory=set)
    operators: set[tuple[int, str]] = field(default_factory=set)
    types: set[tuple[int, str]] = field(default_factory=set)
    relations: set[tuple[int, str]] = field(default_factory=set)
    schemas: set[str] = field(default_factory=set)  # whose relations the statement reads


@dataclass
class Plan:
    """What one statement reaches under the current `Catalog` and `Relations`."""

    reached: dict[Obj, Obj | None]  # each object and the one it was reached from
    lookups: Lookups
    refusal: Refusal | None
    missing_relations: set[int]  # relations (by oid) to read before the plan is complete
    missing_types: set[int]  # types neither in the catalog nor known row types
    unresolved: bool  # names never resolved yet: the check must run before trusting this

    @property
    def complete(self) -> bool:
        return not (self.missing_relations or self.missing_types or self.unresolved)

    def user_oids(self, *kinds: str) -> list[int]:
        """Objects reached that users made (initdb's never change, see FIRST_USER_OID)."""
        return sorted({o for k, o in self.reached if k in kinds and o >= FIRST_USER_OID})


@dataclass
class Judge:
    """Static judgements over one `Catalog` (memoised), and statement plans."""

    catalog: Catalog
    allow_foreign_tables: bool = False
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
        elif f.name in REFUSED_NAMES:
            verdict = (
                "refused_function",
                "runs SQL given to it as text, which the guard cannot see",
            )
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
        elif isinstance(self._body(f), str):
            verdict = ("unanalysable_body", str(self._body(f)))
        self._verdicts[oid] = verdict
        return verdict

    def naming(self, oid: int) -> tuple[int, str | None, str] | None:
        """(argument position, argument name, kind) when calling this function directly runs
        the code of an object named in an argument's value (see NAMING_SYMBOLS)."""
        f = self.catalog.functions.get(oid)
        if f is None or f.language != "internal":
            return None
        if f.source in NAMING_SYMBOLS:
            return NAMING_SYMBOLS[f.source]
        if oid in self.catalog.input_functions and _OID in f.types[: f.nargs]:
            return (f.types.index(_OID), None, NAMES_TYPE_OID)
        return None

    def _body(self, f: Function) -> Refs | str | None:
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

    def function_path(self, f: Function) -> tuple[int, ...]:
        """The schemas an SQL body's names resolve in: its own search_path, else the
        caller's (pg_catalog first unless listed)."""
        if f.search_path is None:
            return self.catalog.path
        names = [n.strip().strip('"') for n in f.search_path.split(",")]
        names = [self.catalog.role if n == "$user" else n for n in names]
        if "pg_catalog" not in names:
            names.insert(0, "pg_catalog")
        return tuple(self.catalog.schema_oids[n] for n in names if n in self.catalog.schema_oids)

    # --- reaching ----------------------------------------------------------------------

    def plan(self, refs: Refs, relations: Relations) -> Plan:
        walk = _Walk(self, relations)
        walk.statement(refs)
        walk.names(_driver_lookup(), (DRIVER, 0), self.catalog.path)
        walk.run()
        return walk.finish()

    def reuse_clean(self, other: Judge) -> None:
        self._clean = other._clean

    def clean(self) -> frozenset[Obj]:
        """Built-in functions, operators, types and operator families whose code, and all it
        reaches, is built in and safe: walks skip them (a statement reaches thousands through
        '=' alone). Anything that reaches a user's object, a relation, a refused or naming
        built-in, or an SQL body kept as text (its names resolve when called) is not clean."""
        if self._clean is None:
            self._clean = frozenset()  # while computing: walk everything
            edges: list[tuple[Obj, Obj]] = []
            walk = _Walk(self, Relations(), record=edges)
            c = self.catalog
            builtin = [
                *((FUNCTION, o) for o in c.functions),
                *((OPERATOR, o) for o in c.operators),
                *((TYPE, o) for o in c.types),
                *((FAMILY, o) for o in c.families),
            ]
            for obj in builtin:
                if obj[1] < FIRST_USER_OID:
                    walk.add(obj, None)
            walk.run(casts=False)
            dirty = {o for o in walk.reached if o[1] >= FIRST_USER_OID or o[0] in (RELATION, ROW)}
            dirty |= {child for _, child in edges if child[0] == MISSING}
            for kind, oid in walk.reached:
                if (
                    kind == FUNCTION
                    and (
                        self.function_verdict(oid) is not None
                        or self.naming(oid) is not None
                        or self._body(c.functions[oid]) is not None
                    )
                ) or (kind == TYPE and c.types[oid].relation):
                    dirty.add((kind, oid))
            parents: dict[Obj, list[Obj]] = {}
            for parent, child in edges:
                parents.setdefault(child, []).append(parent)
            todo = list(dirty)
            while todo:  # whatever reaches something dirty is dirty
                for parent in parents.get(todo.pop(), ()):
                    if parent not in dirty:
                        dirty.add(parent)
                        todo.append(parent)
            self._clean = frozenset(o for o in walk.reached if o not in dirty)
        return self._clean

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


class _Walk:
    """One breadth-first walk from a statement's names (see Judge.plan)."""

    def __init__(
        self, judge: Judge, relations: Relations, record: list[tuple[Obj, Obj]] | None = None
    ) -> None:
        self.judge = judge
        self.c = judge.catalog
        self.relations = relations
        # Judge.clean's walk records every edge instead of skipping clean built-ins.
        self.record = record
        self.clean = judge.clean() if record is None else frozenset()
        self.reached: dict[Obj, Obj | None] = {}
        self.queue: deque[Obj] = deque()
        self.lookups = Lookups()
        self.missing_relations: set[int] = set()
        self.missing_types: set[int] = set()
        self.unresolved = False
        self.refusal: Refusal | None = None

    def add(self, obj: Obj, parent: Obj | None) -> None:
        if not obj[1] or obj in self.clean:
            return
        if self.record is not None and parent is not None:
            self.record.append((parent, obj))
        if obj not in self.reached:
            self.reached[obj] = parent
            self.queue.append(obj)

    def refuse(self, rule: str, reason: str, chain: tuple[str, ...], suggestion: str) -> None:
        if self.refusal is None:
            self.refusal = Refusal(rule, reason, chain, suggestion)

    # --- names -------------------------------------------------------------------------

    def schemas(self, schema: str | None, path: tuple[int, ...]) -> tuple[int, ...]:
        if schema is None:
            return path
        oid = self.c.schema_oids.get(schema)
        return (oid,) if oid is not None else ()

    def functions(
        self, schema: str | None, name: str, nargs: int, path: tuple[int, ...]
    ) -> Iterator[Function]:
        """Every function a call may resolve to. Like PostgreSQL, one in a later schema of
        the path with the same argument types as one in an earlier schema is hidden by it."""
        seen: set[tuple[int, ...]] = set()
        for nsp in self.schemas(schema, path):
            self.lookups.functions.add((nsp, name))
            here = [f for f in self.c.functions_named.get(name, ()) if f.schema == nsp]
            for f in here:
                if f.arguments not in seen and f.accepts(nargs):
                    yield f
            seen.update(f.arguments for f in here)

    def operators(
        self, schema: str | None, name: str, prefix: bool, path: tuple[int, ...]
    ) -> Iterator[Operator]:
        """Every operator a name may resolve to, hidden ones left out (see `functions`)."""
        seen: set[tuple[int, int]] = set()
        for nsp in self.schemas(schema, path):
            self.lookups.operators.add((nsp, name))
            here = [
                o
                for o in self.c.operators_named.get(name, ())
                if o.schema == nsp and (o.kind == "l") == prefix
            ]
            for o in here:
                if (o.left, o.right) not in seen:
                    yield o
            seen.update((o.left, o.right) for o in here)

    def types(self, schema: str | None, name: str, path: tuple[int, ...]) -> Iterator[int]:
        """The type a name resolves to (the first schema that has it), or the relations whose
        row type it may be."""
        schemas = self.schemas(schema, path)
        for nsp in schemas:
            self.lookups.types.add((nsp, name))
        for nsp in schemas:
            typ = self.c.types_named.get((nsp, name))
            if typ is not None:
                yield typ.oid
                return
        yield from (-oid for oid in self.relation_names(schemas, name))

    def relation_names(self, schemas: Iterable[int], name: str) -> Iterator[int]:
        for nsp in schemas:
            key = (nsp, name)
            self.lookups.relations.add(key)
            if key not in self.relations.named:
                self.unresolved = True
            yield from self.relations.named.get(key, ())

    def names(self, refs: Refs, parent: Obj | None, path: tuple[int, ...]) -> None:
        """Every object the names in `refs` may resolve to, reached from `parent` (None: the
        statement itself)."""
        for call in refs.calls:
            self.call(call, parent, path)
        for name in refs.row_functions:
            for f in self.functions(None, name, 1, path):
                if self.row_argument(f):
                    self.add((FUNCTION, f.oid), parent)
        for schema, name, prefix in refs.operators:
            for o in self.operators(schema, name, prefix, path):
                self.add((OPERATOR, o.oid), parent)
        for schema, name in refs.types:
            for t in self.types(schema, name, path):
                self.add((TYPE, t) if t > 0 else (ROW, -t), parent)
        for schema, name in refs.relations:
            for oid in self.relation_names(self.schemas(schema, path), name):
                self.add((RELATION, oid), parent)

    def row_argument(self, f: Function) -> bool:
        if not f.types:
            return False
        typ = self.c.types.get(f.types[0])
        return typ is None or typ.kind == "c" or typ.name in _ROW_ARGUMENTS

    def statement(self, refs: Refs) -> None:
        self.names(refs, None, self.c.path)

    def call(self, call: Call, parent: Obj | None, path: tuple[int, ...]) -> None:
        nargs = len(call.args)
        for f in self.functions(call.schema, call.name, nargs, path):
            naming = self.judge.naming(f.oid)
            if naming is None:
                self.add((FUNCTION, f.oid), parent)
            elif parent is None and self.target(naming, call, path, f.oid):
                pass  # the statement names a constant object: that object is checked instead
            else:
                self.refuse_naming(f.oid, parent)
        if nargs == 1:  # `name(x)` is a cast to type `name` when no function fits
            for t in self.types(call.schema, call.name, path):
                self.add((TYPE, t) if t > 0 else (ROW, -t), parent)

    def refuse_naming(self, oid: int, parent: Obj | None) -> None:
        chain = self.chain(parent) if parent is not None else ()
        self.refuse(
            "names_object_at_run_time",
            f"{_NAMES_AT_RUN_TIME}, and the guard can only check such a name when the statement "
            "passes it as a constant",
            (*chain, self.judge.describe((FUNCTION, oid), self.relations)),
            "Pass the relation, schema or type name as a string constant in the query itself.",
        )

    def target(
        self, naming: tuple[int, str | None, str], call: Call, path: tuple[int, ...], via: int
    ) -> bool:
        """Reach the object a call names by a constant; False when it is not a constant."""
        position, argument, kind = naming
        parent: Obj = (FUNCTION, via)
        # Named in the chain, never expanded: a built-in whose only code is the object it names.
        self.reached.setdefault(parent, None)
        if kind == NAMES_DATABASE:
            self.schema_relations(ALL_SCHEMAS, via)
            return True
        value = _argument(call, position, argument)
        if value is None:
            return False
        if kind == NAMES_SCHEMA:
            self.schema_relations(value, via)
            return True
        if kind == NAMES_RELATION:
            if value.isdigit():
                self.add((RELATION, int(value)), parent)
                return True
            parts = sqltree.qualified_name(value)
            if parts is None:
                return False
            schema, name = (parts[-2] if len(parts) > 1 else None), parts[-1]
            for oid in self.relation_names(self.schemas(schema, path), name):
                self.add((RELATION, oid), parent)
            return True
        if kind == NAMES_TYPE_OID and value.isdigit():
            self.type(int(value), parent)
            return True
        type_name = sqltree.type_name(value)
        if type_name is None:
            return False
        for t in self.types(*type_name, path):
            self.add((TYPE, t) if t > 0 else (ROW, -t), parent)
        return True

    def schema_relations(self, schema: str, via: int) -> None:
        self.lookups.schemas.add(schema)
        if schema not in self.relations.in_schema:
            self.unresolved = True
        for oid in self.relations.in_schema.get(schema, ()):
            self.add((RELATION, oid), (FUNCTION, via))

    # --- edges -------------------------------------------------------------------------

    def run(self, *, casts: bool = True) -> None:
        casts_done: set[int] = set()
        while True:
            while self.queue:
                obj = self.queue.popleft()
                self.check(obj)
                self.edges(obj)
            if not casts:
                return
            # Casts between types in play (built-in types always are: literals, syntax).
            types = {o for k, o in self.reached if k == TYPE}
            for i in self.judge.risky_casts():
                cast = self.c.casts[i]
                if cast.oid in casts_done:
                    continue
                ends = (cast.source, cast.target)
                if all(t < FIRST_USER_OID or t in types for t in ends):
                    casts_done.add(cast.oid)
                    user = next((t for t in ends if t in types and t >= FIRST_USER_OID), 0)
                    self.add((CAST, cast.oid), (TYPE, user) if user else None)
            if not self.queue:
                return

    def check(self, obj: Obj) -> None:
        kind, oid = obj
        if self.refusal is not None:
            return
        if kind == FUNCTION:
            verdict = self.judge.function_verdict(oid)
            if verdict is not None:
                suggestion = _suggestion(verdict[0]) + self.qualify_hint(obj)
                self.refuse(*verdict, self.chain(obj), suggestion)
        elif kind == RELATION:
            rel = self.relations.by_oid.get(oid)
            if rel is not None and rel.kind == "f" and not self.judge.allow_foreign_tables:
                self.refuse(
                    "foreign_table",
                    "is a foreign table: reading it runs a query on another server, outside "
                    "this read-only transaction",
                    self.chain(obj),
                    "Foreign tables are refused unless the server runs with "
                    "MCP_ALLOW_FOREIGN_TABLES=true.",
                )

    def qualify_hint(self, obj: Obj) -> str:
        """When the statement named the refused object's root by a name that built-ins share,
        how to leave it out: the guard checks every candidate an unqualified name may reach."""
        kind, oid = self.path_to(obj)[0]
        catalog = self.c.schema_oids.get("pg_catalog")
        if kind == FUNCTION and oid in self.c.functions:
            f = self.c.functions[oid]
            schema, name, builtin = f.schema, f.name, f"pg_catalog.{f.name}(...)"
            shared = any(x.schema == catalog for x in self.c.functions_named.get(name, ()))
        elif kind == OPERATOR and oid in self.c.operators:
            o = self.c.operators[oid]
            schema, name, builtin = o.schema, o.name, f"OPERATOR(pg_catalog.{o.name})"
            shared = any(x.schema == catalog for x in self.c.operators_named.get(name, ()))
        else:
            return ""
        if schema == catalog or not shared:
            return ""
        return (
            f" If you meant the built-in {name}, write {builtin}: an unqualified name is "
            "checked against every object it may resolve to."
        )

    def path_to(self, obj: Obj) -> list[Obj]:
        """The objects from what the statement named down to `obj`."""
        out: list[Obj] = []
        current: Obj | None = obj
        while current is not None and current not in out:
            out.append(current)
            current = self.reached.get(current)
        return out[::-1]

    def chain(self, obj: Obj) -> tuple[str, ...]:
        return tuple(self.judge.describe(o, self.relations) for o in self.path_to(obj))

    def edges(self, obj: Obj) -> None:
        kind, oid = obj
        if kind == FUNCTION:
            self.function_edges(oid, obj)
        elif kind == OPERATOR:
            o = self.c.operators.get(oid)
            if o is not None:
                for f in (o.code, o.restrict, o.join):
                    self.add((FUNCTION, f), obj)
                for op in (o.commutator, o.negator):
                    self.add((OPERATOR, op), obj)
                for t in (o.left, o.right, o.result):
                    self.type(t, obj)
                for fam in self.c.operator_families.get(oid, ()):
                    self.add((FAMILY, fam), obj)
        elif kind == TYPE:
            self.type_edges(oid, obj)
        elif kind in (RELATION, ROW):
            self.relation_edges(oid, obj, full=kind == RELATION)
        elif kind == FAMILY:
            procs, oprs = self.c.families.get(oid, ([], []))
            for f in procs:
                self.add((FUNCTION, f), obj)
            for op in oprs:
                self.add((OPERATOR, op), obj)
        elif kind == CAST:
            cast = next(x for x in self.c.casts if x.oid == oid)
            self.add((FUNCTION, cast.function), obj)

    def function_edges(self, oid: int, obj: Obj) -> None:
        f = self.c.functions.get(oid)
        if f is None:
            return
        self.tree(self.judge.tree(FUNCTION, oid, f.trees), obj)
        body = self.judge._body(f)
        if isinstance(body, Refs):  # its naming calls are refused by their own verdict
            self.names(body, obj, self.judge.function_path(f))
        for g in (f.support, *f.aggregate):
            self.add((FUNCTION, g), obj)
        self.add((OPERATOR, f.sort_operator), obj)
        for t in f.types:
            self.type(t, obj)

    def type(self, oid: int, parent: Obj) -> None:
        if not oid:
            return
        if oid in self.c.types:
            self.add((TYPE, oid), parent)
        elif oid in self.relations.by_row_type:
            self.add((ROW, self.relations.by_row_type[oid]), parent)
        else:
            self.missing_types.add(oid)
            if self.record is not None:  # (a table's row type: not clean, see Judge.clean)
                self.record.append((parent, (MISSING, oid)))

    def type_edges(self, oid: int, obj: Obj) -> None:
        t = self.c.types.get(oid)
        if t is None:
            return
        for f in t.functions:
            self.add((FUNCTION, f), obj)
        for other in (t.element, t.base):
            self.type(other, obj)
        if t.relation:
            self.add((ROW, t.relation), obj)
        for i, (text, _) in enumerate(self.c.domain_checks.get(oid, ())):
            self.tree(self.judge.tree(f"{TYPE}{i}", oid, text), obj)
        rng = self.c.ranges.get(oid)
        if rng is not None:
            self.type(rng.subtype, obj)
            self.add((FUNCTION, rng.canonical), obj)
            self.add((FUNCTION, rng.subtype_diff), obj)
            self.add((FAMILY, rng.subtype_family), obj)
        if oid in self.c.multiranges:
            self.type(self.c.multiranges[oid], obj)
        for fam in self.c.default_families.get(oid, ()):
            self.add((FAMILY, fam), obj)

    def relation_edges(self, oid: int, obj: Obj, *, full: bool) -> None:
        rel = self.relations.by_oid.get(oid)
        if rel is None:
            self.missing_relations.add(oid)
            return
        for t in rel.column_types:
            self.type(t, obj)
        if not full:
            return
        self.tree(rel.code, obj)
        for child in rel.children:
            self.add((RELATION, child), obj)
        for fam in rel.families:
            self.add((FAMILY, fam), obj)

    def tree(self, refs: TreeRefs, parent: Obj) -> None:
        for f in refs.functions:
            if self.judge.naming(f) is None:
                self.add((FUNCTION, f), parent)
            else:
                self.refuse_naming(f, parent)
        for op in refs.operators:
            self.add((OPERATOR, op), parent)
        for t in refs.types:
            self.type(t, parent)
        for r in refs.relations:
            self.add((RELATION, r), parent)
        for fam in refs.families:
            self.add((FAMILY, fam), parent)

    def finish(self) -> Plan:
        return Plan(
            reached=self.reached,
            lookups=self.lookups,
            refusal=self.refusal,
            missing_relations=self.missing_relations,
            missing_types=self.missing_types - set(self.relations.by_row_type),
            unresolved=self.unresolved,
        )


@functools.cache
def _driver_lookup() -> Refs:
    """The names in the query asyncpg runs, on the statement's session, to learn a result
    type it does not know (an enum, a domain, a composite): loosely typed (`typbasetype != 0`,
    an oid against an integer), so an operator or aggregate planted in a schema on the search
    path with those exact argument types would run there, as the server's role. It is checked
    with every statement."""
    refs = Refs()
    for query in (introspection.INTRO_LOOKUP_TYPES, introspection.INTRO_LOOKUP_TYPES_13):
        tree = sqltree.parse(query)
        if tree is None:
            raise RuntimeError("asyncpg's type lookup query no longer parses")
        refs = refs.merged(refs_of(tree))
    # Its `t.typname` and the like are columns of the catalogs, which win over functions.
    return dataclasses.replace(refs, row_functions=frozenset())


def _argument(call: Call, position: int, name: str | None) -> str | None:
    for arg_name, value in call.args:
        if arg_name is not None and arg_name == name:
            return value
    if position < len(call.args) and call.args[position][0] is None:
        return call.args[position][1]
    return None


def _suggestion(rule: str) -> str:
    return {
        "untrusted_owner": "Ask an administrator to review it; if its owner is trusted, add "
        "that role to MCP_TRUSTED_ROLES.",
        "volatile_function": "Use only side-effect-free functions (stable or immutable ones, "
        "plus harmless volatile ones such as random() or clock_timestamp()) and objects "
        "built on them.",
    }.get(rule, "Leave it out of the query.")
