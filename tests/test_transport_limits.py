"""No client can stop the server or starve the others: slow bodies, long-lived listen streams,
messages over the size limit and messages nested thousands deep, against spawned servers over
real loopback HTTP and real stdio."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psutil
import pytest
from eventually import eventually, wait_for
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcpclient import call, records
from serverproc import EXECUTABLE, Server, clean_env, http_server as serve
from test_http import ACCEPT, V1

from pg_mcp_server.transport.envelope import check
from pg_mcp_server.transport.idscan import Addressee

QUERY = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "execute_query", "arguments": {"sql": "SELECT 1 AS one"}},
}
DEEP = 5000


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _start_slow_body(port: int, request_id: int) -> socket.socket:
    """A POST whose body stops a hundred bytes short of its Content-Length, forever."""
    part = b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"x":"' % request_id
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: {ACCEPT}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        f"Content-Length: {len(part) + 100}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.sendall(head.encode() + part)
    return sock


def _drip(sock: socket.socket, stop: threading.Event) -> None:
    """A space (inside the body's string) every 0.2 s, until stopped or refused."""
    for _ in range(90):  # fewer bytes than the body still owes
        if stop.wait(0.2):
            return
        try:
            sock.send(b" ")
        except OSError:
            return


def _answer(sock: socket.socket) -> tuple[int, dict[str, Any], bytes]:
    """Status, JSON body and headers of the one answer on `sock`, read until the server
    closes the connection (or the socket's timeout fails the test)."""
    raw = b""
    while chunk := sock.recv(65536):
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body), head.lower()


def _accepted(proc_pid: int, socks: list[socket.socket]) -> bool:
    ours = {s.getsockname()[1] for s in socks}
    held = [
        c
        for c in psutil.Process(proc_pid).net_connections()
        if c.status == "ESTABLISHED" and c.raddr and c.raddr.port in ours
    ]
    return len(held) == len(socks)


async def test_slow_bodies_take_no_slot_and_get_408(demo_dsn: str, tmp_path: Path) -> None:
    """One body more than the request limit never finishes: the others are served meanwhile
    (they used to wait for a slot, then get 503), and each slow one gets 408 with its id
    once MCP_REQUEST_BODY_TIMEOUT has passed, and its connection closed."""
    timeout = 3.0
    log = tmp_path / "stderr.log"
    with serve(
        demo_dsn,
        stderr=log,
        MCP_MAX_CONCURRENT_REQUESTS="2",
        PG_POOL_TIMEOUT="0.5",
        MCP_REQUEST_BODY_TIMEOUT=str(timeout),
    ) as running:
        slow = [_start_slow_body(_port(running.base), 60 + i) for i in range(3)]
        started = time.monotonic()
        # The last one keeps sending a byte now and then: the timeout is for the whole body.
        stop = threading.Event()
        threading.Thread(target=_drip, args=(slow[2], stop), daemon=True).start()
        try:
            assert wait_for(lambda: _accepted(running.proc.pid, slow), 10)
            async with httpx.AsyncClient(timeout=30) as http:
                reply = await http.post(running.mcp, json=QUERY, headers=V1)
            assert reply.status_code == 200, reply.text
            assert reply.json()["result"]["structuredContent"]["rows"] == [[1]]
            # The slow ones were still waiting while it was served.
            assert not select.select(slow, [], [], 0)[0]
            for i, sock in enumerate(slow):
                status, body, head = _answer(sock)
                assert status == 408 and body["id"] == 60 + i, body
                assert "MCP_REQUEST_BODY_TIMEOUT" in body["error"]["message"]
                assert b"connection: close" in head
            assert time.monotonic() - started >= timeout - 0.2
        finally:
            stop.set()
            for sock in slow:
                sock.close()
    text = log.read_text()
    assert text.count("did not arrive within") == 3 and "Traceback" not in text


def _listen_request(request_id: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "subscriptions/listen", "params": {}}


async def test_listen_streams_do_not_take_request_slots(demo_dsn: str) -> None:
    """More listen streams than the request limit stay open, and a tool call is still
    served; one stream above MCP_MAX_LISTEN_STREAMS gets 503 at once, with its id; a closed
    stream gives its place back."""
    with serve(
        demo_dsn, MCP_MAX_CONCURRENT_REQUESTS="2", PG_POOL_TIMEOUT="0.5", MCP_MAX_LISTEN_STREAMS="3"
    ) as running:
        async with Client(running.mcp) as client, httpx.AsyncClient(timeout=30) as http:
            async with AsyncExitStack() as streams:
                for _ in range(3):  # entering waits for the server's acknowledgement
                    await streams.enter_async_context(client.listen(tools_list_changed=True))
                out = await call(client, "execute_query", sql="SELECT 1 AS one")
                assert records(out) == [{"one": 1}]
                started = time.monotonic()
                reply = await http.post(running.mcp, json=_listen_request("L4"), headers=V1)
                assert reply.status_code == 503 and reply.headers["retry-after"] == "5"
                assert reply.json()["id"] == "L4"
                assert "MCP_MAX_LISTEN_STREAMS" in reply.json()["error"]["message"]
                assert time.monotonic() - started < 5, "refused at once, not after a wait"
            # A closed stream's place comes back once the server has seen its client go.

            async def place_back() -> bool:
                try:
                    async with client.listen(tools_list_changed=True):
                        return True
                except MCPError:
                    return False

            await eventually(place_back, what="a closed stream's place back", interval=0.05)


def _nested(request_id: int, depth: int) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"a":' % request_id
        + b"[" * depth
        + b"]" * depth
        + b"}}"
    )


