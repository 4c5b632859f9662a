"""Custom definitions never run planted code (issue 19, findings 2 and 5).

A role with CREATE on `public` (legacy rights) plants `public.=(mood, mood)`,
`public.enum_range(mood)` and `public.<>(oid, integer)` (the operator of asyncpg's own type
lookup, `typelem <> 0`), each calling an effect that leaves a fingerprint: it resets the
database's statistics (`stats_reset` moves) and consumes a transaction ID. Exact matches
beat pg_catalog's polymorphic built-ins, so the traps fire for any unpinned SQL that
compares an enum, lists its values or returns one (the tests first prove that). They are
planted before the server starts, so the check at start sees them too. Then every kind of
definition that compares or returns the enum is called through an MCP client: the
fingerprint must not move and every answer must be right.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from customdefs import serve, write
from guardbed import next_xid_when_idle
from mcp import Client
from mcp_types import PromptReference, ResourceTemplateReference
from mcpclient import call, call_error, execute, fetch, records
from pgbed import PgServer

from pg_mcp_server.config import Settings
from pg_mcp_server.custom.specs import DefinitionsError
from pg_mcp_server.server import build_server

FIXTURE = """
CREATE TYPE public.mood AS ENUM ('fine', 'grumpy', 'sad');
CREATE TABLE public.feelings (id int PRIMARY KEY, m public.mood NOT NULL, note text);
INSERT INTO public.feelings VALUES (1, 'fine', 'sun'), (2, 'grumpy', 'rain'), (3, 'fine', NULL),
                                   (4, 'sad', 'fog');
ALTER TABLE public.feelings SET (autovacuum_enabled = off);
-- Functions of the DBA's whose bodies resolve names when they run, on their caller's path:
-- one names its table with the schema (its `=` on the enum is still unqualified), one relies
-- on finding it on the path (as most do).
CREATE FUNCTION public.count_feelings() RETURNS bigint STABLE LANGUAGE sql
    AS 'SELECT count(*) FROM public.feelings';
CREATE FUNCTION public.count_fine() RETURNS bigint STABLE LANGUAGE sql
    AS $$SELECT count(*) FROM public.feelings WHERE m = 'fine'$$;
CREATE FUNCTION public.count_on_path() RETURNS bigint STABLE LANGUAGE sql
    AS 'SELECT count(*) FROM feelings';
-- ... and one with a path of its own, as advice often has it: the schema the planter may
-- create in, where its planted = wins inside the body whatever the caller's path is.
CREATE FUNCTION public.count_fine_pathed() RETURNS bigint STABLE LANGUAGE sql
    SET search_path = public AS $$SELECT count(*) FROM feelings WHERE m = 'fine'$$;
"""

PLANT = """
CREATE ROLE {role} NOLOGIN;
GRANT CREATE, USAGE ON SCHEMA public TO {role};  -- legacy public CREATE rights
CREATE SCHEMA planter AUTHORIZATION {role};
SET ROLE {role};
GRANT USAGE ON SCHEMA planter TO PUBLIC;  -- so that any role's SQL can reach the traps
CREATE FUNCTION planter.effect() RETURNS boolean LANGUAGE sql AS $$
    SELECT pg_catalog.pg_current_xact_id() IS NOT NULL
       AND pg_catalog.pg_stat_reset()::text IS NOT NULL $$;
CREATE FUNCTION planter.mood_eq(public.mood, public.mood) RETURNS boolean LANGUAGE sql
    AS 'SELECT planter.effect() AND pg_catalog.enum_eq($1, $2)';
CREATE OPERATOR public.= (LEFTARG = public.mood, RIGHTARG = public.mood,
                          FUNCTION = planter.mood_eq);
CREATE FUNCTION public.enum_range(public.mood) RETURNS public.mood[] LANGUAGE sql
    AS 'SELECT CASE WHEN planter.effect() THEN pg_catalog.enum_range($1) END';
CREATE FUNCTION planter.oid_ne(oid, integer) RETURNS boolean LANGUAGE sql
    AS 'SELECT planter.effect() AND $1 OPERATOR(pg_catalog.<>) $2::pg_catalog.oid';
