"""attack5: names looked up in a schema anyone may create in, with default settings
(MCP_ALLOW_OPEN_SCHEMA_CODE=false). Reproductions of open findings, each marked
`xfail(strict=True)` so that main stays green and the fix turns it into a failure to unmark
(security-review/attack5/README.md).

A role that is not trusted has legacy CREATE on `public`, where the DBA keeps a helper
`public.norm(text)`; trusted functions call it qualified, as docs/custom-definitions.md
advises. The attacker plants `public.norm(varchar)`, an exact match for a varchar argument
that beats the DBA's (an implicit cast away), before the server starts. The planted code
takes a transaction ID and raises 'PWNED': had it run, the call fails with that message and
the ID is rolled back with the call (only the server rolls back here).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from customdefs import write
from guardbed import burnt_xids, next_xid_when_idle
from mcp import Client
from mcpclient import execute
from pgbed import PgServer

from pg_mcp_server.config import Settings
from pg_mcp_server.custom.specs import DefinitionsError
from pg_mcp_server.server import build_server

SETUP = """
CREATE ROLE {atk} LOGIN;
CREATE ROLE {reader} LOGIN;
GRANT CREATE, USAGE ON SCHEMA public TO {atk};  -- legacy public CREATE rights
CREATE SCHEMA atk AUTHORIZATION {atk};
GRANT USAGE ON SCHEMA atk TO PUBLIC;
CREATE SCHEMA app;
GRANT USAGE ON SCHEMA app TO {reader};
CREATE TABLE app.people (id int PRIMARY KEY, name varchar(20));
INSERT INTO app.people VALUES (1, 'Alice'), (2, 'Bob');
GRANT SELECT ON app.people TO {reader};
CREATE FUNCTION public.norm(text) RETURNS text IMMUTABLE LANGUAGE sql AS 'SELECT lower($1)';
CREATE FUNCTION app.people_norm() RETURNS SETOF text STABLE LANGUAGE sql
    AS 'SELECT public.norm(p.name) FROM app.people p ORDER BY p.id';
CREATE FUNCTION app.people_norm_pl() RETURNS text STABLE LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT pg_catalog.string_agg(public.norm(p.name), ',' ORDER BY p.id)
            FROM app.people p);
END $$;
CREATE FUNCTION public.people_report() RETURNS text STABLE LANGUAGE sql
    AS 'SELECT pg_catalog.string_agg(public.norm(p.name), '','' ORDER BY p.id) FROM app.people p';
-- Own search_path naming public, every name in the body qualified: only the join's `=`,
-- which JOIN ... USING and NATURAL JOIN look up where no name is written, resolves there.
CREATE FUNCTION app.twins() RETURNS bigint STABLE LANGUAGE sql
    SET search_path = pg_catalog, public
    AS $$SELECT pg_catalog.count(*) FROM app.people a JOIN app.people b USING (name)$$;
CREATE FUNCTION app.twins_natural() RETURNS bigint STABLE LANGUAGE plpgsql
    SET search_path = pg_catalog, public AS $$
BEGIN
    RETURN (SELECT pg_catalog.count(*) FROM app.people a NATURAL JOIN app.people b);
END $$;
-- attack2 F13 one call deeper: the function custom SQL calls has no path of its own, the
-- one its body calls has `SET search_path = public` and compares varchar unqualified.
CREATE FUNCTION app.inner_count() RETURNS bigint STABLE LANGUAGE sql SET search_path = public
    AS $$SELECT count(*) FROM app.people p WHERE p.name = 'Alice'::varchar$$;
CREATE FUNCTION app.outer_count() RETURNS bigint STABLE LANGUAGE sql
    AS 'SELECT app.inner_count()';
-- Own search_path naming public, every name in its SQL qualified, a variable declared with
-- an unqualified type of app's: PL/pgSQL looks it up on that path when it compiles the body.
CREATE DOMAIN app.label AS text;
CREATE FUNCTION app.shout(t text) RETURNS text STABLE LANGUAGE plpgsql
    SET search_path = pg_catalog, public, app AS $$
