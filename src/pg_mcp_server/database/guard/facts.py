"""The catalog facts the guard judges code by, read from PostgreSQL itself.

Two parts, both kept fresh by `database/guard/reach.py`'s per-call check:

- `Catalog`: everything that holds or names code (functions with their bodies and support
  functions, operators, types with their I/O functions, domain constraints, ranges, casts,
  operator families) plus the search path and the trusted roles. Read in one statement, at the
  first check and again when a check finds that something it relies on changed.
- `Relations`: tables, views and the like, read only when a statement reaches them (a catalog
  of 10,000 tables costs nothing until used), each with a digest of the catalog rows it is made
  of (columns, view rule, policies, virtual generated columns, children, indexes).

Nothing here judges: see database/guard/reach.py.

Its size (~750 lines) is the two catalog statements, each column written next to the field it
fills, with the classes they decode into: a fact added touches both, here.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import asyncpg

from pg_mcp_server.database.sql import Refs, refs_of, statement, tree as sqltree

# Objects with smaller oids were made by initdb (PostgreSQL's FirstNormalObjectId): they change
# only by a superuser editing the system catalogs, so the per-call digest skips them.
FIRST_USER_OID = 16384
# Our own SQL names everything with its schema and gives operators arguments of their exact
# built-in types, so that no function, operator or type a role plants in a schema on the
# search path can be picked in their place (an untyped `0` against an oid would let a
# planted `public.=(oid, integer)` win over the built-in `=(oid, oid)`).
USER_OID = f"{FIRST_USER_OID}::pg_catalog.oid"

# Fields of stored expression trees (pg_node_tree text) that hold object oids, by kind.
_TREE_OID = re.compile(r":(\w+) (\d+)")
_TREE_OIDS = re.compile(r":(\w+) \(o ([\d ]*)\)")
_FUNCTION_FIELDS = frozenset(
    {"funcid", "opfuncid", "aggfnoid", "winfnoid", "hashfuncid", "negfuncid", "tsmhandler"}
)
_OPERATOR_FIELDS = frozenset({"opno", "eqop", "sortop"})
_RELATION_FIELDS = frozenset({"relid", "resorigtbl"})
_TYPE_FIELDS = frozenset(
    {
        "vartype",
        "consttype",
        "paramtype",
        "aggtype",
        "aggtranstype",
        "wintype",
        "funcresulttype",
        "opresulttype",
        "resulttype",
        "casetype",
        "coalescetype",
        "minmaxtype",
        "array_typeid",
        "element_typeid",
        "row_typeid",
        "typeId",
        "type",
        "typid",
        "refcontainertype",
        "refelemtype",
        "refrestype",
        "msftype",
        "firstColType",
    }
)
_TYPE_LIST_FIELDS = frozenset(
    {"aggargtypes", "funccoltypes", "coltypes", "ctecoltypes", "colTypes"}
)


@dataclass(frozen=True)
class TreeRefs:
    """The objects a stored expression tree (view rule, default, constraint, policy, SQL body)
    references by oid."""

    functions: frozenset[int] = frozenset()
    operators: frozenset[int] = frozenset()
    types: frozenset[int] = frozenset()
    relations: frozenset[int] = frozenset()
    families: frozenset[int] = frozenset()


def tree_refs(text: str | None) -> TreeRefs:
    if not text:
        return TreeRefs()
    found: dict[str, set[int]] = defaultdict(set)
    for name, value in _TREE_OID.findall(text):
        oid = int(value)
        if not oid:
            continue
        if name in _FUNCTION_FIELDS:
            found["functions"].add(oid)
        elif name in _OPERATOR_FIELDS:
            found["operators"].add(oid)
        elif name in _RELATION_FIELDS:
            found["relations"].add(oid)
        elif name in _TYPE_FIELDS:
            found["types"].add(oid)
    for name, values in _TREE_OIDS.findall(text):
        oids = {int(v) for v in values.split()}
        if name == "opnos":
            found["operators"] |= oids
        elif name == "opfamilies":
            found["families"] |= oids
        elif name in _TYPE_LIST_FIELDS:
            found["types"] |= oids
    return TreeRefs(**{k: frozenset(v) for k, v in found.items()})


class Function(NamedTuple):
    oid: int
    schema: int
    name: str
    nargs: int
    ndefaults: int
    variadic: bool
    volatility: str  # i, s, v
    kind: str  # f, a, w, p
    language: str
    owner: int
    # the C symbol (internal, C), an SQL body kept as text, or a PL/pgSQL function's definition
    source: str | None
    trees: str  # default arguments and a pre-parsed SQL body (pg_node_tree text)
    support: int
    aggregate: tuple[int, ...]  # an aggregate's support functions
    sort_operator: int
    types: tuple[int, ...]  # arguments, result, an aggregate's transition types
    xmin: int
    aggregate_xmin: int | None
    extension_xmin: int | None  # the pg_depend row that makes it an extension member
    search_path: str | None  # its own SET search_path, if any
    owner_name: str | None
    argument_names: tuple[str, ...]
    extension_owner: int | None  # of the extension it is a member of
    arguments: tuple[int, ...]  # its input arguments' types: its signature

    @property
    def extension_member(self) -> bool:
        return self.extension_xmin is not None

    def accepts(self, nargs: int) -> bool:
        """Could a call with `nargs` arguments resolve to this function?"""
        if self.variadic and nargs >= self.nargs - 1:
            return True
        return self.nargs - self.ndefaults <= nargs <= self.nargs


class Operator(NamedTuple):
    oid: int
    schema: int
    name: str
    kind: str  # b (infix), l (prefix)
    left: int
    right: int
    result: int
    code: int
    restrict: int
    join: int
    commutator: int
    negator: int
    xmin: int
    owner: int
    owner_name: str | None  # of an operator users made


class Type(NamedTuple):
    oid: int
    schema: int
    name: str
    kind: str  # b, c, d, e, p, r, m
    functions: tuple[int, ...]  # input, output, receive, send, typmod in/out, subscript
    element: int
    base: int  # a domain's base type
    relation: int  # a composite type's pg_class row
    xmin: int
    owner: int
    owner_name: str | None  # of a type users made


class Range(NamedTuple):
    type: int
    subtype: int
    canonical: int
    subtype_diff: int
    subtype_family: int
    multirange: int


class Cast(NamedTuple):
    oid: int
    source: int
    target: int
    function: int
    context: str  # e (explicit), a (assignment), i (implicit)


# Table row types and their arrays are left to `Relations` (a 10,000-table catalog has 20,000
# of them); both the load and the digest apply this filter, so they agree.
NOT_A_TABLE_ROW_TYPE = """NOT EXISTS (
    SELECT FROM pg_catalog.pg_class r
    WHERE r.oid = CASE WHEN t.typrelid <> 0::pg_catalog.oid THEN t.typrelid
                       ELSE (SELECT e.typrelid FROM pg_catalog.pg_type e
                             WHERE e.oid = t.typelem AND t.typcategory = 'A') END
      AND r.relkind <> 'c')"""


def xmin(alias: str) -> str:
    """A row's xmin as a number (xid has no arithmetic)."""
    return f"{alias}.xmin::pg_catalog.text::bigint"


