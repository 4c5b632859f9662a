"""Which catalog objects a reader may touch, read from the catalog itself.

A function is unsafe when PostgreSQL marks it VOLATILE (it may have side effects: file access,
advisory locks, settings, signals) and it is not on a short list of harmless volatile
functions, or when it is one of the few STABLE functions that run SQL text the guard never sees
(tablefunc's crosstab/connectby). Unsafety then spreads through everything that can call such a
function without the caller naming it, found by following the function oids that PostgreSQL
stores in its expression trees: aggregates (support functions), functions (default arguments,
SQL bodies), operators (their function), domains (CHECK constraints), views (their query) and
tables with row-level security (policy expressions). The guard refuses any of these names.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from pg_mcp_server.database import sqltree

# Volatile, but harmless for a reader: nothing outlives the rolled-back transaction, nothing
# outside the database is touched, and pg_sleep is bounded by the statement timeout.
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
    }
)
HARMLESS_PREFIXES = ("pg_stat_get_",)

# STABLE (or marked so by their extension) yet they execute SQL given as text.
RUNS_SQL_TEXT = frozenset(
    {
        "crosstab",
        "crosstab2",
        "crosstab3",
        "crosstab4",
        "connectby",
        "query_to_xml",
        "query_to_xmlschema",
        "query_to_xml_and_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "ts_stat",
    }
)

_REFRESH_SECONDS = 60.0
_FUNC_REF = re.compile(r":(?:funcid|aggfnoid|winfnoid|opfuncid) (\d+)")
_REL_REF = re.compile(r":relid (\d+)")

# Everything the closure needs, in one statement: expression trees as text, to be searched for
# the function and relation oids they reference.
CATALOG = """
SELECT
  (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
      'oid', p.oid::bigint, 'name', p.proname, 'volatile', p.provolatile = 'v',
      'kind', p.prokind, 'sql', l.lanname = 'sql' AND p.prosqlbody IS NULL,
      'src', CASE WHEN l.lanname = 'sql' AND p.prosqlbody IS NULL THEN p.prosrc END,
      'trees', pg_catalog.concat_ws(' ', p.proargdefaults::text, p.prosqlbody::text),
      'support', ARRAY[a.aggtransfn::oid, a.aggfinalfn::oid, a.aggcombinefn::oid,
                       a.aggserialfn::oid, a.aggdeserialfn::oid, a.aggmtransfn::oid,
                       a.aggminvtransfn::oid, a.aggmfinalfn::oid]::bigint[],
      'row_arg', p.pronargs = 1 AND EXISTS (
          SELECT 1 FROM pg_catalog.pg_type t
          WHERE t.oid = p.proargtypes[0]
            AND (t.typtype = 'c' OR t.typname IN ('record', 'anyelement', 'anycompatible',
                                                  'anynonarray', 'anycompatiblenonarray')))))
   FROM pg_catalog.pg_proc p
   JOIN pg_catalog.pg_language l ON l.oid = p.prolang
   LEFT JOIN pg_catalog.pg_aggregate a ON a.aggfnoid = p.oid) AS functions,
  (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
              'name', o.oprname, 'func', o.oprcode::oid::bigint))
   FROM pg_catalog.pg_operator o) AS operators,
  (SELECT pg_catalog.json_agg(pg_catalog.json_build_object('oid', c.oid::bigint, 'name', c.relname,
                                     'trees', r.ev_action::text))
   FROM pg_catalog.pg_rewrite r JOIN pg_catalog.pg_class c ON c.oid = r.ev_class
   WHERE c.relkind = 'v') AS views,
  (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
              'name', t.typname, 'trees', k.conbin::text))
   FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_type t ON t.oid = k.contypid
   WHERE k.contype = 'c') AS domains,
  (SELECT pg_catalog.json_agg(pg_catalog.json_build_object('name', c.relname,
                                     'trees', pg_catalog.concat_ws(' ', p.polqual::text,
                                                        p.polwithcheck::text)))
   FROM pg_catalog.pg_policy p JOIN pg_catalog.pg_class c ON c.oid = p.polrelid) AS policies
