"""Streamable HTTP over a real spawned server: versions, status codes, auth, health, limits."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx2 as httpx
import psutil
import pytest
import pytest_asyncio
from eventually import eventually, wait_for
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcpclient import call, call_error, execute, fetch, records
from serverproc import Running, http_server as serve

EXECUTABLE = str(Path(sys.executable).parent / "pg-mcp-server")
ACCEPT = "application/json, text/event-stream"
TOKEN = "test-token-7f3a"


@pytest.fixture(scope="module")
def server(demo_dsn: str) -> Iterator[Running]:
    with serve(demo_dsn, MCP_MAX_REQUEST_BYTES="65536") as running:
        yield running


@pytest.fixture(scope="module")
def secured(demo_dsn: str) -> Iterator[Running]:
    with serve(demo_dsn, MCP_AUTH_TOKENS=f"other-token, {TOKEN}") as running:
        yield running


@pytest_asyncio.fixture(loop_scope="session")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


def init(version: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }


HEADERS = {"Content-Type": "application/json", "Accept": ACCEPT}


@pytest.mark.parametrize(
    ("proposed", "agreed"),
    [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),  # an unknown newer proposal negotiates down
    ],
)
async def test_initialize_negotiates_every_version(
    server: Running, http: httpx.AsyncClient, proposed: str, agreed: str
) -> None:
    reply = await http.post(server.mcp, json=init(proposed), headers=HEADERS)
    assert reply.status_code == 200
    body = reply.json()
    assert body["result"]["protocolVersion"] == agreed
    assert body["result"]["serverInfo"]["name"] == "pg-mcp-server"
    assert body["result"]["capabilities"]["tools"] is not None


async def test_modern_client_discovers_and_calls(server: Running) -> None:
    async with Client(server.mcp) as client:
        assert client.protocol_version == "2026-07-28"  # negotiated via server/discover
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"list_tables", "execute_query", "find_join_path"} <= tools
        listed = await call(client, "list_tables")
        assert "orders" in {t["name"] for t in listed["tables"]}
        body = await call_error(client, "execute_query", sql="DELETE FROM orders")
        assert body["error"]["code"] == "WRITE_OPERATION_DENIED"


def raw_post(running: Running, headers: str, message: dict[str, Any]) -> tuple[int, Any]:
    """One HTTP/1.1 POST written by hand (httpx refuses header values with surrounding
    whitespace, which the spec says servers must accept)."""
    port = int(running.base.rsplit(":", 1)[1])
    body = json.dumps(message).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: {ACCEPT}\r\n{headers}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode() + body)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    status = int(raw.split(b" ", 2)[1])
    return status, json.loads(raw.split(b"\r\n\r\n", 1)[1])


def test_routing_headers_may_carry_surrounding_whitespace(server: Running) -> None:
    """RFC 9110: a field value excludes leading and trailing whitespace (the conformance
    suite's http-header-validation checks it); a different name is still refused."""
    message = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {
            "name": "list_schemas",
            "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    version = "MCP-Protocol-Version: 2026-07-28\r\n"
    status, body = raw_post(
        server, version + "Mcp-Method:  tools/call \t\r\nMcp-Name: \tlist_schemas  \r\n", message
    )
    assert status == 200 and "public" in json.dumps(body["result"])
    status, body = raw_post(
        server, version + "Mcp-Method: tools/call\r\nMcp-Name: list_tables\r\n", message
    )
    assert status == 400 and body["error"]["code"] == -32020


async def test_legacy_client_initializes_and_calls(server: Running) -> None:
    async with Client(server.mcp, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        out = await call(client, "execute_query", sql="SELECT count(*) AS n FROM users")
        assert records(out)[0]["n"] > 0
        body = await call_error(client, "describe_table", table_name="order")
        assert body["error"]["code"] == "TABLE_NOT_FOUND"


async def test_http_status_codes(server: Running, http: httpx.AsyncClient) -> None:
    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
    reply = await http.get(server.mcp, headers={"Accept": "text/event-stream"})
    assert reply.status_code == 405 and reply.headers["allow"] == "POST"
    assert (await http.delete(server.mcp)).status_code == 405
    reply = await http.post(
        server.mcp, json=ping, headers={"Content-Type": "application/json", "Accept": "text/html"}
    )
    assert reply.status_code == 406
    reply = await http.post(
        server.mcp, json=ping, headers={**HEADERS, "MCP-Protocol-Version": "1999-01-01"}
    )
    assert reply.status_code == 400
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    reply = await http.post(
        server.mcp, json=note, headers={**HEADERS, "MCP-Protocol-Version": "2025-11-25"}
    )
    assert reply.status_code == 202
    reply = await http.post(server.mcp, json=ping, headers={**HEADERS, "Host": "evil.example"})
    assert reply.status_code == 421  # DNS rebinding: unknown Host
    reply = await http.post(
        server.mcp, json=ping, headers={**HEADERS, "Origin": "http://evil.example"}
    )
    assert reply.status_code == 403  # a browser page from elsewhere
    reply = await http.post(server.mcp, content=b"{" + b" " * 70000 + b"}", headers=HEADERS)
    assert reply.status_code == 413  # MCP_MAX_REQUEST_BYTES
    assert (await http.get(server.base + "/nowhere")).status_code == 404


async def test_health_reports_the_database(server: Running, http: httpx.AsyncClient) -> None:
    reply = await http.get(server.base + "/health")
    assert reply.status_code == 200
    assert reply.json() == {"status": "ok", "database": "reachable"}


async def test_health_is_503_when_the_database_is_down(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    dead = f"postgresql://nobody@/nowhere?host={tmp_path}&port=5999"
    with serve(dead) as running:
        reply = await http.get(running.base + "/health")
        assert reply.status_code == 503
        assert reply.json() == {"status": "unavailable", "database": "CONNECTION_ERROR"}
        async with Client(running.mcp) as client:
            body = await call_error(client, "list_schemas")
            assert body["error"]["code"] == "CONNECTION_ERROR"
        assert running.proc.poll() is None  # still serving


async def test_bearer_tokens(secured: Running, http: httpx.AsyncClient) -> None:
    reply = await http.post(secured.mcp, json=init("2025-11-25"), headers=HEADERS)
    assert reply.status_code == 401
    assert reply.headers["www-authenticate"].startswith("Bearer")
    wrong = {**HEADERS, "Authorization": "Bearer nope"}
    assert (await http.post(secured.mcp, json=init("2025-11-25"), headers=wrong)).status_code == 401
    right = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}
    reply = await http.post(secured.mcp, json=init("2025-11-25"), headers=right)
    assert reply.status_code == 200 and reply.json()["result"]["protocolVersion"]
    # /health stays open for load balancers; it tells nothing but reachability.
    assert (await http.get(secured.base + "/health")).status_code == 200


async def test_workers_share_the_resolved_settings(demo_dsn: str, http: httpx.AsyncClient) -> None:
    """--workers 2: two worker processes, each serving with the parent's settings (the DSN from
    the command line and the tokens from the environment included), none of which reach the
    workers' environment."""
    with serve(demo_dsn, "--workers", "2", MCP_AUTH_TOKENS=TOKEN) as running:
        workers = _workers_of(running)
        assert len(workers) == 2
        for worker in workers:  # the settings came as an argument, the token is not inherited
            assert TOKEN.encode() not in Path(f"/proc/{worker.pid}/environ").read_bytes()
        anonymous = await http.post(running.mcp, json=init("2025-11-25"), headers=HEADERS)
        assert anonymous.status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx.AsyncClient(headers=auth) as authed,
            Client(streamable_http_client(running.mcp, http_client=authed)) as client,
        ):
            for _ in range(6):
                out = await call(client, "execute_query", sql="SELECT count(*) AS n FROM users")
                assert records(out)[0]["n"] > 0


def _workers_of(running: Running) -> list[psutil.Process]:
    workers: list[psutil.Process] = []

    def two() -> bool:
        nonlocal workers
        children = psutil.Process(running.proc.pid).children()
        workers = [c for c in children if "spawn_main" in " ".join(c.cmdline())]
        return len(workers) >= 2

    wait_for(two, 10)
    return workers


def test_workers_share_a_burst_of_connections(demo_dsn: str) -> None:
    """Each worker listens on a socket of its own (SO_REUSEPORT), so connections opened all at
    once are spread over the workers; with one shared socket the first worker to wake took
    them all. Stopping the server stops every worker."""
    with serve(demo_dsn, "--workers", "2") as running:
        workers = _workers_of(running)
        assert len(workers) == 2
        port = int(running.base.rsplit(":", 1)[1])
        wait_for(  # both workers listening
            lambda: all(
                any(c.status == "LISTEN" and c.laddr.port == port for c in w.net_connections())
                for w in workers
            ),
            10,
        )
        burst = [socket.create_connection(("127.0.0.1", port)) for _ in range(24)]
        try:
            # The kernel picks a worker for each connection as it arrives; each worker accepts
            # its own when its event loop gets to them (later on a loaded machine).
            held: list[int] = []

            def accepted() -> bool:
                nonlocal held
                held = [
                    sum(
                        1
                        for c in w.net_connections()
                        if c.status == "ESTABLISHED" and c.laddr.port == port
                    )
                    for w in workers
                ]
                return sum(held) == 24

            wait_for(accepted, 10)
            assert sum(held) == 24 and min(held) >= 3, held
        finally:
            for sock in burst:
                sock.close()
    for worker in workers:
        assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE


SLEEP = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "execute_query", "arguments": {"sql": "SELECT pg_sleep(3)"}},
}
V1 = {**HEADERS, "MCP-Protocol-Version": "2025-11-25"}