def count_and_sum(value: str, separator: str = ":") -> str:
    """'count:sum' of `value` over the rows of the query it is put in ('0:0' for none)."""
    return (
        f"pg_catalog.concat_ws('{separator}', pg_catalog.count(*), "
        f"coalesce(pg_catalog.sum({value}), 0::bigint))"
    )


# User rows of catalogs too small to key by statement: any change there counts. And every
# schema, `public` included: the guard resolves schema names once per catalog read, and locks
# relations by qualified name (state.py), so a schema renamed, and another made with its
# name, must be seen; so must a change of who may create objects in one (its ACL, its owner,
# or a role's membership, see CREATORS).
SMALL_CATALOGS = "pg_catalog.concat_ws('/', {})".format(
    ", ".join(
        [
            f"(SELECT {count_and_sum(xmin('t'))} FROM pg_catalog.{table} t "
            f"WHERE t.{column} >= {USER_OID})"
            for table, column in (
                ("pg_cast", "oid"),
                ("pg_opclass", "oid"),
                ("pg_opfamily", "oid"),
                ("pg_amop", "oid"),
                ("pg_amproc", "oid"),
                ("pg_range", "rngtypid"),
            )
        ]
        + [
            f"(SELECT {count_and_sum(xmin('t'))} FROM pg_catalog.{table} t)"
            for table in ("pg_namespace", "pg_auth_members")
        ]
    )
)

# (Results and parameters of our statements are text, text[], oid[], json or scalars: the
# types asyncpg knows without a lookup query of its own, see closure._driver_lookup.)
# Trusted: superusers, the database's owner (who owns `public` from PostgreSQL 15 on and may
# change anything in the database), the server's own role (a session of it can do all the
# server can), and MCP_TRUSTED_ROLES; but for superusers, only while no other role may act as
# them: a member (SET ROLE) that is none of these, or before PostgreSQL 16 any role with
# CREATEROLE (it may grant itself any role), makes a role untrusted (attack3 F16).
# The server's own role is SESSION_USER, the login role: a caller's grant may have the
# statement run as another role (SET LOCAL ROLE, identity/), which CURRENT_USER would then
# name, and trust must not follow it (a tenant role's objects are trusted for no caller).
# The guard refuses SET SESSION AUTHORIZATION, and only a superuser could run it.
# `{names}`: a text[] of MCP_TRUSTED_ROLES (each statement passes it its own way).
TRUSTED_ROLES = f"""ARRAY(
    WITH named AS (
        SELECT r.oid FROM pg_catalog.pg_roles r
        WHERE r.rolsuper OR r.rolname = ANY ({{names}})
           OR r.rolname IN (SESSION_USER, 'pg_database_owner')
           OR r.oid = (SELECT d.datdba FROM pg_catalog.pg_database d
                       WHERE d.datname = pg_catalog.current_database()))
    SELECT n.oid FROM named n JOIN pg_catalog.pg_roles r ON r.oid = n.oid
    WHERE r.rolsuper OR NOT EXISTS (
        SELECT FROM pg_catalog.pg_roles m
        WHERE NOT m.rolsuper AND m.oid >= {USER_OID}
          AND m.oid NOT IN (SELECT x.oid FROM named x)
          AND (pg_catalog.pg_has_role(m.oid, n.oid, 'MEMBER')
               OR (m.rolcreaterole
                   AND pg_catalog.current_setting('server_version_num')::integer < 160000)))
    ORDER BY 1)"""