DECLARE v label;
BEGIN
    v := t;
    RETURN pg_catalog.upper(v);
END $$;
SET ROLE {atk};
CREATE FUNCTION atk.effect() RETURNS text VOLATILE LANGUAGE plpgsql AS $f$
BEGIN
    RAISE EXCEPTION 'PWNED as % (xid %)', current_user, pg_catalog.pg_current_xact_id();
END $f$;
CREATE FUNCTION public.norm(varchar) RETURNS text IMMUTABLE LANGUAGE sql
    AS 'SELECT atk.effect()';
CREATE FUNCTION atk.evil_eq(varchar, varchar) RETURNS boolean IMMUTABLE LANGUAGE plpgsql
    AS 'BEGIN RETURN atk.effect() IS NULL; END';
CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = atk.evil_eq);
CREATE FUNCTION atk.chk(text) RETURNS boolean IMMUTABLE LANGUAGE sql
    AS 'SELECT atk.effect() IS NULL';
CREATE DOMAIN public.label AS text CHECK (atk.chk(VALUE));
RESET ROLE;
"""


def as_role(dsn: str, role: str) -> str:
    return f"postgresql://{role}@{dsn.split('@', 1)[1]}"


@dataclass
class Bed:
    admin: str
    reader: str

    async def burnt_xids(self, since: int) -> list[int]:
        return await burnt_xids(self.admin, since)


@pytest_asyncio.fixture(loop_scope="session")
async def bed(pg: PgServer) -> AsyncIterator[Bed]:
    db = await pg.create_database("attack5")
    tag = secrets.token_hex(4)
    atk, reader = f"atk5_{tag}", f"atk5_reader_{tag}"
    await execute(db.dsn, SETUP.format(atk=atk, reader=reader))
    try:
        yield Bed(db.dsn, as_role(db.dsn, reader))
    finally:
        await pg.drop_database(db.name)
        await execute(pg.admin_dsn, f"DROP ROLE {atk}; DROP ROLE {reader}")


async def _answers(bed: Bed, tmp_path: Path, definitions: str, tool: str) -> str | None:
    """The tool's answer as text, or None when the start refuses the file (also held: its
    check only parses, in transactions it rolls back, which take transaction IDs of their
    own). Transaction IDs burnt by the call itself fail the test here."""
    path = write(tmp_path, definitions)
    settings = Settings.load(database={"dsn": bed.reader}, server={"custom_definitions": str(path)})
    try:
        async with Client(build_server(settings)) as client:
            since = await next_xid_when_idle(bed.admin)
            result: Any = await client.call_tool(tool, {})
            text = json.dumps([c.text for c in result.content if hasattr(c, "text")])
            assert "PWNED" not in text, text
            assert await bed.burnt_xids(since) == [], text
    except DefinitionsError as refused:
        assert "norm" in " ".join(refused.problems) or "public" in " ".join(refused.problems)
        return None
    return text


CALLERS = {
    "sql_body": "SELECT n FROM app.people_norm() AS n",
    "plpgsql_body": "SELECT app.people_norm_pl() AS n",
    "no_arguments_in_public": "SELECT public.people_report() AS n",
    # An alias over 63 bytes: custom SQL runs as written back from pglast's tree (resolve.py),
    # where it is cut as the guard reads it; the walk follows what the statement calls.
    "long_alias": 'SELECT n AS "norm_' + "x" * 60 + '" FROM app.people_norm() AS n',
}


@pytest.mark.parametrize("caller", sorted(CALLERS))
async def test_custom_sql_never_runs_an_overload_planted_for_a_qualified_name_in_a_body(
    bed: Bed, tmp_path: Path, caller: str
) -> None:
    """attack5 F1: custom SQL calling a function whose body names public.norm(...) ran the
    public.norm(varchar) planted beside it at every call (resolve.py judged only the
    functions custom SQL calls itself). The start now refuses the file: the guard's walk,
    asked of custom SQL, follows the bodies (open_schema_code)."""
    tool = f"tools:\n  - name: t\n    type: sql\n    sql: {CALLERS[caller]}\n"
    assert await _answers(bed, tmp_path, tool, "t") is None


async def test_custom_sql_calling_a_body_that_calls_one_on_an_open_path_stops_the_start(
    bed: Bed, tmp_path: Path
) -> None:
    """attack5 F1b (attack2 F13 one call deeper): custom SQL calls app.outer_count(), whose
    body calls app.inner_count() with its own `SET search_path = public` and an unqualified
    `=` on varchar; the planted public.=(varchar, varchar) ran at every call. Now the start
    refuses the file (main 04cda17)."""
    tool = "tools:\n  - name: t\n    type: sql\n    sql: SELECT app.outer_count() AS n\n"
    assert await _answers(bed, tmp_path, tool, "t") is None


PL_TOOLS = {
    "pl-func": """