CREATE OPERATOR public.<> (LEFTARG = oid, RIGHTARG = integer, FUNCTION = planter.oid_ne);
RESET ROLE;
"""


async def refused_at_start(dsn: str, directory: Path, text: str) -> list[str]:
    """The problems a server that is to serve `text` as its definitions file stops at."""
    path = write(directory, text)
    settings = Settings.load(database={"dsn": dsn}, server={"custom_definitions": str(path)})
    with pytest.raises(DefinitionsError) as caught:
        async with Client(build_server(settings)):
            pass
    return caught.value.problems


STATS_RESET = """
SELECT stats_reset::text FROM pg_catalog.pg_stat_database
WHERE datname = pg_catalog.current_database()
"""

# Every kind of definition, comparing the enum, listing its values and returning it.
DEFINITIONS = """
prompts:
  - name: mood-report
    arguments:
      - name: mood
        required: true
        completion: SELECT unnest(enum_range(NULL::mood))::text
    messages:
      - role: user
        content:
          type: resource
          uri: custom://feelings/{{mood}}
resources:
  - uri: custom://fine
    name: Fine feelings
    type: sql
    mimeType: application/json
    sql: SELECT id, m FROM feelings WHERE m = 'fine' ORDER BY id
  - uri: custom://feelings/{mood}
    name: Feelings in a mood
    type: sql
    mimeType: application/json
    sql: SELECT id, m, note FROM feelings WHERE m = $1::mood ORDER BY id
    parameters:
      - name: mood
        completion: |
          SELECT s::text FROM unnest(enum_range(NULL::mood)) AS s WHERE s::text LIKE $1 || '%'
tools:
  - name: in_mood
    type: sql
    input_schema:
      type: object
      properties:
        mood: {type: string}
      required: [mood]
    sql: |
      SELECT id, m FROM feelings
      WHERE m = $1::mood AND m IN ('fine', 'grumpy', 'sad') AND m = ANY (enum_range(m))
      ORDER BY id
  - name: counted
    type: sql
    sql: SELECT count_feelings() AS n, max(m) AS worst FROM feelings WHERE m <> 'sad'
  - name: fine_counted
    type: sql
    sql: SELECT count_fine() AS n
  - name: joined
    type: sql
    sql: |
      SELECT count(*) AS n FROM feelings f JOIN feelings g USING (id, m) WHERE f.m = 'fine'
  - name: moods_func
    type: pl-func
    language: plpgsql
    returns: TABLE(id int, m public.mood)
    input_schema:
      type: object
      properties:
        mood: {type: string}
    code: |
      BEGIN
        RETURN QUERY SELECT f.id, f.m FROM public.feelings f
          WHERE f.m = (args->>'mood')::public.mood ORDER BY f.id;
      END;
  - name: first_mood
    type: pl-func
    language: plpgsql
    returns: public.mood
    code: |
      BEGIN
        RETURN (SELECT f.m FROM public.feelings f ORDER BY f.id LIMIT 1);
      END;
  - name: mood_count_do
    type: pl-do
    language: plpgsql
    code: |
      SELECT pg_catalog.jsonb_build_object('n', pg_catalog.count(*)) INTO result
      FROM public.feelings;
"""


@pytest_asyncio.fixture(loop_scope="session")
async def planted(pg: PgServer) -> AsyncIterator[str]:
    """A database with the fixture and the traps planted; the server's DSN (a superuser's)."""
    db = await pg.create_database("customtraps")
    role = f"custom_planter_{db.name[-8:]}"
    await execute(db.dsn, FIXTURE + PLANT.format(role=role))
    try:
        yield db.dsn
    finally:
        await pg.drop_database(db.name)
        await execute(pg.admin_dsn, f"DROP ROLE {role}")


async def _stats_reset(dsn: str) -> str | None:
    (row,) = await fetch(dsn, STATS_RESET)
    value: str | None = row[0]
    return value


async def _moved(dsn: str, sql: str) -> bool:
    """Whether running `sql` as the server's role, on a fresh connection with the default
    search path, set off a trap (the fingerprint moved)."""
    before = await _stats_reset(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.fetch(sql)
    finally:
        await conn.close()
    return await _stats_reset(dsn) != before


async def test_the_traps_are_live(planted: str) -> None:
    """What custom SQL ran before: each trap fires as the server's role, including through
    the driver's own type lookup for a result of the enum type."""
    assert await _moved(planted, "SELECT 'fine'::mood = 'fine'::mood")
    assert await _moved(planted, "SELECT enum_range(NULL::mood)::text")
    assert await _moved(planted, "SELECT 1::oid <> 0")
    assert await _moved(planted, "SELECT 'fine'::mood AS m")  # asyncpg looks mood up


def _json(text: Any) -> Any:
    return json.loads(text)