async def test_deep_and_large_bodies_get_errors_with_ids_over_http(
    demo_dsn: str, tmp_path: Path
) -> None:
    """5,000 levels used to raise RecursionError (a bare 500 and a traceback); 300 levels
    passed our check and the SDK's parser gave up on them. A body over the limit gets 413
    with its id; a lone surrogate, which only the SDK's parser refuses, 400 with its id (the
    SDK answered it with a null id)."""
    log = tmp_path / "stderr.log"
    with serve(demo_dsn, stderr=log, MCP_MAX_REQUEST_BYTES="65536") as running:
        async with httpx.AsyncClient(timeout=30) as http:
            # Over the size limit: the id is read from the part read before the refusal.
            big = {"jsonrpc": "2.0", "id": 51, "method": "ping", "params": {"x": "y" * 70_000}}
            reply = await http.post(running.mcp, json=big, headers=V1)
            assert reply.status_code == 413 and reply.json()["id"] == 51
            assert "MCP_MAX_REQUEST_BYTES" in reply.json()["error"]["message"]
            cases = [(b"[" * DEEP + b"]" * DEEP, None), (_nested(41, DEEP), 41)]
            surrogate = b'{"jsonrpc":"2.0","id":43,"method":"ping","params":{"a":"\\udc00"}}'
            for body, answer_id in [*cases, (_nested(42, 300), 42), (surrogate, 43)]:
                reply = await http.post(running.mcp, content=body, headers=V1)
                assert reply.status_code == 400, reply.text
                error = reply.json()
                assert error["id"] == answer_id and error["error"]["code"] == -32600
                assert answer_id == 43 or "nested deeper than 128" in error["error"]["message"]
            reply = await http.post(running.mcp, json=QUERY, headers=V1)
            assert reply.status_code == 200
    text = log.read_text()
    assert "Traceback" not in text and all(len(line) < 1000 for line in text.splitlines())


def test_over_size_and_deep_stdio_messages_are_answered_with_their_ids(
    demo_dsn: str, tmp_path: Path
) -> None:
    """The id of a line over MCP_MAX_REQUEST_BYTES is found wherever it is (the TypeScript
    SDK writes it last), without the line being kept; notifications and responses over the
    limit get no answer; a 5,000-deep line no longer ends the session."""
    env = clean_env(MCP_MAX_REQUEST_BYTES="65536")
    server = Server([EXECUTABLE, "--dsn", demo_dsn], env, tmp_path / "stderr.log")
    big = "y" * 200_000
    try:
        server.initialize()
        sql = {"name": "execute_query", "arguments": {"sql": f"SELECT '{big}'"}}
        server.send({"method": "tools/call", "params": sql, "jsonrpc": "2.0", "id": 31})
        server.send({"jsonrpc": "2.0", "id": "s32", "method": "tools/call", "params": sql})
        server.send({"jsonrpc": "2.0", "method": "notifications/x", "params": {"x": big}})
        server.send({"jsonrpc": "2.0", "id": 5, "result": {"x": big}})
        server.send(b"[" * DEEP + b"]" * DEEP)
        server.send(_nested(41, DEEP))
        server.send(_nested(42, 300))
        server.send({"jsonrpc": "2.0", "id": "next", "method": "ping"})
        answers: dict[Any, int] = {}
        while (answer := server.read())["id"] != "next":
            assert answer["id"] not in answers
            answers[answer["id"]] = answer["error"]["code"]
        assert answers == {31: -32600, "s32": -32600, None: -32600, 41: -32600, 42: -32600}
        server.send(QUERY)
        assert server.read()["result"]["structuredContent"]["rows"] == [[1]]
        assert server.proc.poll() is None
        text = server.stderr_path.read_text()
        assert "Traceback" not in text and server.stderr_path.stat().st_size < 8000
    finally:
        server.close()


SCANNED = [
    b'{"jsonrpc":"2.0","id":5,"method":"ping"}',
    b'{"method":"tools/call","params":{"a":{"id":9},"b":"\\"id\\":3"},"jsonrpc":"2.0","id":"x\\"y"}',
    b'{"method":"notifications/x","params":{"id":1}}',
    b'{"jsonrpc":"2.0","id":3,"result":{"id":4}}',
    b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
    b'{"id":{"a":1},"method":"ping"}',
    b'{"id" : 12 , "method":"ping", "params": [[["]]]"]]]}',
    b'[{"jsonrpc":"2.0","id":8,"method":"ping"}]',
    b'{"jsonrpc":"2.0","params":{"a":"b"},"id":"' + b"i" * 300 + b'","method":"ping"}',
    b'{"params":' + b"[" * 3000 + b"]" * 3000 + b',"id":-7,"method":"ping","jsonrpc":"2.0"}',
]


@pytest.mark.parametrize("raw", SCANNED)
def test_the_id_is_read_as_the_parser_would(raw: bytes) -> None:
    """Fed whole or a few bytes at a time, the scan picks the addressee that parsing the
    message picks (`check`), for requests, notifications, responses and broken ids alike."""
    try:
        message = json.loads(raw)
    except RecursionError:
        message = None
    rejection = None if message is None else check(message)
    if message is None:
        expected: tuple[bool, Any] = (True, -7)
    elif rejection is not None:
        expected = (rejection.answer, rejection.id)
    elif "method" in message and "id" in message:  # a well-formed request
        expected = (True, message["id"])
    else:  # a notification or a response: never answered
        expected = (False, None)
    for step in (len(raw), 1, 2, 5):
        scan = Addressee()
        for start in range(0, len(raw), step):
            scan.feed(raw[start : start + step])
        assert scan.verdict() == expected, step
