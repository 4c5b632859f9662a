"""Users and row-level security (issue 24): each HTTP caller is a user entry found by its
static token; each call runs in `BEGIN READ ONLY` with `SET LOCAL ROLE` to the user's role and
its settings (set_config(..., true)), gone when the transaction ends; the guard's trust does
not follow SET ROLE."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx2 as httpx
import pytest
import pytest_asyncio
from customdefs import write
from eventually import eventually
from identitybed import Tenants, client_as, serving, tenants_in
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcpclient import call, call_error, execute, records
from pgbed import PgServer
from wire import pgbouncer

from pg_mcp_server.config import Settings
from pg_mcp_server.database.pool.engine import Database
from pg_mcp_server.errors import PermissionDeniedError
from pg_mcp_server.identity import AuthSettings, Grant, Identity, UserEntry, current_identity
from pg_mcp_server.identity.access import Access
from pg_mcp_server.server import PgMcp

DEFINITIONS = """
tools:
  - name: tenant_notes
    description: The caller's notes.
    type: sql
    sql: SELECT id, body FROM app.notes ORDER BY id
"""
MINE = (
    "SELECT id, body, current_user AS who, current_setting('mcp.user_id') AS user_id "
    "FROM app.notes ORDER BY id"
)


@pytest_asyncio.fixture(loop_scope="session")
async def tenants(pg: PgServer) -> AsyncIterator[Tenants]:
    async with tenants_in(pg, "identity") as made:
        yield made


def settings(tenants: Tenants, tmp: Path | None = None, **server: Any) -> Settings:
    if tmp is not None:
        server["custom_definitions"] = str(write(tmp, DEFINITIONS))
    return Settings.load(database={"dsn": tenants.dsn, "pool_size": 1}, server=server)


async def _pid(client: Client) -> int:
    out = await call(client, "execute_query", sql="SELECT pg_backend_pid() AS pid")
    pid: int = records(out)[0]["pid"]
    return pid


async def test_each_caller_sees_only_its_rows_on_one_reused_connection(
    tenants: Tenants, tmp_path: Path
) -> None:
    """alice (role ta, app.tenant_id a) and bob (tb, b) in turns on the one pooled
    connection: every way rows are read (execute_query, get_sample_rows, the sample
    resource, a custom SQL tool) shows the caller's rows only; carol (the login role, no
    tenant) sees none, so nothing of the one before her was left on the session."""
    access = Access(tenants.users())
    expected = {
        "alice": ([1, 2], tenants.ta),
        "bob": ([3, 4], tenants.tb),
        "carol": ([], tenants.login),
    }
    pids = set()
    async with serving(settings(tenants, tmp_path), access) as (base, _):
        for name in ("alice", "bob", "carol", "bob", "alice", "carol"):
            ids, role = expected[name]
            async with client_as(base, f"{name}-token") as client:
                pids.add(await _pid(client))
                out = records(await call(client, "execute_query", sql=MINE))
                assert [r["id"] for r in out] == ids, name
                assert {r["who"] for r in out} <= {role}
                assert {r["user_id"] for r in out} <= {name}
                who = records(
                    await call(
                        client,
                        "execute_query",
                        sql="SELECT current_user AS who, "
                        "current_setting('app.tenant_id', true) AS tenant, "
                        "current_setting('mcp.user_id', true) AS user_id",
                    )
                )[0]
                assert who["who"] == role and who["user_id"] == name
                # (A setting once set in a session reads '' after its transaction, not NULL.)
                assert (who["tenant"] or None) == {"alice": "a", "bob": "b"}.get(name)
                sample = await call(
                    client, "get_sample_rows", schema_name="app", table_name="notes", limit=10
                )
                assert sorted(r["id"] for r in records(sample)) == ids
                read = await client.read_resource("pg://schemas/app/tables/notes/sample")
                text = read.contents[0].text  # type: ignore[union-attr]
                assert sorted(r["id"] for r in records(json.loads(text))) == ids
                custom = await call(client, "tenant_notes")
                assert [r["id"] for r in records(custom)] == ids
    assert len(pids) == 1, "every call used the one pooled connection (pool_size=1)"


async def test_a_caller_changing_its_role_is_refused_and_the_next_is_not_affected(
    tenants: Tenants,
) -> None:
    access = Access(tenants.users())
    async with serving(settings(tenants), access) as (base, _):
        async with client_as(base, "alice-token") as alice:
            for sql in (
                f"SELECT set_config('role', '{tenants.tb}', false)",
                "SELECT set_config('app.tenant_id', 'b', false)",
                "SELECT set_config('app.tenant_id', 'b', true), * FROM app.notes",
                "SELECT set_config('mcp.user_id', 'bob', true)",
                f"SET ROLE {tenants.tb}",
                "RESET ROLE",
            ):
                body = await call_error(alice, "execute_query", sql=sql)
                assert body["error"]["code"] in ("WRITE_OPERATION_DENIED", "INVALID_SQL"), sql
        async with client_as(base, "carol-token") as carol:
            out = records(await call(carol, "execute_query", sql=MINE))
            assert out == []
            (who,) = records(await call(carol, "execute_query", sql="SELECT current_user AS who"))
            assert who["who"] == tenants.login


async def test_role_and_settings_end_with_the_transaction_even_when_set_for_the_session(
    tenants: Tenants,
) -> None:
    """Past the guard (our own connection use): a statement in alice's transaction that
    sets the role and a setting for the session (is_local false) leaves nothing for the next
    use of the connection, through the pool's reset."""
    db = Database(Settings.load(database={"dsn": tenants.dsn, "pool_size": 1}).database)
    await _set_for_the_session_then_look(db, tenants, tenants.login, rls=True)