tools:
  - name: t
    type: pl-func
    language: plpgsql
    returns: text
    code: |
      BEGIN
        RETURN (SELECT string_agg(public.norm(p.name), ',' ORDER BY p.id) FROM app.people p);
      END;
""",
    "pl-do": """
tools:
  - name: t
    type: pl-do
    language: plpgsql
    code: |
      BEGIN
        result := to_jsonb((SELECT string_agg(public.norm(p.name), ',' ORDER BY p.id)
                            FROM app.people p));
      END;
""",
}


@pytest.mark.xfail(
    strict=True,
    reason="attack5 F2: PL code is not checked: its qualified public.norm(...) picks the "
    "overload planted in the open schema",
)
@pytest.mark.parametrize("kind", sorted(PL_TOOLS))
async def test_pl_code_never_runs_an_overload_planted_for_a_qualified_name(
    bed: Bed, tmp_path: Path, kind: str
) -> None:
    await _answers(bed, tmp_path, PL_TOOLS[kind], "t")


async def test_execute_query_refuses_the_same_reads(bed: Bed) -> None:
    """Control: the guard refuses each of those reads (open_schema_code, or open_schema_body
    for the nested call), planted or not."""
    settings = Settings.load(database={"dsn": bed.reader})
    async with Client(build_server(settings)) as client:
        for sql in CALLERS.values():
            result = await client.call_tool("execute_query", {"sql": sql})
            text = json.dumps([c.text for c in result.content if hasattr(c, "text")])
            assert result.is_error, text
            rules = ("open_schema_code", "open_schema_body", "long_identifier")
            assert any(rule in text for rule in rules), text
            assert "PWNED" not in text


JOINS: dict[str, tuple[str, dict[str, Any]]] = {
    "execute_query USING": ("execute_query", {"sql": "SELECT app.twins() AS n"}),
    "execute_query NATURAL": ("execute_query", {"sql": "SELECT app.twins_natural() AS n"}),
    "explain_query analyze": (
        "explain_query",
        {"sql": "SELECT app.twins() AS n", "analyze": True},
    ),
    "get_sample_rows where_clause": (
        "get_sample_rows",
        {"schema_name": "app", "table_name": "people", "where_clause": "app.twins() > 0"},
    ),
}


async def _refused_as_open_schema_body(bed: Bed, tool: str, arguments: dict[str, Any]) -> None:
    """`tool` refuses the call as open_schema_body, and nothing planted ran (no PWNED, no
    transaction ID taken and rolled back)."""
    since = await next_xid_when_idle(bed.admin)
    settings = Settings.load(database={"dsn": bed.reader})
    async with Client(build_server(settings)) as client:
        result = await client.call_tool(tool, arguments)
    text = json.dumps([c.text for c in result.content if hasattr(c, "text")])
    assert "PWNED" not in text, text
    assert result.is_error and "open_schema_body" in text, text
    assert await bed.burnt_xids(since) == []


@pytest.mark.parametrize("case", sorted(JOINS))
async def test_a_join_using_in_a_body_on_an_open_path_never_runs_a_planted_operator(
    bed: Bed, case: str
) -> None:
    """attack5 F3: refs.py did not see the `=` that JOIN ... USING and NATURAL JOIN look up,
    so a body on its own path with public, its names all qualified, passed open_schema_body
    and ran the planted public.=(varchar, varchar). Now refused (open_schema_body)."""
    tool, arguments = JOINS[case]
    await _refused_as_open_schema_body(bed, tool, arguments)


@pytest.mark.parametrize("tool", ["execute_query", "explain_query"])
async def test_a_declared_type_in_a_body_on_an_open_path_never_takes_a_planted_domain(
    bed: Bed, tool: str
) -> None:
    """attack5 F4: the guard did not read a PL/pgSQL body's declarations: `DECLARE v label`
    on the function's own path with public took the attacker's domain public.label (before
    app.label on that path), whose CHECK ran at the assignment. Now every body that resolves
    names at run time on such a path is refused (main f4f2f7c)."""
    arguments: dict[str, Any] = {"sql": "SELECT app.shout('hi') AS s"}
    if tool == "explain_query":
        arguments["analyze"] = True
    await _refused_as_open_schema_body(bed, tool, arguments)


@pytest_asyncio.fixture(loop_scope="session")
async def extension_in_public(pg: PgServer) -> AsyncIterator[str]:
    """A database where a trusted extension that defines `=` (citext, or pgvector where this
    PostgreSQL has no citext: the pgserver wheel) is installed in `public`, which has legacy
    CREATE rights: the reader's DSN."""
    db = await pg.create_database("attack5_ext")
    tag = secrets.token_hex(4)
    atk, reader = f"atk5x_{tag}", f"atk5x_reader_{tag}"
    await execute(
        db.dsn,
        f"""
        CREATE ROLE {atk} LOGIN;
        CREATE ROLE {reader} LOGIN;
        GRANT CREATE, USAGE ON SCHEMA public TO {atk};
        CREATE TABLE public.items (id int PRIMARY KEY, code varchar(10));
        INSERT INTO public.items VALUES (1, 'x');
        GRANT SELECT ON public.items TO {reader};
        """,
    )
    for extension in ("citext", "vector", None):
        if extension is None:
            await pg.drop_database(db.name)
            await execute(pg.admin_dsn, f"DROP ROLE {atk}; DROP ROLE {reader}")
            pytest.skip(f"this PostgreSQL ({pg.source}) has neither citext nor pgvector")
        try:
            await execute(db.dsn, f"CREATE EXTENSION {extension} SCHEMA public")
            break
        except asyncpg.FeatureNotSupportedError:
            continue
    try:
        yield as_role(db.dsn, reader)
    finally:
        await pg.drop_database(db.name)
        await execute(pg.admin_dsn, f"DROP ROLE {atk}; DROP ROLE {reader}")


