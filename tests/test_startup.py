"""Misconfiguration gets one line naming what is wrong (exit code 2), before anything starts;
an unreachable database is named (never with its password) and the server keeps serving."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil
import pytest
from mcp import Client, StdioServerParameters
from mcpclient import call, call_error, connect
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
