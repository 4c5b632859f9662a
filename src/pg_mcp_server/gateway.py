"""Streamable HTTP: the SDK's stateless JSON app behind a small gateway of our own.

The SDK checks Accept (406), Content-Type, MCP-Protocol-Version (400), Host (421) and Origin
(403) and answers notifications with 202. In front of it we add what a server that hands out
database access needs: bearer tokens (compared in constant time, 401 with WWW-Authenticate),
405 for GET/DELETE on /mcp (stateless: there is no stream to open and no session to end; the
SDK would otherwise hold a GET open forever), a concurrency limit that answers 503 at once
instead of queueing without bound, cancellation of a request whose client went away (so its
query stops), and /health for load balancers (200, or 503 when the database is unreachable).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pg_mcp_server.config import ServerSettings, Settings
from pg_mcp_server.database.engine import Database, request_backends
from pg_mcp_server.errors import PgMcpError
from pg_mcp_server.server import build_server

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
HEALTH_PATH = "/health"
HEALTH_TIMEOUT_S = 5.0


async def _respond(
    send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    payload = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


def _rpc_error(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


class Gateway:
    """ASGI app: /health, then auth, method and concurrency checks for /mcp, then the SDK."""

    def __init__(self, app: ASGIApp, db: Database, settings: Settings) -> None:
        self.app = app
        self.db = db
        self.tokens = [t.get_secret_value().encode() for t in settings.server.auth_tokens]
        self.max_bytes = settings.server.max_request_bytes
        limit = settings.server.max_concurrent_requests or 4 * settings.database.pool_size
        self.limit = limit
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            try:
                await self.app(scope, receive, send)
            finally:
                await self.db.dispose()
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path == HEALTH_PATH and method in ("GET", "HEAD"):
            await self._health(send)
            return
        if path.rstrip("/") != MCP_PATH:
            await self.app(scope, receive, send)
            return
        # RFC 9110 5.5: a field value excludes leading and trailing whitespace; the SDK compares
        # Mcp-Method / Mcp-Name with the body as sent, and httptools keeps what surrounds them.
        scope = {**scope, "headers": [(k, v.strip(b" \t")) for k, v in scope["headers"]]}
        if self.tokens and not self._authorized(scope):
            await _respond(
                send,
                401,
                _rpc_error(-32001, "Missing or invalid bearer token"),
                {"WWW-Authenticate": 'Bearer realm="pg-mcp-server"'},
            )
            return
        if method in ("GET", "DELETE"):
            await _respond(
                send,
                405,
                _rpc_error(-32000, f"{method} is not supported: this server is stateless; POST"),
                {"Allow": "POST"},
            )
            return
        if self.in_flight >= self.limit:
            await _respond(
                send,
                503,
                _rpc_error(-32000, f"Server busy: {self.limit} requests in progress; retry"),
                {"Retry-After": "1"},
            )
            return
        self.in_flight += 1
        try:
            await self._serve(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the SDK app; if the client goes away meanwhile, cancel the request's queries (a
        dropped request must not leave them running). The body is read first, so that the
        connection can then be watched for `http.disconnect`, and replayed to the app."""
        body: list[Message] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.append(message)
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await _respond(send, 413, _rpc_error(-32600, "Request body too large"))
                return
            if not message.get("more_body", False):
                break
        gone = anyio.Event()

        async def replay() -> Message:
            if body:
                return body.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        # The SDK serves a stateless request in a task of its own (which inherits this context),
        # so cancelling our call would not stop it: the request's queries are cancelled instead.
        backends: set[int] = set()
        token = request_backends.set(backends)
        try:
            async with anyio.create_task_group() as tasks:

                async def watch() -> None:
                    if (await receive())["type"] == "http.disconnect":
                        gone.set()
                        await self.db.cancel(set(backends))
                        tasks.cancel_scope.cancel()

                tasks.start_soon(watch)
                await self.app(scope, replay, send)
                tasks.cancel_scope.cancel()
        finally:
            request_backends.reset(token)

    def _authorized(self, scope: Scope) -> bool:
        header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer" or not token:
            return False
        # Compare with every token, always, so timing says nothing about which one matched.
        matches = [hmac.compare_digest(token.strip(), t) for t in self.tokens]
        return any(matches)

    async def _health(self, send: Send) -> None:
        try:
            with anyio.fail_after(HEALTH_TIMEOUT_S):
                await self.db.ping()
        except (PgMcpError, TimeoutError) as exc:
            reason = exc.code if isinstance(exc, PgMcpError) else "TIMEOUT"
            await _respond(send, 503, {"status": "unavailable", "database": reason})
            return
        await _respond(send, 200, {"status": "ok", "database": "reachable"})


def sdk_app(server: MCPServer[Any], srv: ServerSettings, host: str) -> ASGIApp:
    """The SDK's stateless JSON app on /mcp, with our body limit and DNS-rebinding protection
    (the benchmark's floor is served through this too, so both are configured alike)."""
    return server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=srv.max_request_bytes,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=srv.allowed_hosts,
            allowed_origins=srv.allowed_origins,
        ),
        host=host,
    )


def http_app(settings: Settings, role_warnings: list[str] | None = None) -> Gateway:
    """The whole HTTP application: our gateway around the SDK's stateless JSON app."""
    db = Database(settings.database)
    server = build_server(settings, role_warnings, db=db)
    return Gateway(sdk_app(server, settings.server, settings.server.host), db, settings)


# How `pg-mcp-server --workers N` hands its resolved settings to uvicorn's worker processes.
WORKER_SETTINGS = "PGMCP_WORKER_SETTINGS"
WORKER_WARNINGS = "PGMCP_WORKER_WARNINGS"


def worker_app() -> Gateway:
    """The app of one HTTP worker process (uvicorn imports it by name, as a factory). The
    settings are taken out of the environment, so nothing this process starts inherits them."""
    from pydantic import ValidationError

    from pg_mcp_server.__main__ import _explain, configure_logging

    try:
        settings = Settings.from_json(os.environ.pop(WORKER_SETTINGS))
    except ValidationError as exc:  # the message must not carry the values (secrets)
        raise RuntimeError(f"invalid worker settings:\n{_explain(exc)}") from None
    configure_logging(settings.server.log_level, settings.server.log_format)
    return http_app(settings, json.loads(os.environ.pop(WORKER_WARNINGS, "[]")))