# Who may create objects in a schema on the search path (n): its owner, the roles its ACL
# grants CREATE (PUBLIC: every role), and every member of those (a member can SET ROLE to
# one), superusers and predefined roles left out (always trusted; pg_database_owner's member
# is the database's owner, listed itself). A schema where any of them is not trusted is
# "open": an overload or operator planted there with a closer match of argument types is
# picked over the intended one, even with pg_catalog first on the path (CVE-2018-1058), and
# can be planted at any moment, between any check and the statement. The guard drops open
# schemas from a statement's path where it can (see Catalog.open_schemas); custom SQL and PL
# code run without them (custom/resolve.py).
_CREATOR = f"""NOT r.rolsuper AND r.oid >= {USER_OID}
      AND (pg_catalog.pg_has_role(r.oid, n.nspowner, 'MEMBER')
           OR EXISTS (
               SELECT FROM pg_catalog.aclexplode(n.nspacl) a
               WHERE a.privilege_type = 'CREATE'
                 AND CASE WHEN a.grantee = 0::pg_catalog.oid THEN true
                          ELSE pg_catalog.pg_has_role(r.oid, a.grantee, 'MEMBER') END))"""
CREATORS = f"""(
    SELECT pg_catalog.json_agg(pg_catalog.json_build_array(r.oid::bigint, r.rolname))
    FROM pg_catalog.pg_roles r WHERE {_CREATOR})"""
# For a schema off every path, only a statement that names it looks there: its owner and
# the roles its ACL grants CREATE (0: PUBLIC), without their members, which is enough, as a
# role another role may act as is not trusted (TRUSTED_ROLES). A statement that names a
# function or operator of such a schema is refused when one of them is not (reach.open_lookup).
_DIRECT_CREATORS = f"""(
    SELECT pg_catalog.json_agg(pg_catalog.json_build_array(c.oid::bigint, c.name))
    FROM (SELECT n.nspowner AS oid, pg_catalog.pg_get_userbyid(n.nspowner)::text AS name
          WHERE n.nspowner >= {USER_OID}
          UNION
          SELECT a.grantee, CASE WHEN a.grantee = 0::pg_catalog.oid THEN 'PUBLIC'
                                 ELSE pg_catalog.pg_get_userbyid(a.grantee)::text END
          FROM pg_catalog.aclexplode(n.nspacl) a
          WHERE a.privilege_type = 'CREATE') c)"""
# The same as a condition on `n`, for statements of their own; `{{trusted}}`: an oid[].
OPEN_SCHEMA = f"""EXISTS (SELECT FROM pg_catalog.pg_roles r
    WHERE {_CREATOR} AND r.oid <> ALL ({{trusted}}))"""

# Schemas a function's own `SET search_path` names: its body's names resolve there whatever
# the statement's path is, so whether they are open matters too (attack3 F18). One InitPlan.
_CONFIGURED = """coalesce((SELECT pg_catalog.array_agg(DISTINCT x.s) FROM pg_catalog.pg_proc p
    CROSS JOIN LATERAL pg_catalog.unnest(p.proconfig) AS c(setting)
    CROSS JOIN LATERAL pg_catalog.unnest(pg_catalog.string_to_array(pg_catalog.replace(
        pg_catalog.replace(pg_catalog.substr(c.setting, 13), '"', ''), ' ', ''), ',')) AS x(s)
    WHERE c.setting LIKE 'search\\_path=%'), ARRAY[]::pg_catalog.text[])"""


def _array(row: Any, columns: dict[str, str]) -> str:
    """A JSON array of the SQL expressions `columns` names, for rows decoded with
    `row._make` (a NamedTuple): the names tie each expression to its field, checked here,
    so the statement and the class cannot drift apart by position."""
    if tuple(columns) != row._fields:
        raise AssertionError(f"{row.__name__}: the SQL names {tuple(columns)}, not its fields")
    return "pg_catalog.json_build_array(\n      " + ",\n      ".join(columns.values()) + ")"