async def test_role_and_settings_end_with_the_transaction_behind_pgbouncer(
    pg: PgServer, tenants: Tenants
) -> None:
    """The same in PgBouncer's transaction mode, where the server connection goes to the next
    client after each transaction: ROLLBACK (to the start savepoint, then of the whole
    transaction) undoes both."""
    async with pgbouncer(pg.admin_dsn, shared={"shared": tenants.database}) as running:
        db = Database(Settings.load(database={"dsn": running.dsn("shared")}).database)
        await db.ping()
        assert db.pooled is True
        # (PgBouncer's user is the test's superuser, to whom row-level security does not
        # apply: the tenants' roles, which it does apply to, are what is looked at.)
        superuser = await _user(running.dsn("shared"))
        await _set_for_the_session_then_look(db, tenants, superuser, rls=False)


async def _user(dsn: str) -> str:
    conn = await asyncpg.connect(dsn, statement_cache_size=0)
    try:
        name: str = await conn.fetchval("SELECT current_user")
        return name
    finally:
        await conn.close()


async def _set_for_the_session_then_look(
    db: Database, tenants: Tenants, login: str, *, rls: bool
) -> None:
    alice, bob, _ = tenants.users()
    try:
        pids = set()
        for user, ids in ((alice, [1, 2]), (bob, [3, 4])):
            token = current_identity.set(Identity(user))
            try:
                for use in (db.read_only, db.session):
                    async with use() as conn:
                        pids.add(await conn.fetchval("SELECT pg_backend_pid()"))
                        rows = await conn.fetch("SELECT id FROM app.notes ORDER BY id")
                        assert [r["id"] for r in rows] == ids
                        await conn.fetchval(
                            "SELECT set_config('role', $1, false), "
                            "set_config('app.tenant_id', 'c', false)",
                            tenants.tb if user is alice else tenants.ta,
                        )
            finally:
                current_identity.reset(token)
            async with db.read_only() as conn:  # no identity: the login role, as configured
                row = await conn.fetchrow(
                    "SELECT current_user AS who, current_setting('app.tenant_id', true) AS t,"
                    " current_setting('mcp.user_id', true) AS u, pg_backend_pid() AS pid"
                )
                assert row is not None
                pids.add(row["pid"])
                assert row["who"] == login
                assert not row["t"] and not row["u"]
                if rls:
                    assert await conn.fetch("SELECT id FROM app.notes") == []
        assert len(pids) == 1, "one server connection served every use"
    finally:
        await db.dispose()


@pytest.mark.parametrize("allow_open", [False, True])
@pytest.mark.parametrize("trusted", [[], ["login"]])
async def test_trust_does_not_follow_set_role(
    tenants: Tenants, trusted: list[str], allow_open: bool
) -> None:
    """Tenant A's function in a schema both use is refused for A's call and B's (its owner
    is not trusted, whichever role the call runs as), while the login role's own function is
    allowed under either role: trust is the login role's (SESSION_USER), never the role SET
    ROLE made current. Run with the login role trusted by name too, which made a tenant role
    trusted while CURRENT_USER named it; with open-schema code allowed, the owner is what
    refuses it."""
    roles = [getattr(tenants, r) for r in trusted]
    server = {"trusted_roles": roles, "allow_open_schema_code": allow_open}
    config = Settings.load(database={"dsn": tenants.dsn}, server=server)
    rule = "untrusted_owner" if allow_open else "open_schema_code"
    access = Access(tenants.users())
    async with serving(config, access) as (base, _):
        for name in ("alice", "bob", "alice"):
            async with client_as(base, f"{name}-token") as client:
                body = await call_error(client, "execute_query", sql="SELECT shared.peek()")
                assert body["error"]["code"] == "WRITE_OPERATION_DENIED", body
                assert body["error"]["context"]["rule"] == rule, body
                assert tenants.ta in body["error"]["message"]
                assert "PWNED" not in json.dumps(body)
                out = await call(
                    client, "execute_query", sql="SELECT app.tenant_of_caller() AS tenant"
                )
                assert records(out) == [{"tenant": {"alice": "a", "bob": "b"}[name]}]
        async with client_as(base, "carol-token") as carol:
            body = await call_error(carol, "execute_query", sql="SELECT shared.peek()")
            assert body["error"]["code"] == "WRITE_OPERATION_DENIED"
            out = await call(carol, "execute_query", sql="SELECT app.tenant_of_caller() AS t")
            assert records(out)[0]["t"] in (None, "")  # (see the first test)


