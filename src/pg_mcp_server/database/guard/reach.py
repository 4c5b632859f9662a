"""Which code a statement can make PostgreSQL run, judged by database/guard/rules.py.

From the names a statement uses (database/sql/refs.py), every object PostgreSQL might resolve
them to is a seed; from each object, every object whose code PostgreSQL may run on its behalf
is reached in turn: a view's query, an operator's function (and the ones the planner calls for
it: selectivity, commutator, negator, its operator families), a type's I/O, subscript and range
functions, its domain constraints, the operator families that sort and hash it, a function's
default arguments and body, an aggregate's support functions, a table's policies, virtual
generated columns, children, index families and what the planner folds when it opens it, and
the casts between types in play. The statement is refused when anything it can reach is
unsafe; the refusal names the chain from what the statement named down to the culprit.

Its size (~800 lines) is one idea: every edge PostgreSQL can follow from an object to code
it runs. Split by kind of object, the list a reviewer checks for a missing edge would be
spread over several files.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from asyncpg import introspection

from pg_mcp_server.database.guard.facts import (
    FIRST_USER_OID,
    Function,
    Operator,
    Relations,
    TreeRefs,
)
from pg_mcp_server.database.guard.rules import (
    ALL_SCHEMAS,
    CAST,
    DRIVER,
    FAMILY,
    FUNCTION,
    MISSING,
    NAMES_DATABASE,
    NAMES_RELATION,
    NAMES_SCHEMA,
    NAMES_SQL,
    NAMES_TYPE_OID,
    OPERATOR,
    RELATION,
    ROW,
    TYPE,
    Judge,
    Naming,
    Obj,
    Refusal,
    suggestion_for,
)
from pg_mcp_server.database.sql import Call, Name, Refs, refs_of, select_refs, tree as sqltree

_NAMES_AT_RUN_TIME = (
    "runs what an argument's value names (a relation, a schema, a type or SQL text)"
)
_ROW_ARGUMENTS = frozenset(
    {"record", "anyelement", "anycompatible", "anynonarray", "anycompatiblenonarray"}
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
class RunPath:
    """The path a statement runs on, and what makes it (see `run_path`)."""

    path: tuple[int, ...]
    qualify: dict[tuple[str, str], int] = field(default_factory=dict)
    kept: dict[int, set[str]] = field(default_factory=dict)
    # Relation and type names looked up on the session's whole path, open schemas included:
    # watched by the per-call check, so that a name found nowhere yet is read once it is in
    # one (and then qualified with it) though the statement's path leaves that schema out.
    watch: Lookups = field(default_factory=Lookups)


@dataclass
class Plan:
    """What one statement reaches under the current `Catalog` and `Relations`."""

    reached: dict[Obj, Obj | None]  # each object and the one it was reached from
    lookups: Lookups
    refusal: Refusal | None
    # The search path it was walked under, so the one the statement must run under: the
    # session's without its open schemas where the statement has no trusted candidate.
    path: tuple[int, ...]
    # Relation and type names the statement must name with their schema (one left off
    # `path`): (RELATION or TYPE, name, schema), see `run_path`.
    qualified: tuple[tuple[str, str, str], ...]
    missing_relations: set[int]  # relations (by oid) to read before the plan is complete
    missing_types: set[int]  # types neither in the catalog nor known row types
    unresolved: bool  # names never resolved yet: the check must run before trusting this

    @property
    def complete(self) -> bool:
        return not (self.missing_relations or self.missing_types or self.unresolved)

    def user_oids(self, *kinds: str) -> list[int]:
        """Objects reached that users made (initdb's never change, see FIRST_USER_OID)."""
        return sorted({o for k in kinds for o in self._users.get(k, ())})

    @cached_property
    def _users(self) -> dict[str, list[int]]:
        """`reached` is walked once per plan, not at every call's check (a plan is kept)."""
        found: dict[str, list[int]] = {}
        for kind, oid in self.reached:
            if oid >= FIRST_USER_OID:
                found.setdefault(kind, []).append(oid)
        return found


def plan(judge: Judge, refs: Refs, relations: Relations) -> Plan:
    """What a statement reaches under `judge`'s catalog and `relations`, and its verdict,
    on the search path it is to run under (see `run_path`)."""
    run = run_path(judge, refs, relations)
    path, qualified = run.path, run.qualify
    walk = _Walk(judge, relations, path)
    if run.kept and not judge.allow_open_schema_code:
        walk.refuse_kept(run.kept)
    schemas = {key: judge.catalog.schemas[nsp] for key, nsp in qualified.items()}

    def named(kind: str, names: frozenset[tuple[str | None, str]]) -> frozenset[Name]:
        return frozenset((schemas.get((kind, n), s) if s is None else s, n) for s, n in names)

    walk.names(
        dataclasses.replace(
            refs, relations=named(RELATION, refs.relations), types=named(TYPE, refs.types)
        ),
        None,
        path,
    )
    # What a qualified name would resolve to on the session's path is watched too: an
    # object of that name made earlier on it is seen, and the statement planned again.
    for kind, name in qualified:
        found = walk.lookups.relations if kind == RELATION else walk.lookups.types
        found.update((nsp, name) for nsp in judge.catalog.path)
    walk.lookups.relations |= run.watch.relations
    walk.lookups.types |= run.watch.types
    walk.names(_driver_lookup(), (DRIVER, 0), path)
    walk.run()
    made = walk.finish()
    made.qualified = tuple(sorted((k, n, s) for (k, n), s in schemas.items()))
    return made


def run_path(judge: Judge, refs: Refs, relations: Relations) -> RunPath:
    """The session's search path without the open schemas (where a role that is not trusted
    may create objects, see Catalog.open_schemas) in which none of the statement's names
    has a candidate a trusted role owns; the statement's relation and type names to
    qualify with the open schema they resolve to ((kind, name) -> schema), so that it need
    not stay on the path for them; and the names that keep an open schema on it (schema ->
    names), which the statement is refused for unless MCP_ALLOW_OPEN_SCHEMA_CODE (then they
    stay: a closer overload planted there between the check and the parse could be picked).
    A name that resolves nowhere yet keeps no schema then: it is not found in one left off.
    An object planted in a schema left off, after the check, between it and PostgreSQL's
    parse, is then never found: the statement runs on this path (freshness.py sets it in its
    transaction), and the walk that judges it uses it too. A first walk on the whole path
    finds the trusted candidates; it follows only trusted code, so that nothing a role that
    is not trusted made can keep a schema on the path."""
    c = judge.catalog
    open_here = [nsp for nsp in c.path if nsp in c.open_schemas]
    if not open_here:
        return RunPath(c.path)
    if judge.custom is not None:
        return RunPath(tuple(nsp for nsp in c.path if nsp not in open_here))
    scout = _Walk(judge, relations, c.path, scout=set(open_here))
    scout.names(refs, None, c.path)
    # The driver's type lookup means pg_catalog's operators (it compares oids and integers):
    # an extension's `=` in an open schema keeps nothing for it (attack5 F6), and left off,
    # the schema cannot take the lookup over.
    scout.driver = True
    scout.names(_driver_lookup(), (DRIVER, 0), c.path)
    scout.driver = False
    scout.run()
    if not judge.allow_open_schema_code:
        scout.kept = set(scout.kept_for)
    drop = set(open_here) - scout.kept
    qualify = {key: nsp for key, nsp in scout.qualify.items() if nsp in drop}
    if scout.kept:
        # An open schema stays on the path: a relation or type name that resolves in a later
        # schema is written with it too, or one planted in the open schema between the check
        # and the parse would be read instead (attack3 F17).
        qualify.update(scout.resolved)
    return RunPath(
        tuple(nsp for nsp in c.path if nsp not in drop), qualify, scout.kept_for, scout.lookups
    )


def clean(judge: Judge) -> frozenset[Obj]:
    """Built-in functions, operators, types and operator families whose code, and all it
    reaches, is built in and safe: walks skip them (a statement reaches thousands through '='
    alone). Anything that reaches a user's object, a relation, a table's row type, a refused or
    naming built-in, or a body whose names resolve when it runs is not clean. Computed once per
    catalog read (see Judge.reuse_clean)."""
    if judge._clean is not None:
        return judge._clean
    judge._clean = frozenset()  # while computing: walk everything
    edges: list[tuple[Obj, Obj]] = []
    walk = _Walk(judge, Relations(), judge.catalog.path, record=edges)
    c = judge.catalog
    for kind, oids in ((FUNCTION, c.functions), (OPERATOR, c.operators), (TYPE, c.types)):
        for oid in oids:
            if oid < FIRST_USER_OID:
                walk.add((kind, oid), None)
    for oid in c.families:
        if oid < FIRST_USER_OID:
            walk.add((FAMILY, oid), None)
    walk.run(casts=False)
    dirty = {o for o in walk.reached if o[1] >= FIRST_USER_OID or o[0] in (RELATION, ROW)}
    dirty |= {child for _, child in edges if child[0] == MISSING}
    dirty |= {
        (FUNCTION, oid)
        for kind, oid in walk.reached
        if kind == FUNCTION
        and (
            judge.function_verdict(oid) is not None
            or judge.naming(oid) is not None
            or judge.body(c.functions[oid]) is not None
        )
    }
    dirty |= {(TYPE, oid) for kind, oid in walk.reached if kind == TYPE and c.types[oid].relation}
    parents: dict[Obj, list[Obj]] = {}
    for parent, child in edges:
        parents.setdefault(child, []).append(parent)
    todo = list(dirty)
    while todo:  # whatever reaches something dirty is dirty
        for parent in parents.get(todo.pop(), ()):
            if parent not in dirty:
                dirty.add(parent)
                todo.append(parent)
    judge._clean = frozenset(o for o in walk.reached if o not in dirty)
    return judge._clean


class _Walk:
    """One breadth-first walk from a statement's names (see `plan`)."""

    def __init__(
        self,
        judge: Judge,
        relations: Relations,
        path: tuple[int, ...] = (),
        record: list[tuple[Obj, Obj]] | None = None,
        scout: set[int] | None = None,
    ) -> None:
        self.judge = judge
        self.c = judge.catalog
        self.relations = relations
        self.path = path  # the search path names resolve on (bodies without their own)
        # `run_path`'s first walk: the open schemas to look in, and those where a name has a
        # trusted candidate (kept on the path). It judges nothing and follows trusted code only.
        self.scout = scout
        self.kept: set[int] = set()
        self.kept_for: dict[int, set[str]] = {}  # ... and by which names (resolved ones)
        self.driver = False  # walking the driver's type lookup's names (see run_path)
        self.bodies = 0  # how deep in function bodies the names being walked are
        # The statement's relation and type names found first in an open schema: qualified
        # with it rather than keeping it (see run_path).
        self.qualify: dict[tuple[str, str], int] = {}
        # ... and where every one of them is found first, whatever the schema: all are
        # qualified when an open schema stays on the path (see run_path).
        self.resolved: dict[tuple[str, str], int] = {}
        # `clean`'s walk records every edge instead of skipping clean built-ins.
        self.record = record
        self.clean = clean(judge) if record is None else frozenset()
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
        if self.judge.custom is not None and rule not in self.judge.custom:
            return
        if self.refusal is None:
            self.refusal = Refusal(rule, reason, chain, suggestion)

    # --- names -------------------------------------------------------------------------

    def schemas(self, schema: str | None, path: tuple[int, ...]) -> tuple[int, ...]:
        if schema is None:
            return path
        oid = self.c.schema_oids.get(schema)
        return (oid,) if oid is not None else ()

    def functions(
        self,
        schema: str | None,
        name: str,
        nargs: int,
        path: tuple[int, ...],
        *,
        by_name: bool = True,
    ) -> Iterator[Function]:
        """Every function a call may resolve to. Like PostgreSQL, one in a later schema of
        the path with the same argument types as one in an earlier schema is hidden by it.
        `by_name` False: a call a view's stored query makes by oid, whose candidates keep no
        schema on the path (see run_path)."""
        seen: set[tuple[int, ...]] = set()
        for nsp in self.schemas(schema, path):
            self.lookups.functions.add((nsp, name))
            if by_name:
                self.open_lookup(nsp, f"function {name}")
            here = [f for f in self.c.functions_named.get(name, ()) if f.schema == nsp]
            for f in here:
                if f.arguments not in seen and f.accepts(nargs):
                    trusted = by_name and self.judge._trusted(f)
                    self.candidate(schema, nsp, trusted, f"function {name}")
                    yield f
            seen.update(f.arguments for f in here)

    def operators(
        self, schema: str | None, name: str, prefix: bool, path: tuple[int, ...]
    ) -> Iterator[Operator]:
        """Every operator a name may resolve to, hidden ones left out (see `functions`)."""
        seen: set[tuple[int, int]] = set()
        for nsp in self.schemas(schema, path):
            self.lookups.operators.add((nsp, name))
            self.open_lookup(nsp, f"operator {name}")
            here = [
                o
                for o in self.c.operators_named.get(name, ())
                if o.schema == nsp and (o.kind == "l") == prefix
            ]
            for o in here:
                if (o.left, o.right) not in seen:
                    trusted = self.judge.trusts(o.owner, o.oid)
                    self.candidate(schema, nsp, trusted, f"operator {name}")
                    yield o
            seen.update((o.left, o.right) for o in here)

    def types(
        self, schema: str | None, name: str, path: tuple[int, ...], *, qualifiable: bool = False
    ) -> Iterator[int]:
        """The type a name resolves to (the first schema that has it), or the relations whose
        row type it may be. `qualifiable`: a type name of the statement itself, which it
        names with the open schema it resolves to rather than keeping that on the path."""
        schemas = self.schemas(schema, path)
        for nsp in schemas:
            self.lookups.types.add((nsp, name))
        for nsp in schemas:
            typ = self.c.types_named.get((nsp, name))
            if typ is not None:
                if qualifiable and schema is None and self.scout is not None:
                    self.resolved[(TYPE, name)] = nsp
                if qualifiable and schema is None and self.scout and nsp in self.scout:
                    self.qualify[(TYPE, name)] = nsp
                else:
                    trusted = self.judge.trusts(typ.owner, typ.oid)
                    self.candidate(schema, nsp, trusted, f"type {name}")
                yield typ.oid
                return
        yield from (-oid for oid in self.relation_names(schema, path, name))

    def relation_names(
        self,
        schema: str | None,
        path: tuple[int, ...],
        name: str,
        *,
        named: bool = False,
        qualifiable: bool = False,
    ) -> Iterator[int]:
        """What a relation name resolves to: the relation of the first schema that has one
        (PostgreSQL's rule; one of a later schema is never picked while it exists, so it is not
        judged: attack2 F15). Every schema up to that one is looked up, so the per-call check
        sees a relation of that name made in an earlier one. `named`: by the statement
        itself, whose relation in an open schema keeps that schema on the path whoever owns
        it (its owner is judged like any other, rather than the name not found), unless
        `qualifiable` (not a WITH name): then the statement names it with that schema
        instead (see run_path)."""
        for nsp in self.schemas(schema, path):
            key = (nsp, name)
            self.lookups.relations.add(key)
            if key not in self.relations.named:
                self.unresolved = True
                self.candidate(schema, nsp, True, None)  # kept until the check resolves it
                continue
            found = self.relations.named[key]
            if found:
                if qualifiable and schema is None and self.scout is not None:
                    self.resolved[(RELATION, name)] = nsp
                if qualifiable and schema is None and self.scout and nsp in self.scout:
                    self.qualify[(RELATION, name)] = nsp
                else:
                    rels = [self.relations.by_oid.get(oid) for oid in found]
                    self.candidate(
                        schema,
                        nsp,
                        named or any(r is None or self.judge.trusts(r.owner, r.oid) for r in rels),
                        # A WITH name (unqualifiable) may be the statement's own CTE, not
                        # this relation: left off the path, it is at worst not found.
                        f"relation {name}" if qualifiable or not named else None,
                    )
                yield from found
                return

    def candidate(self, schema: str | None, nsp: int, trusted: bool, name: str | None) -> None:
        """A candidate for `name` (None: one not resolved yet), found in schema `nsp` of the
        path (`schema` None) or named with its schema: see `run_path`."""
        if trusted and schema is None and self.scout is not None and nsp in self.scout:
            self.kept.add(nsp)
            if name is not None and not self.driver:
                self.kept_for.setdefault(nsp, set()).add(name)

    def open_lookup(self, nsp: int, name: str) -> None:
        """A function or operator name looked up in an open schema when the statement runs:
        named with that schema, or by a body on its function's own search_path (the
        statement's path keeps none, see run_path). Any overload planted there between the
        check and the call with a closer match of argument types would be picked, so unless
        MCP_ALLOW_OPEN_SCHEMA_CODE it is refused. run_path's first walk judges nothing."""
        if self.scout is not None or self.judge.allow_open_schema_code:
            return
        if self.judge.custom is not None and not self.bodies:
            return  # custom SQL's own names are custom/resolve.py's to judge
        if self.c.open_to(nsp) and self.record is None:
            self.refuse_open({nsp: {name}}, "names")

    def refuse_kept(self, kept: dict[int, set[str]]) -> None:
        """Refuse a statement whose names keep an open schema on its path (see run_path)."""
        self.refuse_open(kept, "uses, by an unqualified name,")

    def refuse_open(self, names: dict[int, set[str]], how: str) -> None:
        nsp = min(names)
        schema = self.c.schemas.get(nsp, "?")
        roles = ", ".join(self.c.open_to(nsp)[:3])
        self.refuse(
            "open_schema_code",
            f"{how} {', '.join(sorted(names[nsp]))} of schema {schema}, where roles that are "
            f"not trusted may create objects ({roles}): a function or operator planted there "
            "with a closer match of argument types, between this check and the statement, "
            "would run instead, as the server's role",
            ("statement",),
            f"Revoke CREATE on that schema from the roles you do not trust (REVOKE CREATE ON "
            f"SCHEMA {schema} FROM PUBLIC: the default since PostgreSQL 15), trust them "
            "(MCP_TRUSTED_ROLES), or accept the risk with MCP_ALLOW_OPEN_SCHEMA_CODE=true.",
        )

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
            for t in self.types(schema, name, path, qualifiable=parent is None):
                self.add((TYPE, t) if t > 0 else (ROW, -t), parent)
        for schema, name in refs.relations:
            statement = parent is None
            qualifiable = statement and name not in refs.ctes
            for oid in self.relation_names(
                schema, path, name, named=statement, qualifiable=qualifiable
            ):
                self.add((RELATION, oid), parent)

    def row_argument(self, f: Function) -> bool:
        if not f.types:
            return False
        typ = self.c.types.get(f.types[0])
        return typ is None or typ.kind == "c" or typ.name in _ROW_ARGUMENTS

    def call(
        self, call: Call, parent: Obj | None, path: tuple[int, ...], *, naming_only: bool = False
    ) -> None:
        """Every function a call may resolve to; for one that runs what a value names, that
        object instead when the value is a constant (refused otherwise). `naming_only`: the
        other candidates are known already (a view's, by oid)."""
        nargs = len(call.args)
        for f in self.functions(call.schema, call.name, nargs, path, by_name=not naming_only):
            naming = self.judge.naming(f.oid)
            if naming is None:
                if not naming_only:
                    self.add((FUNCTION, f.oid), parent)
            elif not self.target(naming, call, path, (FUNCTION, f.oid), parent):
                self.refuse_naming(f.oid, parent)
        if nargs == 1 and not naming_only:  # `name(x)` casts to type `name` if no function fits
            for t in self.types(call.schema, call.name, path):
                self.add((TYPE, t) if t > 0 else (ROW, -t), parent)

    def refuse_naming(self, oid: int, parent: Obj | None) -> None:
        chain = self.chain(parent) if parent is not None else ()
        self.refuse(
            "names_object_at_run_time",
            f"{_NAMES_AT_RUN_TIME}, and the guard can only check what a constant names",
            (*chain, self.judge.describe((FUNCTION, oid), self.relations)),
            "Pass the relation, schema or type name, or the SQL text, as a string constant.",
        )

    def target(
        self, naming: Naming, call: Call, path: tuple[int, ...], fn: Obj, parent: Obj | None
    ) -> bool:
        """Reach what a call names by constants; False when an argument is not a constant."""
        positions, arguments, kind = naming
        # Named in the chain, never expanded: a built-in whose only code is what it names.
        self.reached.setdefault(fn, parent)
        if kind == NAMES_DATABASE:
            self.schema_relations(ALL_SCHEMAS, fn)
            return True
        values = [_argument(call, p, a) for p, a in zip(positions, arguments, strict=True)]
        return all(v is not None and self.named(kind, v, path, fn) for v in values)

    def named(self, kind: str, value: str, path: tuple[int, ...], fn: Obj) -> bool:
        """Reach the object `value` names; False when it cannot be read as such a name."""
        if kind == NAMES_SCHEMA:
            self.schema_relations(value, fn)
            return True
        if kind == NAMES_SQL:
            refs = select_refs(value)
            if isinstance(refs, str):
                return False
            self.names(refs, fn, path)
            return True
        if kind == NAMES_RELATION:
            if value.isdigit():
                self.add((RELATION, int(value)), fn)
                return True
            parts = sqltree.qualified_name(value)
            if parts is None:
                return False
            schema, name = (parts[-2] if len(parts) > 1 else None), parts[-1]
            for oid in self.relation_names(schema, path, name):
                self.add((RELATION, oid), fn)
            return True
        if kind == NAMES_TYPE_OID and value.isdigit():
            self.type(int(value), fn)
            return True
        type_name = sqltree.type_name(value)
        if type_name is None:
            return False
        for t in self.types(*type_name, path):
            self.add((TYPE, t) if t > 0 else (ROW, -t), fn)
        return True

    def schema_relations(self, schema: str, fn: Obj) -> None:
        self.lookups.schemas.add(schema)
        if schema not in self.relations.in_schema:
            self.unresolved = True
        for oid in self.relations.in_schema.get(schema, ()):
            self.add((RELATION, oid), fn)

    # --- edges -------------------------------------------------------------------------

    def run(self, *, casts: bool = True) -> None:
        casts_done: set[int] = set()
        while True:
            while self.queue:
                obj = self.queue.popleft()
                if self.scout is None:
                    self.check(obj)
                    self.edges(obj)
                elif self.trusted(obj):
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

    def trusted(self, obj: Obj) -> bool:
        """Whether a trusted role made `obj` (see Judge): `run_path`'s first walk follows
        only such code."""
        kind, oid = obj
        owner: int | None = None
        if kind == FUNCTION:
            f = self.c.functions.get(oid)
            return f is not None and self.judge._trusted(f)
        if kind == OPERATOR and oid in self.c.operators:
            owner = self.c.operators[oid].owner
        elif kind == TYPE and oid in self.c.types:
            owner = self.c.types[oid].owner
        elif kind in (RELATION, ROW) and oid in self.relations.by_oid:
            owner = self.relations.by_oid[oid].owner
        elif kind in (FAMILY, CAST, DRIVER):
            return True
        return owner is not None and self.judge.trusts(owner, oid)

    def check(self, obj: Obj) -> None:
        kind, oid = obj
        if self.refusal is not None:
            return
        if kind == FUNCTION:
            verdict = self.judge.function_verdict(oid)
            if verdict is not None:
                suggestion = suggestion_for(verdict[0]) + self.qualify_hint(obj)
                self.refuse(*verdict, self.chain(obj), suggestion)
        elif kind == OPERATOR:
            o = self.c.operators.get(oid)
            # Its owner can give it a negator, a commutator or estimators at any moment (ALTER
            # OPERATOR ... SET), which the planner then calls, whatever function it runs now.
            if o is not None and not self.judge.trusts(o.owner, oid):
                self.refuse(
                    "untrusted_owner",
                    f"is owned by role {o.owner_name!r}, which is not trusted: it may change "
                    "it at any moment (a negator, a commutator, estimators), and PostgreSQL "
                    "would run what it names for this query as the server's role",
                    self.chain(obj),
                    suggestion_for("untrusted_owner") + self.qualify_hint(obj),
                )
        elif kind == TYPE:
            t = self.c.types.get(oid)
            # A type's owner can add code to it at any moment, without waiting for any lock
            # the statement holds: a cast from or to it (CREATE CAST needs only ownership of
            # one of the two types), a domain's CHECK, an attribute of a composite type.
            if t is not None and not self.judge.trusts(t.owner, oid):
                self.refuse(
                    "untrusted_owner",
                    f"is owned by role {t.owner_name!r}, which is not trusted: "
                    "it may add code to it at any moment (a cast, a domain CHECK, an attribute "
                    "of such a domain), which PostgreSQL would run for this query as the "
                    "server's role",
                    self.chain(obj),
                    suggestion_for("untrusted_owner"),
                )
        elif kind in (RELATION, ROW):
            rel = self.relations.by_oid.get(oid)
            # The owner of a relation can add what PostgreSQL runs while it plans or reads it
            # (an index expression, extended statistics, a CHECK or a child table the planner
            # folds, a policy) with DDL that waits for no lock a reader holds, in the moment
            # between the check and the statement or while the statement waits on a lock the
            # owner holds: the check cannot see it coming, so its owner must be trusted.
            if rel is not None and not self.judge.trusts(rel.owner, oid):
                self.refuse(
                    "untrusted_owner",
                    f"is owned by role {rel.owner_name!r}, which is not trusted: it may add code "
                    "to it at any moment (an index expression, statistics, a CHECK, a child "
                    "table, a policy) that PostgreSQL runs while it plans a read of it, as the "
                    "server's role",
                    self.chain(obj),
                    suggestion_for("untrusted_owner"),
                )
            elif (
                kind == RELATION
                and rel is not None
                and rel.kind == "f"
                and not self.judge.allow_foreign_tables
            ):
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
                proc = self.c.functions.get(f)
                if proc is None or not self.judge.index_support(proc):
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
        body = self.judge.body(f)
        if isinstance(body, Refs):  # its naming calls are refused by their own verdict
            path = self.judge.function_path(f, self.path)
            self.body_path(path, obj)  # (its refusal says more than the names')
            self.bodies += 1
            try:
                self.names(body, obj, path)
            finally:
                self.bodies -= 1
        for g in (f.support, *f.aggregate):
            self.add((FUNCTION, g), obj)
        self.add((OPERATOR, f.sort_operator), obj)
        for t in f.types:
            self.type(t, obj)

    def body_path(self, path: tuple[int, ...], obj: Obj) -> None:
        """A body whose names PostgreSQL resolves when the function runs (SQL not BEGIN
        ATOMIC, PL/pgSQL), on a path with a schema where a role that is not trusted may create
        objects (kept on the statement's path for a trusted candidate, or named by the
        function's own search_path): an overload or operator planted there with a closer
        match between the check and the call would run inside it. Not only what it names
        unqualified: PostgreSQL looks names up where none is written too (the `=` of JOIN ...
        USING, a PL/pgSQL variable's type, a %TYPE; attack5 F3, F4), so every such body is
        refused."""
        if self.scout is not None:
            return  # run_path's first walk judges nothing
        open_here = [nsp for nsp in path if nsp in self.c.open_schemas]
        if open_here:
            names = ", ".join(self.c.schemas.get(nsp, "?") for nsp in open_here)
            self.refuse(
                "open_schema_body",
                f"has a body whose names PostgreSQL looks up when it runs, on a search path "
                f"with {names}, where roles that are not trusted may create objects: one "
                "planted there with a closer match, between this check and the call, would "
                "run inside it as the server's role",
                self.chain(obj),
                "Give the function a search_path without such schemas (SET search_path = "
                "pg_catalog, <its schemas>, with their objects named) or a BEGIN ATOMIC body, "
                "or revoke CREATE on that schema from the roles you do not trust (REVOKE "
                "CREATE ON SCHEMA public FROM PUBLIC).",
            )

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
        if rel.view_refs is not None:  # its calls with their constants, as written
            for call in rel.view_refs.calls:
                self.call(call, obj, self.path, naming_only=True)
        self.tree(rel.code, obj, naming_checked=rel.view_refs is not None)
        for child in rel.children:
            self.add((RELATION, child), obj)
        for fam in rel.families:
            self.add((FAMILY, fam), obj)

    def tree(self, refs: TreeRefs, parent: Obj, *, naming_checked: bool = False) -> None:
        """Objects a stored tree references by oid. A function that runs what a value names
        is refused (the tree keeps no argument text), unless `naming_checked`: a view whose
        definition's calls were checked by name (see relation_edges)."""
        for f in refs.functions:
            if self.judge.naming(f) is None:
                self.add((FUNCTION, f), parent)
            elif not naming_checked:
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
            path=self.path,
            qualified=(),
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
    """The constant passed to a parameter, by name or by position; None if not a constant."""
    for arg_name, value in call.args:
        if arg_name is not None and arg_name == name:
            return value
    if position < len(call.args) and call.args[position][0] is None:
        return call.args[position][1]
    return None
