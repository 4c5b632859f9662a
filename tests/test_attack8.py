"""attack8: several databases combined with users (issue 24), attacked. A user whose grant
names one database tries to reach, or learn the name of, another through every route the
server has (the `database` argument, resource URIs, read_resource, prompts, completions,
custom tools, /health), and the audit line is fed hostile names. Each finding is a test that
failed before its fix (or a strict xfail when open); see security-review/attack8/REPORT.md."""

from __future__ import annotations

import json
import logging
import re
import secrets
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from identitybed import Tenants, as_role, client_as, serving, tenants_in
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference, ResourceTemplateReference
from mcpclient import call, call_error, execute, module_database, records
from pgbed import PgServer
from serverproc import free_port

from pg_mcp_server.configfile import ConfigFileError, load
from pg_mcp_server.identity import Grant, Identity, UserEntry, current_identity
from pg_mcp_server.server import build_server

ASYNC = pytest.mark.asyncio(loop_scope="session")

SECRET = """
CREATE TABLE public.ledger (id int PRIMARY KEY, amount numeric NOT NULL);
INSERT INTO public.ledger VALUES (1, 1000000), (2, 2000000);
"""
OPEN = """
CREATE TABLE public.people (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO public.people VALUES (1, 'dee'), (2, 'eve');
"""
# The hidden database's own definitions: their names may be guessed or known, their
# content and their database's name must not come out.
SECRET_DEFS = """
tools:
  - name: vault_total
    description: The ledger's total.
    type: sql
    input_schema: {type: object, properties: {}}
    sql: SELECT sum(amount) AS total FROM public.ledger
resources:
  - uri: custom://vault
    name: Vault
    type: sql
    sql: SELECT sum(amount) AS total FROM public.ledger
prompts:
  - name: vault-plan
    description: The plan
    messages:
      - role: user
        content: {type: text, text: "the vault plan is WATERMELON"}
"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def secret(pg: PgServer) -> AsyncIterator[str]:
    async with module_database(pg, "vaultdb", SECRET) as dsn:
        yield dsn


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def opened(pg: PgServer) -> AsyncIterator[str]:
    async with module_database(pg, "opendb", OPEN) as dsn:
        yield dsn


def config_file(tmp_path: Path, secret: str, opened: str, extra: str = "") -> Path:
    """`vault` (first, the default) holds the secret; `people` is the one ann may use."""
    (tmp_path / "vault.yaml").write_text(textwrap.dedent(SECRET_DEFS))
    path = tmp_path / "pg-mcp.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            databases:
              - name: vault
                default: true
                dsn: "{secret}"
                custom_definitions: vault.yaml
              - name: people
                dsn: "{opened}"
            """
        )
        + textwrap.dedent(extra)
    )
    return path


ANN = Identity(UserEntry(name="ann", databases={"people": Grant()}))


@asynccontextmanager
async def served_as(path: Path, identity: Identity | None = ANN) -> AsyncIterator[Client]:
    """The server in process, its session run as `identity` (as the gateway sets it)."""
    config = load(str(path))
    token = current_identity.set(identity)
    try:
        async with Client(build_server(config.settings, config=config)) as client:
            yield client
    finally:
        current_identity.reset(token)


def said(error: Any) -> str:
    """Everything an error tells, as text."""
    return json.dumps(error, default=str)


def hidden_named(text: str) -> bool:
    """Whether `text` names the hidden database (as configured: `vault`, so that a caller's
    own `VAULT` echoed back does not count) or shows its secrets."""
    return "vault" in text or "WATERMELON" in text or "2000000" in text


async def failed_read(client: Client, uri: str) -> str:
    with pytest.raises(MCPError) as caught:
        await client.read_resource(uri)
    return said(caught.value.error.model_dump())


# --- 1. a database ann has no grant for: names must not come out


@ASYNC
async def test_the_hidden_databases_custom_tool_answers_as_an_unknown_tool(
    tmp_path: Path, secret: str, opened: str
) -> None:
    async with served_as(config_file(tmp_path, secret, opened)) as client:
        assert "vault_total" not in {t.name for t in (await client.list_tools()).tools}
        hidden = await client.call_tool("vault_total", {})
        unknown = await client.call_tool("no_such_tool", {})
        assert hidden.is_error and unknown.is_error
        text = said(hidden.model_dump())
        assert not hidden_named(text.replace("vault_total", "")), text
        assert text.replace("vault_total", "no_such_tool") == said(unknown.model_dump())


