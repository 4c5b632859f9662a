"""Security review attack7 (issue 24's identity work): hostile tenants against the per-call
SET LOCAL ROLE and row-level security. Exploratory probes; findings become strict tests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx2 as httpx
import pytest
import pytest_asyncio
from identitybed import Tenants, client_as, serving, tenants_in
from mcp import Client
from mcpclient import call, call_error, execute, fetch, records
from pgbed import PgServer

from pg_mcp_server.config import Settings
from pg_mcp_server.identity.access import Access


@pytest_asyncio.fixture(loop_scope="session")
async def tenants(pg: PgServer) -> AsyncIterator[Tenants]:
    async with tenants_in(pg, "attack7") as made:
        yield made


def settings(tenants: Tenants, **server: Any) -> Settings:
    return Settings.load(database={"dsn": tenants.dsn, "pool_size": 1}, server=server)


async def _any(client: Client, tool: str, **args: Any) -> Any:
    try:
        return await call(client, tool, **args)
    except AssertionError:
        return await call_error(client, tool, **args)


PER_TENANT = """
CREATE SCHEMA {ta}; GRANT USAGE ON SCHEMA {ta} TO {ta};
CREATE TABLE {ta}.mine AS SELECT 'a-note'::text AS note;
GRANT SELECT ON {ta}.mine TO {ta};
CREATE SCHEMA {tb}; GRANT USAGE ON SCHEMA {tb} TO {tb};
CREATE TABLE {tb}.mine AS SELECT 'b-hunter2'::text AS password;
GRANT SELECT ON {tb}.mine TO {tb};
"""


async def test_a_described_shape_is_the_callers_own_role(tenants: Tenants) -> None:
    """F1. A schema per tenant named as its role (the README's worked example): the same SQL
    text (`SELECT * FROM mine`) is another table for each role ("$user" on the path). The
    described shape (column names, redaction verdict) and the redaction facts were kept by
    SQL text / relation name alone: bob, after alice, got alice's column name `note` over
    his own `password` column, and his password unredacted."""
    t = tenants
    await execute(t.admin, PER_TENANT.format(ta=t.ta, tb=t.tb))
    try:
        async with serving(settings(t), Access(t.users())) as (base, _):
            async with client_as(base, "alice-token") as a:
                out = await call(a, "execute_query", sql="SELECT * FROM mine")
                assert out["columns"] == [{"name": "note", "data_type": "text"}]
                assert records(out) == [{"note": "a-note"}]
            async with client_as(base, "bob-token") as b:
                out = await call(b, "execute_query", sql="SELECT * FROM mine")
                assert [c["name"] for c in out["columns"]] == ["password"], out
                assert "b-hunter2" not in json.dumps(out), out
            async with client_as(base, "alice-token") as a:
                out = await call(a, "execute_query", sql="SELECT * FROM mine")
                assert [c["name"] for c in out["columns"]] == ["note"], out
                assert records(out) == [{"note": "a-note"}]
    finally:
        await execute(t.admin, f"DROP SCHEMA {t.ta} CASCADE; DROP SCHEMA {t.tb} CASCADE")


ORACLE = """
INSERT INTO app.notes SELECT g, 'c', 'filler ' || g FROM generate_series(100, 5099) g;
INSERT INTO app.notes SELECT g, 'b', 'topsecret' FROM generate_series(6000, 6399) g;
CREATE INDEX notes_body ON app.notes (body);
ANALYZE app.notes;
"""


def _plan(out: dict[str, Any]) -> str:
    return str(out["plan"])


async def test_explain_is_no_oracle_on_another_tenants_rows(tenants: Tenants) -> None:
    """F2 (fixed). explain_query runs the plan as the caller's role, but the plan itself
    reports about rows row-level security hides: with ANALYZE, an index scan on a value
    another tenant has showed `Rows Removed by Filter: N` (the policy's filter removing the
    other tenant's rows), 0 for a value nobody has; without ANALYZE the estimate came from
    statistics over every tenant's rows (texteq is leakproof, so the planner may use them).
    Alice learnt that tenant b has 400 notes whose body is 'topsecret'. Now a user's plan of
    a statement reading a table its policy filters is refused, with and without ANALYZE, and
    so is index advice on it; a table without a policy is still planned for the same user,
    and the server's own role (no users) is served as before."""
    t = tenants
    await execute(t.admin, ORACLE)
    await execute(
        t.admin,
        f"CREATE TABLE app.open_notes AS SELECT 1 AS id; GRANT SELECT ON app.open_notes TO {t.ta}",
    )
    leak = "SELECT id FROM app.notes WHERE body = 'topsecret'"
    try:
        await execute(t.admin, "CREATE EXTENSION IF NOT EXISTS hypopg")
        hypopg = True
    except asyncpg.PostgresError:
        hypopg = False
    async with (
        serving(settings(t), Access(t.users())) as (base, _),
        client_as(base, "alice-token") as a,
    ):
        for analyze in (True, False):
            body = await call_error(a, "explain_query", sql=leak, analyze=analyze)
            assert body["error"]["code"] == "PERMISSION_DENIED", body
            assert body["error"]["context"]["rule"] == "row_security", body
            assert "400" not in json.dumps(body), body
        advice = json.dumps(await _any(a, "analyze_query_indexes", queries=[leak]))
        if hypopg:  # (PostgreSQL 15 in the suite: Debian's package)
            assert "row-level security filters your rows" in advice, advice
            assert "400" not in advice, advice
        served = await call(a, "explain_query", sql="SELECT id FROM app.open_notes")
        assert "Seq Scan" in _plan(served)
    # No users: the server's own role is planned as before (its policy hides every row here,
    # and nothing is asked of row-level security).
    async with (
        serving(settings(t), None) as (base, _),
        client_as(base, None) as c,
    ):
        plain = await call(c, "explain_query", sql=leak)
        assert "notes" in _plan(plain)


SLOW = (
    "SELECT count(*) AS n FROM generate_series(1, 12000) a, generate_series(1, 6000) b "
    "WHERE 'alice-private-search' IS NOT NULL"
)


async def _until_running(admin: str, marker: str) -> int:
    """The pid of the server's backend running the statement that names `marker`."""
    for _ in range(2000):
        rows = await fetch(
            admin,
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 "
            "AND pid <> pg_backend_pid()",
            f"%{marker}%",
        )
        if rows:
            return int(rows[0]["pid"])
        await asyncio.sleep(0.005)  # polling a condition
    raise AssertionError("the slow statement never ran")


async def test_activity_shows_no_other_users_statements(tenants: Tenants) -> None:
    """F3. Every pooled session is the login role's, whatever role a call SETs: a
    user whose grant runs as the login role (carol; any user with settings but no role)
    sees every other user's statement in flight, literals included, in pg://stat/activity
    (and analyze_db_health's long-running check). A user with a role of its own (bob)
    sees none: PostgreSQL shows a session's query to roles with the privileges of its
    session user only. Now the login role's sessions other than the caller's own show no
    statement to an identified caller (rows.hides_statements_of)."""
    t = tenants
    config = Settings.load(database={"dsn": t.dsn, "pool_size": 3}, server={})
    async with (
        serving(config, Access(t.users())) as (base, _),
        client_as(base, "alice-token") as a,
    ):
        slow = asyncio.create_task(call(a, "explain_query", sql=SLOW, analyze=True))
        try:
            await _until_running(t.admin, "alice-private-search")
            seen = {}
            for name in ("bob", "carol"):
                async with client_as(base, f"{name}-token") as other:
                    read = await other.read_resource("pg://stat/activity")
                    seen[name] = read.contents[0].text  # type: ignore[union-attr]
            assert not slow.done(), "both read while alice's statement ran"
        finally:
            await slow
    assert "alice-private-search" not in seen["bob"]
    assert "alice-private-search" not in seen["carol"], seen["carol"][:2000]
    assert "another caller's statement" in seen["carol"]
    assert "(reading pg://stat/activity)" in seen["carol"]  # its own is still shown


PLANTED = """
CREATE TYPE app.mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE app.moods (id int PRIMARY KEY, m app.mood, d app.mood[]);
INSERT INTO app.moods VALUES (1, 'ok', '{{sad,ok}}');
GRANT SELECT ON app.moods TO {ta}, {tb};
GRANT USAGE ON TYPE app.mood TO {ta}, {tb};
CREATE SCHEMA {ta} AUTHORIZATION {ta};
SET ROLE {ta};
CREATE FUNCTION {ta}.pwn(a anyelement, b anyelement) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
    RAISE EXCEPTION 'PWNED as % (session %)', current_user, session_user;
END $f$;
CREATE FUNCTION {ta}.pwn2(a oid, b int) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
    RAISE EXCEPTION 'PWNED2 as % (session %)', current_user, session_user;
END $f$;
CREATE FUNCTION {ta}.pwn3(a app.mood, b app.mood) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
    RAISE EXCEPTION 'PWNED3 as % (session %)', current_user, session_user;
END $f$;
CREATE OPERATOR {ta}.<> (leftarg = oid, rightarg = int4, function = {ta}.pwn2);
CREATE OPERATOR {ta}.= (leftarg = oid, rightarg = int4, function = {ta}.pwn2);
CREATE OPERATOR {ta}.= (leftarg = app.mood, rightarg = app.mood, function = {ta}.pwn3);
CREATE FUNCTION {ta}.enum_range(app.mood) RETURNS app.mood[] LANGUAGE plpgsql AS $f$
BEGIN
    RAISE EXCEPTION 'PWNED4 as %', current_user;
END $f$;
CREATE FUNCTION {ta}.lower(app.mood) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN
    RAISE EXCEPTION 'PWNED5 as %', current_user;
END $f$;
RESET ROLE;
"""

PROBES: list[tuple[str, dict[str, Any]]] = [
    ("execute_query", {"sql": "SELECT * FROM app.moods"}),
    ("execute_query", {"sql": "SELECT 'ok'::app.mood AS m, '{ok}'::app.mood[] AS d"}),
    ("execute_query", {"sql": "SELECT id FROM app.moods WHERE m = 'ok'"}),
    ("execute_query", {"sql": "SELECT enum_range(m) FROM app.moods"}),
    ("execute_query", {"sql": "SELECT lower(m) FROM app.moods"}),
    ("execute_query", {"sql": "SELECT id FROM app.moods WHERE m = $1", "params": ["ok"]}),
    ("get_sample_rows", {"schema_name": "app", "table_name": "moods"}),
    ("get_sample_rows", {"schema_name": "app", "table_name": "moods", "where_clause": "m = 'ok'"}),
    ("explain_query", {"sql": "SELECT id FROM app.moods WHERE m = 'ok'", "analyze": True}),
    ("describe_table", {"schema_name": "app", "table_name": "moods"}),
]


async def test_planted_on_the_tenants_own_search_path_never_runs(tenants: Tenants) -> None:
    """Tenant A owns the schema its role's "$user" names (schema per tenant, owned by the
    tenant: it may create there) and plants exact-type operators and functions there. Its
    own calls (and bob's) must never run them: they run as the tenant in the server's
    session, whose login role is a member of every tenant role (SET ROLE to any of them)."""
    t = tenants
    await execute(t.admin, PLANTED.format(ta=t.ta, tb=t.tb))
    said: list[str] = []
    async with serving(settings(t), Access(t.users())) as (base, _):
        for name in ("alice", "bob", "alice"):
            async with client_as(base, f"{name}-token") as c:
                for tool, args in PROBES:
                    said.append(f"{name} {tool} {args}: {json.dumps(await _any(c, tool, **args))}")
    text = "\n".join(said)
    Path("/tmp/a7_planted.txt").write_text(text)
    assert "PWNED" not in text, text


RACE = """
CREATE ROLE {owner} LOGIN;
CREATE ROLE {atk} LOGIN;
CREATE SCHEMA atk AUTHORIZATION {atk};
GRANT USAGE ON SCHEMA atk TO {login}, {ta}, {tb};
GRANT USAGE, CREATE ON SCHEMA atk TO {owner};
SET ROLE {atk};
CREATE FUNCTION atk.evil() RETURNS text IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'PWNED as % (session %)', current_user, session_user;
END $$;
SET ROLE {owner};
CREATE TABLE atk.t (id int PRIMARY KEY, v text);
INSERT INTO atk.t VALUES (1, 'a');
CREATE VIEW atk.v AS SELECT id, v FROM atk.t;
GRANT SELECT ON atk.t, atk.v TO {login}, {ta}, {tb};
RESET ROLE;
"""
REPLACE_VIEW = "CREATE OR REPLACE VIEW atk.v AS SELECT id, v || atk.evil() AS v FROM atk.t"


async def _lock_wait(admin: str, database: str) -> None:
    for _ in range(4000):
        rows = await fetch(
            admin,
            "SELECT 1 FROM pg_stat_activity WHERE datname = $1 "
            "AND application_name = 'pg-mcp-server' AND wait_event_type = 'Lock'",
            database,
        )
        if rows:
            return
        await asyncio.sleep(0.005)  # polling a condition
    raise AssertionError("the server's call never waited on the attacker's lock")


@pytest.mark.parametrize("pool_mode", ["session", "transaction"])
@pytest.mark.parametrize("warm", [True, False], ids=["plan-known", "first-call"])
@pytest.mark.parametrize(
    "tool,args",
    [
        ("execute_query", {"sql": "SELECT id, v FROM atk.v"}),
        ("explain_query", {"sql": "SELECT id, v FROM atk.v"}),
        ("get_sample_rows", {"schema_name": "atk", "table_name": "v"}),
    ],
    ids=["execute", "explain", "sample"],
)
async def test_a_view_replaced_while_a_tenants_call_waits_is_refused(
    tenants: Tenants, tool: str, args: dict[str, Any], warm: bool, pool_mode: str
) -> None:
    """Issue 19's check-then-lock race with SET ROLE in play: alice's call runs as tenant
    role A, whose relation locks go out after set_config('role') in a round trip of their
    own. The view's (trusted) owner replaces it, uncommitted, with one calling an untrusted
    function; the call is seen waiting on the lock, the change commits: the call is refused,
    and the function never ran (as the tenant, in the server's session)."""
    t = tenants
    tag = t.ta.rsplit("_", 1)[1]
    owner, atk = f"a7_owner_{tag}", f"a7_atk_{tag}"
    await execute(t.admin, RACE.format(owner=owner, atk=atk, login=t.login, ta=t.ta, tb=t.tb))
    config = Settings.load(
        database={"dsn": t.dsn, "pool_size": 1, "pool_mode": pool_mode},
        server={"trusted_roles": [owner]},
    )
    changer = await asyncpg.connect(f"postgresql://{owner}@{t.admin.split('@', 1)[1]}")
    try:
        async with (
            serving(config, Access(t.users())) as (base, _),
            client_as(base, "alice-token") as a,
        ):
            if warm:
                await call(a, tool, **args)
            await changer.execute("BEGIN")
            await changer.execute(REPLACE_VIEW)
            attempt = asyncio.ensure_future(_any(a, tool, **args))
            try:
                await _lock_wait(t.admin, t.database)
            finally:
                await changer.execute("COMMIT")
            body = await attempt
        assert "PWNED" not in json.dumps(body), body
        assert body["error"]["code"] == "WRITE_OPERATION_DENIED", body
    finally:
        await changer.close()
        await execute(
            t.admin,
            f"DROP SCHEMA atk CASCADE; DROP OWNED BY {owner}, {atk}; "
            f"DROP ROLE {owner}; DROP ROLE {atk}",
        )


async def test_a_failing_introspection_endpoint_is_not_asked_again_at_once(
    tenants: Tenants,
) -> None:
    """F4. Any caller, with any made-up opaque token, made the server POST to the
    authorization server's introspection endpoint (with the server's client credentials),
    each time, even while that endpoint failed: a flood of made-up tokens is a flood of
    requests to the authorization server, each caller waiting on its timeout. After a failed
    ask the server now answers 503 for a few seconds without asking (as for the JWKS)."""
    from test_identity_oauth import Introspection, Jwks, access, config

    from pg_mcp_server.identity.introspection import RETRY_S

    refusing = Introspection()  # (it refuses these credentials: 401, a failed ask)
    keys = Jwks()
    try:
        both = access(
            tenants,
            keys,
            introspection_endpoint=refusing.url,
            client_id="mcp-server",
            client_secret="not-the-secret",
        )
        async with (
            serving(config(tenants), both) as (base, _),
            httpx.AsyncClient(timeout=30) as http,
        ):
            started = time.monotonic()
            for i in range(3):
                bearer = {"Authorization": f"Bearer made-up-{i}"}
                reply = await http.post(base + "/mcp", json={}, headers=bearer)
                assert reply.status_code == 503
                assert f"made-up-{i}" not in reply.text
            assert time.monotonic() - started < RETRY_S  # so the count says something:
        assert refusing.asked == 1
    finally:
        refusing.close()
        keys.close()


LEAKY = [
    "SELECT id FROM app.notes WHERE (CASE WHEN body = 'beta' THEN 1 / (id - id) ELSE 1 END) = 1",
    "SELECT id FROM app.notes WHERE body::int = 1 AND tenant = 'b'",
    "SELECT id FROM app.notes WHERE tenant = 'b' AND body::int = 1",
    "SELECT id FROM app.notes WHERE (SELECT 1 / (id - id) WHERE body = 'banana') IS NULL",
    "SELECT id FROM app.notes n WHERE EXISTS (SELECT 1 WHERE n.body::int = 1)",
]


async def test_errors_echo_no_value_of_another_tenants_rows(tenants: Tenants) -> None:
    """Held: a predicate that fails on a value (a division by zero, a failing cast that
    echoes the text) is evaluated after the policy's filter (the policy is a security
    barrier; neither is leakproof), so no error names or reveals tenant b's rows. (A
    constant `1 / 0` fails at planning whatever the rows: the divisor here is a column's.)"""
    t = tenants
    said: list[str] = []
    async with (
        serving(settings(t), Access(t.users())) as (base, _),
        client_as(base, "alice-token") as a,
    ):
        for sql in LEAKY:
            for tool, args in (
                ("execute_query", {"sql": sql}),
                ("explain_query", {"sql": sql, "analyze": True}),
            ):
                said.append(json.dumps(await _any(a, tool, **args)))
        for where in (
            "body::int = 1",
            "(CASE WHEN body = 'beta' THEN 1 / (id - id) ELSE 1 END) = 1",
        ):
            args = {"schema_name": "app", "table_name": "notes", "where_clause": where}
            said.append(json.dumps(await _any(a, "get_sample_rows", **args)))
    text = "\n".join(said)
    for value in ("beta", "banana", "cherry"):
        assert f'\\"{value}\\"' not in text and f'"{value}"' not in text, text
    assert "division by zero" not in text, text
