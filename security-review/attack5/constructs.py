"""attack5 sweep: qualified function/operator names of the open schema public in odd places,
and implicit (unwritten) name lookups, through execute_query, explain_query (analyze) and
get_sample_rows' where_clause, default settings, with exact-match varchar overloads planted
in public before the check (so a name the guard missed would pick them at once).

Expected (claim): every construct naming public's code is refused (`open_schema_code`);
every construct whose names are unqualified runs without public on its path (served, the
plant never runs). Prints one line per construct: FINDING (PWNED), refused (rule) or served.
Usage: PYTHONPATH=tests:security-review:security-review/attack5 uv run python \
    security-review/attack5/constructs.py"""
from __future__ import annotations

import asyncio
import sys

import asyncpg

from common5 import ATTACKER, DSN, READER, execute, pwned, reset_db, tool
from mcpclient import connect

DBA = """
CREATE FUNCTION public.len(text) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT length($1)';
CREATE FUNCTION public.dup(text) RETURNS SETOF text IMMUTABLE LANGUAGE sql AS 'SELECT $1 UNION ALL SELECT $1';
CREATE FUNCTION public.neg(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT -$1';
CREATE OPERATOR public.~-~ (RIGHTARG = int, FUNCTION = public.neg);
CREATE FUNCTION public.txt_eq(text, text) RETURNS boolean IMMUTABLE LANGUAGE sql AS 'SELECT $1 = $2';
CREATE OPERATOR public.=== (LEFTARG = text, RIGHTARG = text, FUNCTION = public.txt_eq);
CREATE FUNCTION public.txt_lt(text, text) RETURNS boolean IMMUTABLE LANGUAGE sql AS 'SELECT $1 < $2';
CREATE OPERATOR public.<<< (LEFTARG = text, RIGHTARG = text, FUNCTION = public.txt_lt);
"""
# Exact-match overloads for varchar arguments; each runs atk.effect().
PLANTS = """
CREATE FUNCTION public.norm(varchar) RETURNS text IMMUTABLE LANGUAGE sql AS 'SELECT atk.effect()';
CREATE FUNCTION public.len(varchar) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT length(atk.effect())';
CREATE FUNCTION public.dup(varchar) RETURNS SETOF text IMMUTABLE LANGUAGE sql AS 'SELECT atk.effect()';
CREATE FUNCTION public.lower(varchar) RETURNS text IMMUTABLE LANGUAGE sql AS 'SELECT atk.effect()';
CREATE FUNCTION public.length(varchar) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT length(atk.effect())';
CREATE FUNCTION atk.lt(varchar, varchar) RETURNS boolean IMMUTABLE LANGUAGE sql AS 'SELECT atk.effect() IS NULL';
CREATE FUNCTION atk.neg(int2) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT length(atk.effect())';
CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.evil_eq);
CREATE OPERATOR public.<> (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.evil_eq);
CREATE OPERATOR public.< (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.lt);
CREATE OPERATOR public.> (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.lt);
CREATE OPERATOR public.<= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.lt);
CREATE OPERATOR public.>= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.lt);
CREATE OPERATOR public.~~ (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.lt);
CREATE OPERATOR public.~ (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.lt);
CREATE OPERATOR public.=== (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.evil_eq);
CREATE OPERATOR public.<<< (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.lt);
CREATE OPERATOR public.~-~ (RIGHTARG = int2, FUNCTION = atk.neg);
"""
V = "'x'::varchar"
QUALIFIED = {  # each names code of public: must be refused
    "operator": "SELECT id FROM app.people WHERE name OPERATOR(public.===) 'x'::varchar",
    "function": "SELECT public.len(name) FROM app.people",
    "prefix operator": "SELECT OPERATOR(public.~-~) 1::int2",
    "ORDER BY USING": "SELECT id FROM app.people ORDER BY name USING OPERATOR(public.<<<)",
    "op ANY(array)": f"SELECT id FROM app.people WHERE name OPERATOR(public.===) ANY (ARRAY[{V}])",
    "op ALL(subquery)": "SELECT id FROM app.people WHERE name OPERATOR(public.===) ALL (SELECT name FROM app.people)",
    "row comparison": f"SELECT id FROM app.people WHERE ROW(name, name) OPERATOR(public.<<<) ROW({V}, {V})",
    "row sublink": "SELECT id FROM app.people WHERE (name, name) OPERATOR(public.===) (SELECT name, name FROM app.people LIMIT 1)",
    "aggregate FILTER": "SELECT count(*) FILTER (WHERE public.len(name) > 0) FROM app.people",
    "aggregate ORDER BY USING": "SELECT string_agg(name, ',' ORDER BY name USING OPERATOR(public.<<<)) FROM app.people",
    "WITHIN GROUP": "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY public.len(name)) FROM app.people",
    "window ORDER BY USING": "SELECT row_number() OVER (ORDER BY name USING OPERATOR(public.<<<)) FROM app.people",
    "window PARTITION BY": "SELECT row_number() OVER (PARTITION BY public.len(name)) FROM app.people",
    "named WINDOW": "SELECT sum(id) OVER w FROM app.people WINDOW w AS (ORDER BY public.len(name))",
    "GROUPING SETS": "SELECT count(*) FROM app.people GROUP BY GROUPING SETS ((public.len(name)), ())",
    "ROWS FROM": "SELECT * FROM ROWS FROM (public.dup('x'::varchar), generate_series(1, 2)) AS r(a, b)",
    "LATERAL": "SELECT d FROM app.people p, LATERAL public.dup(p.name) AS d",
    "TABLESAMPLE REPEATABLE": "SELECT id FROM app.people TABLESAMPLE bernoulli (100) REPEATABLE (public.len('x'::varchar))",
    "TABLESAMPLE arg": "SELECT id FROM app.people TABLESAMPLE system (public.len('x'::varchar))",
    "XMLTABLE PASSING": "SELECT * FROM XMLTABLE('/a' PASSING xmlparse(document '<a>1</a>') COLUMNS v text PATH concat('.', public.norm('x'::varchar)))",
    "JSON_TABLE PASSING": "SELECT * FROM JSON_TABLE('[1]'::jsonb, '$[*]' PASSING public.len('x'::varchar) AS n COLUMNS (v int PATH '$'))",
    "JSON_VALUE DEFAULT": "SELECT JSON_VALUE('{}'::jsonb, '$.a' DEFAULT public.len('x'::varchar) ON EMPTY)",
    "JSON_EXISTS PASSING": "SELECT JSON_EXISTS('[1]'::jsonb, '$[*] ? (@ == $n)' PASSING public.len('x'::varchar) AS n)",
    "CASE WHEN": "SELECT CASE WHEN public.len(name) > 0 THEN 1 END FROM app.people",
    "COALESCE/NULLIF": "SELECT COALESCE(NULLIF(public.norm(name), 'a'), 'b') FROM app.people",
    "IN list": "SELECT id FROM app.people WHERE public.len(name) IN (1, 2)",
    "array subscript": "SELECT (ARRAY[1, 2])[public.len('x'::varchar)]",
    "jsonb subscript": "SELECT ('{\"a\": 1}'::jsonb)[public.norm('x'::varchar)]",
    "json operator arg": "SELECT '{\"a\": 1}'::jsonb -> public.norm('x'::varchar)",
    "IS DISTINCT FROM": "SELECT id FROM app.people WHERE public.norm(name) IS DISTINCT FROM 'a'",
    "COLLATE": "SELECT public.norm(name) COLLATE \"C\" FROM app.people",
    "typmod expression": "SELECT 'x'::varchar(3) FROM app.people WHERE public.len(name) > 0",
    "VALUES": "SELECT * FROM (VALUES (public.len('x'::varchar))) v(a)",
    "LIMIT": "SELECT id FROM app.people LIMIT public.len('x'::varchar)",
    "DISTINCT ON": "SELECT DISTINCT ON (public.len(name)) id FROM app.people",
    "EXISTS": "SELECT EXISTS (SELECT FROM app.people p WHERE public.len(p.name) > 0)",
    "scalar sublink in ORDER BY": "SELECT id FROM app.people ORDER BY (SELECT public.len(name))",
    "named argument": "SELECT public.len($1 => 'x'::varchar)" .replace("$1", "\"$1\""),
    "VARIADIC": "SELECT public.len(VARIADIC ARRAY['x'::varchar])",
    "catalog-qualified": "SELECT atk5db.public.len('x'::varchar)",
    "quoted schema": "SELECT \"public\".\"len\"('x'::varchar)",
    "function in FROM": "SELECT * FROM public.dup('x'::varchar)",
    "function as column (row notation)": "SELECT (p).public.len FROM app.people p",
}
IMPLICIT = {  # unqualified: must run without public (served, never PWNED)
    "=": f"SELECT id FROM app.people WHERE name = {V}",
    "IN list": f"SELECT id FROM app.people WHERE name IN ({V}, 'y'::varchar)",
    "NOT IN": f"SELECT id FROM app.people WHERE name NOT IN ({V})",
    "IN subquery": "SELECT id FROM app.people WHERE name IN (SELECT name FROM app.people)",
    "CASE x WHEN": f"SELECT CASE name WHEN {V} THEN 1 END FROM app.people",
    "NULLIF": f"SELECT NULLIF(name, {V}) FROM app.people",
    "IS DISTINCT FROM": f"SELECT id FROM app.people WHERE name IS DISTINCT FROM {V}",
    "BETWEEN": f"SELECT id FROM app.people WHERE name BETWEEN {V} AND {V}",
    "LIKE": f"SELECT id FROM app.people WHERE name LIKE {V}",
    "SIMILAR TO": f"SELECT id FROM app.people WHERE name SIMILAR TO {V}",
    "~": f"SELECT id FROM app.people WHERE name ~ {V}",
    "= ANY": f"SELECT id FROM app.people WHERE name = ANY (ARRAY[{V}])",
    "row compare": f"SELECT id FROM app.people WHERE (name, name) < ({V}, {V})",
    "ORDER BY USING <": "SELECT id FROM app.people ORDER BY name USING <",
    "JOIN USING": "SELECT count(*) FROM app.people a JOIN app.people b USING (name)",
    "NATURAL JOIN": "SELECT count(*) FROM app.people a NATURAL JOIN app.people b",
    "CYCLE mark varchar": f"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 2) CYCLE n SET c TO varchar 'x' DEFAULT varchar 'y' USING p SELECT n FROM r",
    "GREATEST": f"SELECT GREATEST(name, {V}) FROM app.people",
    "lower()": "SELECT lower(name) FROM app.people",
    "length()": "SELECT length(name) FROM app.people",
    "row notation p.lower": "SELECT (p.name).lower FROM app.people p",
    "prefix ~-~": "SELECT ~-~ 1::int2",
    "JSON_TABLE varchar column": "SELECT * FROM JSON_TABLE('[\"x\"]'::jsonb, '$[*]' COLUMNS (v varchar PATH '$')) WHERE v = 'x'::varchar",
}
TOOLS = {
    "execute_query": lambda sql: ("execute_query", {"sql": sql}),
    "explain_analyze": lambda sql: ("explain_query", {"sql": sql, "analyze": True}),
}