@ASYNC
async def test_a_hidden_databases_uri_answers_as_an_unknown_databases(
    tmp_path: Path, secret: str, opened: str
) -> None:
    async with served_as(config_file(tmp_path, secret, opened)) as client:
        for inner in ("system_info", "schemas", "schemas/public/tables/ledger"):
            hidden = await failed_read(client, f"pg://vault/{inner}")
            unknown = await failed_read(client, f"pg://nope1/{inner}")
            assert hidden.replace("vault", "nope1") == unknown
        # nothing names the hidden database, not even an example in a suggestion
        for uri in ("pg://system_info", "pg://x", "custom://none", "pg://VAULT/system_info"):
            text = await failed_read(client, uri)
            assert not hidden_named(text.replace(uri, "")), (uri, text)
        # the same through the read_resource tool
        hidden_tool = await call_error(client, "read_resource", uri="pg://vault/system_info")
        unknown_tool = await call_error(client, "read_resource", uri="pg://nope1/system_info")
        assert said(hidden_tool).replace("vault", "nope1") == said(unknown_tool)
        no_db = await call_error(client, "read_resource", uri="pg://system_info")
        assert not hidden_named(said(no_db)), no_db


@ASYNC
async def test_the_hidden_databases_custom_resource_is_not_read_nor_named(
    tmp_path: Path, secret: str, opened: str
) -> None:
    async with served_as(config_file(tmp_path, secret, opened)) as client:
        hidden = await failed_read(client, "custom://vault")
        unknown = await failed_read(client, "custom://nothing")
        assert not hidden_named(hidden.replace("custom://vault", "")), hidden
        assert hidden.replace("custom://vault", "custom://nothing") == unknown
        got = await call_error(client, "read_resource", uri="custom://vault", database="people")
        assert not hidden_named(said(got).replace("custom://vault", "")), got


@ASYNC
async def test_the_hidden_databases_prompt_is_neither_served_nor_named(
    tmp_path: Path, secret: str, opened: str
) -> None:
    async with served_as(config_file(tmp_path, secret, opened)) as client:
        assert "vault-plan" not in {p.name for p in (await client.list_prompts()).prompts}
        for arguments in ({}, {"database": "people"}):
            with pytest.raises(MCPError) as hidden:
                await client.get_prompt("vault-plan", arguments)
            text = said(hidden.value.error.model_dump())
            assert not hidden_named(text.replace("vault-plan", "")), (arguments, text)
            with pytest.raises(MCPError) as unknown:
                await client.get_prompt("no-such-prompt", arguments)
            assert text.replace("vault-plan", "no-such-prompt") == said(
                unknown.value.error.model_dump()
            )
    # whoever may use vault still has its prompt (listed once, as its file gives it)
    async with served_as(config_file(tmp_path, secret, opened), None) as client:
        listed = [p for p in (await client.list_prompts()).prompts if p.name == "vault-plan"]
        assert len(listed) == 1 and not listed[0].arguments
        got = await client.get_prompt("vault-plan", {})
        assert "WATERMELON" in str(got.messages)


@ASYNC
async def test_completions_name_no_hidden_database(
    tmp_path: Path, secret: str, opened: str
) -> None:
    async with served_as(config_file(tmp_path, secret, opened)) as client:
        ref = PromptReference(type="ref/prompt", name="analyze-table")
        done = await client.complete(ref, {"name": "database", "value": ""}, {})
        assert done.completion.values == ["people"]
        with pytest.raises(MCPError) as caught:
            await client.complete(ref, {"name": "table", "value": ""}, {"database": "vault"})
        hidden = said(caught.value.error.model_dump())
        with pytest.raises(MCPError) as caught:
            await client.complete(ref, {"name": "table", "value": ""}, {"database": "nope1"})
        assert hidden.replace("vault", "nope1") == said(caught.value.error.model_dump())
        template = "pg://vault/schemas/{schema}/tables"
        with pytest.raises(MCPError) as caught:
            await client.complete(
                ResourceTemplateReference(type="ref/resource", uri=template),
                {"name": "schema", "value": ""},
                {},
            )
        hidden = said(caught.value.error.model_dump())
        with pytest.raises(MCPError) as caught:
            await client.complete(
                ResourceTemplateReference(
                    type="ref/resource", uri=template.replace("vault", "nope1")
                ),
                {"name": "schema", "value": ""},
                {},
            )
        assert hidden.replace("vault", "nope1") == said(caught.value.error.model_dump())