# Each of CATALOG's rows of pg_proc (p, with its pg_language l, pg_aggregate a and extension
# membership e), field by field.
_FUNCTION_COLUMNS = {
    "oid": "p.oid::bigint",
    "schema": "p.pronamespace::bigint",
    "name": "p.proname",
    "nargs": "p.pronargs",
    "ndefaults": "p.pronargdefaults",
    "variadic": "p.provariadic <> 0::pg_catalog.oid",
    "volatility": "p.provolatile",
    "kind": "p.prokind",
    "language": "l.lanname",
    "owner": "p.proowner::bigint",
    "source": """CASE
           WHEN l.lanname IN ('internal', 'c') OR (l.lanname = 'sql' AND p.prosqlbody IS NULL)
           THEN p.prosrc
           -- PL/pgSQL: the whole statement, which its parser needs (arguments are variables)
           WHEN l.lanname = 'plpgsql' AND p.prokind <> 'p'
           THEN 'CREATE FUNCTION f(' || pg_catalog.pg_get_function_arguments(p.oid)
                || ') RETURNS ' || pg_catalog.pg_get_function_result(p.oid)
                || ' LANGUAGE plpgsql AS ' || pg_catalog.quote_literal(p.prosrc) END""",
    "trees": """pg_catalog.concat_ws(' ', p.proargdefaults::pg_catalog.text,
                           p.prosqlbody::pg_catalog.text)""",
    "support": "p.prosupport::pg_catalog.oid::bigint",
    "aggregate": """ARRAY[a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn,
            a.aggdeserialfn, a.aggmtransfn, a.aggminvtransfn,
            a.aggmfinalfn]::pg_catalog.oid[]::bigint[]""",
    "sort_operator": "coalesce(a.aggsortop, 0)::bigint",
    "types": """pg_catalog.array_cat(
          pg_catalog.array_append(coalesce(p.proallargtypes, p.proargtypes::pg_catalog.oid[]),
                                  p.prorettype),
          ARRAY[a.aggtranstype, a.aggmtranstype])::pg_catalog.int8[]""",
    "xmin": xmin("p"),
    "aggregate_xmin": xmin("a"),
    "extension_xmin": xmin("e"),
    "search_path": """(SELECT pg_catalog.substr(c, 13) FROM pg_catalog.unnest(p.proconfig) c
       WHERE c LIKE 'search\\_path=%')""",
    "owner_name": f"CASE WHEN p.oid >= {USER_OID} THEN pg_catalog.pg_get_userbyid(p.proowner) END",
    "argument_names": "p.proargnames",
    "extension_owner": """(SELECT x.extowner::bigint FROM pg_catalog.pg_extension x
       WHERE x.oid = e.refobjid)""",
    "arguments": "p.proargtypes::pg_catalog.oid[]::bigint[]",
}
# The fields decoded from JSON arrays into tuples (without the zeros of absent ones).
_AGGREGATE, _TYPES, _ARGUMENT_NAMES, _ARGUMENTS = (
    Function._fields.index(name) for name in ("aggregate", "types", "argument_names", "arguments")
)
_OPERATOR_COLUMNS = {
    "oid": "o.oid::bigint",
    "schema": "o.oprnamespace::bigint",
    "name": "o.oprname",
    "kind": "o.oprkind",
    "left": "o.oprleft::bigint",
    "right": "o.oprright::bigint",
    "result": "o.oprresult::bigint",
    "code": "o.oprcode::pg_catalog.oid::bigint",
    "restrict": "o.oprrest::pg_catalog.oid::bigint",
    "join": "o.oprjoin::pg_catalog.oid::bigint",
    "commutator": "o.oprcom::bigint",
    "negator": "o.oprnegate::bigint",
    "xmin": xmin("o"),
    "owner": "o.oprowner::bigint",
    "owner_name": f"CASE WHEN o.oid >= {USER_OID} THEN pg_catalog.pg_get_userbyid(o.oprowner) END",
}
# (The functions, in this order: input and receive are the ones a value is read with.)
_TYPE_FUNCTIONS = ("typinput", "typoutput", "typreceive", "typsend", "typmodin", "typmodout")
_TYPE_COLUMNS = {
    "oid": "t.oid::bigint",
    "schema": "t.typnamespace::bigint",
    "name": "t.typname",
    "kind": "t.typtype",
    "functions": f"""ARRAY[{", ".join(f"t.{f}" for f in _TYPE_FUNCTIONS)},
            t.typsubscript]::pg_catalog.oid[]::bigint[]""",
    "element": "t.typelem::bigint",
    "base": "t.typbasetype::bigint",
    "relation": "t.typrelid::bigint",
    "xmin": xmin("t"),
    "owner": "t.typowner::bigint",
    "owner_name": f"CASE WHEN t.oid >= {USER_OID} THEN pg_catalog.pg_get_userbyid(t.typowner) END",
}
_TYPE_FUNCTIONS_AT = Type._fields.index("functions")
_READERS = tuple(_TYPE_FUNCTIONS.index(f) for f in ("typinput", "typreceive"))
_RANGE_COLUMNS = {
    "type": "r.rngtypid::bigint",
    "subtype": "r.rngsubtype::bigint",
    "canonical": "r.rngcanonical::pg_catalog.oid::bigint",
    "subtype_diff": "r.rngsubdiff::pg_catalog.oid::bigint",
    "subtype_family": "c.opcfamily::bigint",
    "multirange": "r.rngmultitypid::bigint",
}
_CAST_COLUMNS = {
    "oid": "c.oid::bigint",
    "source": "c.castsource::bigint",
    "target": "c.casttarget::bigint",
    "function": "c.castfunc::bigint",
    "context": "c.castcontext",
}

