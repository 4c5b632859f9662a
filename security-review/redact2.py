"""Redaction probes, round 2: oracles that survive (JOIN USING / NATURAL JOIN, views)."""
import asyncio
import json
import sys

from common import DSN, as_role, tool
from mcpclient import connect, execute

PROBES = [
 # equality oracle through a USING join: a dictionary attack, every user at once
 "SELECT u.name, g.guess FROM users u JOIN (SELECT x AS password, x AS guess FROM (VALUES ('123456'),('hunter2'),('s3cr3t!'),('letmein')) t(x)) g USING (password)",
 "SELECT u.name, g.guess FROM users u NATURAL JOIN (SELECT x AS password, x AS guess FROM (VALUES ('hunter2'),('s3cr3t!')) t(x)) g",
 "SELECT name FROM (SELECT name, password AS p FROM users) s WHERE p = 'hunter2'",
 "SELECT name FROM users u WHERE (SELECT u.password) = 'hunter2'",
 "SELECT name FROM users u, LATERAL (VALUES (u.password)) v(p) WHERE v.p = 'hunter2'",
 "SELECT name FROM users u JOIN LATERAL (SELECT u.password AS q) s ON s.q = 'hunter2'",
 "WITH t AS (SELECT name, coalesce(password,'') AS p FROM users) SELECT name FROM t WHERE p='hunter2'",
 "SELECT name, nullif(password,'hunter2') IS NULL AS hit FROM users",
 "SELECT name, greatest(password,'h') AS g FROM users",
 "SELECT name FROM users u JOIN users v USING (password)",
 "SELECT u.name FROM users u FULL JOIN (VALUES ('hunter2')) v(password) USING (password) WHERE u.name IS NOT NULL AND v.password IS NOT NULL",
 "SELECT u.name, (v.password IS NOT NULL) AS hit FROM users u LEFT JOIN (VALUES ('hunter2')) v(password) USING (password)",
 "SELECT name FROM users u WHERE ROW(u.id, u.password) = ROW(1, 'hunter2')",
 "SELECT name FROM users u WHERE (u.id, u.password) IN ((1,'hunter2'))",
 "SELECT name FROM users u WHERE u = ROW(1,'alice','hunter2','tok-ALICE-123')::users",
 "SELECT name FROM users u WHERE u.* = ROW(1,'alice','hunter2','tok-ALICE-123')::users",
 "SELECT name FROM users u WHERE u IN (SELECT ROW(1,'alice','hunter2','tok-ALICE-123')::users)",
 "SELECT DISTINCT ON (password) name FROM users",
 "SELECT name FROM users GROUP BY ROLLUP(name, password)",
 "SELECT * FROM atk.vo",
 "SELECT * FROM atk.vc",
 "SELECT name FROM users u WHERE num_nulls(nullif(u.password, 'hunter2')) = 1",
 "SELECT count(password) FROM users WHERE password IS NOT NULL",
 "SELECT count(nullif(password, 'hunter2')) FROM users",
 "SELECT name FROM users WHERE (password = 'hunter2') IS TRUE",
 "SELECT name FROM users u WHERE u.password IS NOT NULL AND u.password IS DOCUMENT",
 "SELECT name, length(u.password) FROM users u",
 "SELECT u.name FROM users u, LATERAL (SELECT 1 WHERE u.password = 'hunter2') s",
 "SELECT pg_column_size(password) FROM users",
 "SELECT name FROM users ORDER BY 2",
]

VIEWS = """
DROP VIEW IF EXISTS atk.vo, atk.vc;
CREATE VIEW atk.vo WITH (security_invoker = true) AS
  SELECT name, 'starts with h' AS fact FROM public.users WHERE password LIKE 'h%';
CREATE VIEW atk.vc WITH (security_invoker = true) AS
  SELECT name, (password LIKE 'h%')::int AS bit FROM public.users;
"""

async def main(role: str) -> None:
    await execute(as_role("attacker"), VIEWS)
    dsn = DSN if role == "postgres" else as_role(role)
    async with connect(dsn) as c:
        for sql in PROBES:
            ok, body = await tool(c, "execute_query", sql=sql)
            if ok:
                print("ok   ", sql, "->", json.dumps(body.get("rows"))[:200], body.get("note", "")[:80] if isinstance(body.get("note"), str) else "")
            else:
                e = body["error"]
                print("ref  ", sql, "->", e.get("code"), e.get("message")[:150])

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "postgres"))
