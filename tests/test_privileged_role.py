"""A role that could run programs or read files on the database host is refused at start
(issue 19, "Defence in depth at start"): one statement that got past the guard would run shell
commands through COPY ... TO PROGRAM. MCP_ALLOW_PRIVILEGED_ROLE serves it anyway, warned about.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import pytest_asyncio
from mcpclient import call, call_error, connect, execute
from serverproc import EXECUTABLE, Server, clean_env

# The test server trusts local connections: a role logs in by name alone.
ROLES = f"""
CREATE ROLE pgmcp_plain_{os.getpid()} LOGIN;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO pgmcp_plain_{os.getpid()};
CREATE ROLE pgmcp_files_{os.getpid()} LOGIN;
GRANT pg_read_server_files TO pgmcp_files_{os.getpid()};
CREATE ROLE pgmcp_group_{os.getpid()};
GRANT pg_execute_server_program TO pgmcp_group_{os.getpid()};
CREATE ROLE pgmcp_member_{os.getpid()} LOGIN IN ROLE pgmcp_group_{os.getpid()};
"""
NAMES = ("plain", "files", "group", "member")


def as_role(dsn: str, role: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@pytest_asyncio.fixture(loop_scope="session")
async def roles(demo_dsn: str) -> AsyncIterator[dict[str, str]]:
    """DSNs of the demo database as a plain reader, a member of pg_read_server_files, and a
    member of a role that is a member of pg_execute_server_program; and as the superuser."""
    await execute(demo_dsn, ROLES)
    pid = os.getpid()
    try:
        yield {
            "superuser": demo_dsn,
            **{n: as_role(demo_dsn, f"pgmcp_{n}_{pid}") for n in ("plain", "files", "member")},
        }
    finally:
        await execute(
            demo_dsn,
            "".join(f"DROP OWNED BY pgmcp_{n}_{pid}; DROP ROLE pgmcp_{n}_{pid};" for n in NAMES),
        )


def start(dsn: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXECUTABLE, "--dsn", dsn],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("who", "attribute"),
    [
        ("superuser", "is a superuser"),
        ("files", "is a member of pg_read_server_files"),
        ("member", "is a member of pg_execute_server_program"),
    ],
)
def test_a_privileged_role_is_refused_at_start(
    roles: dict[str, str], who: str, attribute: str
) -> None:
    done = start(roles[who], MCP_ALLOW_PRIVILEGED_ROLE="false")
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""  # nothing served
    line = done.stderr.strip().splitlines()[-1]
    role = urlsplit(roles[who]).username
    assert line.startswith(f"pg-mcp-server: refusing to start: role '{role}' {attribute}"), line
    assert "COPY ... TO PROGRAM" in line and "can only SELECT" in line
    assert "MCP_ALLOW_PRIVILEGED_ROLE=true" in line


def test_the_override_serves_a_privileged_role_with_a_warning(
    roles: dict[str, str], tmp_path: Path
) -> None:
    server = Server(
        [EXECUTABLE, "--dsn", roles["files"]],
        clean_env(MCP_ALLOW_PRIVILEGED_ROLE="true"),
        tmp_path / "stderr.log",
    )
    try:
        reply = server.initialize()
        assert "pg_read_server_files" in reply["result"]["instructions"]
        warnings = [m for m in server.log_lines() if m.startswith("privilege audit:")]
        assert any("is a member of pg_read_server_files" in m for m in warnings), warnings
    finally:
        server.close()


def test_a_reading_role_starts_without_a_warning(roles: dict[str, str], tmp_path: Path) -> None:
    server = Server(
        [EXECUTABLE, "--dsn", roles["plain"]],
        clean_env(MCP_ALLOW_PRIVILEGED_ROLE="false"),
        tmp_path / "stderr.log",
    )
    try:
        reply = server.initialize()
        assert "more rights than reading" not in reply["result"]["instructions"]
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "list_tables", "arguments": {}},
            }
        )
        answer = server.read()
        assert not answer["result"]["isError"], answer
        assert not [m for m in server.log_lines() if "privilege audit" in m]
    finally:
        server.close()


async def test_a_privileged_role_not_audited_at_start_is_refused_at_connection(
    roles: dict[str, str],
) -> None:
    """The start-up audit could not run (the database was down then), or the role gained the
    privilege since: every new pooled connection checks again, and a call gets a structured
    refusal instead of running as that role."""
    async with connect(roles["member"], allow_privileged_role=False) as client:
        body = await call_error(client, "execute_query", sql="SELECT 1")
        assert body["error"]["code"] == "PERMISSION_DENIED", body
        assert "is a member of pg_execute_server_program" in body["error"]["message"]
        assert "MCP_ALLOW_PRIVILEGED_ROLE" in body["error"]["suggestion"]
    async with connect(roles["member"], allow_privileged_role=True) as client:
        assert (await call(client, "execute_query", sql="SELECT 1 AS x"))["rows"] == [[1]]


def test_a_database_that_does_not_answer_holds_up_the_start_only_briefly(
    tmp_path: Path,
) -> None:
    """The audit before serving waits a few seconds at most, not PG_CONNECT_TIMEOUT: the
    connection check covers what it could not see (the test above)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes the handshakes; nobody ever answers
        port = silent.getsockname()[1]
        env = clean_env(
            PG_DSN=f"postgresql://alice@127.0.0.1:{port}/appdb",
            PG_CONNECT_TIMEOUT="120",
            MCP_ALLOW_PRIVILEGED_ROLE="false",
        )
        server = Server([EXECUTABLE], env, tmp_path / "stderr.log")
        try:
            server.initialize(timeout=60)  # half of PG_CONNECT_TIMEOUT
            line = next(m for m in server.log_lines() if "role audit within" in m)
            assert "every new database connection checks the role" in line
        finally:
            server.close()
