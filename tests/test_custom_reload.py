"""Custom definitions checked against the live database at start, naming the definition;
reloaded when the file changes and on SIGHUP (a service), with list_changed notifications;
a bad new file keeps the old definitions; listChanged is advertised only with a file."""

from __future__ import annotations

import asyncio
import logging
import os
import pty
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from customdefs import write
from eventually import eventually, wait_for
from mcp import Client, StdioServerParameters
from mcpclient import call, call_error, records
from serverproc import clean_env, http_answers

from pg_mcp_server.config import Settings
from pg_mcp_server.custom.specs import DefinitionsError
from pg_mcp_server.server import build_server, check_definitions

EXECUTABLE = str(Path(sys.executable).parent / "pg-mcp-server")
ONE = """
tools:
  - name: count_users
    description: How many users there are (version aaaa)
    type: sql
    sql: SELECT count(*) AS users FROM users
prompts:
  - name: hello
    messages:
      - role: user
        content: {type: text, text: hi}
"""
TWO = (
    ONE
    + """
resources:
  - uri: custom://env
    name: Env
    type: static
    data: test
"""
)
TWO_TOOLS = TWO.replace(
    "tools:\n",
    """tools:
  - name: count_orders
    type: sql
    sql: SELECT count(*) AS orders FROM orders
""",
)


def replace(path: Path, text: str) -> None:
    """A new version of the file as editors save it: written aside, then renamed over it."""
    aside = path.with_suffix(".tmp.yaml")
    aside.write_text(text)
    os.replace(aside, path)


@asynccontextmanager
async def session(
    dsn: str, path: Path, heard: list[str] | None = None, **client: Any
) -> AsyncIterator[Client]:
    async def handler(message: Any) -> None:
        if heard is not None and hasattr(message, "method"):
            heard.append(message.method)

    settings = Settings.load(database={"dsn": dsn}, server={"custom_definitions": str(path)})
    async with Client(build_server(settings), message_handler=handler, **client) as c:
        yield c


async def tool_names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "tools:\n  - name: report\n    type: sql\n    sql: |\n      SELECT *\n"
            "      FROM orderz\n",
            '2: tool 0 (report): sql: relation "orderz" does not exist (line 2 of the sql)',
        ),
        (
            "tools:\n  - name: two\n    type: sql\n    sql: SELECT $1::int + $2::int AS n\n"
            "    input_schema:\n      type: object\n      properties:\n"
            "        a: {type: integer}\n",
            "2: tool 0 (two): sql uses $2 but input_schema has 1 properties to bind "
            "($1, $2, ... in order)",
        ),
        (
            "tools:\n  - name: twice\n    type: sql\n    sql: SELECT 1 AS id, 2 AS id\n",
            "2: tool 0 (twice): the result has more than one column named id: name them apart "
            "(AS ...)",
        ),
        (
            "tools:\n  - name: f\n    type: pl-func\n    language: plpgsql\n    returns: int\n"
            "    code: BEGIN RETURN 1 END\n",
            "2: tool 0 (f): code: syntax error at end of input",
        ),
        (
            "tools:\n  - name: f\n    type: pl-func\n    language: plpgsql\n"
            "    returns: no_such_type\n    code: BEGIN RETURN NULL; END\n",
            '2: tool 0 (f): code: type "no_such_type" does not exist',
        ),
        (
            "resources:\n  - uri: custom://r\n    name: R\n    type: sql\n"
            "    sql: SELECT emial FROM users\n",
            '2: resource 0 (R): sql: column "emial" does not exist (line 1 of the sql); hint: '
            'Perhaps you meant to reference the column "users.email".',
        ),
        (
            "resources:\n  - uri: custom://o/{status}\n    name: O\n    type: sql\n"
            "    sql: SELECT id FROM orders WHERE status = $1::order_status AND user_id = $2\n",
            "2: resource 0 (O): sql uses $2 but the uri has 1 parameters to bind ($1, $2, ... "
            "in the order they appear)",
        ),
        (
            "resources:\n  - uri: custom://o/{status}\n    name: O\n    type: sql\n"
            "    sql: SELECT id FROM orders WHERE status = $1::order_status\n"
            "    parameters:\n      - name: status\n        completion: SELECT 1, 2\n",
            "2: resource 0 (O): argument status: completion must return one column and use at "
            "most $1 (the text typed so far)",
        ),
        (
            "prompts:\n  - name: p\n    arguments:\n      - name: t\n"
            "        completion: SELECT relname FROM pg_clas\n"
            "    messages:\n      - role: user\n        content: {type: text, text: hi}\n",
            '2: prompt 0 (p): argument t: completion: relation "pg_clas" does not exist (line 1 '
            "of the sql)",
        ),
    ],
)
async def test_the_live_check_names_the_definition(
    demo_dsn: str, tmp_path: Path, text: str, problem: str
) -> None:
    path = write(tmp_path, text)
    settings = Settings.load(database={"dsn": demo_dsn}, server={"custom_definitions": str(path)})
    with pytest.raises(DefinitionsError) as caught:
        await check_definitions(settings)
    assert [p.removeprefix(f"{path}:") for p in caught.value.problems] == [problem]


