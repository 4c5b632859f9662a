"""Misconfiguration gets one line naming what is wrong (exit code 2), before anything starts;
an unreachable database is named (never with its password) and the server keeps serving."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import asyncpg
import psutil
import pytest
from eventually import eventually
from mcp import Client, StdioServerParameters
from mcpclient import call, call_error, connect, execute, fetch
from serverproc import EXECUTABLE, Server, clean_env, uv_run

SECRET = "s3cret-never-shown"


def start(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXECUTABLE, *args],
        capture_output=True,
        text=True,
        env=clean_env(**(env or {})),
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        (
            {"PG_DSN": f"host=localhost port=notaport dbname=app password={SECRET}"},
            [],
            "PG_DSN (or --dsn): port 'notaport' is not a number from 1 to 65535",
        ),
        (
            {"PG_DSN": f"postgress://app:{SECRET}@localhost/app"},
            [],
            "PG_DSN (or --dsn): unsupported scheme 'postgress://': use postgresql://",
        ),
        ({"PG_DSN": "appdb"}, [], "PG_DSN (or --dsn): not a connection URI or key=value string"),
        ({}, ["--dsn", "host=db colour=blue"], "PG_DSN (or --dsn): key=value string: unknown key"),
        ({"PG_DATABASE": "app", "PG_PORT": "abc"}, [], "PG_PORT: Input should be a valid integer"),
        ({"PG_DATABASE": "app", "MCP_PORT": "abc"}, [], "MCP_PORT (or --port): Input should be"),
        ({"PG_DATABASE": "app"}, ["--log-level", "LOUD"], "MCP_LOG_LEVEL (or --log-level): Input"),
        ({}, [], "no database configured: set PG_DSN"),
    ],
    ids=["port", "scheme", "bare-word", "unknown-key", "PG_PORT", "MCP_PORT", "level", "none"],
)
def test_a_misconfiguration_is_one_line_naming_it(
    tmp_path: Path, env: dict[str, str], args: list[str], expected: str
) -> None:
    done = start(*args, env=env, cwd=tmp_path)  # no .env in tmp_path
    assert done.returncode == 2
    assert done.stdout == ""  # stdout is the MCP transport
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("pg-mcp-server: invalid configuration: ")
    assert expected in lines[0]
    assert SECRET not in done.stderr


@pytest.mark.parametrize(
    ("args", "env", "code"),
    [
        (["--demo", "--transport", "http", "--host", "0.0.0.0"], {}, 3),
        (["--demo"], {"MCP_PORT": "99999"}, 2),
        (["--demo", "--log-format", "yaml"], {}, 2),  # argparse's own refusal
    ],
)
def test_the_demo_checks_flags_before_starting_postgresql(
    args: list[str], env: dict[str, str], code: int
) -> None:
    started = time.monotonic()
    done = start(*args, env=env)
    assert done.returncode == code, done.stderr
    assert "embedded PostgreSQL" not in done.stderr
    assert time.monotonic() - started < 30  # no initdb happened


def test_an_unreachable_database_is_named_and_the_server_keeps_serving(tmp_path: Path) -> None:
    dsn = f"postgresql://alice:{SECRET}@127.0.0.1:1/appdb"
    server = Server([EXECUTABLE], clean_env(PG_DSN=dsn), tmp_path / "stderr.log")
    try:
        server.initialize()
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "list_schemas", "arguments": {}},
            }
        )
        answer = server.read()
        assert answer["result"]["isError"] and "CONNECTION_ERROR" in str(answer["result"])
        log = server.log_lines()
        line = next(m for m in log if "cannot reach PostgreSQL" in m)
        assert "host 127.0.0.1, port 1, database appdb, user alice" in line
        assert "connects again at every tool call" in line
        assert SECRET not in server.stderr_path.read_text()
    finally:
        server.close()


# Each holds a character a URI must percent-encode; "9876" follows it, so a message quoting
# any fragment of the password would show "9876".
RAW_PASSWORDS = ["ab/cd9876", "ab?cd9876", "ab#cd9876", "ab@cd9876", "ab%zz9876", "ab cd9876"]


@pytest.mark.parametrize("password", RAW_PASSWORDS)
def test_a_password_that_needs_encoding_is_refused_naming_the_fix(
    tmp_path: Path, password: str
) -> None:
    done = start(env={"PG_DSN": f"postgresql://alice:{password}@127.0.0.1:5432/app"}, cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "must percent-encode" in line and "PG_PASSWORD" in line, line
    assert "9876" not in done.stderr and "cd" not in line.split("PG_DSN (or --dsn):")[1][:120]


async def test_any_password_works_percent_encoded_or_in_pg_password(
    demo_dsn: str, tmp_path: Path
) -> None:
    """A role whose password holds every character a URI reserves connects with it
    percent-encoded in the DSN, and with it in PG_PASSWORD and left out of the DSN."""
    password = "p/q?r#s@t%u:v w&x=y"
    role = f"pw_{secrets.token_hex(4)}"
    await execute(demo_dsn, f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    # The test server trusts every local connection: make it check this role's password.
    hba = Path((await fetch(demo_dsn, "SHOW hba_file"))[0][0])
    original = hba.read_text()
    hba.write_text(
        f"local all {role} scram-sha-256\nhost all {role} 127.0.0.1/32 scram-sha-256\n" + original
    )
    await execute(demo_dsn, "SELECT pg_reload_conf()")
    try:
        parts = urlsplit(demo_dsn)
        assert "user=" not in parts.query  # the role goes in the URI's user info

        def as_role(userinfo: str) -> str:
            hosts = parts.netloc.rpartition("@")[2]
            return parts._replace(netloc=f"{userinfo}@{hosts}").geturl()

        # Wait until the reload is in force: a wrong password is refused.

        async def checking() -> bool:
            try:
                await fetch(as_role(f"{role}:wrong"), "SELECT 1")
            except asyncpg.InvalidPasswordError:
                return True
            return False

        await eventually(checking, what="the server checking the role's password", seconds=10)
        encoded = as_role(f"{role}:{quote(password, safe='')}")
        for dsn, extra in ((encoded, {}), (as_role(role), {"PG_PASSWORD": password})):
            params = StdioServerParameters(
                command=EXECUTABLE, args=[], env=clean_env(PG_DSN=dsn, **extra), cwd=tmp_path
            )
            async with Client(params) as client:
                info = await call(client, "list_schemas")
                assert "public" in {s["name"] for s in info["schemas"]}
    finally:
        hba.write_text(original)
        await execute(demo_dsn, "SELECT pg_reload_conf()")
        await execute(demo_dsn, f"DROP ROLE {role}")


def test_pg_password_over_a_dsn_password_is_named(tmp_path: Path) -> None:
    dsn = f"postgresql://alice:{SECRET}@127.0.0.1:1/appdb"
    server = Server(
        [EXECUTABLE], clean_env(PG_DSN=dsn, PG_PASSWORD=SECRET + "2"), tmp_path / "stderr.log"
    )
    try:
        server.initialize()
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "list_schemas", "arguments": {}},
            }
        )
        server.read()
        line = next(m for m in server.log_lines() if "cannot reach PostgreSQL" in m)
        assert "password PG_PASSWORD, which overrides the one in the DSN" in line, line
        assert SECRET not in server.stderr_path.read_text()
    finally:
        server.close()


async def test_a_libpq_keyword_dsn_works(demo_dsn: str) -> None:
    parts = urlsplit(demo_dsn)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    keywords = (
        f"host='{query['host']}' port={query['port']} dbname={parts.path.lstrip('/')} "
        f"user={parts.username}"
    )
    params = StdioServerParameters(command=EXECUTABLE, args=["--dsn", keywords], env=clean_env())
    async with Client(params) as client:
        listed = await call(client, "list_tables")
        assert "orders" in {t["name"] for t in listed["tables"]}
        body = await call_error(client, "describe_table", table_name="nope")
        assert body["error"]["code"] == "TABLE_NOT_FOUND"


def test_secrets_do_not_reach_the_demo_processes(tmp_path: Path) -> None:
    """PG_PASSWORD and MCP_AUTH_TOKENS leave the environment once read: the embedded
    PostgreSQL the server starts does not inherit them."""
    env = clean_env(PG_PASSWORD=SECRET, MCP_AUTH_TOKENS=SECRET + "-token")
    server = Server(uv_run("--demo"), env, tmp_path / "stderr.log")
    try:
        server.initialize()
        pid, _ = server.embedded()
        postmaster = psutil.Process(pid)
        for process in [postmaster, *postmaster.children()]:
            environ = Path(f"/proc/{process.pid}/environ").read_bytes()
            assert SECRET.encode() not in environ, process.cmdline()
    finally:
        server.close()


async def test_the_background_audit_reaches_the_instructions(demo_dsn: str) -> None:
    """The audit runs while the server starts serving; `initialize` still carries what it
    found (the test database's role is a superuser), and stderr has it too."""
    async with connect(demo_dsn) as client:
        assert client.instructions is not None
        assert "more rights than reading" in client.instructions
        assert "is a superuser" in client.instructions


# In a fresh interpreter: which heavy modules a server has imported once `initialize` is
# answered, and that the first tools/list (which makes the tools) still lists them all.
_LAZY = """
import sys, anyio
from mcp import Client
from pg_mcp_server.config import Settings
from pg_mcp_server.server import build_server

async def main() -> None:
    server = build_server(Settings.load(database={"dsn": sys.argv[1]}))
    async with Client(server) as client:
        print(sorted(m for m in ("sqlalchemy", "pglast", "yaml") if m in sys.modules))
        print(len((await client.list_tools()).tools), "sqlalchemy" in sys.modules)

anyio.run(main)
"""


def test_initialize_is_answered_before_the_database_layer_is_imported(demo_dsn: str) -> None:
    """SQLAlchemy, pglast and PyYAML are most of the start-up: initialize needs none of them."""
    proc = subprocess.run(
        [sys.executable, "-c", _LAZY, demo_dsn],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    imported, listed = proc.stdout.splitlines()
    assert imported == "[]"
    tools, loaded = listed.split()
    assert int(tools) >= 9 and loaded == "True"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_one_line_naming_it(tmp_path: Path, workers: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = start(
            "--transport", "http", "--port", port, "--workers", workers,
            env={"PG_DSN": f"postgresql://alice:{SECRET}@127.0.0.1:1/appdb"}, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 4
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"pg-mcp-server: cannot serve HTTP: port {port} on 127.0.0.1 is")
    assert "Traceback" not in done.stderr and "Errno" not in done.stderr
    assert "serving Streamable HTTP" not in done.stderr


def test_a_host_that_never_answers_fails_after_the_connect_timeout(tmp_path: Path) -> None:
    """Something accepts the TCP connection and never answers: each call fails after
    PG_CONNECT_TIMEOUT, saying so, instead of hanging for the pool timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes the handshakes; nobody ever answers
        port = silent.getsockname()[1]
        env = clean_env(
            PG_DSN=f"postgresql://alice@127.0.0.1:{port}/appdb",
            PG_CONNECT_TIMEOUT="1",
            PG_POOL_TIMEOUT="60",
        )
        server = Server([EXECUTABLE], env, tmp_path / "stderr.log")
        try:
            server.initialize()
            server.send(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "list_schemas", "arguments": {}},
                }
            )
            answer = server.read(timeout=30)  # well before PG_POOL_TIMEOUT's 60 s
            text = str(answer["result"])
            assert answer["result"]["isError"] and "CONNECTION_ERROR" in text
            assert "did not answer within 1 s (PG_CONNECT_TIMEOUT)" in text
            line = next(m for m in server.log_lines() if "cannot reach PostgreSQL" in m)
            assert "PG_CONNECT_TIMEOUT" in line
        finally:
            server.close()