# The server runs a caller's SQL inside a reading statement of its own (rewrite.py).
ACTIVE = (
    "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND strpos(query, $1) > 0 "
    "AND pid <> pg_backend_pid()"
)


# A session of the server's waiting for a lock the test holds.
WAITING = (
    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
    "AND datname = current_database() AND pid <> pg_backend_pid()"
)


async def _running(demo_dsn: str, sql: str) -> None:
    """Wait until `sql` is running in PostgreSQL (the slot it holds is taken)."""

    async def runs() -> bool:
        return bool(await fetch(demo_dsn, ACTIVE, sql))

    await eventually(runs, what=f"{sql} running", seconds=6)


async def test_above_the_limit_a_request_waits_for_a_slot(
    demo_dsn: str, http: httpx.AsyncClient
) -> None:
    with serve(demo_dsn, MCP_MAX_CONCURRENT_REQUESTS="1") as running:
        first = asyncio.create_task(http.post(running.mcp, json=SLEEP, headers=V1))
        await _running(demo_dsn, "SELECT pg_sleep(3)")
        ping = await http.post(running.mcp, json={**SLEEP, "id": 2, "method": "ping"}, headers=V1)
        assert ping.status_code == 200 and first.done()  # served once the first was answered
        assert (await first).status_code == 200