CATALOG = statement(
    "guard.facts.CATALOG",
    f"""
SELECT
  pg_catalog.current_schemas(true)::pg_catalog.text[] AS path,
  current_user AS role,
  {TRUSTED_ROLES.format(names="$1::pg_catalog.text[]")} AS trusted,
  {SMALL_CATALOGS} AS small,
  (SELECT pg_catalog.json_agg(pg_catalog.json_build_array(n.oid::bigint, n.nspname,
      pg_catalog.has_schema_privilege(n.oid, 'USAGE'),
      CASE WHEN w.on_path THEN {CREATORS} END,
      CASE WHEN NOT w.on_path THEN {_DIRECT_CREATORS} END))
   FROM pg_catalog.pg_namespace n
   CROSS JOIN LATERAL (SELECT n.nspname = ANY (pg_catalog.current_schemas(true))
                           OR n.nspname = ANY ({_CONFIGURED}) AS on_path) w) AS schemas,
  (SELECT pg_catalog.json_agg({_array(Function, _FUNCTION_COLUMNS)})
   FROM pg_catalog.pg_proc p
   JOIN pg_catalog.pg_language l ON l.oid = p.prolang
   LEFT JOIN pg_catalog.pg_aggregate a ON a.aggfnoid = p.oid
   LEFT JOIN pg_catalog.pg_depend e
     ON e.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND e.objid = p.oid
    AND e.deptype = 'e') AS functions,
  (SELECT pg_catalog.json_agg({_array(Operator, _OPERATOR_COLUMNS)})
   FROM pg_catalog.pg_operator o) AS operators,
  (SELECT pg_catalog.json_agg({_array(Type, _TYPE_COLUMNS)})
   FROM pg_catalog.pg_type t
   -- NOT_A_TABLE_ROW_TYPE as joins: one hash join instead of 20,000 subqueries on 10k tables
   LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
   LEFT JOIN pg_catalog.pg_class r
     ON r.oid = CASE WHEN t.typrelid <> 0::pg_catalog.oid THEN t.typrelid ELSE e.typrelid END
   WHERE r.relkind IS NULL OR r.relkind = 'c') AS types,
  (SELECT pg_catalog.json_agg(pg_catalog.json_build_array(
      k.contypid::bigint, k.conbin::pg_catalog.text, {xmin("k")}))
   FROM pg_catalog.pg_constraint k WHERE k.contypid > 0::pg_catalog.oid) AS domain_constraints,
  (SELECT pg_catalog.json_agg({_array(Range, _RANGE_COLUMNS)})
   FROM pg_catalog.pg_range r JOIN pg_catalog.pg_opclass c ON c.oid = r.rngsubopc) AS ranges,
  (SELECT pg_catalog.json_agg(
      pg_catalog.json_build_array(c.opcintype::bigint, c.opcfamily::bigint))
   FROM pg_catalog.pg_opclass c JOIN pg_catalog.pg_am m ON m.oid = c.opcmethod
   WHERE c.opcdefault AND m.amname IN ('btree', 'hash')) AS default_families,
  (SELECT pg_catalog.json_agg(pg_catalog.json_build_array(f.oid::bigint,
      ARRAY(SELECT p.amproc::pg_catalog.oid::bigint FROM pg_catalog.pg_amproc p
            WHERE p.amprocfamily = f.oid),
      ARRAY(SELECT o.amopopr::bigint FROM pg_catalog.pg_amop o WHERE o.amopfamily = f.oid)))
   FROM pg_catalog.pg_opfamily f) AS families,
  (SELECT pg_catalog.json_agg({_array(Cast, _CAST_COLUMNS)})
   FROM pg_catalog.pg_cast c) AS casts
""",
)


def rows(value: Any) -> list[Any]:
    """A JSON array of rows (arrays or objects), decoded unless the driver did."""
    if value is None:
        return []
    rows: list[Any] = json.loads(value) if isinstance(value, str) else value
    return rows


