"""An audit of PostgreSQL's own functions by what they do, not by how they are marked (issue 15
item 4): every built-in the guard could let through (STABLE or IMMUTABLE) that takes simple
arguments is called, each in a read-only transaction that is rolled back, with arguments that
name things a side effect hides behind: SQL text, a view, a domain, a schema. Whatever assigns a
transaction ID, resets statistics or advances a sequence must be refused by the guard when
called the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncpg
from mcpclient import execute

from pg_mcp_server.database.guard.gate import SqlGuard
from pg_mcp_server.errors import PgMcpError, WriteOperationDeniedError

SETUP = """
CREATE SEQUENCE audit_seq;
CREATE FUNCTION audit_effect(int) RETURNS boolean VOLATILE LANGUAGE sql
    AS 'SELECT pg_catalog.pg_current_xact_id() IS NOT NULL AND $1 IS NOT NULL';
CREATE VIEW audit_v AS SELECT pg_catalog.pg_current_xact_id() AS x;
CREATE DOMAIN audit_d AS int CHECK (audit_effect(VALUE));
CREATE TYPE audit_row AS (d audit_d);
CREATE TYPE audit_range AS RANGE (subtype = audit_d);
"""
EFFECT_SQL = "SELECT pg_catalog.pg_current_xact_id()"

# Argument values by type, one per theme: what a text or an oid argument points at (a name,
# or a value of the type the oid names, for the I/O functions).
THEMES = ("sql", "view", "domain", "schema", "domain value", "row", "array", "range")
TEXT = {
    "sql": EFFECT_SQL,
    "view": "public.audit_v",
    "domain": "public.audit_d",
    "schema": "public",
    "domain value": "1",
    "row": "(1)",
    "array": "{1}",
    "range": "[1,2)",
}
_VIEW = "'public.audit_v'::regclass::oid"
_DOMAIN = "'public.audit_d'::regtype::oid"
OID = {
    "sql": _VIEW,
    "view": _VIEW,
    "domain": _DOMAIN,
    "schema": "'public'::regnamespace::oid",
    "domain value": _DOMAIN,
    "row": "'public.audit_row'::regtype::oid",
    "array": _DOMAIN,  # array_in takes the element type
    "range": "'public.audit_range'::regtype::oid",
}
SCALARS = {
    "int2": "1::int2",
    "int4": "1",
    "int8": "1::int8",
    "bool": "true",
    "float4": "1::float4",
    "float8": "1::float8",
    "numeric": "1::numeric",
    "regnamespace": "'public'::regnamespace",
    "regrole": "current_user::regrole",
    "regconfig": "'simple'::regconfig",
    "jsonb": "'{}'::jsonb",
    "json": "'{}'::json",
    "bytea": "'\\x00'::bytea",
    "date": "'2024-01-01'::date",
    "timestamptz": "'2024-01-01'::timestamptz",
    "interval": "'1 day'::interval",
    "anyelement": "1",
    "any": "1",
}
TEXTS = {"text", "name", "varchar", "bpchar", "cstring"}
OIDS = {"oid", "regclass", "regtype", "regproc", "regprocedure"}

CANDIDATES = """
SELECT p.oid::regprocedure::text AS signature, p.oid::regproc::text AS name,
       ARRAY(SELECT t.typname::text FROM pg_catalog.unnest(p.proargtypes) WITH ORDINALITY a(t, i)
             JOIN pg_catalog.pg_type t ON t.oid = a.t ORDER BY a.i) AS args
