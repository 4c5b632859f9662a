"""The real thing: `pg-mcp-server` spawned as a process, spoken to over stdio."""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import asyncpg
import psutil
from eventually import eventually, wait_for
from mcp import Client, StdioServerParameters
from mcpclient import call, call_error, records
from serverproc import Server, clean_env

ALL_TOOLS = {
    "list_schemas",
    "list_tables",
    "search_tables",
    "describe_table",
    "get_sample_rows",
    "get_foreign_keys",
    "find_join_path",
    "execute_query",
    "explain_query",
    "read_resource",
    "generate_embedding",
    "similarity_search",
    "analyze_db_health",
    "get_top_queries",
    "analyze_query_indexes",
}
EXECUTABLE = str(Path(sys.executable).parent / "pg-mcp-server")


def params(*args: str) -> StdioServerParameters:
    env = clean_env()
    env.pop("DATABASE_URL", None)
    return StdioServerParameters(command=EXECUTABLE, args=list(args), env=env)


async def test_stdio_session_against_a_database(demo_dsn: str) -> None:
    async with Client(params("--dsn", demo_dsn, "--log-format", "text")) as client:
        assert client.server_info is not None
        assert client.server_info.name == "pg-mcp-server"
        assert client.instructions and "read-only" in client.instructions
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == ALL_TOOLS
        for tool in tools.values():
            assert tool.output_schema is not None
            # Portable schemas: references inlined, nullables as anyOf (a type array is
            # rejected by single-type dialects such as Gemini's function declarations).
            for schema in (tool.input_schema, tool.output_schema):
                text = json.dumps(schema)
                assert "$ref" not in text and '"type": [' not in text, tool.name
            assert tool.annotations is not None and tool.annotations.read_only_hint
            assert tool.title and "Example" in (tool.description or "")
        listed = await call(client, "list_tables")
        assert {"users", "orders", "order_items", "payments", "addresses"} <= {
            t["name"] for t in listed["tables"]
        }
        body = await call_error(client, "describe_table", table_name="order")
        assert body["error"]["code"] == "TABLE_NOT_FOUND"
        assert "'orders'" in body["error"]["suggestion"]


async def test_demo_mode_over_stdio() -> None:
    async with Client(params("--demo")) as client:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == ALL_TOOLS
        listed = await call(client, "list_tables")
        names = {t["name"] for t in listed["tables"]}
        assert {"users", "addresses", "orders", "order_items", "payments"} <= names
        users = await call(client, "get_sample_rows", table_name="users", limit=2)
        assert users["row_count"] == 2
        assert all(r["password_hash"] == "[REDACTED]" for r in records(users))
        orders = await call(client, "describe_table", table_name="orders")
        assert orders["description"]
        assert any(c.get("enum_values") for c in orders["columns"])
        path = await call(client, "find_join_path", from_table="payments", to_table="users")
        assert path["paths"][0]["depth"] >= 1
        counted = await call(
            client, "execute_query", sql="SELECT count(*) AS n " + path["paths"][0]["sql_example"]
        )
        assert records(counted)[0]["n"] > 0
        # The demo serves through a read-only role: the start-up audit has nothing to report.
        assert client.instructions and "more rights than reading" not in client.instructions


INIT = (
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
)