def verdict(ok: bool, body: object) -> str:
    if pwned(body):
        return "FINDING"
    if ok:
        return "served"
    text = str(body)
    for rule in ("open_schema_code", "open_schema_body", "untrusted_owner"):
        if rule in text or rule.replace("_", " ") in text:
            return f"refused {rule}"
    if "of schema public, where roles" in text:
        return "refused open_schema_code"
    return "error " + text[text.find("'message'"):][:120]


async def live(sql: str) -> bool:
    """Whether the plant runs for `sql` on the reader's own session path (public on it): the
    sweep would see it if the server ran `sql` so."""
    conn = await asyncpg.connect(READER)
    try:
        async with conn.transaction(readonly=True):
            await conn.fetch(sql)
    except asyncpg.PostgresError as e:
        return "PWNED" in str(e)
    finally:
        await conn.close()
    return False


async def main() -> int:
    await reset_db()
    await execute(DSN, DBA)
    await execute(ATTACKER, PLANTS)
    found = 0
    async with connect(READER) as c:
        for group, cases in (("qualified", QUALIFIED), ("implicit", IMPLICIT)):
            for label, sql in cases.items():
                line = []
                for tname, make in TOOLS.items():
                    name, args = make(sql)
                    ok, body = await tool(c, name, **args)
                    v = verdict(ok, body)
                    found += v == "FINDING"
                    line.append(f"{tname}: {v}")
                if group == "qualified" and "WHERE" in sql and "FROM app.people WHERE" in sql:
                    where = sql.split("FROM app.people WHERE", 1)[1]
                    ok, body = await tool(c, "get_sample_rows", schema_name="app",
                                          table_name="people", where_clause=where)
                    v = verdict(ok, body)
                    found += v == "FINDING"
                    line.append(f"sample: {v}")
                if group == "implicit":
                    line.append("live on the session path" if await live(sql) else "not live")
                print(f"[{group}] {label}: " + "; ".join(line))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