async def test_above_the_limit_a_request_gets_503_after_waiting(
    scratch_dsn: str, http: httpx.AsyncClient
) -> None:
    """The first request holds the only slot for as long as the test holds a lock it waits
    for (no sleep to outlast): the next one is refused after PG_POOL_TIMEOUT."""
    await execute(scratch_dsn, "CREATE TABLE gate (x int)")
    gate = await asyncpg.connect(scratch_dsn)
    try:
        blocked = gate.transaction()
        await blocked.start()
        await gate.execute("LOCK TABLE gate IN ACCESS EXCLUSIVE MODE")
        with serve(scratch_dsn, MCP_MAX_CONCURRENT_REQUESTS="1", PG_POOL_TIMEOUT="0.5") as running:
            call = {"name": "execute_query", "arguments": {"sql": "SELECT count(*) FROM gate"}}
            request = {**SLEEP, "params": call}
            first = asyncio.create_task(http.post(running.mcp, json=request, headers=V1))

            async def waiting() -> bool:
                return bool(await fetch(scratch_dsn, WAITING))

            await eventually(waiting, what="the first request waiting for the lock")
            busy = await http.post(
                running.mcp, json={**SLEEP, "id": 2, "method": "ping"}, headers=V1
            )
            assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
            assert "requests in progress" in busy.json()["error"]["message"]
            assert not first.done()
            await blocked.rollback()
            assert (await first).status_code == 200
    finally:
        await gate.close()