async def test_a_language_the_database_lacks_fails_at_start(demo_dsn: str, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "tools:\n  - name: py\n    type: pl-do\n    language: plnothing\n    code: x\n",
    )
    settings = Settings.load(
        database={"dsn": demo_dsn},
        server={"custom_definitions": str(path), "allowed_pl_languages": "*"},
    )
    with pytest.raises(DefinitionsError) as caught:
        await check_definitions(settings)
    assert caught.value.problems == [
        f"{path}:2: tool 0 (py): language plnothing is not installed in the database (the "
        "server does not have it)"
    ]


async def test_a_missing_table_stops_the_server(demo_dsn: str, tmp_path: Path) -> None:
    path = write(tmp_path, "tools:\n  - name: r\n    type: sql\n    sql: SELECT * FROM orderz\n")
    started = subprocess.run(
        [EXECUTABLE, "--dsn", demo_dsn, "--custom-definitions", str(path)],
        input=b"",
        capture_output=True,
        timeout=60,
    )
    assert started.returncode == 2 and started.stdout == b""
    assert f'{path}:2: tool 0 (r): sql: relation "orderz" does not exist' in started.stderr.decode()


async def test_list_changed_is_advertised_only_with_a_file(demo_dsn: str, tmp_path: Path) -> None:
    path = write(tmp_path, ONE)
    for mode in ("legacy", "auto"):
        async with session(demo_dsn, path, mode=mode) as client:
            caps = client.server_capabilities
            assert caps.tools and caps.tools.list_changed is True
            assert caps.prompts and caps.prompts.list_changed is True
            assert caps.resources and caps.resources.list_changed is True
        settings = Settings.load(database={"dsn": demo_dsn})
        async with Client(build_server(settings), mode=mode) as client:
            caps = client.server_capabilities
            assert caps.tools and caps.tools.list_changed is False
            assert caps.prompts and caps.prompts.list_changed is False
            assert caps.resources and caps.resources.list_changed is False


async def test_a_changed_file_is_reloaded_and_clients_told(
    demo_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, ONE)
    heard: list[str] = []
    async with session(demo_dsn, path, heard, mode="legacy") as client:
        assert "count_users" in await tool_names(client)
        replace(path, TWO)

        async def told() -> bool:
            return "notifications/resources/list_changed" in heard

        await eventually(told)
        # Only the list that changed is announced.
        assert heard == ["notifications/resources/list_changed"]
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert "custom://env" in listed
        replace(path, TWO_TOOLS)

        async def tools_told() -> bool:
            return "notifications/tools/list_changed" in heard

        await eventually(tools_told)
        assert {"count_users", "count_orders"} <= await tool_names(client)
        assert records(await call(client, "count_orders"))[0]["orders"] > 0

    # Saving the same text again changes nothing.
    caplog.set_level(logging.DEBUG, logger="pg_mcp_server.custom.reload")
    async with session(demo_dsn, path, heard, mode="legacy") as client:
        heard.clear()
        replace(path, TWO_TOOLS)

        async def seen() -> bool:
            return any("touched, not changed" in r.getMessage() for r in caplog.records)

        await eventually(seen)
        assert heard == []


async def test_a_bad_file_keeps_the_old_definitions(
    demo_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, ONE)
    heard: list[str] = []
    caplog.set_level(logging.INFO, logger="pg_mcp_server.custom.reload")
    async with session(demo_dsn, path, heard, mode="legacy") as client:
        for bad, why in (
            ("tools:\n  - name: broken\n", "tool 0 (broken): type is required"),
            (
                "tools:\n  - name: gone\n    type: sql\n    sql: SELECT * FROM orderz\n",
                'relation "orderz" does not exist',
            ),
            ("tools: [unclosed\n", "invalid YAML"),
        ):
            caplog.clear()
            replace(path, bad)

            async def logged(why: str = why) -> bool:
                return any(why in r.getMessage() for r in caplog.records)

            await eventually(logged)
            (record,) = caplog.records
            assert record.levelname == "WARNING"
            assert "not reloaded (the file changed), the previous ones stay" in record.getMessage()
            assert await tool_names(client) >= {"count_users"}
            assert records(await call(client, "count_users"))[0]["users"] > 0
        assert heard == []
        replace(path, TWO_TOOLS)

        async def reloaded() -> bool:
            return "notifications/tools/list_changed" in heard

        await eventually(reloaded)
        assert "count_orders" in await tool_names(client)