async def test_a_role_the_login_role_cannot_act_as_is_a_clear_error(
    tenants: Tenants, caplog: pytest.LogCaptureFixture
) -> None:
    """At the call, PERMISSION_DENIED naming the role; at start, one warning naming the users
    (a database they may not use at all is refused too, naming it)."""
    users = (
        UserEntry(
            name="stranger",
            token="s-token",  # type: ignore[arg-type]
            databases={"default": Grant(role=tenants.outsider)},
        ),
        UserEntry(
            name="ghost",
            token="g-token",  # type: ignore[arg-type]
            databases={"default": Grant(role="no_such_role_at_all")},
        ),
        UserEntry(
            name="elsewhere",
            token="e-token",  # type: ignore[arg-type]
            databases={"other": Grant()},
        ),
    )
    async with serving(settings(tenants), Access(users)) as (base, _):
        for token, role in (("s-token", tenants.outsider), ("g-token", "no_such_role_at_all")):
            async with client_as(base, token) as client:
                body = await call_error(client, "execute_query", sql="SELECT 1")
                assert body["error"]["code"] == "PERMISSION_DENIED"
                assert body["error"]["context"]["role"] == role
                assert "cannot act as role" in body["error"]["message"]
        async with client_as(base, "e-token") as client:
            body = await call_error(client, "execute_query", sql="SELECT 1")
            assert body["error"]["code"] == "PERMISSION_DENIED"
            assert body["error"]["context"] == {"database": "default"}

        async def warned() -> list[str]:
            return [m for r in caplog.records if "cannot act as" in (m := r.getMessage())]

        found = await eventually(warned, what="the start-up warning")
        assert len(found) == 1, found
        assert f"ghost (no_such_role_at_all), stranger ({tenants.outsider})" in found[0]


async def test_unknown_tokens_are_refused_when_users_are_configured(tenants: Tenants) -> None:
    async with (
        serving(settings(tenants), Access(tenants.users())) as (base, _),
        httpx.AsyncClient(timeout=30) as http,
    ):
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            reply = await http.post(base + "/mcp", json={}, headers=headers)
            assert reply.status_code == 401
            assert reply.headers["www-authenticate"].startswith("Bearer")


async def test_users_and_mcp_auth_tokens_together_are_refused(tenants: Tenants) -> None:
    config = Settings.load(database={"dsn": tenants.dsn}, server={"auth_tokens": ["t"]})
    with pytest.raises(ValueError, match="MCP_AUTH_TOKENS and users"):
        async with serving(config, Access(tenants.users())):
            pass


async def test_stdio_user_is_the_identity_of_an_in_process_client(tenants: Tenants) -> None:
    """Over stdio (here: in process) the identity is `auth.stdio_user`, for every call."""
    from pg_mcp_server.identity.access import enter_stdio

    access = Access(tenants.users(), AuthSettings(stdio_user="bob"))
    server = PgMcp(settings(tenants), [], access=access)

    async def serve() -> list[int]:  # in a task: its context is its own
        enter_stdio(access)
        async with Client(server.server) as client:
            out = records(await call(client, "execute_query", sql=MINE))
            return [r["id"] for r in out]

    assert await asyncio.create_task(serve()) == [3, 4]


def test_only_custom_settings_carry_the_caller() -> None:
    for name in ("role", "search_path", "session_authorization"):
        with pytest.raises(ValueError, match="not a custom setting name"):
            AuthSettings(user_setting=name)
        with pytest.raises(ValueError, match="not a custom setting name"):
            AuthSettings(claims_setting=name)
    assert AuthSettings(user_setting=None, claims_setting="app.claims").claims_setting