@dataclass
class Catalog:
    """The code-holding part of the catalog, as of one statement (see module docstring)."""

    path: tuple[int, ...] = ()  # current_schemas(true), as namespace oids
    path_names: tuple[str, ...] = ()
    trusted_roles: tuple[int, ...] = ()
    small: str = ""
    schemas: dict[int, str] = field(default_factory=dict)
    schema_oids: dict[str, int] = field(default_factory=dict)
    usable: set[int] = field(default_factory=set)  # schemas the role may name (USAGE)
    # Schemas on the path, or named by a function's own search_path, where a role that is
    # not trusted may create objects -> those roles (see CREATORS): the guard leaves them out
    # of a statement's path where it can, and refuses a body resolving names in one.
    open_schemas: dict[int, tuple[str, ...]] = field(default_factory=dict)
    # ... and the other schemas where one may (see _DIRECT_CREATORS): only a statement that
    # names them looks there.
    open_elsewhere: dict[int, tuple[str, ...]] = field(default_factory=dict)

    def open_to(self, nsp: int) -> tuple[str, ...]:
        """The roles that are not trusted and may create objects in schema `nsp`, on a path
        or not (empty: it is not open)."""
        return self.open_schemas.get(nsp) or self.open_elsewhere.get(nsp, ())

    functions: dict[int, Function] = field(default_factory=dict)
    functions_named: dict[str, list[Function]] = field(default_factory=dict)
    operators: dict[int, Operator] = field(default_factory=dict)
    operators_named: dict[str, list[Operator]] = field(default_factory=dict)
    types: dict[int, Type] = field(default_factory=dict)
    types_named: dict[tuple[int, str], Type] = field(default_factory=dict)
    domain_checks: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    ranges: dict[int, Range] = field(default_factory=dict)
    multiranges: dict[int, int] = field(default_factory=dict)  # multirange type -> range type
    default_families: dict[int, list[int]] = field(default_factory=dict)
    families: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    operator_families: dict[int, list[int]] = field(default_factory=dict)
    casts: list[Cast] = field(default_factory=list)
    input_functions: set[int] = field(default_factory=set)  # types' input and receive functions
    generation: int = 0
    trusted_names: tuple[str, ...] = ()
    role: str = ""

    @property
    def loaded(self) -> bool:
        return bool(self.path)

    @classmethod
    async def read(
        cls, conn: asyncpg.Connection, trusted_names: tuple[str, ...], generation: int
    ) -> Catalog:
        row = await conn.fetchrow(CATALOG, list(trusted_names))
        assert row is not None
        catalog = cls(generation=generation, trusted_names=trusted_names)
        catalog._fill(row)
        return catalog

    def _fill(self, row: asyncpg.Record) -> None:
        # (oid, name, usable, creators on a path, creators elsewhere) each
        schemas = rows(row["schemas"])
        self.schemas = {oid: name for oid, name, *_ in schemas}
        self.usable = {oid for oid, _, usable, *_ in schemas if usable}
        self.schema_oids = {name: oid for oid, name in self.schemas.items()}
        self.role = row["role"]
        self.path_names = tuple(row["path"])
        self.path = tuple(self.schema_oids[n] for n in self.path_names if n in self.schema_oids)
        self.trusted_roles = tuple(row["trusted"])
        for oid, _, _, on_path, elsewhere in schemas:
            for creators, found in ((on_path, self.open_schemas), (elsewhere, self.open_elsewhere)):
                untrusted = tuple(
                    name for role, name in creators or () if role not in self.trusted_roles
                )
                if untrusted:
                    found[oid] = untrusted
        self.small = row["small"]
        for r in rows(row["functions"]):
            r[_AGGREGATE] = tuple(o for o in r[_AGGREGATE] or () if o)
            r[_TYPES] = tuple(t for t in r[_TYPES] if t)
            r[_ARGUMENT_NAMES] = tuple(r[_ARGUMENT_NAMES] or ())
            r[_ARGUMENTS] = tuple(r[_ARGUMENTS])
            fn = Function._make(r)
            self.functions[fn.oid] = fn
            self.functions_named.setdefault(fn.name, []).append(fn)
        for r in rows(row["operators"]):
            op = Operator._make(r)
            self.operators[op.oid] = op
            self.operators_named.setdefault(op.name, []).append(op)
        for r in rows(row["types"]):
            functions = r[_TYPE_FUNCTIONS_AT]
            self.input_functions.update(f for f in (functions[i] for i in _READERS) if f)
            r[_TYPE_FUNCTIONS_AT] = tuple(f for f in functions if f)
            typ = Type._make(r)
            self.types[typ.oid] = typ
            self.types_named[(typ.schema, typ.name)] = typ
        for type_oid, tree, xmin in rows(row["domain_constraints"]):
            self.domain_checks.setdefault(type_oid, []).append((tree or "", xmin))
        for r in rows(row["ranges"]):
            rng = Range._make(r)
            self.ranges[rng.type] = rng
            if rng.multirange:
                self.multiranges[rng.multirange] = rng.type
        for type_oid, family in rows(row["default_families"]):
            self.default_families.setdefault(type_oid, []).append(family)
        for family, procs, oprs in rows(row["families"]):
            self.families[family] = (procs, oprs)
            for opr in oprs:
                self.operator_families.setdefault(opr, []).append(family)
        self.casts = [Cast._make(r) for r in rows(row["casts"])]

    def type_name(self, oid: int) -> str:
        typ = self.types.get(oid)
        if typ is None:
            return str(oid)
        schema = self.schemas.get(typ.schema, "?")
        name = typ.name[1:] + "[]" if typ.name.startswith("_") and typ.element else typ.name
        return name if schema == "pg_catalog" else f"{schema}.{name}"

    def qualified(self, schema: int, name: str) -> str:
        return f"{self.schemas.get(schema, '?')}.{name}"


