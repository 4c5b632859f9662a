"""Redaction probes: does any allowed construct show a secret (hunter2 / tok-ALICE-123)?"""
import asyncio
import json
import sys

from common import DSN, as_role, tool
from mcpclient import connect

PROBES = [
 "SELECT j.key, j.value FROM users u, jsonb_each_text(to_jsonb(u)) j",
 "SELECT j.* FROM users u CROSS JOIN LATERAL json_each_text(row_to_json(u)) j",
 "SELECT x FROM users u, unnest(ARRAY[u.password]) x",
 "SELECT x FROM users u, LATERAL unnest(ARRAY[u.password, u.name]) AS x",
 "SELECT x FROM users u, jsonb_array_elements_text(jsonb_build_array(u.password)) x",
 "SELECT r.* FROM users u, jsonb_to_record(to_jsonb(u)) AS r(password text)",
 "SELECT r.p FROM users u, jsonb_to_record(to_jsonb(u)) AS r(p text)",
 "SELECT jt.* FROM users u, JSON_TABLE(to_jsonb(u), '$' COLUMNS (p text PATH '$.password')) jt",
 "SELECT x.* FROM users u, xmltable('/r' PASSING xmlelement(name r, u.password) COLUMNS p text PATH '.') x",
 "SELECT string_agg(name, ',' ORDER BY password) FROM users",
 "SELECT name, row_number() OVER (ORDER BY password) FROM users",
 "SELECT name, rank() OVER (PARTITION BY password) FROM users",
 "SELECT count(*) FILTER (WHERE password > 'h') FROM users",
 "SELECT min(password) FROM users",
 "SELECT name FROM users ORDER BY password",
 "SELECT jsonb_path_query(to_jsonb(u), '$.password') FROM users u",
 "SELECT to_jsonb(u)->>'password' AS x FROM users u",
 "SELECT (to_jsonb(u)->>'password') FROM users u",
 "SELECT u::text FROM users u",
 "SELECT name FROM users u WHERE u::text LIKE '%hunter2%'",
 "SELECT name FROM users u WHERE to_jsonb(u) @> '{\"password\":\"hunter2\"}'",
 "SELECT v FROM (SELECT password FROM users) s(v)",
 "SELECT v FROM users u, LATERAL (SELECT u.password) s(v)",
 "SELECT ARRAY(SELECT password FROM users)::text",
 "SELECT format('%s', password) FROM users",
 "SELECT name, lag(password) OVER () FROM users",
 "SELECT name FROM users u WHERE EXISTS (SELECT 1 FROM users v WHERE v.id=u.id AND v.password LIKE 'h%')",
 "SELECT x FROM users u, regexp_split_to_table(u.password, '') x",
 "SELECT x FROM users u, LATERAL (VALUES (u.password)) v(x)",
 "SELECT x FROM users u, LATERAL (SELECT * FROM (VALUES (u.password)) w(y)) v(x)",
 "WITH t AS (SELECT password AS q FROM users) SELECT q FROM t",
 "SELECT p FROM users u, LATERAL ROWS FROM (jsonb_each_text(to_jsonb(u))) AS r(k, p)",
 "SELECT name FROM users LIMIT (SELECT length(password) FROM users WHERE id=1)",
 "SELECT * FROM generate_series(1, (SELECT length(password) FROM users WHERE id=1))",
 "SELECT name FROM users u TABLESAMPLE BERNOULLI (100)",
 "SELECT (SELECT password FROM users WHERE id=1) AS x",
 "SELECT mcv FROM pg_stats s, unnest(s.most_common_vals::text::text[]) mcv WHERE tablename='users'",
 "SELECT most_common_vals::text FROM pg_stats WHERE tablename='users'",
 "SELECT histogram_bounds FROM pg_stats WHERE tablename='users' AND attname='password'",
 "SELECT convert_from(decode(encode(password::bytea,'hex'),'hex'),'utf8') FROM users",
 "SELECT (u).password FROM (SELECT u FROM users u) s",
 "SELECT s.u FROM (SELECT u FROM users u) s",
 "SELECT x FROM users u, unnest(ARRAY[u]) x",
 "SELECT (x).password FROM users u, unnest(ARRAY[u]) x",
 "SELECT hstore(u) FROM users u",
 "SELECT k FROM users u, jsonb_object_keys(jsonb_build_object(u.password, 1)) k",
 "SELECT jsonb_object_keys(jsonb_build_object(u.password, 1)) FROM users u",
 "SELECT t FROM users u, to_tsvector('simple', u.password) t",
 "SELECT x FROM users u, LATERAL jsonb_path_query(to_jsonb(u), '$.password') x",
 "SELECT x FROM users u, LATERAL jsonb_path_query(to_jsonb(u), '$.*') x",
 "SELECT x FROM users u, jsonb_each(to_jsonb(u)) x",
 "SELECT name, password IS NOT DISTINCT FROM 'hunter2' AS hit FROM users",
 "SELECT name FROM users NATURAL JOIN (VALUES ('hunter2')) v(password)",
 "SELECT name FROM users JOIN (VALUES ('hunter2')) v(password) USING (password)",
 "SELECT name FROM (SELECT name, password FROM users INTERSECT ALL SELECT name, 'hunter2' FROM users) s",
]

async def main(role: str) -> None:
    dsn = DSN if role == "postgres" else as_role(role)
    async with connect(dsn) as c:
        for sql in PROBES:
            ok, body = await tool(c, "execute_query", sql=sql)
            s = json.dumps(body.get("rows") if ok and isinstance(body, dict) else (body.get("error") if isinstance(body, dict) else body))
            leak = any(v in s for v in ("hunter2", "tok-ALICE", "s3cr3t"))
            if ok:
                rows = body.get("rows") if isinstance(body, dict) else None
                print(("LEAK " if leak else "ok   "), sql, "->", json.dumps(rows)[:200])
            else:
                e = body["error"] if isinstance(body, dict) else body
                print(("LEAKE" if leak else "ref  "), sql, "->", (e.get("code"), e.get("message")[:150]) if isinstance(e, dict) else str(e)[:150])

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "postgres"))
