"""attack2: the ownership rule on every path that runs SQL against an attacker's table and view:
execute_query, explain_query (with and without analyze), get_sample_rows, the sample resource.
Each should be refused (untrusted_owner). Usage: PYTHONPATH=tests:security-review uv run python security-review/paths_owner.py [reader|postgres]"""
import asyncio, json, sys
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool

SETUP = """DROP TABLE IF EXISTS atk.po CASCADE; CREATE TABLE atk.po (a int); INSERT INTO atk.po VALUES (1);
CREATE VIEW atk.pov AS SELECT a FROM atk.po; GRANT SELECT ON atk.po, atk.pov TO PUBLIC;"""

async def main(role: str) -> None:
    a = await asyncpg.connect(as_role("attacker")); await a.execute(SETUP)
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        for rel in ("po", "pov"):
            for name, args in [("execute_query", {"sql": f"SELECT a FROM atk.{rel}"}),
                               ("explain_query", {"sql": f"SELECT a FROM atk.{rel}"}),
                               ("explain_query", {"sql": f"SELECT a FROM atk.{rel}", "analyze": True}),
                               ("get_sample_rows", {"table_name": rel, "schema_name": "atk"})]:
                ok, body = await tool(c, name, **args)
                print(rel, name, args.get("analyze", ""), "->", ok, (body.get("error", {}).get("context", {}).get("rule") if not ok else json.dumps(body)[:80]))
            try:
                r = await c.read_resource(f"pg://schemas/atk/tables/{rel}/sample")
                print(rel, "sample resource -> answered", r.contents[0].text[:100])
            except Exception as e:
                print(rel, "sample resource -> error", str(e)[:100])
    await a.execute("DROP TABLE atk.po CASCADE"); await a.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader"))