def _start(*args: str) -> subprocess.Popen[bytes]:
    env = clean_env()
    proc = subprocess.Popen(
        [EXECUTABLE, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INIT.encode())
    proc.stdin.flush()
    reply = json.loads(proc.stdout.readline())  # stdout carries only MCP messages
    assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "pg-mcp-server"
    return proc


def _postmasters_since(started: float) -> set[int]:
    """Postmasters (postgres -D <dir>) created since `started`: the demo's own, not the
    backends that other servers on the machine fork meanwhile."""
    found = set()
    for p in psutil.process_iter(["name", "cmdline", "create_time"]):
        recent = p.info["create_time"] >= started - 0.5
        if p.info["name"] == "postgres" and recent and "-D" in (p.info["cmdline"] or []):
            found.add(p.pid)
    return found


def test_stdio_exits_cleanly_at_end_of_input(demo_dsn: str) -> None:
    proc = _start("--dsn", demo_dsn)
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0


def test_sigterm_stops_the_server_and_its_embedded_database() -> None:
    started = time.time()
    proc = _start("--demo")
    demo = _postmasters_since(started)
    assert demo, "the demo runs its own PostgreSQL"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
    stopped = wait_for(lambda: not any(psutil.pid_exists(pid) for pid in demo), 15)
    assert stopped, "postgres outlived the server"


def _query(request_id: int | str, sql: str) -> dict[str, object]:
    call = {"name": "execute_query", "arguments": {"sql": sql}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": call}


async def _running(dsn: str, marker: str) -> int:
    """How many backends are running a statement holding `marker` now (ours aside)."""
    conn = await asyncpg.connect(dsn)
    try:
        found: int = await conn.fetchval(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE state = 'active'"
            " AND pid <> pg_catalog.pg_backend_pid() AND strpos(query, $1) > 0",
            marker,
        )
        return found
    finally:
        await conn.close()


async def test_a_request_the_client_cancelled_is_never_answered(
    demo_dsn: str, tmp_path: Path
) -> None:
    """JSON-RPC: no answer to a request its client cancelled, not even the error of ours that
    requests still unanswered get at the end. (It got one, after the whole grace.)"""
    marker = "cancelled_by_the_client"
    server = Server([EXECUTABLE, "--dsn", demo_dsn], clean_env(), tmp_path / "stderr.log")
    try:
        server.initialize()
        server.send(_query(7, f"SELECT pg_sleep(60) AS {marker}"))
        await eventually(lambda: _running(demo_dsn, marker), what="the query running")
        cancel = {"requestId": 7, "reason": "the user gave up"}
        server.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})

        async def stopped() -> bool:
            return await _running(demo_dsn, marker) == 0

        await eventually(stopped, what="the cancelled query stopping")
        server.send({"jsonrpc": "2.0", "id": "after", "method": "ping"})
        assert server.read()["id"] == "after"  # nothing for request 7 before it
        assert server.proc.stdin is not None and server.proc.stdout is not None
        server.proc.stdin.close()
        assert server.proc.wait(20) == 0
        rest = server.proc.stdout.read()
        assert rest == b"", f"answered at the end: {rest[:300]!r}"
    finally:
        server.close()


def test_a_non_blocking_stdout_that_fills_up_only_waits(demo_dsn: str, tmp_path: Path) -> None:
    """A client may hand the server a pipe in non-blocking mode (the mode belongs to the pipe,
    shared by both processes). Once it is full, the server waits for the client to read: it
    stopped instead, losing every answer still to come (also before c2500e0)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with (tmp_path / "stderr.log").open("wb") as log:
        proc = subprocess.Popen(
            [EXECUTABLE, "--dsn", demo_dsn], stdin=subprocess.PIPE, stdout=write_end, stderr=log,
            env=clean_env(),
        )  # fmt: skip
    os.close(write_end)
    assert proc.stdin is not None
    try:
        big = "SELECT repeat('x', 1000) AS a FROM generate_series(1, 1500)"  # ~1.5 MB each
        messages = [INIT.encode()] + [json.dumps(_query(i, big)).encode() + b"\n" for i in (2, 3)]
        proc.stdin.write(b"".join(messages))
        proc.stdin.flush()
        capacity = fcntl.fcntl(read_end, fcntl.F_GETPIPE_SZ)
        assert wait_for(lambda: _queued(read_end) >= capacity, 60), "the pipe never filled"
        proc.stdin.write(b'{"jsonrpc":"2.0","id":"last","method":"ping"}\n')
        proc.stdin.flush()
        answers: list[dict[str, Any]] = []
        data = b""
        while len(answers) < 4:
            assert select.select([read_end], [], [], 60)[0], "no answer in time"
            chunk = os.read(read_end, 1 << 20)
            assert chunk, f"stdout ended after {len(answers)} answers"
            *lines, data = (data + chunk).split(b"\n")
            answers += [json.loads(line) for line in lines]
        assert sorted(str(a["id"]) for a in answers) == ["1", "2", "3", "last"]
        assert all("result" in a for a in answers), [a for a in answers if "result" not in a]
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(20)
        proc.stdin.close()
        os.close(read_end)


def _queued(fd: int) -> int:
    """Bytes waiting in the pipe that `fd` reads."""
    queued: int = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
    return queued


STRAY = """
import os, sys, threading, time