@ASYNC
async def test_the_database_argument_names_no_hidden_database(
    tmp_path: Path, secret: str, opened: str
) -> None:
    async with served_as(config_file(tmp_path, secret, opened)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["execute_query"].input_schema["properties"]["database"]["enum"] == ["people"]
        for given in ("vault", "VAULT", "vaul", "vault ", "v%61ult", "*"):
            got = await call_error(client, "execute_query", sql="SELECT 1", database=given)
            assert got["error"]["code"] == "PARAMETER_ERROR"
            assert not hidden_named(said(got).replace(repr(given)[1:-1], "")), (given, got)
        # no database named: vault is the default, but not ann's
        got = await call_error(client, "execute_query", sql="SELECT 1")
        assert not hidden_named(said(got)), got
        listed = await call(client, "list_databases")
        assert [d["name"] for d in listed["databases"]] == ["people"]


# --- /health with users: an unauthenticated caller


@ASYNC
async def test_health_names_no_database_to_a_caller_without_a_token(
    tmp_path: Path, opened: str
) -> None:
    import httpx2 as httpx

    from pg_mcp_server.transport.gateway import http_app

    down = f"postgresql://nobody@127.0.0.1:{free_port()}/gone"
    path = tmp_path / "pg-mcp.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            databases:
              - {{name: people, default: true, dsn: "{opened}"}}
              - {{name: payroll_eu, dsn: "{down}", connect_timeout: 1}}
            users:
              - {{name: ann, token: ann-token, databases: {{people: {{}}}}}}
            """
        )
    )
    config = load(str(path))
    gateway = http_app(config.settings, [], config)
    transport = httpx.ASGITransport(app=gateway)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            reply = await http.get("/health")
        assert reply.status_code == 503
        assert "payroll_eu" not in reply.text, reply.text
    finally:
        await gateway.db.dispose()


# --- the audit line


@ASYNC
async def test_a_users_name_cannot_forge_audit_fields(
    tmp_path: Path, secret: str, opened: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = config_file(tmp_path, secret, opened, "server:\n  audit_log: true\n")
    forger = Identity(
        UserEntry(name="eve tool=drop_everything outcome=ok\nx", databases={"*": Grant()})
    )
    with caplog.at_level(logging.INFO, logger="pg_mcp_server.audit"):
        async with served_as(path, forger) as client:
            await call_error(client, "list_tables", database="people", schema_name="nope")
            await client.call_tool("x y=1 outcome=ok", {"database": "people\noutcome=ok"})
    lines = [r.getMessage() for r in caplog.records if r.name == "pg_mcp_server.audit"]
    assert len(lines) == 2, lines
    for line in lines:
        assert "\n" not in line
        # logfmt: key=value, a value quoted (JSON) when it is not a plain word
        fields = re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', line)
        assert re.sub(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', "", line).split() == ["audit"], line
        keys = [k for k, _ in fields]
        assert keys[:3] == ["caller", "database", "tool"] and keys.count("outcome") == 1, line
        assert json.loads(fields[0][1]).startswith("eve tool="), line


# --- 2. each database's grant on that database's pool, whatever route the call takes


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def tenants(pg: PgServer) -> AsyncIterator[Tenants]:
    async with tenants_in(pg, "atk8_notes") as made:
        yield made


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def shop(pg: PgServer, tenants: Tenants) -> AsyncIterator[str]:
    db = await pg.create_database("atk8_shop")
    await execute(
        db.dsn,
        "CREATE TABLE public.products (id int PRIMARY KEY, name text NOT NULL);"
        "INSERT INTO public.products VALUES (1, 'lamp');"
        f"GRANT SELECT ON public.products TO {tenants.login}, {tenants.tb};",
    )
    try:
        yield as_role(db.dsn, tenants.login)
    finally:
        await pg.drop_database(db.name)


WHO = "SELECT current_user AS r, current_setting('app.tenant_id', true) AS t"
SHOP_DEFS = f"""
tools:
  - name: shop_who
    description: Who runs here.
    type: sql
    input_schema: {{type: object, properties: {{}}}}
    sql: "{WHO}"
resources:
  - uri: custom://shop-who
    name: Who
    type: sql
    sql: "{WHO}"
"""


@ASYNC
async def test_each_route_runs_with_its_own_databases_grant(
    tmp_path: Path, tenants: Tenants, shop: str
) -> None:
    (tmp_path / "shop.yaml").write_text(textwrap.dedent(SHOP_DEFS))
    path = tmp_path / "pg-mcp.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            databases:
              - {{name: notes, default: true, dsn: "{tenants.dsn}"}}
              - {{name: shop, dsn: "{shop}", custom_definitions: shop.yaml}}
            """
        )
    )
    dana = Identity(
        UserEntry(
            name="dana",
            databases={
                "notes": Grant(role=tenants.ta, settings={"app.tenant_id": "a"}),
                "*": Grant(role=tenants.tb, settings={"app.tenant_id": "b"}),
            },
        )
    )
    async with served_as(path, dana) as client:
        notes = records(await call(client, "execute_query", sql=WHO))
        assert notes == [{"r": tenants.ta, "t": "a"}]
        shop_rows = records(await call(client, "execute_query", sql=WHO, database="shop"))
        assert shop_rows == [{"r": tenants.tb, "t": "b"}]
        # shop's custom tool, its resource and its URIs while the call names notes
        got = await call(client, "shop_who")
        assert [tenants.tb, "b"] == got["rows"][0], got
        read = await call(client, "read_resource", uri="custom://shop-who")
        assert tenants.tb in json.dumps(read) and f'"{tenants.ta}"' not in json.dumps(read)
        # named with the other database: that one's (it has no such resource), never shop's
        # resource with notes's grant
        other = await call_error(client, "read_resource", uri="custom://shop-who", database="notes")
        assert other["error"]["code"] == "PARAMETER_ERROR"
        listed = await call(
            client, "read_resource", uri="pg://shop/schemas/public/tables", database="notes"
        )
        assert "products" in json.dumps(listed)
        # notes's rows as tenant a, whatever ran on shop before
        mine = records(await call(client, "execute_query", sql="SELECT id FROM app.notes"))
        assert sorted(r["id"] for r in mine) == [1, 2]


