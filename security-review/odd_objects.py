"""attack2: odd objects an untrusted role can create (names with quotes, dots and spaces,
deep default expressions, BEGIN ATOMIC bodies, many-argument functions) must not break the
guard's catalog load for queries that do not reach them. Prints, per object, whether a trusted
one-row query and a query using a built-in function still answer.
Usage: PYTHONPATH=tests:security-review uv run python security-review/odd_objects.py [reader|postgres]"""
import asyncio, json, sys
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool

DEEP = "(" * 900 + "1" + ")" * 900
OBJECTS = [
    ('quoted names', 'CREATE TYPE public."x.y""z" AS ENUM (\'a\'); CREATE FUNCTION public."lower"(public."x.y""z") RETURNS text IMMUTABLE LANGUAGE sql AS $$SELECT \'a\'$$'),
    ('space/dot function', 'CREATE FUNCTION public." . "(int) RETURNS int IMMUTABLE LANGUAGE sql AS $$SELECT 1$$'),
    ('deep default', f'CREATE FUNCTION atk.deep(a int DEFAULT {DEEP}) RETURNS int IMMUTABLE LANGUAGE sql AS $$SELECT a$$'),
    ('deep atomic body', f'CREATE FUNCTION atk.deepb() RETURNS int IMMUTABLE LANGUAGE sql BEGIN ATOMIC SELECT {DEEP}; END'),
    ('100 args', 'CREATE FUNCTION atk.many(' + ', '.join(f'a{i} int' for i in range(100)) + ') RETURNS int IMMUTABLE LANGUAGE sql AS $$SELECT 1$$'),
    ('plpgsql odd', "CREATE FUNCTION atk.odd() RETURNS int LANGUAGE plpgsql AS $$<<l>> BEGIN RETURN 1; END l$$"),
    ('operator odd chars', 'CREATE OPERATOR public.@#@ (LEFTARG = int, RIGHTARG = int, FUNCTION = pg_catalog.int4eq)'),
    ('public upper overload on text[]', 'CREATE FUNCTION public.upper(text[]) RETURNS text IMMUTABLE LANGUAGE sql AS $$SELECT 1::text$$'),
    ('public cast-ish name', 'CREATE FUNCTION public.int4(text[]) RETURNS int IMMUTABLE LANGUAGE sql AS $$SELECT 1$$'),
    ('huge enum', "DO $d$BEGIN EXECUTE 'CREATE TYPE atk.big AS ENUM (' || (SELECT string_agg(quote_literal('v' || i), ',') FROM generate_series(1, 20000) i) || ')'; END$d$"),
    ('domain on domain chain', "DO $d$BEGIN CREATE DOMAIN atk.d0 AS int; FOR i IN 1..200 LOOP EXECUTE format('CREATE DOMAIN atk.d%s AS atk.d%s', i, i - 1); END LOOP; END$d$"),
]
CLEAN = """DROP TYPE IF EXISTS public."x.y""z" CASCADE; DROP FUNCTION IF EXISTS public." . "(int);
DROP FUNCTION IF EXISTS atk.deep(int), atk.deepb(), atk.odd(); DROP OPERATOR IF EXISTS public.@#@ (int, int);
DROP FUNCTION IF EXISTS public.upper(text[]), public.int4(text[]); DROP TYPE IF EXISTS atk.big;
DROP DOMAIN IF EXISTS atk.d0 CASCADE;
DO $d$BEGIN EXECUTE (SELECT 'DROP FUNCTION IF EXISTS atk.many(' || string_agg('int', ',') || ')' FROM generate_series(1,100)); END$d$;"""
QUERIES = ["SELECT id, name FROM public.users WHERE id = 1", "SELECT upper(name) AS u, lower(name) AS l FROM public.users"]

async def main(role: str) -> None:
    a = await asyncpg.connect(as_role("attacker")); await a.execute(CLEAN)
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        for label, ddl in OBJECTS:
            try:
                await a.execute(ddl)
            except Exception as e:
                print(f"{label}: could not create ({str(e)[:80]})"); continue
            res = []
            for q in QUERIES:
                ok, body = await tool(c, "execute_query", sql=q)
                res.append("ok" if ok else f"{body['error']['code']}: {body['error']['message'][:110]}")
            print(f"{label}: {res}")
    await a.execute(CLEAN); await a.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader"))