def test_access_refuses_ambiguous_users(tenants: Tenants) -> None:
    alice, bob, _ = tenants.users()
    with pytest.raises(ValueError, match="named more than once"):
        Access((alice, alice))
    with pytest.raises(ValueError, match="stdio_user"):
        Access((alice, bob), AuthSettings(stdio_user="nobody"))
    with pytest.raises(ValueError, match="same token"):
        Access((alice, bob.model_copy(update={"token": alice.token})))


BOB_SHOWN = ["list_tables", "execute_query", "pg://schemas/{schema}/erd"]


async def test_what_a_user_may_not_use_is_not_listed_and_answers_as_unknown(
    tenants: Tenants,
) -> None:
    """bob's `tools:` list: only those tools, the resources that are their answers, and what
    it names; a hidden tool, resource or prompt is answered exactly as one that does not
    exist (its name in no list, no suggestion naming it). alice, without a list, sees all."""
    access = Access(tenants.users(bob={"tools": BOB_SHOWN}))
    async with serving(settings(tenants), access) as (base, _):
        async with client_as(base, "alice-token") as alice:
            every_tool = {t.name for t in (await alice.list_tools()).tools}
            every_resource = {r.uri for r in (await alice.list_resources()).resources}
            assert {"get_sample_rows", "describe_table", "read_resource"} <= every_tool
            assert "pg://system_info" in every_resource
            assert (await alice.list_prompts()).prompts
        async with client_as(base, "bob-token") as bob:
            assert {t.name for t in (await bob.list_tools()).tools} == {
                "list_tables",
                "execute_query",
            }
            assert (await bob.list_resources()).resources == []
            templates = {
                t.uri_template for t in (await bob.list_resource_templates()).resource_templates
            }
            assert templates == {
                "pg://schemas/{schema}/tables",  # list_tables' answer
                "pg://results/{id}/{page}",  # execute_query's held pages
                "pg://schemas/{schema}/erd",  # named
            }
            assert (await bob.list_prompts()).prompts == []
            # A hidden tool is unknown, with arguments valid or not.
            unknown = await call_error(bob, "no_such_tool")
            for hidden, arguments in (
                ("get_sample_rows", {"table_name": "notes", "schema_name": "app"}),
                ("get_sample_rows", {"limit": "not a number"}),
                ("read_resource", {"uri": "pg://system_info"}),
            ):
                body = await call_error(bob, hidden, **arguments)
                said = json.dumps(body["error"]).replace(hidden, "no_such_tool")
                assert json.loads(said) == unknown["error"], body
                assert "get_sample_rows" not in unknown["error"]["suggestion"]
            # So are a hidden resource and a hidden prompt.
            with pytest.raises(MCPError) as nowhere:
                await bob.read_resource("pg://nowhere")
            for uri in ("pg://system_info", "pg://schemas/app/tables/notes/sample"):
                with pytest.raises(MCPError) as hidden_resource:
                    await bob.read_resource(uri)
                assert str(hidden_resource.value).replace(uri, "pg://nowhere") == str(nowhere.value)
            with pytest.raises(MCPError) as no_prompt:
                await bob.get_prompt("no_such_prompt")
            prompt = (await alice_prompt(base)).name
            with pytest.raises(MCPError) as hidden_prompt:
                await bob.get_prompt(prompt)
            assert str(hidden_prompt.value).replace(prompt, "no_such_prompt") == str(
                no_prompt.value
            )
            # What is shown works, as bob's role.
            out = records(await call(bob, "execute_query", sql=MINE))
            assert [r["id"] for r in out] == [3, 4]
            listed = await bob.read_resource("pg://schemas/app/tables")
            assert "notes" in listed.contents[0].text  # type: ignore[union-attr]


async def alice_prompt(base: str) -> Any:
    async with client_as(base, "alice-token") as alice:
        return (await alice.list_prompts()).prompts[0]


async def test_held_results_and_history_belong_to_the_user(tenants: Tenants) -> None:
    """The owner of what is held is the user (`user:NAME`): bob cannot read alice's cursor,
    nor see her statements; alice reads it over another connection."""
    sql = "SELECT g, repeat('x', 400) AS filler FROM generate_series(1, 1000) g"
    async with serving(settings(tenants), Access(tenants.users())) as (base, _):
        async with client_as(base, "alice-token") as alice:
            out = await call(alice, "execute_query", sql=sql)
            cursor = out["next_cursor"]
        async with client_as(base, "bob-token") as bob:
            body = await call_error(bob, "execute_query", cursor=cursor)
            assert body["error"]["code"] == "RESULT_EXPIRED"
            recent = await bob.read_resource("pg://queries/recent")
            assert sql not in recent.contents[0].text  # type: ignore[union-attr]
        async with client_as(base, "alice-token") as alice:
            page = await call(alice, "execute_query", cursor=cursor)
            assert page["rows"][0][0] == out["row_count"] + 1
            recent = await alice.read_resource("pg://queries/recent")
            assert "generate_series(1, 1000)" in recent.contents[0].text  # type: ignore[union-attr]


