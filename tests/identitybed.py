"""A multi-tenant database for the identity tests (issue 24): a non-superuser login role, two
tenant roles it is a member of, a table with row-level security keyed by a setting, and the
server over HTTP in process (uvicorn on a loopback port), its users given directly."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcpclient import execute
from pgbed import PgServer
from serverproc import free_port

from pg_mcp_server.config import Settings
from pg_mcp_server.configfile import ServerConfig
from pg_mcp_server.identity import Grant, UserEntry
from pg_mcp_server.identity.access import Access
from pg_mcp_server.transport.gateway import Gateway, http_app

SETUP = """
CREATE ROLE {login} LOGIN;
CREATE ROLE {ta} NOLOGIN;
CREATE ROLE {tb} NOLOGIN;
CREATE ROLE {outsider} NOLOGIN;
GRANT {ta}, {tb} TO {login};
CREATE SCHEMA app;
GRANT USAGE ON SCHEMA app TO {login}, {ta}, {tb};
CREATE TABLE app.notes (id int PRIMARY KEY, tenant text NOT NULL, body text NOT NULL);
INSERT INTO app.notes VALUES
    (1, 'a', 'alpha'), (2, 'a', 'apple'), (3, 'b', 'beta'), (4, 'b', 'banana'),
    (5, 'c', 'cherry');
ALTER TABLE app.notes ENABLE ROW LEVEL SECURITY;
CREATE POLICY by_tenant ON app.notes USING (tenant = current_setting('app.tenant_id', true));
GRANT SELECT ON app.notes TO {login}, {ta}, {tb};
ANALYZE app.notes;
-- The login role's own function: trusted for every caller, whatever role a call runs as.
CREATE FUNCTION app.tenant_of_caller() RETURNS text STABLE LANGUAGE sql
    AS $$SELECT pg_catalog.current_setting('app.tenant_id', true)$$;
ALTER FUNCTION app.tenant_of_caller() OWNER TO {login};
-- A schema both tenants use, where tenant A may create: A's function is trusted by nobody.
CREATE SCHEMA shared;
GRANT USAGE ON SCHEMA shared TO {login}, {ta}, {tb};
GRANT CREATE ON SCHEMA shared TO {ta};
SET ROLE {ta};
CREATE FUNCTION shared.peek() RETURNS text STABLE LANGUAGE plpgsql AS $f$
BEGIN
    RAISE EXCEPTION 'PWNED as %', current_user;
END $f$;
RESET ROLE;
"""


def as_role(dsn: str, role: str) -> str:
    return f"postgresql://{role}@{dsn.split('@', 1)[1]}"


@dataclass
class Tenants:
    admin: str  # the superuser's DSN of the database
    database: str  # its name
    login: str
    ta: str
    tb: str
    outsider: str

    @property
    def dsn(self) -> str:
        """The server's DSN: as the login role."""
        return as_role(self.admin, self.login)

    def users(self, **extra: Any) -> tuple[UserEntry, ...]:
        """alice (tenant a, role ta), bob (tenant b, role tb) and carol (the login role, no
        tenant), with static tokens."""
        return (
            UserEntry(
                name="alice",
                token="alice-token",  # type: ignore[arg-type]
                databases={"default": Grant(role=self.ta, settings={"app.tenant_id": "a"})},
                **extra.get("alice", {}),
            ),
            UserEntry(
                name="bob",
                token="bob-token",  # type: ignore[arg-type]
                databases={"*": Grant(role=self.tb, settings={"app.tenant_id": "b"})},
                **extra.get("bob", {}),
            ),
            UserEntry(
                name="carol",
                token="carol-token",  # type: ignore[arg-type]
                databases={"default": Grant()},
                **extra.get("carol", {}),
            ),
        )


@asynccontextmanager
async def tenants_in(pg: PgServer, name: str) -> AsyncIterator[Tenants]:
    """A database made with SETUP and roles of its own (roles are cluster-wide: unique names),
    all dropped afterwards: what each test module's `tenants` fixture yields."""
    db = await pg.create_database(name)
    roles = names()
    await execute(db.dsn, SETUP.format(**roles))
    try:
        yield Tenants(db.dsn, db.name, **roles)
    finally:
        await pg.drop_database(db.name)
        await execute(pg.admin_dsn, "".join(f"DROP ROLE IF EXISTS {r};" for r in roles.values()))


def names() -> dict[str, str]:
    tag = secrets.token_hex(3)
    return {k: f"idt_{k}_{tag}" for k in ("login", "ta", "tb", "outsider")}


@asynccontextmanager
async def serving(
    settings: Settings, access: Access | None, config: ServerConfig | None = None
) -> AsyncIterator[tuple[str, Gateway]]:
    """The HTTP app in process under uvicorn on a free loopback port: its base URL. `config`:
    a configuration file's (its users are the access unless `access` is given)."""
    app = http_app(settings, [], config=config, access=access)
    port = free_port()
    served = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_level="warning")
    server = uvicorn.Server(served)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)  # polling a condition, not waiting out a delay
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def client_as(base: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(base + "/mcp", http_client=http)) as client,
    ):
        yield client