@dataclass(frozen=True, slots=True)
class Relation:
    """A relation the guard has seen, with the digest of what it is made of."""

    oid: int
    schema: int
    name: str
    kind: str  # r, v, m, f, p, S, c
    row_type: int
    digest: str
    column_types: tuple[int, ...]
    # of its view rule, SELECT policies, virtual generated columns, and what the planner folds
    # (index expressions and predicates, partition key, CHECK constraints, statistics)
    code: TreeRefs
    children: tuple[int, ...]
    families: tuple[int, ...]  # of its indexes and partition key
    owner_name: str
    array_type: int  # the array of its row type
    # a view's definition as SQL (None when it does not parse): its calls with their constants
    view_refs: Refs | None
    # the server's role may SELECT it, so LOCK TABLE it (a GRANT or REVOKE changes its row,
    # hence its digest; one through a role membership does not, see freshness._lock)
    selectable: bool = False
    owner: int = 0


# The rows that hang off a relation, by the column that names it.
_RELATION_ROWS = (
    ("pg_rewrite", "ev_class"),
    ("pg_policy", "polrelid"),
    ("pg_attrdef", "adrelid"),
    ("pg_inherits", "inhparent"),
    ("pg_index", "indrelid"),
    ("pg_partitioned_table", "partrelid"),
    ("pg_constraint", "conrelid"),
    ("pg_statistic_ext", "stxrelid"),
)
# What a relation is made of, as one text: the row itself, then its columns, then the rows
# that hang off it. Any CREATE, ALTER, DROP or GRANT touching them changes some xmin or count.
RELATION_DIGEST = f"""pg_catalog.concat_ws(':', c.xmin,
    (SELECT {count_and_sum(xmin("a"), ".")} FROM pg_catalog.pg_attribute a
     WHERE a.attrelid = c.oid),
    (SELECT {count_and_sum("e.x", ".")} FROM ({
    " UNION ALL ".join(
        f"SELECT {xmin('h')} FROM pg_catalog.{table} h WHERE h.{column} = c.oid"
        for table, column in _RELATION_ROWS
    )
}) e(x)))"""

