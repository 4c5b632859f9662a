"""Every JSON-RPC request with an id gets an answer over stdio, however malformed, and no
answer or log line grows with what a client sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcpclient import call_error, connect
from serverproc import EXECUTABLE, Server, clean_env

from pg_mcp_server.transport.envelope import check

BIG = "x" * 900_000

# (message sent, id the answer must carry, JSON-RPC error code)
MALFORMED: list[tuple[bytes | dict[str, Any] | list[Any], Any, int]] = [
    (b"this is not json", None, -32700),
    (b'{"jsonrpc": "2.0", "id": 20, "method": "ping"', None, -32700),  # cut short
    ({"jsonrpc": "2.0", "id": 21, "method": "ping", "params": 1.5}, 21, -32600),
    ({"jsonrpc": "2.0", "id": 22, "method": "ping", "params": [1]}, 22, -32600),
    ({"id": 23, "method": "ping"}, 23, -32600),  # no "jsonrpc"
    ({"jsonrpc": "1.0", "id": 24, "method": "ping"}, 24, -32600),
    ({"jsonrpc": "2.0", "id": 25, "method": 7}, 25, -32600),
    ({"jsonrpc": "2.0", "id": 26, "method": "x" + BIG}, 26, -32600),  # not echoed
    ({"jsonrpc": "2.0", "id": "s27", "params": {}}, "s27", -32600),  # neither method nor result
    ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None, -32600),  # would be a notification
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None, -32600),
    ({"jsonrpc": "2.0", "id": {}, "method": "ping"}, None, -32600),
    ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None, -32600),
    ({"jsonrpc": "2.0", "id": "i" * 300, "method": "ping"}, None, -32600),  # too long to echo
    ([{"jsonrpc": "2.0", "id": 28, "method": "ping"}], None, -32600),  # a batch
    (b"42", None, -32600),
    # Python's json takes a lone surrogate; the SDK's parser dropped the message unanswered.
    (b'{"jsonrpc": "2.0", "id": 30, "method": "ping", "params": {"a": "\\ud800"}}', 30, -32600),
]


def _raw(message: bytes | dict[str, Any] | list[Any]) -> bytes:
    return message if isinstance(message, bytes) else json.dumps(message).encode()


def test_every_malformed_request_is_answered_over_stdio(demo_dsn: str, tmp_path: Path) -> None:
    server = Server([EXECUTABLE, "--dsn", demo_dsn], clean_env(), tmp_path / "stderr.log")
    try:
        server.initialize()
        for message, _, _ in MALFORMED:
            server.send(_raw(message))
        # Broken notifications and responses get no answer (JSON-RPC); a line longer than
        # MCP_MAX_REQUEST_BYTES is refused whole; then the server still serves.
        server.send({"jsonrpc": "1.0", "method": "notifications/initialized"})
        server.send({"jsonrpc": "2.0", "id": 3, "result": 5})
        server.send(
            b'{"jsonrpc": "2.0", "id": 29, "method": "ping", "params": {"x": "'
            + b"y" * 1_100_000
            + b'"}}'
        )
        server.send({"jsonrpc": "2.0", "id": "done", "method": "ping"})
        answers = []
        sizes = []
        while True:
            line = server.read_line()
            sizes.append(len(line))
            answer = json.loads(line)
            if answer.get("id") == "done":
                break
            answers.append(answer)
        assert max(sizes) < 600, "an answer echoed what it was sent"
        by_id = {a["id"]: a["error"]["code"] for a in answers if a["id"] is not None}
        expected = {i: code for _, i, code in MALFORMED if i is not None}
        assert by_id == {**expected, 29: -32600}  # the line too long is answered with its id
        nameless = sorted(a["error"]["code"] for a in answers if a["id"] is None)
        assert nameless == sorted(c for _, i, c in MALFORMED if i is None)
        assert "Traceback" not in server.stderr_path.read_text()
        # 19 rejections and a 1.1 MB line: the log stays small (one bounded line each).
        assert server.stderr_path.stat().st_size < 8000
    finally:
        server.close()


@pytest.mark.parametrize(("message", "answer_id", "code"), MALFORMED[2:12])
def test_check_names_the_problem(message: dict[str, Any], answer_id: Any, code: int) -> None:
    rejection = check(message)
    assert rejection is not None and rejection.answer
    assert (rejection.id, rejection.code) == (answer_id, code)
    assert len(rejection.response()) < 300


def test_well_formed_messages_pass() -> None:
    assert check({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) is None
    assert check({"jsonrpc": "2.0", "id": "a", "method": "ping", "params": {}}) is None
    assert check({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None
    assert check({"jsonrpc": "2.0", "id": 1, "result": {}}) is None
    assert check({"jsonrpc": "2.0", "id": None, "error": {"code": 1, "message": "m"}}) is None


async def test_an_unknown_tool_is_a_structured_error_listing_the_tools(demo_dsn: str) -> None:
    async with connect(demo_dsn) as client:
        body = await call_error(client, "list_table")
        assert body["error"]["code"] == "PARAMETER_ERROR"
        assert "'list_tables'" in body["error"]["suggestion"]  # the closest name first
        assert "execute_query, explain_query" in body["error"]["suggestion"]
        result = await client.call_tool("t" + BIG, {})
        assert result.is_error and len(result.content[0].text) < 1500  # type: ignore[union-attr]


async def test_a_json_rpc_error_does_not_echo_a_huge_value(demo_dsn: str) -> None:
    async with connect(demo_dsn) as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource("pg://" + BIG)
        assert raised.value.code == -32602 and len(raised.value.message) < 600
