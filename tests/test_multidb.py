"""Several databases in one server (issue 24): each answers its own schema through the same
client session; one that does not answer stops nothing; the `database` argument's errors; the
configuration file's errors; the audit line."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import pytest_asyncio
from mcp import Client
from mcp_types import ResourceTemplateReference
from mcpclient import call, call_error, execute, module_database
from pgbed import PgServer
from serverproc import clean_env, free_port

from pg_mcp_server.configfile import ConfigFileError, ServerConfig, load
from pg_mcp_server.server import build_server

SALES = """
CREATE TABLE public.orders (id int PRIMARY KEY, customer text NOT NULL, total numeric);
INSERT INTO public.orders VALUES (1, 'ada', 10), (2, 'bob', 20), (3, 'cy', 30);
"""
STAFF = """
CREATE TABLE public.people (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO public.people VALUES (1, 'dee'), (2, 'eve');
"""
SALES_TOOLS = """
tools:
  - name: big_orders
    description: Orders over a total.
    type: sql
    input_schema:
      type: object
      properties:
        least: {type: number, description: smallest total}
      required: [least]
    sql: SELECT id FROM public.orders WHERE total >= $1 ORDER BY id
"""
STAFF_TOOLS = """
tools:
  - name: staff_names
    description: Everyone's name.
    type: sql
    input_schema: {type: object, properties: {}}
    sql: SELECT name FROM public.people ORDER BY name
"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def sales(pg: PgServer) -> AsyncIterator[str]:
    async with module_database(pg, "sales", SALES) as dsn:
        yield dsn


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def staff(pg: PgServer) -> AsyncIterator[str]:
    async with module_database(pg, "staff", STAFF) as dsn:
        yield dsn


def start_with(path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command with `--config path`, run to its end (one that refuses to start)."""
    return subprocess.run(
        [sys.executable, "-m", "pg_mcp_server", "--config", str(path)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=cwd,
        timeout=60,
    )


def write_config(directory: Path, text: str, extra: str = "") -> Path:
    path = directory / "pg-mcp.yaml"
    path.write_text(textwrap.dedent(text) + extra)
    return path


@asynccontextmanager
async def serve(path: Path) -> AsyncIterator[Client]:
    config = load(str(path))
    async with Client(build_server(config.settings, config=config)) as client:
        yield client


def two(tmp_path: Path, sales: str, staff: str, extra: str = "", default: bool = True) -> Path:
    (tmp_path / "sales.yaml").write_text(textwrap.dedent(SALES_TOOLS))
    (tmp_path / "staff.yaml").write_text(textwrap.dedent(STAFF_TOOLS))
    return write_config(
        tmp_path,
        f"""
        databases:
          - name: sales
            default: {"true" if default else "false"}
            description: Orders and customers
            dsn: {sales}
            custom_definitions: sales.yaml
          - name: staff
            dsn: {staff}
            max_rows: 1
            custom_definitions: staff.yaml
        """,
        extra,
    )


@pytest.mark.asyncio(loop_scope="session")
async def test_each_database_answers_its_own_schema(tmp_path: Path, sales: str, staff: str) -> None:
    async with serve(two(tmp_path, sales, staff)) as client:
        tables = await call(client, "list_tables", schema_name="public")
        assert [t["name"] for t in tables["tables"]] == ["orders"]  # the default: sales
        tables = await call(client, "list_tables", schema_name="public", database="staff")
        assert [t["name"] for t in tables["tables"]] == ["people"]
        out = await call(client, "execute_query", sql="SELECT name FROM people", database="staff")
        # staff's own max_rows (1) applies there, and not in sales
        assert out["row_count"] == 1 and out["has_more"]
        out = await call(client, "execute_query", sql="SELECT id FROM orders", database="sales")
        assert out["row_count"] == 3
        described = await call(client, "describe_table", table_name="people", database="staff")
        assert [c["name"] for c in described["columns"]] == ["id", "name"]
        # a custom tool belongs to the database whose file defines it
        out = await call(client, "big_orders", least=20)
        assert [r[0] for r in out["rows"]] == [2, 3]
        out = await call(client, "staff_names")
        assert [r[0] for r in out["rows"]] == ["dee"]  # staff's max_rows again


@pytest.mark.asyncio(loop_scope="session")
async def test_resources_are_namespaced(tmp_path: Path, sales: str, staff: str) -> None:
    async with serve(two(tmp_path, sales, staff)) as client:
        uris = [str(r.uri) for r in (await client.list_resources()).resources]
        assert "pg://sales/system_info" in uris and "pg://staff/system_info" in uris
        assert "pg://system_info" not in uris
        templates = [
            t.uri_template for t in (await client.list_resource_templates()).resource_templates
        ]
        assert "pg://staff/schemas/{schema}/tables/{table}" in templates
        read = await client.read_resource("pg://staff/schemas/public/tables/people")
        contents = read.contents[0]
        assert str(contents.uri) == "pg://staff/schemas/public/tables/people"
        assert "people" in contents.text  # type: ignore[union-attr]
        # the read_resource tool takes the same URIs
        out = await call(client, "read_resource", uri="pg://sales/schemas/public/tables/orders")
        assert "orders" in str(out["contents"])
        # completions follow the database of the template
        ref = ResourceTemplateReference(
            type="ref/resource", uri="pg://staff/schemas/{schema}/tables/{table}"
        )
        done = await client.complete(ref, {"name": "table", "value": "pe"}, {"schema": "public"})
        assert done.completion.values == ["people"]
        with pytest.raises(Exception, match="Resource not found"):
            await client.read_resource("pg://system_info")


@pytest.mark.asyncio(loop_scope="session")
async def test_database_argument_errors(tmp_path: Path, sales: str, staff: str) -> None:
    async with serve(two(tmp_path, sales, staff, default=False)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["list_tables"].input_schema
        assert schema["properties"]["database"]["enum"] == ["sales", "staff"]
        assert "database" in schema["required"]  # no default: every call names one
        error = await call_error(client, "list_tables")
        assert error["error"]["code"] == "PARAMETER_ERROR"
        assert error["error"]["context"]["databases"] == ["sales", "staff"]
        error = await call_error(client, "list_tables", database="sails")
        assert "sales" in error["error"]["suggestion"]
        listed = await call(client, "list_databases")
        assert listed["databases"][0] == {
            "name": "sales",
            "description": "Orders and customers",
            "reachable": True,
        }


@pytest.mark.asyncio(loop_scope="session")
async def test_a_database_that_is_down_stops_nothing(tmp_path: Path, sales: str) -> None:
    down = f"postgresql://nobody:not-a-secret@127.0.0.1:{free_port()}/gone"
    path = write_config(
        tmp_path,
        f"""
        databases:
          - name: sales
            default: true
            dsn: {sales}
          - name: gone
            dsn: {down}
            connect_timeout: 2
            pool_timeout: 3
        """,
    )
    async with serve(path) as client:
        out = await call(client, "execute_query", sql="SELECT count(*) AS n FROM orders")
        assert out["rows"] == [[3]]
        error = await call_error(client, "list_tables", database="gone")
        assert error["error"]["code"] == "CONNECTION_ERROR"
        assert "not-a-secret" not in str(error)
        out = await call(client, "list_tables", schema_name="public")  # still serving
        assert [t["name"] for t in out["tables"]] == ["orders"]
        listed = {d["name"]: d for d in (await call(client, "list_databases"))["databases"]}
        assert listed["sales"]["reachable"] and not listed["gone"].get("reachable", False)


@pytest.mark.asyncio(loop_scope="session")
async def test_disallowed_connections_fail_that_database_only(
    tmp_path: Path, pg: PgServer, sales: str
) -> None:
    db = await pg.create_database("closed")
    try:
        await execute(db.dsn, STAFF)
        path = write_config(
            tmp_path,
            f"""
            databases:
              - name: sales
                default: true
                dsn: {sales}
              - name: closed
                dsn: {db.dsn}
            """,
        )
        async with serve(path) as client:
            out = await call(client, "list_tables", database="closed")
            assert [t["name"] for t in out["tables"]] == ["people"]
            await execute(
                pg.admin_dsn,
                f'ALTER DATABASE "{db.name}" ALLOW_CONNECTIONS false;'
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{db.name}' AND pid <> pg_backend_pid();",
            )
            error = await call_error(client, "list_tables", database="closed")
            assert error["error"]["code"] == "CONNECTION_ERROR"
            out = await call(client, "execute_query", sql="SELECT count(*) AS n FROM orders")
            assert out["rows"] == [[3]]
    finally:
        await execute(pg.admin_dsn, f'ALTER DATABASE "{db.name}" ALLOW_CONNECTIONS true')
        await pg.drop_database(db.name)


@pytest.mark.asyncio(loop_scope="session")
async def test_one_database_from_the_file_keeps_todays_tools_and_uris(
    tmp_path: Path, sales: str
) -> None:
    from mcpclient import connect

    path = write_config(tmp_path, f"databases:\n  - name: sales\n    dsn: {sales}\n")
    async with serve(path) as client, connect(sales) as plain:
        mine = (await client.list_tools()).tools
        theirs = (await plain.list_tools()).tools
        assert [t.model_dump() for t in mine] == [t.model_dump() for t in theirs]
        assert "database" not in str([t.input_schema for t in mine])
        uris = [str(r.uri) for r in (await client.list_resources()).resources]
        assert uris == [str(r.uri) for r in (await plain.list_resources()).resources]


# --- the audit line


@pytest.mark.asyncio(loop_scope="session")
async def test_audit_line_has_no_parameter_values(
    tmp_path: Path, sales: str, staff: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = two(tmp_path, sales, staff, extra="server:\n  audit_log: true\n")
    secret = "needle-7f3a"
    with caplog.at_level(logging.INFO, logger="pg_mcp_server.audit"):
        async with serve(path) as client:
            await call(
                client,
                "execute_query",
                sql="SELECT id FROM orders WHERE customer <> $1",
                params=[secret],
            )
            await call_error(client, "list_tables", database="staff", schema_name="nope")
    lines = [r.getMessage() for r in caplog.records if r.name == "pg_mcp_server.audit"]
    assert len(lines) == 2, lines
    assert "caller=local database=sales" in lines[0]
    assert "tool=execute_query" in lines[0] and "rows=3 outcome=ok" in lines[0]
    assert " sql=" in lines[0]
    assert "database=staff" in lines[1] and "outcome=SCHEMA_NOT_FOUND" in lines[1]
    assert not any(secret in line for line in lines)


async def test_audit_parameters_shows_the_values_never_the_sql(
    tmp_path: Path, sales: str, staff: str, caplog: pytest.LogCaptureFixture
) -> None:
    """auth.audit_parameters: the values a caller passed are on the line, quoted as one field
    and bounded; the SQL text is still only its hash."""
    extra = "server:\n  audit_log: true\nauth:\n  audit_parameters: true\n"
    path = two(tmp_path, sales, staff, extra=extra)
    long = "x" * 5000
    with caplog.at_level(logging.INFO, logger="pg_mcp_server.audit"):
        async with serve(path) as client:
            await call(
                client,
                "execute_query",
                sql="SELECT id FROM orders WHERE customer <> $1 AND $2::text <> 'sql-marker'",
                params=["needle-7f3a", long],
            )
    (line,) = [r.getMessage() for r in caplog.records if r.name == "pg_mcp_server.audit"]
    assert "needle-7f3a" in line and "sql-marker" not in line and " sql=" in line
    assert len(line) < 1400, len(line)
    assert "\n" not in line


# --- the configuration file's errors


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigFileError) as raised:
        load(str(path))
    return raised.value.lines


def test_missing_variable_is_named_never_a_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_DSN", raising=False)
    monkeypatch.setenv("A_PASSWORD", "hunter2-secret")
    path = write_config(
        tmp_path,
        """
        databases:
          - name: a
            dsn: ${NO_SUCH_DSN}
          - name: b
            host: h
            database: d
            password: ${A_PASSWORD}
            port: nope
        """,
    )
    lines = problems(path)
    assert f"{path}: databases[0].dsn: environment variable NO_SUCH_DSN is not set" in lines
    assert any(line.startswith(f"{path}: databases[1].port:") for line in lines)
    assert "hunter2-secret" not in " ".join(lines)


def test_unknown_keys_say_what_was_meant(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
        sever: {}
        databases:
          - name: a
            dsn: postgresql://u@h/d
            max_rowz: 5
            transport: http
        users:
          - name: ann
            databases: {a: {rolle: reader}}
        """,
    )
    lines = problems(path)
    assert f"{path}: sever: is not a known key; did you mean 'server'?" in lines
    assert f"{path}: databases[0].max_rowz: is not a known key; did you mean 'max_rows'?" in lines
    assert any("databases[0].transport: is a server-wide setting" in line for line in lines)
    assert any(
        "users[0].databases.a.rolle: is not a known key; did you mean 'role'" in line
        for line in lines
    )


def test_duplicate_names_and_two_defaults(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
        databases:
          - {name: a, dsn: "postgresql://u@h/d", default: true}
          - {name: a, dsn: "postgresql://u@h/e"}
          - {name: b, dsn: "postgresql://u@h/f", default: true}
          - {name: "bad name", dsn: "postgresql://u@h/g"}
        """,
    )
    lines = problems(path)
    assert f"{path}: databases[1].name: 'a' is the name of an earlier entry" in lines
    assert f"{path}: databases: only one may be `default: true`, not ['a', 'b']" in lines
    assert any(line.startswith(f"{path}: databases[3].name: is required") for line in lines)


def test_file_settings_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_MAX_ROWS", "7")
    monkeypatch.setenv("MCP_MAX_VALUE_CHARS", "99")
    monkeypatch.setenv("PG_DSN", "postgresql://env@envhost/envdb")
    path = write_config(
        tmp_path,
        """
        server: {max_rows: 500}
        databases:
          - {name: a, host: ahost, database: adb, max_rows: 5}
          - {name: b, dsn: "postgresql://u@h/b"}
        """,
    )
    config: ServerConfig = load(str(path), {"max_value_chars": 33})
    a, b = config.databases["a"].settings, config.databases["b"].settings
    assert a.server.max_rows == 5 and b.server.max_rows == 500  # entry > server: > env
    assert a.server.max_value_chars == 33  # a flag wins over the file
    assert a.database.dsn is None and a.database.host == "ahost"  # PG_DSN is not the entry's
    assert config.default is None and config.several


def test_a_bad_file_stops_the_start_with_exit_code_2(tmp_path: Path) -> None:

    path = write_config(tmp_path, "databases:\n  - {name: a, dsn: '${NOPE_DSN_X}'}\n")
    proc = start_with(path, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    line = f"invalid configuration: {path}: databases[0].dsn: environment variable NOPE_DSN_X"
    assert line in proc.stderr


def test_the_process_starts_with_one_database_down(tmp_path: Path, sales: str) -> None:
    """The command as users run it: the down database is logged, the start goes on, the
    other serves, and the audit line (users: in the file) is on stderr without values."""
    from serverproc import Server, uv_run

    down = f"postgresql://nobody@127.0.0.1:{free_port()}/gone"
    path = write_config(
        tmp_path,
        f"""
        databases:
          - {{name: sales, default: true, dsn: "{sales}"}}
          - {{name: gone, dsn: "{down}", connect_timeout: 1}}
        users:
          - {{name: ann, databases: {{"*": {{}}}}}}
        auth: {{stdio_user: ann}}
        """,
    )
    server = Server(uv_run("--config", str(path)), clean_env(), tmp_path / "stderr")
    try:
        reply = server.initialize()
        assert "list_databases names those you may use" in reply["result"]["instructions"]
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "execute_query",
                    "arguments": {"sql": "SELECT $1::text AS x", "params": ["needle-9"]},
                },
            }
        )
        reply = server.read()
        assert reply["id"] == 2 and not reply["result"].get("isError"), reply
        lines = server.log_lines()
        assert any("database gone is not reachable" in line for line in lines), lines
        audit = [line for line in lines if line.startswith("audit ")]
        assert audit and "database=sales tool=execute_query" in audit[0], lines
        assert not any("needle-9" in line for line in lines)
    finally:
        server.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_health_names_the_database_that_is_down(tmp_path: Path, sales: str) -> None:
    import httpx2 as httpx

    from pg_mcp_server.transport.gateway import http_app

    down = f"postgresql://nobody@127.0.0.1:{free_port()}/gone"
    path = write_config(
        tmp_path,
        f"""
        databases:
          - {{name: sales, default: true, dsn: "{sales}", pool_size: 2}}
          - {{name: gone, dsn: "{down}", connect_timeout: 1, pool_size: 3}}
        """,
    )
    config = load(str(path))
    gateway = http_app(config.settings, [], config)
    assert gateway.limit == 4 * (2 + 3)  # four requests per pooled connection, every pool's
    transport = httpx.ASGITransport(app=gateway)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        reply = await http.get("/health")
    assert reply.status_code == 503
    assert reply.json()["down"] == ["gone"]
    await gateway.db.dispose()


@pytest.mark.asyncio(loop_scope="session")
async def test_pages_and_prompts_with_several_databases(
    tmp_path: Path, sales: str, staff: str
) -> None:
    import json

    from mcp_types import PromptReference

    async with serve(two(tmp_path, sales, staff, default=False)) as client:
        sql = "SELECT g AS n, repeat('x', 200) AS pad FROM generate_series(1, 2000) AS g"
        result = await client.call_tool(
            "execute_query", {"sql": sql, "database": "sales", "limit": 2000}
        )
        first = json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert first["has_more"] and first["next_cursor"]
        # the held result is read back without naming a database, by cursor and by URI
        second = await call(client, "execute_query", cursor=first["next_cursor"])
        link = result.content[1]
        assert link.type == "resource_link" and str(link.uri).startswith("pg://results/")
        read = await client.read_resource(str(link.uri))
        assert json.loads(read.contents[0].text) == second  # type: ignore[union-attr]

        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        database = [a for a in prompts["analyze-table"].arguments or [] if a.name == "database"]
        assert database and database[0].required
        got = await client.get_prompt(
            "analyze-table", {"table": "people", "schema": "public", "database": "staff"}
        )
        assert "people" in str(got.messages)
        ref = PromptReference(type="ref/prompt", name="analyze-table")
        done = await client.complete(ref, {"name": "table", "value": "p"}, {"database": "staff"})
        assert done.completion.values == ["people"]
        done = await client.complete(ref, {"name": "database", "value": "st"}, {})
        assert done.completion.values == ["staff"]


@pytest.mark.asyncio(loop_scope="session")
async def test_a_caller_sees_and_uses_only_its_databases(
    tmp_path: Path, sales: str, staff: str
) -> None:
    from pg_mcp_server.identity import Grant, Identity, UserEntry, current_identity

    ann = Identity(UserEntry(name="ann", databases={"staff": Grant()}))
    token = current_identity.set(ann)  # as the gateway sets it; the session inherits it
    try:
        async with serve(two(tmp_path, sales, staff)) as client:
            listed = await call(client, "list_databases")
            assert [d["name"] for d in listed["databases"]] == ["staff"]
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["list_tables"].input_schema["properties"]["database"]["enum"] == ["staff"]
            assert "big_orders" not in tools  # sales's custom tool
            out = await call(client, "list_tables", database="staff")
            assert [t["name"] for t in out["tables"]] == ["people"]
            # sales is the default, but not ann's: the same answer as a name that is not there
            hidden = await call_error(client, "list_tables", database="sales")
            unknown = await call_error(client, "list_tables", database="nope")
            assert hidden["error"]["suggestion"] == unknown["error"]["suggestion"]
            assert hidden["error"]["context"] == unknown["error"]["context"]
            same = hidden["error"]["message"].replace("'sales'", "'nope'")
            assert same == unknown["error"]["message"]
            uris = [str(r.uri) for r in (await client.list_resources()).resources]
            assert uris and all(u.startswith("pg://staff/") for u in uris)
            with pytest.raises(Exception, match="no database named"):
                await client.read_resource("pg://sales/system_info")
    finally:
        current_identity.reset(token)


def test_a_database_may_not_be_named_like_a_builtin_uri(tmp_path: Path) -> None:
    path = write_config(tmp_path, "databases:\n  - {name: schemas, dsn: 'postgresql://u@h/d'}\n")
    assert any("databases[0].name: 'schemas' starts built-in" in line for line in problems(path))


def test_two_files_defining_one_tool_stop_the_start(tmp_path: Path, sales: str, staff: str) -> None:

    (tmp_path / "a.yaml").write_text(textwrap.dedent(STAFF_TOOLS))
    (tmp_path / "b.yaml").write_text(textwrap.dedent(STAFF_TOOLS))
    path = write_config(
        tmp_path,
        f"""
        databases:
          - {{name: one, dsn: "{staff}", custom_definitions: a.yaml}}
          - {{name: two, dsn: "{staff}", custom_definitions: b.yaml}}
        """,
    )
    proc = start_with(path, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "tool staff_names is defined for databases one and two" in proc.stderr


@pytest.mark.asyncio(loop_scope="session")
async def test_one_database_from_the_file_is_served_under_its_name(
    tmp_path: Path, sales: str
) -> None:
    from pg_mcp_server.app import AppContext

    path = write_config(tmp_path, f"databases:\n  - name: sales\n    dsn: {sales}\n")
    config = load(str(path))
    server = build_server(config.settings, config=config)
    async with server.lifespan(server) as app:
        assert isinstance(app, AppContext)
        assert app.name == "sales" and app.db.name == "sales"


@pytest.mark.asyncio(loop_scope="session")
async def test_each_database_reloads_its_own_file(tmp_path: Path, sales: str, staff: str) -> None:
    from eventually import eventually

    async with serve(two(tmp_path, sales, staff)) as client:
        assert "staff_names" in [t.name for t in (await client.list_tools()).tools]
        (tmp_path / "staff.yaml").write_text(
            textwrap.dedent(STAFF_TOOLS).replace("staff_names", "staff_list")
        )

        async def renamed() -> bool:
            names = [t.name for t in (await client.list_tools()).tools]
            return "staff_list" in names and "staff_names" not in names

        await eventually(renamed, what="staff's tool renamed after its file changed")
        out = await call(client, "staff_list")
        assert [r[0] for r in out["rows"]] == ["dee"]
        out = await call(client, "big_orders", least=30)  # sales's file is untouched
        assert [r[0] for r in out["rows"]] == [3]


@pytest.mark.asyncio(loop_scope="session")
async def test_over_http_with_two_workers(tmp_path: Path, sales: str, staff: str) -> None:
    """The command over HTTP, its workers started from the configuration (pickled to each
    spawned process): both databases answer, /health is 200 when both do."""
    import httpx2 as httpx
    from eventually import wait_for
    from serverproc import EXECUTABLE, http_answers

    port = free_port()
    path = two(tmp_path, sales, staff)
    log = (tmp_path / "stderr").open("wb")
    argv = ["--transport", "http", "--port", str(port), "--workers", "2", "--config", str(path)]
    proc = subprocess.Popen(
        [EXECUTABLE, *argv],
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: http_answers(proc, base), 60), (tmp_path / "stderr").read_text()
        async with httpx.AsyncClient(timeout=30) as http:
            assert (await http.get(base + "/health")).status_code == 200
        async with Client(base + "/mcp") as client:
            out = await call(client, "list_tables", database="staff")
            assert [t["name"] for t in out["tables"]] == ["people"]
            out = await call(client, "execute_query", sql="SELECT count(*) AS n FROM orders")
            assert out["rows"] == [[3]]
            out = await call(client, "staff_names")
            assert [r[0] for r in out["rows"]] == ["dee"]
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
        log.close()


def test_the_files_variables_are_kept_from_children_and_its_paths_are_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("B_SECRET", "s3cret-value")
    path = write_config(
        tmp_path,
        """
        databases:
          - {name: b, host: h, database: d, password: "${B_SECRET}", sslmode: verify-full,
             sslrootcert: certs/root.crt}
        """,
    )
    config = load(str(path))
    db = config.databases["b"].settings.database
    assert config.variables == {"B_SECRET"}
    assert "B_SECRET" in db.hidden_variables()  # PG_PASSWORD_COMMAND's environment
    assert db.password is not None and db.password.get_secret_value() == "s3cret-value"
    assert db.sslrootcert == str(tmp_path / "certs" / "root.crt")


def test_users_are_checked_without_showing_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANN_TOKEN", "tok-9f8e7d")
    path = write_config(
        tmp_path,
        """
        databases:
          - {name: a, dsn: "postgresql://u@h/d"}
        users:
          - {name: ann, token: "${ANN_TOKEN}", databases: {a: {role: reader}}}
          - {name: bob, token: "${ANN_TOKEN}", databases: {b: {}}}
          - {name: ann}
        auth: {stdio_user: anne}
        """,
    )
    lines = problems(path)
    assert f"{path}: users[1].token: is the token of an earlier user" in lines
    assert f"{path}: users[1].databases: no database named 'b'" in lines
    assert f"{path}: users[2].name: 'ann' is the name of an earlier user" in lines
    assert f"{path}: auth.stdio_user: no user named 'anne'; did you mean 'ann'?" in lines
    assert "tok-9f8e7d" not in " ".join(lines)
