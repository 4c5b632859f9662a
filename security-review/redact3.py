"""Redaction probes, round 3 (attack2): whole-row comparisons, sorting and grouping by a row
that holds a secret, jsonb/xml predicates over a row, length oracles.
Shows which constructs run and whether the output or the row order/count tells a secret.
Usage: PYTHONPATH=tests:security-review uv run python security-review/redact3.py [postgres|reader]"""
import asyncio, json, sys
from mcpclient import connect
from common import DSN, as_role, tool

PROBES = [
 # whole-row comparisons, the secret is the row's first field
 "SELECT s.name FROM (SELECT password, name FROM users) s WHERE s > ROW('h', '')",
 "SELECT s.name FROM (SELECT password, name FROM users) s WHERE s >= ROW('hunter2', '') AND s < ROW('hunter3', '')",
 "SELECT s.name FROM (SELECT password, name FROM users) s ORDER BY s",
 "SELECT s.name FROM (SELECT password, name FROM users) s ORDER BY s DESC LIMIT 1",
 "SELECT count(DISTINCT s) FROM (SELECT password FROM users) s",
 "SELECT s.name, rank() OVER (ORDER BY s) FROM (SELECT password, name FROM users) s",
 "SELECT min(s)::text IS NULL FROM (SELECT password FROM users) s",
 "SELECT name FROM users u WHERE to_jsonb(u) > '{\"api_token\": \"tok-B\"}'::jsonb",
 "SELECT name FROM users u ORDER BY to_jsonb(u)->>'password'",
 "SELECT name FROM users u ORDER BY to_jsonb(u)",
 "SELECT name FROM users u WHERE jsonb_path_exists(to_jsonb(u), '$.password ? (@ starts with \"h\")')",
 "SELECT name FROM users u WHERE json_value(to_jsonb(u), '$.password') = 'hunter2'",
 "SELECT name FROM users u WHERE to_jsonb(u) @? '$.password ? (@ like_regex \"^hu\")'",
 "SELECT name FROM users u WHERE (u).password > 'h'",
 "SELECT name FROM users u WHERE (u.*).password > 'h'",
 "SELECT name, pg_column_size(u) FROM users u",
 "SELECT name, octet_length(u::text) FROM users u",
 "SELECT name, length(to_jsonb(u)::text) FROM users u",
 "SELECT name FROM users u WHERE u.password IS JSON",
 "SELECT name FROM users u WHERE u.password IS NOT NULL AND u.password IS NOT DISTINCT FROM 'hunter2'",
 "SELECT name FROM users u WHERE xmlexists('//r[text()=\"hunter2\"]' PASSING xmlelement(name r, u.password))",
 "SELECT name FROM users u WHERE u.password = ANY('{hunter2}')",
 "SELECT name FROM users u WHERE (ARRAY[u.password])[1] > 'h'",
 "SELECT name FROM users u WHERE ROW(u.password) > ROW('h')",
 "SELECT name FROM users u GROUP BY name, u HAVING u > ROW(0,'','','')::users",
 "SELECT s.name FROM (SELECT password, name FROM users) s GROUP BY s.name, s HAVING s > ROW('h','')",
 "SELECT name FROM users u WHERE u IS DISTINCT FROM ROW(1,'alice','hunter2','tok-ALICE-123')::users",
 "SELECT name FROM users u WHERE hashtext(u::text) % 2 = 0",
 "SELECT name, md5(to_jsonb(u)::text) FROM users u",
 "SELECT name, (SELECT array_agg(k ORDER BY v) FROM jsonb_each_text(to_jsonb(u)) e(k, v)) FROM users u",
 "SELECT name, jsonb_path_query_first(to_jsonb(u), '$.password.size()') FROM users u",
 "SELECT name, jsonb_path_query_first(to_jsonb(u), '$.password.type()') FROM users u",
 "SELECT name, to_jsonb(u) - 'id' - 'name' AS x FROM users u",
 "SELECT name, jsonb_path_query_first(to_jsonb(u), '$.* ? (@ starts with \"tok\")') AS x FROM users u",
 "SELECT name FROM users u, LATERAL (SELECT to_jsonb(u) AS j) s WHERE s.j->>'password' = 'hunter2'",
 "SELECT name FROM users u WHERE starts_with((u).api_token, 'tok-A')",
 "SELECT name FROM users u WHERE row_to_json(u)::text ~ 'hunter'",
 "SELECT name FROM users u WHERE u::text ~ 'hunter'",
 "SELECT s.a FROM (SELECT name AS a, password FROM users) s WHERE s::text ~ 'hunter'",
 "SELECT name FROM users u WHERE format('%s', u) ~ 'hunter'",
 "SELECT name FROM users u WHERE concat(u) ~ 'hunter'",
 "SELECT name FROM users u WHERE concat_ws(',', u.*) ~ 'hunter'",
 "SELECT name FROM users u WHERE array_to_string(ARRAY[u.*]::text[], ',') ~ 'hunter'",
 "SELECT name FROM users u WHERE (SELECT bool_or(x ~ 'hunter') FROM unnest(ARRAY[u.*]::text[]) x)",
]

async def main(role: str) -> None:
    dsn = DSN if role == "postgres" else as_role(role)
    async with connect(dsn) as c:
        for sql in PROBES:
            ok, body = await tool(c, "execute_query", sql=sql)
            if ok:
                print("ok   ", sql, "->", json.dumps(body.get("rows"))[:200])
            else:
                e = body["error"]
                print("ref  ", sql, "->", e.get("code"), e.get("message")[:150])

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "postgres"))