async def test_removed_tools_are_gone(demo_dsn: str, tmp_path: Path) -> None:
    path = write(tmp_path, TWO_TOOLS)
    heard: list[str] = []
    async with session(demo_dsn, path, heard, mode="legacy") as client:
        assert records(await call(client, "count_users"))[0]["users"] > 0
        replace(path, "")

        async def emptied() -> bool:
            return len(heard) == 3

        await eventually(emptied)
        assert sorted(heard) == [
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
            "notifications/tools/list_changed",
        ]
        assert not {"count_users", "count_orders"} & await tool_names(client)
        # Called by name once before, still the structured answer of an unknown tool.
        body = await call_error(client, "count_users")
        assert body["error"]["code"] == "PARAMETER_ERROR"
        assert body["error"]["message"] == "There is no tool named 'count_users'."
        assert "count_users" not in body["error"]["suggestion"]


async def test_modern_clients_hear_through_subscriptions_listen(
    demo_dsn: str, tmp_path: Path
) -> None:
    path = write(tmp_path, ONE)
    async with session(demo_dsn, path) as client:
        async with client.listen(tools_list_changed=True) as events:
            replace(path, TWO_TOOLS)
            event = await asyncio.wait_for(anext(aiter(events)), 15)
        assert type(event).__name__ == "ToolsListChanged"
        assert "count_orders" in await tool_names(client)


async def test_an_unreachable_database_serves_the_file_unchecked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, ONE)
    caplog.set_level(logging.WARNING, logger="pg_mcp_server.custom.reload")
    async with session("postgresql://nobody@127.0.0.1:9/none", path) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        rows = tools["count_users"].output_schema["properties"]["rows"]  # type: ignore[index]
        assert rows["items"] == {"type": "array"}  # no columns known yet
        body = await call_error(client, "count_users")
        assert body["error"]["code"] == "CONNECTION_ERROR"
    assert any("not checked against the database" in r.getMessage() for r in caplog.records)


def _serve(dsn: str, path: Path, stdin: int) -> subprocess.Popen[bytes]:
    env = clean_env()
    return subprocess.Popen(
        [EXECUTABLE, "--dsn", dsn, "--custom-definitions", str(path), "--log-format", "text"],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


@asynccontextmanager
async def served(
    transport: str, dsn: str, path: Path, heard: list[str]
) -> AsyncIterator[tuple[Client, int]]:
    """A client of a server process serving `path` as a service (stdin not a terminal), and
    the server's pid."""

    async def handler(message: Any) -> None:
        if hasattr(message, "method"):
            heard.append(message.method)

    env = clean_env()
    args = ["--dsn", dsn, "--custom-definitions", str(path), "--log-format", "text"]
    if transport == "stdio":
        params = StdioServerParameters(command=EXECUTABLE, args=args, env=env)
        async with Client(params, mode="legacy", message_handler=handler) as client:
            (pid,) = [
                p.pid
                for p in psutil.process_iter(["cmdline"])
                if str(path) in " ".join(p.info["cmdline"] or ())
            ]
            yield client, pid
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [EXECUTABLE, "--transport", "http", "--port", str(port), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"

        listening = wait_for(lambda: http_answers(process, base), 60)
        assert listening, "the server did not listen within 60 s"
        async with Client(base + "/mcp") as client:
            yield client, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_sighup_reloads_a_service(demo_dsn: str, tmp_path: Path, transport: str) -> None:
    path = write(tmp_path, ONE)
    heard: list[str] = []

    async def description(client: Client) -> str:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        return tools["count_users"].description or ""

    async with served(transport, demo_dsn, path, heard) as (client, pid):
        assert (await description(client)).endswith("(version aaaa)")
        # Same size, same inode, same modification time: the file watcher cannot see it.
        before = path.stat()
        with path.open("r+") as f:
            f.write(ONE.replace("aaaa", "bbbb"))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_mtime_ns == before.st_mtime_ns
        assert (path.stat().st_size, path.stat().st_ino) == (before.st_size, before.st_ino)
        os.kill(pid, signal.SIGHUP)

        async def reloaded() -> bool:
            return (await description(client)).endswith("(version bbbb)")

        async def told() -> bool:
            return "notifications/tools/list_changed" in heard

        await eventually(reloaded)
        if transport == "stdio":  # (HTTP is stateless here: nobody to tell)
            await eventually(told)
        assert psutil.Process(pid).is_running()


def test_sighup_from_a_terminal_ends_the_server(demo_dsn: str, tmp_path: Path) -> None:
    path = write(tmp_path, ONE)
    leader, follower = pty.openpty()
    try:
        process = _serve(demo_dsn, path, follower)
        assert process.stdout is not None
        # Serving (the SIGHUP hook in place): a ping through the terminal is answered.
        os.write(leader, b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
        assert b'"id":1' in process.stdout.readline()
        process.send_signal(signal.SIGHUP)
        process.wait(timeout=30)  # ended, not reloaded
    finally:
        os.close(leader)
        os.close(follower)
