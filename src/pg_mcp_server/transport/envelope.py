"""JSON-RPC envelopes the SDK would drop or answer badly, checked before it sees them.

The SDK's transports validate a message against the union of request, notification and
response models. A request with an id but a bad envelope (`"params": 1.5`, no `"jsonrpc"`,
`"jsonrpc": "1.0"`) fails every model and is dropped over stdio (the client waits for its own
timeout), or answered with `"id": null` and a multi-line validation dump over HTTP; a request
whose id has the wrong type (`1.5`, `true`, `{}`) validates as a *notification* and gets no
answer at all; an unparseable stdio line is dropped without -32700. Here every message with a
usable id that is not a well-formed request gets a -32600 answer carrying that id, an unusable
id gets one with `"id": null`, unparseable input gets -32700, and no answer echoes the input
(ids over `MAX_ID` characters are not echoed either). A message nested deeper than `MAX_DEPTH`
gets -32600 with its id (idscan.py reads it without parsing the message): the SDK's parser
drops one nested near 200 levels, and one nested a few thousand deep made Python's json raise
RecursionError, which ended the stdio session and was a 500 over HTTP. A string holding a
lone UTF-16 surrogate (`"\\ud800"`), which Python's json takes and the SDK's parser refuses,
gets -32600 with its id too. Notifications and responses are never answered, as JSON-RPC
says; a broken one is only logged.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

import pydantic_core
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError

from pg_mcp_server.transport.idscan import MAX_ID, addressee, usable_id as _usable_id

__all__ = ["INVALID_REQUEST", "MAX_DEPTH", "MAX_ID", "Rejection", "check", "log", "parse"]

logger = logging.getLogger(__name__)

MAX_METHOD = 200  # characters of a method name (every MCP method is far shorter)
# Arrays and objects inside one another, the message itself counting as one. The SDK's parser
# (pydantic-core) gives up near 200 and drops the message unanswered; Python's json module
# raises RecursionError near 1000. No MCP message needs more than a handful.
MAX_DEPTH = 128
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # the escape of a UTF-16 surrogate


@dataclass(frozen=True)
class Rejection:
    code: int
    message: str
    id: int | str | None
    answer: bool  # False for a broken notification or response: JSON-RPC never answers those

    def response(self) -> bytes:
        error = ErrorData(code=self.code, message=self.message)
        reply = JSONRPCError(jsonrpc="2.0", id=self.id, error=error)
        return reply.model_dump_json(by_alias=True, exclude_unset=True).encode()


def _id_problem(value: Any) -> str:
    if isinstance(value, str):
        return f"'id' is longer than {MAX_ID} characters"
    return f"'id' must be a string or an integer, not {_json_type(value)}"


def _json_type(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number with a fraction",
        str: "a string",
        list: "an array",
        dict: "an object",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def check(message: Any) -> Rejection | None:
    """None when `message` (parsed JSON) is a well-formed JSON-RPC request, notification or
    response; otherwise what is wrong, and whom to answer."""
    if isinstance(message, list):
        return _reject("batches are not supported; send one message at a time", None, answer=True)
    if not isinstance(message, dict):
        return _reject(f"a message is an object, not {_json_type(message)}", None, answer=True)
    has_id = "id" in message
    request_id = message.get("id")
    if "method" in message:
        is_request = has_id
    elif "result" in message or "error" in message:
        return _response_problem(message)
    else:
        what = "a message needs a 'method' (or 'result'/'error' for a response)"
        return _reject(what, request_id, answer=True)
    if is_request and not _usable_id(request_id):
        return _reject(_id_problem(request_id), None, answer=True)
    problem = _envelope_problem(message)
    if problem is None:
        return None
    return _reject(problem, request_id if is_request else None, answer=is_request)


def _envelope_problem(message: dict[str, Any]) -> str | None:
    if message.get("jsonrpc") != "2.0":
        if "jsonrpc" not in message:
            return "'jsonrpc' is missing; it must be \"2.0\""
        return "'jsonrpc' must be \"2.0\""
    method = message["method"]
    if not isinstance(method, str):
        return f"'method' must be a string, not {_json_type(method)}"
    if len(method) > MAX_METHOD:
        return f"'method' is longer than {MAX_METHOD} characters"
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return f"'params' must be an object, not {_json_type(params)}"
    return None


def _response_problem(message: dict[str, Any]) -> Rejection | None:
    request_id = message.get("id")
    addressed = _usable_id(request_id) or (request_id is None and "error" in message)
    shaped = isinstance(message.get("result"), dict) or isinstance(message.get("error"), dict)
    if message.get("jsonrpc") == "2.0" and addressed and shaped:
        return None
    return _reject("malformed response", None, answer=False)


def _reject(problem: str, request_id: Any, *, answer: bool) -> Rejection:
    usable = request_id if _usable_id(request_id) else None
    return Rejection(INVALID_REQUEST, f"Invalid Request: {problem}", usable, answer)


def parse(raw: bytes | str) -> tuple[Any, Rejection | None]:
    """The message in `raw` (one JSON text) and what is wrong with it, if anything."""
    data = raw.encode() if isinstance(raw, str) else raw
    try:
        message = json.loads(data)
    except RecursionError:  # json's C parser recurses per level; the stack is unharmed
        return None, too_deep(data)
    except (ValueError, UnicodeDecodeError):
        return None, Rejection(PARSE_ERROR, "Parse error: not valid JSON", None, True)
    if _nested_deeper(message, data):
        return None, too_deep(data)
    if _SURROGATE.search(data) and _not_unicode(data):
        answer, request_id = addressee(data)
        problem = "Invalid Request: a string holds a lone UTF-16 surrogate, which is not text"
        return None, Rejection(INVALID_REQUEST, problem, request_id, answer)
    return message, check(message)


def _not_unicode(data: bytes) -> bool:
    """Python's json takes a lone surrogate (`"\\ud800"`); the SDK's parser refuses the
    message, which then goes unanswered over stdio and gets `"id": null` over HTTP."""
    try:
        pydantic_core.from_json(data)
    except ValueError:
        return True
    return False


def too_deep(data: bytes) -> Rejection:
    answer, request_id = addressee(data)
    problem = f"Invalid Request: arrays and objects nested deeper than {MAX_DEPTH} levels"
    return Rejection(INVALID_REQUEST, problem, request_id, answer)


def too_long(limit: int, answer: bool, request_id: int | str | None) -> Rejection:
    problem = f"Invalid Request: a message is longer than {limit} bytes"
    return Rejection(INVALID_REQUEST, problem, request_id, answer)


def _nested_deeper(message: Any, data: bytes) -> bool:
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH or not isinstance(message, dict | list):
        return False  # the common case, counted in C
    stack: list[tuple[Any, int]] = [(message, 1)]
    while stack:  # a loop, not recursion: the depth is what is being checked
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        if depth > MAX_DEPTH:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def log(rejection: Rejection, transport: str) -> None:
    """One line at INFO: a client's malformed message is routine, not a server fault."""
    logger.info(
        "%s: rejected a malformed message (%s)%s",
        transport,
        rejection.message,
        "" if rejection.answer else "; not answered (not a request)",
    )