async def _sweep(client: Client) -> dict[str, Any]:
    """Every definition once: what it answered."""
    out: dict[str, Any] = {}
    out["in_mood"] = records(await call(client, "in_mood", mood="fine"))
    out["counted"] = records(await call(client, "counted"))
    out["fine_counted"] = records(await call(client, "fine_counted"))
    out["joined"] = records(await call(client, "joined"))
    out["moods_func"] = records(await call(client, "moods_func", mood="grumpy"))
    out["first_mood"] = (await call(client, "first_mood"))["result"]
    out["mood_count_do"] = (await call(client, "mood_count_do"))["result"]
    read = await client.read_resource("custom://fine", cache_mode="bypass")
    out["custom://fine"] = _json(read.contents[0].text)  # type: ignore[union-attr]
    read = await client.read_resource("custom://feelings/sad", cache_mode="bypass")
    out["custom://feelings/sad"] = _json(read.contents[0].text)  # type: ignore[union-attr]
    template = ResourceTemplateReference(type="ref/resource", uri="custom://feelings/{mood}")
    done = await client.complete(template, {"name": "mood", "value": "g"})
    out["complete template"] = done.completion.values
    prompt = PromptReference(type="ref/prompt", name="mood-report")
    done = await client.complete(prompt, {"name": "mood", "value": "s"})
    out["complete prompt"] = done.completion.values
    got = await client.get_prompt("mood-report", {"mood": "grumpy"})
    out["prompt"] = _json(got.messages[0].content.resource.text)  # type: ignore[union-attr]
    return out


EXPECTED = {
    "in_mood": [{"id": 1, "m": "fine"}, {"id": 3, "m": "fine"}],
    "counted": [{"n": 4, "worst": "grumpy"}],
    "fine_counted": [{"n": 2}],
    "joined": [{"n": 2}],
    "moods_func": [{"id": 2, "m": "grumpy"}],
    "first_mood": "fine",
    "mood_count_do": {"n": 4},
    "custom://fine": [{"id": 1, "m": "fine"}, {"id": 3, "m": "fine"}],
    "custom://feelings/sad": [{"id": 4, "m": "sad", "note": "fog"}],
    "complete template": ["grumpy"],
    "complete prompt": ["sad"],
    "prompt": [{"id": 2, "m": "grumpy", "note": "rain"}],
}