FROM pg_catalog.pg_proc p
WHERE p.oid < 16384 AND p.provolatile <> 'v' AND p.prokind = 'f'
ORDER BY 1
"""


def literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def calls(name: str, args: list[str]) -> list[str] | None:
    """The calls to make (one per theme, duplicates dropped), or None when an argument type
    has no simple value here. `IS NULL`: whatever the result type, it need not be output."""
    out: list[str] = []
    for theme in THEMES:
        values = []
        for typ in args:
            if typ in TEXTS:
                values.append(f"{literal(TEXT[theme])}::{typ}")
            elif typ in OIDS:
                values.append(f"{OID[theme]}::{typ}")
            elif typ in SCALARS:
                values.append(SCALARS[typ])
            else:
                return None
        call = f"SELECT {name}({', '.join(values)}) IS NULL"
        if call not in out:
            out.append(call)
    return out


@dataclass
class Audit:
    called: int = 0
    skipped: int = 0
    failed: int = 0  # errors (bad values for the function): they did nothing either
    offenders: dict[str, str] = field(default_factory=dict)  # call -> what it changed


STATE = """
SELECT pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL AS xid,
       (SELECT stats_reset FROM pg_catalog.pg_stat_database
        WHERE datname = pg_catalog.current_database()) AS stats_reset,
       (SELECT last_value::text || is_called::text FROM audit_seq) AS sequence
"""


async def audit(dsn: str) -> Audit:
    result = Audit()
    conn = await asyncpg.connect(dsn)
    try:
        before = await conn.fetchrow(STATE)
        assert before is not None
        for row in await conn.fetch(CANDIDATES):
            todo = calls(row["name"], list(row["args"]))
            if todo is None:
                result.skipped += 1
                continue
            for sql in todo:
                result.called += 1
                await conn.execute("BEGIN READ ONLY; SET LOCAL statement_timeout = 2000")
                try:
                    await conn.execute(sql)  # no result types to decode: any type will do
                except asyncpg.PostgresError:
                    result.failed += 1
                    await conn.execute("ROLLBACK")
                    continue
                after = await conn.fetchrow(STATE)
                await conn.execute("ROLLBACK")
                assert after is not None
                changed = [k for k in ("stats_reset", "sequence") if after[k] != before[k]]
                if after["xid"]:
                    changed.append("xid")
                if changed:
                    result.offenders[sql] = ", ".join(changed)
                    before = await conn.fetchrow(STATE)
    finally:
        await conn.close()
    return result


async def test_every_builtin_that_changes_state_is_refused(scratch_dsn: str) -> None:
    await execute(scratch_dsn, SETUP)
    found = await audit(scratch_dsn)
    # The audit itself works: it called most built-ins, and found the XID functions and the
    # input functions that run the code of the type an oid argument names.
    assert found.called > 1500, found
    for expected in ("pg_current_xact_id()", "txid_current()", "record_in(", "domain_in("):
        assert any(expected in sql for sql in found.offenders), (expected, found.offenders)

    guard = SqlGuard()
    conn = await asyncpg.connect(scratch_dsn)
    let_through: dict[str, str] = {}
    try:
        for sql, what in found.offenders.items():
            try:
                # (a verdict is for the transaction its statement runs in: the guard locks
                # the relations it rests on there)
                async with conn.transaction(readonly=True):
                    await guard.check(sql, conn)
            except WriteOperationDeniedError:
                continue
            except PgMcpError as exc:  # any other refusal is a gap in the guard's rules
                let_through[sql] = f"{what} (refused only as {exc.code})"
                continue
            let_through[sql] = what
    finally:
        await conn.close()
    assert not let_through, let_through


def test_the_audit_builds_one_call_per_theme() -> None:
    made = calls("pg_catalog.f", ["text", "oid", "int4"])
    assert made is not None and len(made) == len(THEMES)
    assert made[0] == (
        f"SELECT pg_catalog.f({literal(EFFECT_SQL)}::text, "
        "'public.audit_v'::regclass::oid::oid, 1) IS NULL"
    )
    assert calls("pg_catalog.g", ["int4"]) == ["SELECT pg_catalog.g(1) IS NULL"]
    assert calls("pg_catalog.h", ["internal"]) is None
    assert calls("pg_catalog.k", []) == ["SELECT pg_catalog.k() IS NULL"]