async def test_an_extension_in_an_open_public_does_not_refuse_every_statement(
    extension_in_public: str,
) -> None:
    """attack5 F6: the driver's type lookup (read with every statement) has unqualified =, <>,
    > whose candidates include citext's in public, which kept public on every statement's
    path, so every statement was refused, SELECT 1 included. The lookup keeps no schema now
    (it means pg_catalog's operators; with public left off, nothing there can take it over).
    A statement's own `=` still does: the guard cannot tell `id = 1` from `email = 'x'` on a
    citext column without types, and leaving public off would silently compare the latter as
    text; so it is refused with the fix, as docs/security.md says (a decision, not a bug)."""
    settings = Settings.load(database={"dsn": extension_in_public})
    async with Client(build_server(settings)) as client:
        result = await client.call_tool("execute_query", {"sql": "SELECT 1 AS one"})
        text = json.dumps([c.text for c in result.content if hasattr(c, "text")])
        assert not result.is_error, text
        sql = "SELECT id FROM public.items WHERE id = 1"
        result = await client.call_tool("execute_query", {"sql": sql})
        text = json.dumps([c.text for c in result.content if hasattr(c, "text")])
        assert result.is_error and "open_schema_code" in text, text
        assert "REVOKE CREATE ON SCHEMA public FROM PUBLIC" in text, text
