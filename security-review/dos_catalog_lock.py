"""attack2 / F9: a role that owns any table in a listed schema makes the catalog tools hang.
The listing SQL calls pg_relation_size / pg_total_relation_size (and pg_get_expr, pg_get_viewdef
...) on the relations it lists; those open the relation with AccessShareLock. The attacker
creates a table in `public` (legacy CREATE) and holds `LOCK TABLE ... IN ACCESS EXCLUSIVE MODE`
in an open transaction (its own table: no privilege needed): every listing that reaches that
table waits until the server's statement timeout, then fails, for every agent.
Usage: PYTHONPATH=tests:security-review uv run python security-review/dos_catalog_lock.py [reader|postgres]
(PG_STATEMENT_TIMEOUT is set to 3000 ms here so the run is short.)"""
import asyncio, json, os, sys, time
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool

CALLS = [
    ("list_schemas", {}),
    ("list_tables", {"schema_name": "public"}),
    ("list_tables", {"schema_name": "public", "include_columns": True}),
    ("search_tables", {"query": "users"}),
    ("describe_table", {"table_name": "users"}),
    ("get_foreign_keys", {"table_name": "users"}),
    ("execute_query", {"sql": "SELECT id, name FROM public.users"}),
]
RESOURCES = ["pg://schemas", "pg://schemas/public/tables", "pg://schemas/public/tables/users"]


async def run(c, lab: str) -> None:
    for name, args in CALLS:
        t0 = time.monotonic()
        ok, body = await tool(c, name, **args)
        dt = time.monotonic() - t0
        err = body.get("error", {}) if isinstance(body, dict) else {}
        print(f"{lab} {name}{json.dumps(args)}: ok={ok} {dt:.2f}s {err.get('code', '')} {str(err.get('message', ''))[:90]} {json.dumps(err.get('context', ''))[:120] if err else ''}")
    for uri in RESOURCES:
        t0 = time.monotonic()
        try:
            r = await c.read_resource(uri)
            res = "ok " + r.contents[0].text[:60].replace("\n", " ")
        except Exception as exc:
            res = "error " + str(exc)[:120]
        print(f"{lab} {uri}: {time.monotonic() - t0:.2f}s {res}")


async def main(role: str) -> None:
    a = await asyncpg.connect(as_role("attacker"))
    await a.execute("DROP TABLE IF EXISTS public.zz_hold; CREATE TABLE public.zz_hold (x int)")
    os.environ["PG_STATEMENT_TIMEOUT"] = "3000"
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        await run(c, "baseline")
        await a.execute("BEGIN; LOCK TABLE public.zz_hold IN ACCESS EXCLUSIVE MODE")
        print("attacker holds ACCESS EXCLUSIVE on its own public.zz_hold")
        await run(c, "held    ")
        await a.execute("ROLLBACK")
    await a.execute("DROP TABLE public.zz_hold")
    await a.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader"))