async def _closed_loop(url: str, clients: int, calls: int) -> list[int]:
    """`clients` keep-alive clients, each sending its next call as soon as it has an answer."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "execute_query", "arguments": {"sql": "SELECT 1 AS one"}},
    }
    statuses: list[int] = []

    async def client() -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            for _ in range(calls):
                statuses.append((await http.post(url, json=call, headers=V1)).status_code)

    async with asyncio.TaskGroup() as tasks:
        for _ in range(clients):
            tasks.create_task(client())
    return statuses


async def test_as_many_clients_as_the_limit_get_no_errors(demo_dsn: str) -> None:
    """The limit counts requests until their response is sent: with exactly `limit` clients
    in a closed loop no request is ever refused (the SDK's teardown used to count too)."""
    with serve(demo_dsn, MCP_MAX_CONCURRENT_REQUESTS="4", PG_POOL_TIMEOUT="0.01") as running:
        statuses = await _closed_loop(running.mcp, clients=4, calls=40)
        assert statuses.count(200) == len(statuses) == 160


async def test_32_clients_under_default_settings_get_no_errors(demo_dsn: str) -> None:
    with serve(demo_dsn) as running:
        statuses = await _closed_loop(running.mcp, clients=32, calls=8)
        assert statuses.count(200) == len(statuses) == 256


async def test_malformed_envelopes_get_json_rpc_errors(
    server: Running, http: httpx.AsyncClient
) -> None:
    cases: list[tuple[Any, Any, int]] = [
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None, -32600),  # was 202, no answer
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None, -32600),
        ({"jsonrpc": "2.0", "id": {}, "method": "ping"}, None, -32600),
        ({"jsonrpc": "2.0", "id": 5, "method": "ping", "params": 1.5}, 5, -32600),
        ({"id": 6, "method": "ping"}, 6, -32600),
        ({"jsonrpc": "1.0", "id": 7, "method": "ping"}, 7, -32600),
        ([{"jsonrpc": "2.0", "id": 8, "method": "ping"}], None, -32600),
    ]
    for body, answer_id, code in cases:
        reply = await http.post(server.mcp, json=body, headers=V1)
        assert reply.status_code == 400, body
        assert reply.json() == {
            "jsonrpc": "2.0",
            "id": answer_id,
            "error": {"code": code, "message": reply.json()["error"]["message"]},
        }
        assert len(reply.content) < 300
    reply = await http.post(server.mcp, content=b"{not json", headers=V1)
    assert reply.status_code == 400 and reply.json()["error"]["code"] == -32700


async def test_refusals_say_how_to_fix_them(server: Running, http: httpx.AsyncClient) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    reply = await http.post(server.mcp, json=ping, headers={**HEADERS, "Host": "db.example:80"})
    assert reply.status_code == 421
    assert "'db.example:80'" in reply.text and "MCP_ALLOWED_HOSTS" in reply.text
    reply = await http.post(server.mcp, json=ping, headers={**HEADERS, "Origin": "http://x.io"})
    assert reply.status_code == 403 and "MCP_ALLOWED_ORIGINS" in reply.text
    reply = await http.post(
        server.mcp, json=ping, headers={**HEADERS, "MCP-Protocol-Version": "1999-01-01"}
    )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == -32022 and "'1999-01-01'" in error["message"]
    assert "2025-11-25" in error["message"] and "2026-07-28" in error["message"]


async def test_a_trailing_slash_is_served_not_redirected(
    server: Running, http: httpx.AsyncClient
) -> None:
    reply = await http.post(server.mcp + "/", json={"jsonrpc": "2.0", "id": 9, "method": "ping"},
                            headers=V1)  # fmt: skip
    assert reply.status_code == 200 and reply.json() == {"jsonrpc": "2.0", "id": 9, "result": {}}