async def test_no_definition_runs_a_planted_object(
    planted: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = await _stats_reset(planted)
    async with serve(planted, tmp_path, DEFINITIONS) as client:
        answers = await _sweep(client)
        again = await _sweep(client)  # on sessions that have seen the enum already
    assert answers == EXPECTED
    assert again == EXPECTED
    assert await _stats_reset(planted) == before, "a planted object ran"
    # The check saw what the statements resolved to on the server's path, and said which
    # planted-looking objects it left out.
    ignored = " ".join(r.getMessage() for r in caplog.records)
    assert "operator =(mood,mood)" in ignored
    assert "function enum_range(mood)" in ignored
    # `public` is left off the path PL code and function bodies run on (the planter may
    # create there), which is why count_fine's unqualified `=` found pg_catalog's.
    assert "schema(s) public of the search path are left off" in ignored


async def test_the_traps_fire_in_a_trusted_function_body_on_the_servers_path(
    planted: str,
) -> None:
    """What count_fine() did before, called on the server's path (public on it), and how a
    body whose names rely on that path fails now: clearly, and running nothing planted."""
    assert await _moved(planted, "SELECT public.count_fine()")


async def test_a_function_whose_own_path_names_an_open_schema_stops_the_start(
    planted: str, tmp_path: Path
) -> None:
    assert await _moved(planted, "SELECT public.count_fine_pathed()")  # what it did
    before = await _stats_reset(planted)
    tool = "tools:\n  - name: pathed\n    type: sql\n    sql: SELECT count_fine_pathed()\n"
    (problem,) = await refused_at_start(planted, tmp_path, tool)
    assert "it calls count_fine_pathed(), whose own search_path (public) names public" in problem
    assert await _stats_reset(planted) == before, "a planted object ran"


async def test_a_function_with_arguments_of_an_open_schema_is_refused(
    planted: str, tmp_path: Path
) -> None:
    """Custom SQL is qualified with the schemas its names resolve to, but a qualified call of
    a function with arguments is still resolved again at every call among that schema's
    overloads: in an open schema (public here) one planted later with a closer match of
    argument types would run. The file is refused, saying how to close the schema, unless
    MCP_ALLOW_OPEN_SCHEMA_CODE accepts that risk. (A function without arguments, which only
    an exact match could replace, is not: count_feelings() above.)"""
    await execute(
        planted,
        "CREATE FUNCTION public.plus_one(bigint) RETURNS bigint IMMUTABLE LANGUAGE sql "
        "AS 'SELECT $1 + 1'",
    )
    tool = "tools:\n  - name: plus\n    type: sql\n    sql: SELECT plus_one(41) AS n\n"
    try:
        (problem,) = await refused_at_start(planted, tmp_path, tool)
        assert "it uses function plus_one(bigint), of schema public" in problem
        assert "REVOKE CREATE ON SCHEMA public FROM PUBLIC" in problem
        async with serve(planted, tmp_path, tool, allow_open_schema_code=True) as client:
            assert records(await call(client, "plus")) == [{"n": 42}]
    finally:
        await execute(planted, "DROP FUNCTION public.plus_one(bigint)")


async def test_a_body_that_needs_a_schema_left_off_the_path_says_so(
    planted: str, tmp_path: Path
) -> None:
    before = await _stats_reset(planted)
    tool = "tools:\n  - name: on_path\n    type: sql\n    sql: SELECT count_on_path() AS n\n"
    async with serve(planted, tmp_path, tool) as client:
        body = await call_error(client, "on_path")
    error = body["error"]
    assert error["code"] == "INVALID_SQL", error
    assert 'relation "feelings" does not exist' in error["message"], error
    assert error["context"]["left_off_path"] == ["public"], error
    assert "REVOKE CREATE ON SCHEMA public FROM PUBLIC" in error["suggestion"], error
    assert await _stats_reset(planted) == before, "a planted object ran"


NO_TEMP = """
CREATE ROLE {role} LOGIN;
GRANT USAGE ON SCHEMA public TO {role};
GRANT SELECT ON public.feelings TO {role};
REVOKE TEMP ON DATABASE {db} FROM PUBLIC;
"""
SQL_ONLY = DEFINITIONS.split("  - name: moods_func")[0]


async def test_without_temp_the_names_are_looked_up_and_nothing_planted_runs(
    pg: PgServer, planted: str, tmp_path: Path
) -> None:
    """A role without TEMP (or a standby) cannot make the probe functions: names are looked
    up on the server's path instead, and the planted objects still never run."""
    ((db,),) = await fetch(planted, "SELECT pg_catalog.current_database()")
    role = f"custom_notemp_{db[-8:]}"
    await execute(planted, NO_TEMP.format(role=role, db=db))
    reader = f"postgresql://{role}@{planted.split('@', 1)[1]}"
    try:
        before = await _stats_reset(planted)
        async with serve(reader, tmp_path, SQL_ONLY) as client:
            got: dict[str, Any] = {
                "in_mood": records(await call(client, "in_mood", mood="fine")),
                "counted": records(await call(client, "counted")),
                "joined": records(await call(client, "joined")),
            }
            read = await client.read_resource("custom://feelings/sad", cache_mode="bypass")
            got["custom://feelings/sad"] = _json(read.contents[0].text)  # type: ignore[union-attr]
            ref = PromptReference(type="ref/prompt", name="mood-report")
            got["complete prompt"] = (
                await client.complete(ref, {"name": "mood", "value": "s"})
            ).completion.values
        assert got == {k: EXPECTED[k] for k in got}
        assert await _stats_reset(planted) == before, "a planted object ran"
    finally:
        await execute(
            planted,
            f"GRANT TEMP ON DATABASE {db} TO PUBLIC; DROP OWNED BY {role}; DROP ROLE {role}",
        )


REFUSALS = """
tools:
  - name: two_labels
    type: sql
    sql: SELECT label(1) AS a, label('x'::text) AS b
  - name: colours_in
    type: sql
    sql: SELECT 'red'::colour IN ('red', 'blue') AS found
  - name: colours_qualified
    type: sql
    sql: |
      SELECT 'red'::colour OPERATOR(public.=) 'red' AS same, label(2) AS a, extra.label('y') AS b
  - name: colours_plain
    type: sql
    sql: SELECT 'red'::colour = 'blue' AS same
"""
REFUSAL_FIXTURE = """
CREATE SCHEMA extra;
CREATE FUNCTION public.label(int) RETURNS text IMMUTABLE LANGUAGE sql AS $$SELECT 'int'$$;
CREATE FUNCTION extra.label(text) RETURNS text IMMUTABLE LANGUAGE sql AS $$SELECT 'text'$$;
CREATE TYPE public.colour AS ENUM ('red', 'blue');
-- the DBA's own equality for colours (a trusted role's: used wherever it resolves), which
-- finds every two colours alike, so that the answer shows which = ran
CREATE FUNCTION public.colour_eq(public.colour, public.colour) RETURNS boolean IMMUTABLE
    LANGUAGE sql AS 'SELECT $1 IS NOT NULL AND $2 IS NOT NULL';
CREATE OPERATOR public.= (LEFTARG = public.colour, RIGHTARG = public.colour,
                          FUNCTION = public.colour_eq);
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET search_path = "$user", public, extra',
                           current_database()); END $$;
"""


async def test_a_name_that_cannot_be_pinned_stops_the_start(
    scratch_dsn: str, tmp_path: Path
) -> None:
    """A name resolving into two schemas, and an operator outside pg_catalog in a construct
    that cannot be written qualified (IN (...)), are refused at start with the file, the
    line and what to write; the same written qualified is served."""
    await execute(scratch_dsn, REFUSAL_FIXTURE)
    path = write(tmp_path, REFUSALS)
    problems = [
        p.removeprefix(f"{path}:") for p in await refused_at_start(scratch_dsn, tmp_path, REFUSALS)
    ]
    assert len(problems) == 2, problems
    assert problems[0].startswith("3: tool 0 (two_labels): sql: function label resolves to ")
    assert "extra.label or public.label" in problems[0]
    assert problems[1].startswith("6: tool 1 (colours_in): sql: it resolves differently")
    assert "=(colour,colour)" in problems[1] and "OPERATOR(schema.=)" in problems[1]
    text = (
        REFUSALS.split("  - name: two_labels")[0]
        + "  - name: colours_qualified"
        + (REFUSALS.split("  - name: colours_qualified")[1])
    )
    async with serve(scratch_dsn, tmp_path, text) as client:
        got = await call(client, "colours_qualified")
        plain = await call(client, "colours_plain")  # qualified by the check: the DBA's =
    assert records(got) == [{"same": True, "a": "int", "b": "text"}]
    assert records(plain) == [{"same": True}]


EVENT_TRIGGER = """
CREATE TABLE public.things (id int PRIMARY KEY, v int);
INSERT INTO public.things VALUES (1, 10), (2, 20);
CREATE TABLE public.ddl_seen (n serial PRIMARY KEY, tag text);
CREATE FUNCTION public.see_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.ddl_seen (tag) VALUES (tg_tag); END $$;
CREATE EVENT TRIGGER see_ddl ON ddl_command_start EXECUTE FUNCTION public.see_ddl();
"""
PLFUNC = """
tools:
  - name: total
    type: pl-func
    language: plpgsql
    returns: bigint
    input_schema:
      type: object
      properties:
        over: {type: integer}
    code: |
      BEGIN
        RETURN (SELECT sum(v) FROM things WHERE v > (args->>'over')::int);
      END;
"""


@asynccontextmanager
async def _one_session(dsn: str, path: Path) -> AsyncIterator[Client]:
    """A server with one pooled session, so that every call runs on the same one."""
    settings = Settings.load(
        database={"dsn": dsn, "pool_size": 1}, server={"custom_definitions": str(path)}
    )
    async with Client(build_server(settings)) as client:
        yield client


async def test_a_read_only_pl_func_call_assigns_no_xid_and_runs_no_ddl(
    scratch_dsn: str, tmp_path: Path
) -> None:
    """The function is created once per session (the event trigger sees that one CREATE
    FUNCTION); the calls after it run read-only: no transaction ID, no DDL."""
    await execute(scratch_dsn, EVENT_TRIGGER)
    path = write(tmp_path, PLFUNC)
    async with _one_session(scratch_dsn, path) as client:
        assert (await call(client, "total", over=0))["result"] == 30
        seen = [r[0] for r in await fetch(scratch_dsn, "SELECT tag FROM ddl_seen")]
        assert seen == ["CREATE FUNCTION"], "the trigger sees the server's DDL"
        first = await next_xid_when_idle(scratch_dsn)
        for over in (0, 10, 15, 20, 5):
            got = await call(client, "total", over=over)
            assert got["result"] == {0: 30, 10: 20, 15: 20, 20: None, 5: 30}[over]
        assert await next_xid_when_idle(scratch_dsn) == first, "a call assigned a transaction ID"
        seen = [r[0] for r in await fetch(scratch_dsn, "SELECT tag FROM ddl_seen")]
        assert seen == ["CREATE FUNCTION"], "a call ran DDL"
        # Reloaded (another description, the same code): the session has the function
        # already, under the same name; it is made again once, and answers.
        async with client.listen(tools_list_changed=True) as events:
            aside = path.with_suffix(".tmp.yaml")
            aside.write_text(PLFUNC.replace("    type: pl-func", "    description: Sum.\n"
                                            "    type: pl-func"))  # fmt: skip
            aside.replace(path)
            await asyncio.wait_for(anext(aiter(events)), 15)
        assert (await call(client, "total", over=15))["result"] == 20
