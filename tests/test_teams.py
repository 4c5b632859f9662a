"""Issue 24 end to end: one configuration file with two databases and users, served over
HTTP. Each user's token picks its databases and, in each, the role and settings its statements
run with: the multi-tenant example of README's "Users and row-level security"."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2 as httpx
import pytest_asyncio
from identitybed import Tenants, as_role, client_as, serving, tenants_in
from mcpclient import call, call_error, execute, records
from pgbed import PgServer

from pg_mcp_server.configfile import load

MINE = "SELECT id FROM app.notes ORDER BY id"


@pytest_asyncio.fixture(loop_scope="session")
async def tenants(pg: PgServer) -> AsyncIterator[Tenants]:
    async with tenants_in(pg, "teams") as made:
        yield made


@pytest_asyncio.fixture(loop_scope="session")
async def catalog(pg: PgServer, tenants: Tenants) -> AsyncIterator[str]:
    """A second database the login role reads: a product catalog every tenant shares."""
    db = await pg.create_database("teams_catalog")
    await execute(
        db.dsn,
        "CREATE TABLE public.products (id int PRIMARY KEY, name text NOT NULL);"
        "INSERT INTO public.products VALUES (1, 'lamp'), (2, 'desk');"
        f"GRANT SELECT ON public.products TO {tenants.login};",
    )
    try:
        yield as_role(db.dsn, tenants.login)
    finally:
        await pg.drop_database(db.name)


async def test_each_token_uses_its_databases_as_its_role(
    tmp_path: Path, tenants: Tenants, catalog: str
) -> None:
    path = tmp_path / "pg-mcp.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            databases:
              - name: notes
                default: true
                dsn: {tenants.dsn}
                pool_size: 1
              - name: shop
                dsn: {catalog}
            users:
              - name: alice
                token: alice-token
                databases:
                  notes: {{role: {tenants.ta}, settings: {{app.tenant_id: a}}}}
              - name: bob
                token: bob-token
                databases:
                  notes: {{role: {tenants.tb}, settings: {{app.tenant_id: b}}}}
                  shop: {{}}
            """
        )
    )
    config = load(str(path))
    async with serving(config.settings, None, config) as (base, _gateway):
        async with client_as(base, "alice-token") as alice:
            listed = await call(alice, "list_databases")
            assert [d["name"] for d in listed["databases"]] == ["notes"]
            out = records(await call(alice, "execute_query", sql=MINE))
            assert [r["id"] for r in out] == [1, 2]
            # a database alice may not use answers as one that is not there
            hidden = await call_error(alice, "execute_query", sql=MINE, database="shop")
            unknown = await call_error(alice, "execute_query", sql=MINE, database="nope")
            assert hidden["error"]["code"] == unknown["error"]["code"]
            assert "shop" not in str(hidden["error"]["suggestion"])
        async with client_as(base, "bob-token") as bob:
            listed = await call(bob, "list_databases")
            assert sorted(d["name"] for d in listed["databases"]) == ["notes", "shop"]
            out = records(await call(bob, "execute_query", sql=MINE, database="notes"))
            assert [r["id"] for r in out] == [3, 4]
            (who,) = records(
                await call(bob, "execute_query", sql="SELECT current_user AS r", database="notes")
            )
            assert who["r"] == tenants.tb
            shop = records(
                await call(bob, "execute_query", sql="SELECT name FROM products", database="shop")
            )
            assert [r["name"] for r in shop] == ["lamp", "desk"]
        # alice again on the same pooled connection (pool_size 1): nothing of bob's is left
        async with client_as(base, "alice-token") as alice:
            out = records(await call(alice, "execute_query", sql=MINE))
            assert [r["id"] for r in out] == [1, 2]
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(
                base + "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Authorization": "Bearer nobody", "Accept": "application/json"},
            )
            assert answer.status_code == 401
            assert answer.headers["www-authenticate"].startswith("Bearer")