async def test_ctrl_c_stops_http_without_a_traceback(demo_dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    with serve(demo_dsn, stderr=log) as running:
        async with Client(running.mcp) as client:
            await call(client, "list_schemas")
        running.proc.send_signal(signal.SIGINT)
        assert running.proc.wait(timeout=15) == 0
    text = log.read_text()
    assert "Traceback" not in text and "CancelledError" not in text
    assert all(len(line) < 2500 for line in text.splitlines())


def test_non_loopback_bind_without_tokens_is_refused(demo_dsn: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "MCP_"))}
    proc = subprocess.run(
        [EXECUTABLE, "--transport", "http", "--host", "0.0.0.0", "--dsn", demo_dsn],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 3
    assert "without authentication" in proc.stderr


async def test_dropped_request_cancels_its_query(
    server: Running, http: httpx.AsyncClient, demo_dsn: str
) -> None:
    sql = "SELECT pg_sleep(20.25)"  # a text no other test runs
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "execute_query", "arguments": {"sql": sql}},
    }
    headers = {**HEADERS, "MCP-Protocol-Version": "2025-11-25"}
    # The client goes away as soon as the query runs (not after a timeout it waits out):
    # the request is cancelled and the client closed, and with it the connection.
    async with httpx.AsyncClient(timeout=30) as leaving:
        request = asyncio.create_task(leaving.post(server.mcp, json=body, headers=headers))
        await _running(demo_dsn, sql)  # the query runs before its client goes away
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request

    async def ended() -> bool:
        return not await fetch(demo_dsn, ACTIVE, sql)

    await eventually(ended, what="the query ending with the request that asked for it", seconds=5)


async def test_a_held_result_is_read_only_by_its_callers_token(secured: Running) -> None:
    """Results and the query history are bound to the caller's token: a second client with
    another token gets RESULT_EXPIRED for the first one's cursor and resource, and does not
    see its statements in pg://queries/recent."""
    sql = "SELECT g, repeat('x', 400) AS filler FROM generate_series(1, 1000) g"

    def client_with(token: str) -> Any:
        return httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)

    async with (
        client_with(TOKEN) as first_http,
        client_with("other-token") as second_http,
        Client(streamable_http_client(secured.mcp, http_client=first_http)) as first,
        Client(streamable_http_client(secured.mcp, http_client=second_http)) as second,
    ):
        out = await call(first, "execute_query", sql=sql)
        cursor = out["next_cursor"]
        result_id = cursor.rsplit(".", 1)[0]
        body = await call_error(second, "execute_query", cursor=cursor)
        assert body["error"]["code"] == "RESULT_EXPIRED"
        with pytest.raises(MCPError) as caught:
            await second.read_resource(f"pg://results/{result_id}/2")
        assert caught.value.error.data["error"]["code"] == "RESULT_EXPIRED"
        # Its owner reads it (over another connection: HTTP is stateless).
        page = await call(first, "execute_query", cursor=cursor)
        assert page["rows"][0][0] == out["row_count"] + 1
        mine = json.loads((await first.read_resource("pg://queries/recent")).contents[0].text)  # type: ignore[union-attr]
        theirs = json.loads((await second.read_resource("pg://queries/recent")).contents[0].text)  # type: ignore[union-attr]
    assert [q["sql"] for q in mine["queries"]][:1] == [sql]
    assert sql not in [q["sql"] for q in theirs["queries"]]


async def test_one_tokens_results_do_not_evict_anothers(demo_dsn: str) -> None:
    """attack4 F-G: a token that runs more paged queries than the store holds evicts its own
    least recently read results, not another token's (each keeps a fair share)."""

    def sql(n: int) -> str:
        return f"SELECT g, repeat('x', 400) AS filler FROM generate_series(1, {1000 + n}) g"

    def client_with(token: str) -> Any:
        return httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)

    tokens = f"other-token, {TOKEN}"
    with serve(demo_dsn, MCP_AUTH_TOKENS=tokens, MCP_RESULT_STORE_COUNT="3") as running:
        async with (
            client_with(TOKEN) as first_http,
            client_with("other-token") as second_http,
            Client(streamable_http_client(running.mcp, http_client=first_http)) as first,
            Client(streamable_http_client(running.mcp, http_client=second_http)) as second,
        ):
            out = await call(first, "execute_query", sql=sql(0))
            theirs = [
                (await call(second, "execute_query", sql=sql(n)))["next_cursor"]
                for n in range(1, 7)
            ]
            page = await call(first, "execute_query", cursor=out["next_cursor"])
            assert page["rows"][0][0] == out["row_count"] + 1
            body = await call_error(second, "execute_query", cursor=theirs[0])
            assert body["error"]["code"] == "RESULT_EXPIRED", body
            assert (await call(second, "execute_query", cursor=theirs[-1]))["rows"]
