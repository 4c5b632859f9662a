"""attack3 / control for F18 through custom definitions: HELD. Custom SQL calling
`app.fine_count()` (own `SET search_path = public`, public open, public NOT on the server
role's path `app`) is refused at start (custom/resolve.py judges every schema's creators, not
only those of the session's path), unlike execute_query (offpath_body.py: PWNED).

Usage (bed and setup.py first, see README.md):
  PYTHONPATH=tests:security-review uv run python security-review/offpath_custom.py [before|after]"""
import asyncio, json, sys, tempfile, textwrap
from pathlib import Path
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool
from custom_body import ATK
from offpath_body import ADMIN

DEFS = """
tools:
  - name: fine
    type: sql
    sql: SELECT app.fine_count() AS n
resources:
  - uri: custom://fine
    name: Fine
    type: sql
    mimeType: application/json
    sql: SELECT app.fine_count() AS n
"""


async def main(when: str) -> None:
    adm = await asyncpg.connect(DSN); await adm.execute(ADMIN)
    atk = await asyncpg.connect(as_role("attacker"))
    await atk.execute("DROP OPERATOR IF EXISTS public.= (public.mood, public.mood)")
    if when == "before":
        await atk.execute(ATK)
    d = Path(tempfile.mkdtemp()); (d / "defs.yaml").write_text(textwrap.dedent(DEFS))
    try:
      try:
        async with connect(as_role("reader"), custom_definitions=str(d / "defs.yaml")) as c:
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
            ok, body = await tool(c, "execute_query", sql="SELECT app.fine_count() AS n")
            print("execute_query:", ok, json.dumps(body)[:300])
      except Exception as e:  # DefinitionsError: the start refuses the definitions (held)
        print("start refused:", str(e)[:400])
    finally:
        await adm.execute("ALTER ROLE reader RESET search_path"); await adm.close()
        await atk.execute("DROP OPERATOR IF EXISTS public.= (public.mood, public.mood)"); await atk.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "before"))