"""


def _refs(pattern: re.Pattern[str], text: str | None) -> set[int]:
    return {int(m) for m in pattern.findall(text or "")}


def _called_names(sql: str | None) -> set[str]:
    """Function names a SQL-language body calls (as text: it is not stored as a tree)."""
    tree = sqltree.parse(sql) if sql else None
    return sqltree.last_names(tree, "FuncCall", "funcname") if tree else set()


def _harmless(name: str) -> bool:
    return name in HARMLESS_VOLATILE or name.startswith(HARMLESS_PREFIXES)


@dataclass
class SafetyCatalog:
    """Names the guard refuses, by kind; refreshed from the catalog when stale."""

    functions: frozenset[str] = frozenset()
    row_functions: frozenset[str] = frozenset()  # unsafe and callable as (row).name
    operators: frozenset[str] = frozenset()
    types: frozenset[str] = frozenset()
    relations: frozenset[str] = frozenset()
    known_functions: frozenset[str] = frozenset()
    loaded_at: float = field(default=0.0)

    def unfit(self, function_names: AbstractSet[str]) -> bool:
        """Never loaded, or a function name it has not seen: it must be read before use."""
        return not self.loaded_at or not function_names <= self.known_functions

    def expired(self, factor: float = 1.0) -> bool:
        """Old enough to be read again (meanwhile it is still used)."""
        return time.monotonic() - self.loaded_at > _REFRESH_SECONDS * factor

    @classmethod
    async def read(cls, conn: asyncpg.Connection) -> SafetyCatalog:
        catalog = cls(loaded_at=time.monotonic())  # as of when the statement was sent
        row = await conn.fetchrow(CATALOG)
        assert row is not None
        catalog._compute(*(_decode(row[k]) for k in row.keys()))  # noqa: SIM118
        return catalog

    def _compute(
        self,
        functions: list[dict[str, Any]],
        operators: list[dict[str, Any]],
        views: list[dict[str, Any]],
        domains: list[dict[str, Any]],
        policies: list[dict[str, Any]],
    ) -> None:
        name_of = {f["oid"]: f["name"] for f in functions}
        calls = {
            f["oid"]: _refs(_FUNC_REF, f["trees"]) | {s for s in f["support"] or [] if s}
            for f in functions
        }
        bodies = {f["oid"]: _called_names(f["src"]) for f in functions if f["sql"]}

        def closure(seeds: set[int]) -> set[int]:
            unsafe = set(seeds)
            changed = True
            while changed:  # spread along calls until nothing new is found
                names = {name_of[o] for o in unsafe}
                before = len(unsafe)
                for oid, refs in calls.items():
                    if oid not in unsafe and (refs & unsafe or bodies.get(oid, set()) & names):
                        unsafe.add(oid)
                changed = len(unsafe) != before
            return unsafe

        side_effects = closure(
            {
                f["oid"]
                for f in functions
                if (f["volatile"] and not _harmless(f["name"])) or f["kind"] == "p"
            }
        )
        # Functions that run SQL text are only dangerous with the caller's text: a view or a
        # policy holds the owner's fixed text, so they count for what callers pass values to.
        unsafe = closure(side_effects | {f["oid"] for f in functions if f["name"] in RUNS_SQL_TEXT})
        unsafe_names = {name_of[o] for o in unsafe}

        view_refs = {
            v["oid"]: (_refs(_FUNC_REF, v["trees"]), _refs(_REL_REF, v["trees"])) for v in views
        }
        bad_views = {oid for oid, (funcs, _) in view_refs.items() if funcs & side_effects}
        changed = True
        while changed:  # a view over an unsafe view is unsafe too
            before = len(bad_views)
            bad_views |= {oid for oid, (_, rels) in view_refs.items() if rels & bad_views}
            changed = len(bad_views) != before

        self.functions = frozenset(unsafe_names)
        self.row_functions = frozenset(
            f["name"] for f in functions if f["row_arg"] and f["oid"] in unsafe
        )
        self.operators = frozenset(o["name"] for o in operators if o["func"] in unsafe)
        self.types = frozenset(d["name"] for d in domains if _refs(_FUNC_REF, d["trees"]) & unsafe)
        self.relations = frozenset(
            {v["name"] for v in views if v["oid"] in bad_views}
            | {p["name"] for p in policies if _refs(_FUNC_REF, p["trees"]) & side_effects}
        )
        self.known_functions = frozenset(name_of.values())


def _decode(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    return json.loads(value) if isinstance(value, str) else list(value)