@ASYNC
async def test_a_databases_allow_privileged_role_is_that_databases_only(
    tmp_path: Path, pg: PgServer, tenants: Tenants, shop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_ALLOW_PRIVILEGED_ROLE", "false")  # (the suite's own is true)
    su = f"atk8_su_{secrets.token_hex(3)}"
    await execute(
        pg.admin_dsn, f"CREATE ROLE {su} NOLOGIN SUPERUSER; GRANT {su} TO {tenants.login};"
    )
    try:
        path = tmp_path / "pg-mcp.yaml"
        path.write_text(
            textwrap.dedent(
                f"""
                databases:
                  - {{name: notes, default: true, dsn: "{tenants.dsn}",
                      allow_privileged_role: true}}
                  - {{name: shop, dsn: "{shop}"}}
                """
            )
        )
        root = Identity(UserEntry(name="root", databases={"*": Grant(role=su)}))
        async with served_as(path, root) as client:
            sql = "SELECT current_user AS r"
            assert records(await call(client, "execute_query", sql=sql)) == [{"r": su}]
            refused = await call_error(client, "execute_query", sql=sql, database="shop")
            assert refused["error"]["code"] == "PERMISSION_DENIED", refused
            refused = await call_error(client, "list_tables", database="shop")
            assert refused["error"]["code"] == "PERMISSION_DENIED", refused
    finally:
        await execute(pg.admin_dsn, f"DROP ROLE IF EXISTS {su};")


# --- 6. the configuration file


def problems_of(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "pg-mcp.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(ConfigFileError) as raised:
        load(str(path))
    return raised.value.lines


def test_a_variables_value_is_a_string_never_yaml_nor_another_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATK8_DSN", "postgresql://u@h/db\nallow_privileged_role: true")
    monkeypatch.setenv("ATK8_TOKEN", "${ATK8_REAL}")
    monkeypatch.setenv("ATK8_REAL", "the-real-one")
    path = tmp_path / "pg-mcp.yaml"
    path.write_text(
        textwrap.dedent(
            """
            databases:
              - {name: a, dsn: "${ATK8_DSN}"}
            users:
              - {name: u, token: "${ATK8_TOKEN}", databases: {a: {}}}
            """
        )
    )
    config = load(str(path))
    entry = config.databases["a"]
    assert entry.settings.database.dsn is not None
    assert "allow_privileged_role" in entry.settings.database.dsn.get_secret_value()
    (user,) = config.users
    assert user.token is not None and user.token.get_secret_value() == "${ATK8_REAL}"
    assert "ATK8_REAL" not in config.variables  # only what the file names


def test_a_secret_in_a_variable_is_not_echoed_where_it_does_not_belong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATK8_PW", "hunter2-from-env")
    lines = problems_of(
        tmp_path,
        """
        databases:
          - {name: a, dsn: "postgresql://u@h/db", pool_size: "${ATK8_PW}", user: "${ATK8_PW}x",
             sslkey: ["${ATK8_PW}"]}
        users:
          - {name: u, databases: "${ATK8_PW}"}
        """,
    )
    assert lines and not any("hunter2" in line for line in lines), lines


def test_a_yaml_error_does_not_echo_a_secret(tmp_path: Path) -> None:
    for value in ("*hunter2", "!hunter2"):
        lines = problems_of(
            tmp_path,
            f"""
            databases:
              - name: a
                dsn: postgresql://u@h/db
                password: {value}
            """,
        )
        assert lines and not any("hunter2" in line for line in lines), lines
        assert "line" in lines[0]


# --- held results, the query history and hidden tools over HTTP, across databases and users


@ASYNC
async def test_held_results_and_hidden_tools_across_databases_and_users(
    tmp_path: Path, tenants: Tenants, shop: str
) -> None:
    path = tmp_path / "pg-mcp.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            databases:
              - {{name: notes, default: true, dsn: "{tenants.dsn}"}}
              - {{name: shop, dsn: "{shop}"}}
            users:
              - name: alice
                token: alice-token
                tools: [execute_query, read_resource]
                databases:
                  notes: {{role: {tenants.ta}, settings: {{app.tenant_id: a}}}}
              - name: bob
                token: bob-token
                databases: {{"*": {{}}}}
            """
        )
    )
    config = load(str(path))
    big = "SELECT g, 'shop-secret-' || repeat('x', 200) AS s FROM generate_series(1, 3000) AS g"
    async with serving(config.settings, None, config) as (base, _gateway):
        async with client_as(base, "bob-token") as bob:
            result = await bob.call_tool(
                "execute_query", {"sql": big, "database": "shop", "limit": 3000}
            )
            first = json.loads(result.content[0].text)  # type: ignore[union-attr]
            cursor = first["next_cursor"]
            link = next(c for c in result.content if c.type == "resource_link")
            held = str(link.uri)
            assert cursor and held.startswith("pg://results/")
        async with client_as(base, "alice-token") as alice:
            tools = {t.name for t in (await alice.list_tools()).tools}
            assert tools == {"execute_query", "read_resource", "list_databases"}
            # bob's held result: as one that never was, by cursor and by URI, whatever
            # database is named
            made_up = held[:-4] + ("0000" if not held.endswith("0000") else "1111")
            for database in (None, "notes", "shop"):
                given = {} if database is None else {"database": database}
                got = await alice.call_tool("execute_query", {"cursor": cursor, **given})
                assert got.is_error and "shop-secret" not in str(got.content)
                got = await alice.call_tool("read_resource", {"uri": held, **given})
                other = await alice.call_tool("read_resource", {"uri": made_up, **given})
                assert got.is_error and other.is_error
                assert "shop-secret" not in str(got.content)
            with pytest.raises(MCPError) as caught:
                await alice.read_resource(held)
            assert "shop-secret" not in said(caught.value.error.model_dump())
            # (not in alice's `tools:`: not found; either way, nothing of bob's)
            recent = await alice.call_tool("read_resource", {"uri": "pg://queries/recent"})
            assert "shop-secret" not in str(recent.content)
            # a hidden tool is an unknown one, with or without a database
            for name in ("list_tables", "explain_query"):
                hidden = await alice.call_tool(name, {"database": "notes"})
                unknown = await alice.call_tool("no_such_tool", {"database": "notes"})
                assert hidden.is_error
                assert isinstance(hidden.structured_content, dict)
                assert isinstance(unknown.structured_content, dict)
                error, other = (
                    hidden.structured_content["error"],
                    unknown.structured_content["error"],
                )
                assert error["message"].replace(name, "X") == other["message"].replace(
                    "no_such_tool", "X"
                )
                assert error["code"] == other["code"] and error["context"] == other["context"]
            with pytest.raises(MCPError):
                await alice.read_resource("pg://notes/schemas/app/tables")


# --- 5. tokens and binds with users


def test_auth_tokens_and_users_together_are_refused_naming_no_token(
    tmp_path: Path, opened: str
) -> None:
    from pg_mcp_server.__main__ import RefusedToStart, check_bind
    from pg_mcp_server.transport.gateway import http_app

    path = tmp_path / "pg-mcp.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            server: {{auth_tokens: [stray-token-1], transport: http, host: 0.0.0.0}}
            databases:
              - {{name: people, default: true, dsn: "{opened}"}}
              - {{name: other, dsn: "{opened}"}}
            users:
              - {{name: ann, token: ann-token, databases: {{people: {{}}}}}}
            """
        )
    )
    config = load(str(path))
    with pytest.raises(ValueError) as raised:
        http_app(config.settings, [], config)
    assert "stray-token-1" not in str(raised.value) and "ann-token" not in str(raised.value)
    # a non-loopback bind: users authenticate (allowed); no users and no tokens: refused
    check_bind(config.settings, users=True)
    bare = config.settings.server.model_copy(update={"auth_tokens": []})
    with pytest.raises(RefusedToStart):
        check_bind(config.settings.model_copy(update={"server": bare}), users=False)


