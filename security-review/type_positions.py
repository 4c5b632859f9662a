"""attack2: every syntax position that names a type, with an attacker's domain whose CHECK
raises PWNED (and a composite type): the guard must see the type there and refuse it
(untrusted_owner); a result "PWNED" means PostgreSQL ran the CHECK as the server, unseen.
Usage: PYTHONPATH=tests:security-review uv run python security-review/type_positions.py [reader|postgres]"""
import asyncio, json, sys
import asyncpg
from mcpclient import connect
from common import DSN, as_role, tool

SETUP = r"""
DROP DOMAIN IF EXISTS atk.pdom CASCADE; DROP DOMAIN IF EXISTS atk.tdom CASCADE; DROP TYPE IF EXISTS atk.pcomp CASCADE;
DROP FUNCTION IF EXISTS atk.pwn(anyelement);
CREATE FUNCTION atk.pwn(anyelement) RETURNS boolean VOLATILE LANGUAGE plpgsql AS $f$
BEGIN RAISE EXCEPTION 'PWNED as % xid %', current_user, pg_catalog.pg_current_xact_id(); END $f$;
GRANT EXECUTE ON FUNCTION atk.pwn(anyelement) TO PUBLIC;
CREATE DOMAIN atk.pdom AS int CHECK (atk.pwn(VALUE));
CREATE DOMAIN atk.tdom AS text CHECK (atk.pwn(VALUE));
CREATE TYPE atk.pcomp AS (a atk.pdom);
"""
PROBES = [
    "SELECT 1::atk.pdom AS x",
    "SELECT atk.pdom '1' AS x",
    "SELECT JSON_VALUE(jsonb '1', '$' RETURNING atk.pdom) AS x",
    "SELECT JSON_QUERY(jsonb '\"a\"', '$' RETURNING atk.tdom) AS x",
    "SELECT JSON_OBJECT('a': 1 RETURNING atk.tdom) AS x",
    "SELECT JSON_ARRAY(1 RETURNING atk.tdom) AS x",
    "SELECT JSON_SERIALIZE(jsonb '1' RETURNING atk.tdom) AS x",
    "SELECT jt.a FROM JSON_TABLE(jsonb '[1]', '$[*]' COLUMNS (a atk.pdom PATH '$')) jt",
    "SELECT x.a FROM XMLTABLE('/a' PASSING xml '<a>1</a>' COLUMNS a atk.pdom PATH '.') x",
    "SELECT XMLSERIALIZE(CONTENT xml '<a/>' AS atk.tdom) AS x",
    "SELECT r.a FROM jsonb_to_record(jsonb '{\"a\":1}') AS r(a atk.pdom)",
    "SELECT r.a FROM ROWS FROM (jsonb_to_record(jsonb '{\"a\":1}') AS (a atk.pdom)) r",
    "SELECT (json_populate_record(NULL::atk.pcomp, json '{\"a\":1}')).a AS x",
    "SELECT (jsonb_populate_record(NULL::atk.pcomp, jsonb '{\"a\":1}')).a AS x",
    "SELECT ARRAY['1']::atk.pdom[] AS x",
    "SELECT (ROW(1)::atk.pcomp).a AS x",
    "SELECT x FROM unnest(ARRAY[1]) AS t(x) WHERE x = ANY ('{1}'::atk.pdom[])",
    "SELECT sum(x) OVER (ORDER BY x RANGE BETWEEN '1'::atk.pdom PRECEDING AND CURRENT ROW) FROM generate_series(1,2) x",
    "SELECT pg_input_is_valid('1', 'atk.pdom') AS x",
    "SELECT to_regtype('atk.pdom') AS x",
    "SELECT format_type('atk.pdom'::regtype, NULL) AS x",
    "SELECT CAST(jsonb '1' AS atk.pdom) AS x",
    "SELECT JSON_VALUE(jsonb '\"x\"', '$' RETURNING int DEFAULT '1'::atk.pdom ON ERROR) AS x",
    "SELECT jsonb_path_query_first(jsonb '1', '$.integer()') AS x",
    "SELECT * FROM jsonb_to_recordset(jsonb '[{\"a\":1}]') AS r(a atk.pdom)",
    "SELECT * FROM json_to_record(json '{\"a\":1}') AS r(a atk.pdom)",
    "SELECT (SELECT r FROM json_populate_recordset(NULL::atk.pcomp, json '[{\"a\":1}]') r LIMIT 1) IS NULL AS x",
    "SELECT row_to_json(r) FROM (SELECT 1::atk.pdom AS a) r",
    "SELECT t.a FROM (VALUES (1)) AS t(a) WHERE t.a IS JSON SCALAR",
    "SELECT JSON_EXISTS(jsonb '1', '$ ? (@ == $v)' PASSING 1::atk.pdom AS v) AS x",
    "SELECT JSON_VALUE(jsonb '1', '$' RETURNING atk.pdom[]) AS x",
    "SELECT xmlelement(name a, 1::atk.pdom) AS x",
    "SELECT x FROM generate_series(1, 1) x WHERE x IN (SELECT '1'::atk.pdom)",
]

async def main(role: str) -> None:
    a = await asyncpg.connect(as_role("attacker")); await a.execute(SETUP)
    async with connect(DSN if role == "postgres" else as_role(role)) as c:
        for sql in PROBES:
            ok, body = await tool(c, "execute_query", sql=sql)
            if ok:
                print("RAN  ", sql, "->", json.dumps(body.get("rows"))[:100])
            else:
                e = body["error"]; m = e["message"]
                tag = "PWNED" if "PWNED" in m else ("held " if e.get("context", {}).get("rule") == "untrusted_owner" or "untrusted" in m or "not trusted" in m else "other")
                print(tag, sql, "->", e["code"], m[:110])
    await a.execute("DROP DOMAIN IF EXISTS atk.pdom CASCADE; DROP DOMAIN IF EXISTS atk.tdom CASCADE; DROP TYPE IF EXISTS atk.pcomp CASCADE")
    await a.close()

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "reader"))