def _stray() -> None:
    # Waits until the transport serves (fd 1 then writes where fd 2 does), then prints.
    while not os.path.samestat(os.fstat(1), os.fstat(2)):
        time.sleep(0.01)
    print("stray text from a library")
    open(os.environ["STRAY_PRINTED"], "w").close()

threading.Thread(target=_stray, daemon=True).start()
"""


def test_what_is_printed_while_serving_never_reaches_stdout(demo_dsn: str, tmp_path: Path) -> None:
    """A print (a library's, say) while the server serves goes to stderr: fd 1 points there.
    Python buffers it, though, and flushed it at exit, when fd 1 was the client's again."""
    (tmp_path / "sitecustomize.py").write_text(STRAY)
    printed = tmp_path / "printed"
    env = clean_env(PYTHONPATH=str(tmp_path), STRAY_PRINTED=str(printed))
    env.pop("PYTHONUNBUFFERED", None)  # as a client starts it: stdout, a pipe, is buffered
    server = Server([EXECUTABLE, "--dsn", demo_dsn], env, tmp_path / "stderr.log")
    try:
        server.initialize()
        assert wait_for(printed.exists, 30), "the stray print never ran"
        assert server.proc.stdin is not None and server.proc.stdout is not None
        server.proc.stdin.close()
        assert server.proc.wait(20) == 0
        rest = server.proc.stdout.read()
        assert rest == b"", f"stdout got {rest[:200]!r}"
        assert "stray text from a library" in server.stderr_path.read_text()
    finally:
        server.close()


def test_requests_sent_before_a_stop_signal_are_all_answered(demo_dsn: str, tmp_path: Path) -> None:
    """Requests already in the pipe when SIGINT comes, not read yet: each is answered (at
    c2500e0 only the first one read was; the rest were never read, so never answered)."""
    server = Server([EXECUTABLE, "--dsn", demo_dsn], clean_env(), tmp_path / "stderr.log")
    try:
        server.initialize()
        # Stopped, the server reads nothing: the requests and the signal wait for it together.
        server.proc.send_signal(signal.SIGSTOP)
        assert wait_for(lambda: psutil.Process(server.proc.pid).status() == "stopped", 10)
        assert server.proc.stdin is not None and server.proc.stdout is not None
        # Notifications between them: handing one to the server lets the stop run meanwhile.
        progress = {"progressToken": "t", "progress": 1}
        note: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/progress"}
        note["params"] = progress
        sent: list[dict[str, Any]] = [
            {"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(20)
        ]
        sent.insert(12, note)
        sent.insert(5, note)
        server.proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in sent))
        server.proc.stdin.flush()
        server.proc.send_signal(signal.SIGINT)
        server.proc.send_signal(signal.SIGCONT)
        assert server.proc.wait(20) == 0
        out = server.proc.stdout.read()
        answers = [json.loads(line) for line in out.splitlines()]
        assert sorted(a["id"] for a in answers) == list(range(20)), answers
    finally:
        server.close()


def test_a_listen_stream_open_at_a_stop_ends_with_its_result(demo_dsn: str, tmp_path: Path) -> None:
    """A 2026-07-28 client's subscriptions/listen stream open when the server stops gets its
    SubscriptionsListenResult (the spec's graceful end), not a -32000 after the grace."""
    server = Server([EXECUTABLE, "--dsn", demo_dsn], clean_env(), tmp_path / "stderr.log")
    try:
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        params = {"_meta": meta, "notifications": {"toolsListChanged": True}}
        server.send(
            {"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": params}
        )
        first = server.read()
        assert first.get("method") == "notifications/subscriptions/acknowledged", first
        server.proc.send_signal(signal.SIGINT)
        answer = server.read()
        assert answer["id"] == "L" and "result" in answer, answer
        assert server.proc.wait(20) == 0
    finally:
        server.close()