@ASYNC
async def test_the_handshake_and_tool_schemas_name_no_hidden_database(
    tmp_path: Path, secret: str, opened: str
) -> None:
    # (the suite's role is a superuser: vault's role audit has warnings, as people's has)
    async with served_as(config_file(tmp_path, secret, opened)) as client:
        assert "people: " in (client.instructions or "")  # its own database's warnings
        assert not hidden_named(client.instructions or ""), client.instructions
        tools = (await client.list_tools()).tools
        for tool in tools:
            assert not hidden_named(json.dumps(tool.input_schema)), tool.name
        # vault is the default, not ann's: `database` is required of her
        query = next(t for t in tools if t.name == "execute_query")
        assert "database" in query.input_schema.get("required", [])
    async with served_as(config_file(tmp_path, secret, opened), None) as client:
        assert "vault: " in (client.instructions or "")
        query = next(t for t in (await client.list_tools()).tools if t.name == "execute_query")
        assert "database" not in query.input_schema.get("required", [])
        assert "default vault" in json.dumps(query.input_schema)


# --- another database's statements in flight, through pg://{db}/stat/activity


@ASYNC
async def test_another_databases_statements_are_hidden_from_a_user(
    tmp_path: Path, pg: PgServer, secret: str, opened: str
) -> None:
    import asyncio

    import asyncpg

    watcher = f"atk8_watch_{secrets.token_hex(3)}"
    # people's login role may read every session's statistics (pg_read_all_stats, as a
    # monitoring role often does); vault's pool is another role's (the suite's superuser)
    await execute(
        pg.admin_dsn, f"CREATE ROLE {watcher} LOGIN; GRANT pg_read_all_stats TO {watcher};"
    )
    path = config_file(tmp_path, secret, as_role(opened, watcher))
    other = await asyncpg.connect(secret, server_settings={"application_name": "pg-mcp-server"})
    try:
        running = asyncio.ensure_future(
            other.execute("SELECT pg_catalog.pg_sleep(60) /* vault-secret-statement */")
        )
        async with asyncio.timeout(30):
            while True:  # the vault session is in its statement
                state = await pg_fetchval(
                    pg.admin_dsn,
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                    "AND query LIKE '%vault-secret-statement */'",
                )
                if state:
                    break
                await asyncio.sleep(0.05)
        async with served_as(path) as client:
            got = await call(client, "read_resource", uri="pg://people/stat/activity")
        text = json.dumps(got)
        assert "pg_sleep(60)" not in text and "vault-secret-statement" not in text, text[:2000]
    finally:
        await other.close(timeout=5)
        running.cancel()
        await execute(pg.admin_dsn, f"DROP ROLE IF EXISTS {watcher};")


async def pg_fetchval(dsn: str, sql: str) -> Any:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()