# Relations by oid, and those whose row type (or an array of it) is one of $2.
RELATIONS = statement(
    "guard.facts.RELATIONS",
    f"""
SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
    'oid', c.oid::bigint, 'schema', c.relnamespace::bigint, 'name', c.relname,
    'kind', c.relkind, 'row_type', c.reltype::bigint,
    'digest', {RELATION_DIGEST},
    'column_types', ARRAY(SELECT a.atttypid::bigint FROM pg_catalog.pg_attribute a
          WHERE a.attrelid = c.oid AND a.attnum > 0::pg_catalog.int2 AND NOT a.attisdropped
          ORDER BY a.attnum),
    'code', pg_catalog.concat_ws(' ',
        (SELECT pg_catalog.string_agg(r.ev_action::pg_catalog.text, ' ')
         FROM pg_catalog.pg_rewrite r
         WHERE r.ev_class = c.oid AND r.ev_type = '1' AND c.relkind = 'v'),
        (SELECT pg_catalog.string_agg(p.polqual::pg_catalog.text, ' ') FROM pg_catalog.pg_policy p
         WHERE p.polrelid = c.oid AND p.polcmd IN ('r', '*')),
        (SELECT pg_catalog.string_agg(d.adbin::pg_catalog.text, ' ') FROM pg_catalog.pg_attrdef d
         JOIN pg_catalog.pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
         WHERE d.adrelid = c.oid AND a.attgenerated = 'v'),
        -- what the planner folds when it opens the relation (index expressions and
        -- predicates, partition key, CHECK constraints, statistics expressions)
        (SELECT pg_catalog.string_agg(pg_catalog.concat_ws(' ', x.indexprs::pg_catalog.text,
                                                             x.indpred::pg_catalog.text), ' ')
         FROM pg_catalog.pg_index x WHERE x.indrelid = c.oid),
        (SELECT t.partexprs::pg_catalog.text FROM pg_catalog.pg_partitioned_table t
         WHERE t.partrelid = c.oid),
        (SELECT pg_catalog.string_agg(k.conbin::pg_catalog.text, ' ')
         FROM pg_catalog.pg_constraint k
         WHERE k.conrelid = c.oid AND k.contype = 'c'),
        (SELECT pg_catalog.string_agg(s.stxexprs::pg_catalog.text, ' ')
         FROM pg_catalog.pg_statistic_ext s
         WHERE s.stxrelid = c.oid)),
    'children', ARRAY(SELECT i.inhrelid::bigint FROM pg_catalog.pg_inherits i
                      WHERE i.inhparent = c.oid),
    'families', ARRAY(SELECT o.opcfamily::bigint FROM pg_catalog.pg_index x
          CROSS JOIN LATERAL pg_catalog.unnest(x.indclass::pg_catalog.oid[]) AS k(opc)
          JOIN pg_catalog.pg_opclass o ON o.oid = k.opc WHERE x.indrelid = c.oid
          UNION
          SELECT o.opcfamily::bigint FROM pg_catalog.pg_partitioned_table t
          CROSS JOIN LATERAL pg_catalog.unnest(t.partclass::pg_catalog.oid[]) AS k(opc)
          JOIN pg_catalog.pg_opclass o ON o.oid = k.opc WHERE t.partrelid = c.oid),
    'owner_name', pg_catalog.pg_get_userbyid(c.relowner),
    'array_type', (SELECT t.typarray::bigint FROM pg_catalog.pg_type t WHERE t.oid = c.reltype),
    'view', CASE WHEN c.relkind = 'v' THEN pg_catalog.pg_get_viewdef(c.oid) END,
    'selectable', pg_catalog.has_table_privilege(c.oid, 'SELECT'),
    'owner', c.relowner::bigint))
FROM pg_catalog.pg_class c
WHERE c.oid = ANY ($1::pg_catalog.oid[])
   OR c.oid IN (SELECT coalesce(nullif(t.typrelid, 0::pg_catalog.oid), e.typrelid)
                FROM pg_catalog.pg_type t LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem
                WHERE t.oid = ANY ($2::pg_catalog.oid[]))
""",
)


def _view_refs(definition: str | None) -> Refs | None:
    tree = sqltree.parse(definition) if definition else None
    return refs_of(tree) if tree else None


K = TypeVar("K")


def _update(cache: dict[K, tuple[int, ...]], found: dict[K, set[int]]) -> bool:
    moved = False
    for key, oids in found.items():
        if key not in cache or set(cache[key]) != oids:
            cache[key] = tuple(sorted(oids))
            moved = True
    return moved


@dataclass
class Relations:
    """Relations seen so far, and what relation names and schemas resolved to at the last
    check. Only ever read by oid; `generation` moves whenever anything here changes."""

    by_oid: dict[int, Relation] = field(default_factory=dict)
    by_row_type: dict[int, int] = field(default_factory=dict)  # row type (or its array) -> oid
    named: dict[tuple[int, str], tuple[int, ...]] = field(default_factory=dict)
    in_schema: dict[str, tuple[int, ...]] = field(default_factory=dict)
    generation: int = 0

    def resolved(
        self, named: dict[tuple[int, str], set[int]], in_schema: dict[str, set[int]]
    ) -> bool:
        """Record what relation names and schemas resolve to now; True when that moved."""
        moved = _update(self.named, named) | _update(self.in_schema, in_schema)
        if moved:
            self.generation += 1
        return moved

    async def read(self, conn: asyncpg.Connection, oids: set[int], types: set[int]) -> None:
        value = await conn.fetchval(RELATIONS, sorted(oids), sorted(types))
        found: list[dict[str, Any]] = rows(value)
        for r in found:
            rel = Relation(
                oid=r["oid"],
                schema=r["schema"],
                name=r["name"],
                kind=r["kind"],
                row_type=r["row_type"],
                digest=r["digest"],
                column_types=tuple(r["column_types"]),
                code=tree_refs(r["code"]),
                children=tuple(r["children"]),
                families=tuple(r["families"]),
                owner_name=r["owner_name"],
                array_type=r["array_type"] or 0,
                view_refs=_view_refs(r["view"]),
                selectable=r["selectable"],
                owner=r["owner"],
            )
            self.by_oid[rel.oid] = rel
            for typ in (rel.row_type, rel.array_type):
                if typ:
                    self.by_row_type[typ] = rel.oid
        for oid in oids - {r["oid"] for r in found}:
            self.by_oid.pop(oid, None)  # gone
        self.generation += 1