async def test_each_role_resolves_names_on_its_own_search_path(tenants: Tenants) -> None:
    """A schema per tenant, named as its role, owned by a trusted role: on the default
    search path ("$user", public) an unqualified `mine` is each role's own table, in turns:
    the guard judges each call on facts for that call's role (its path, the schemas it may
    use), never on the path of the role before."""
    script = "".join(
        f"CREATE SCHEMA {role}; GRANT USAGE ON SCHEMA {role} TO {role};"
        f"CREATE TABLE {role}.mine AS SELECT '{tag}'::text AS who;"
        f"GRANT SELECT ON {role}.mine TO {role};"
        for role, tag in ((tenants.ta, "a"), (tenants.tb, "b"))
    )
    await execute(tenants.admin, script)
    try:
        async with serving(settings(tenants), Access(tenants.users())) as (base, _):
            for name, tag in (("alice", "a"), ("bob", "b"), ("alice", "a"), ("bob", "b")):
                async with client_as(base, f"{name}-token") as client:
                    out = await call(client, "execute_query", sql="SELECT who FROM mine")
                    assert records(out) == [{"who": tag}], name
    finally:
        await execute(
            tenants.admin, f"DROP SCHEMA {tenants.ta} CASCADE; DROP SCHEMA {tenants.tb} CASCADE"
        )


async def test_a_privileged_role_a_user_runs_as_is_refused(tenants: Tenants, pg: PgServer) -> None:
    """The login role passes its own audit, but a role it may SET ROLE to is a superuser
    (not inherited through membership): without MCP_ALLOW_PRIVILEGED_ROLE, a call as that
    role is refused before any statement of the caller's runs."""
    evil = f"{tenants.ta}_super"
    await execute(
        pg.admin_dsn, f"CREATE ROLE {evil} SUPERUSER NOLOGIN; GRANT {evil} TO {tenants.login}"
    )
    db = Database(Settings.load(database={"dsn": tenants.dsn}).database, allow_privileged=False)
    user = UserEntry(name="mallory", databases={"*": Grant(role=evil)})
    try:
        await db.ping()  # the login role itself is fine
        token = current_identity.set(Identity(user))
        try:
            with pytest.raises(PermissionDeniedError, match="is a superuser"):
                async with db.read_only() as conn:
                    await conn.fetchval("SELECT 1")
        finally:
            current_identity.reset(token)
    finally:
        await db.dispose()
        await execute(pg.admin_dsn, f"DROP ROLE {evil}")


async def test_callers_in_turn_through_pgbouncer(pg: PgServer, tenants: Tenants) -> None:
    """The server behind PgBouncer in transaction mode, every call on its one server
    connection: alice and bob in turns each see their rows only, as their roles, and a
    caller without a role after them runs as the login role (PgBouncer's user here, a
    superuser whom row-level security does not restrict) with no tenant left set."""
    async with pgbouncer(pg.admin_dsn, shared={"shared": tenants.database}) as running:
        dsn = running.dsn("shared")
        login = await _user(dsn)
        config = Settings.load(database={"dsn": dsn})
        async with serving(config, Access(tenants.users())) as (base, gateway):
            db = gateway.db
            assert isinstance(db, Database)
            assert db.pooled in (None, True)
            pids = set()
            for name, ids, role in (
                ("alice", [1, 2], tenants.ta),
                ("bob", [3, 4], tenants.tb),
                ("carol", [1, 2, 3, 4, 5], login),
                ("alice", [1, 2], tenants.ta),
            ):
                async with client_as(base, f"{name}-token") as client:
                    pids.add(await _pid(client))
                    out = records(await call(client, "execute_query", sql=MINE))
                    assert [r["id"] for r in out] == ids, name
                    assert {r["who"] for r in out} == {role}
                    (seen,) = records(
                        await call(
                            client,
                            "execute_query",
                            sql="SELECT current_setting('app.tenant_id', true) AS t",
                        )
                    )
                    assert (seen["t"] or None) == {"alice": "a", "bob": "b"}.get(name)
            assert db.pooled is True
            assert len(pids) == 1, "one server connection behind PgBouncer served every call"
