"""Streamable HTTP: the SDK's stateless JSON app behind a small gateway of our own.

The SDK checks Accept (406), Content-Type, MCP-Protocol-Version (400), Host (421) and Origin
(403) and answers notifications with 202. In front of it we add what a server that hands out
database access needs: bearer tokens (compared in constant time, 401 with WWW-Authenticate),
405 for GET/DELETE on /mcp (stateless: there is no stream to open and no session to end; the
SDK would otherwise hold a GET open forever), a concurrency limit (a request above it waits a
bounded time for a slot, then gets 503), cancellation of a request whose client went away (so
its query stops), and /health for load balancers (200, or 503 when the database is
unreachable). Where the SDK answers badly we answer first: malformed JSON-RPC envelopes
(envelope.py), an unsupported protocol version (which versions are), a foreign Host or Origin
(which setting to change), and `/mcp/` (served, not redirected to a host the client did not
ask for).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pg_mcp_server import envelope
from pg_mcp_server.config import ServerSettings, Settings
from pg_mcp_server.database.engine import Database, request_backends
from pg_mcp_server.errors import PgMcpError
from pg_mcp_server.server import build_server

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
HEALTH_PATH = "/health"
HEALTH_TIMEOUT_S = 5.0
VERSIONS = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
HEADER_ECHO = 100  # characters of a client's header value repeated in an answer


async def _respond(
    send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    payload = json.dumps(body).encode()
    await _respond_raw(send, status, payload, headers)


async def _respond_raw(
    send: Send, status: int, payload: bytes, headers: dict[str, str] | None = None
) -> None:
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


def _rpc_error(code: int, message: str, data: Any = None, request_id: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def _header(scope: Scope, name: bytes) -> str | None:
    value = next((v for k, v in scope["headers"] if k == name), None)
    return None if value is None else value.decode("latin-1")[:HEADER_ECHO]


class Gateway:
    """ASGI app: /health, then auth, method, version, concurrency and envelope checks for /mcp,
    then the SDK."""

    def __init__(self, app: ASGIApp, db: Database, settings: Settings) -> None:
        self.app = app
        self.db = db
        srv = settings.server
        self.tokens = [t.get_secret_value().encode() for t in srv.auth_tokens]
        self.max_bytes = srv.max_request_bytes
        self.limit = srv.max_concurrent_requests or 4 * settings.database.pool_size
        self.wait_s = settings.database.pool_timeout  # a request above the limit waits this long
        self.allowed_hosts = ", ".join(srv.allowed_hosts)
        self.allowed_origins = ", ".join(srv.allowed_origins)
        # One per request whose response is not sent yet; made in the event loop, on first use.
        self._slots: anyio.Semaphore | None = None
        # The SIGHUP hook of the server behind (reloads custom definitions; signals.py).
        self.on_hangup: Callable[[], bool] = lambda: False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._disposing(send))
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
        # `/mcp/` is served as `/mcp` (the SDK would redirect it to an absolute URL naming its
        # own idea of the host). RFC 9110 5.5: a field value excludes leading and trailing
        # whitespace; the SDK compares Mcp-Method / Mcp-Name with the body as sent, and
        # httptools keeps what surrounds them.
        headers = [(k, v.strip(b" \t")) for k, v in scope["headers"]]
        scope = {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode(), "headers": headers}
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
        if self._slots is None:
            self._slots = anyio.Semaphore(self.limit)
        try:
            with anyio.fail_after(self.wait_s):
                await self._slots.acquire()
        except TimeoutError:
            logger.warning(
                "HTTP: no free slot (%d requests in progress) in %s s: 503", self.limit, self.wait_s
            )
            await _respond(
                send,
                503,
                _rpc_error(-32000, f"Server busy: {self.limit} requests in progress; retry"),
                {"Retry-After": "1"},
            )
            return
        slots, released = self._slots, False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                slots.release()

        async def sent(message: Message) -> None:
            await send(message)
            # A request is done once its whole response is sent: the SDK still tears down
            # after that, while the client (keep-alive) already sends its next request.
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                release()

        try:
            await self._serve(scope, receive, self._explained(scope, sent))
        finally:
            release()

    def _disposing(self, send: Send) -> Send:
        """The pool closes before the server is told the app has shut down: after that the
        event loop stops, and a close still running would be cancelled halfway."""

        async def disposing(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await self.db.dispose()
            await send(message)

        return disposing

    def _unsupported(self, version: str, request_id: Any) -> dict[str, Any]:
        message = (
            f"Unsupported MCP-Protocol-Version {version!r}: this server speaks "
            f"{', '.join(HANDSHAKE_PROTOCOL_VERSIONS)} (after initialize) and "
            f"{', '.join(MODERN_PROTOCOL_VERSIONS)}"
        )
        logger.info("HTTP: %s", message)
        data = {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": version}
        return _rpc_error(UNSUPPORTED_PROTOCOL_VERSION, message, data, request_id)

    def _explained(self, scope: Scope, send: Send) -> Send:
        """`send`, with the SDK's bare 421 (Host) and 403 (Origin) refusals replaced by answers
        that say which setting to change."""
        replaced = False

        async def explained(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the SDK's own body of a refusal we answered
            if message["type"] == "http.response.start" and message["status"] in (421, 403):
                replaced = True
                if message["status"] == 421:
                    what = f"Host {_header(scope, b'host')!r} is not allowed"
                    fix = f"add it to MCP_ALLOWED_HOSTS (now: {self.allowed_hosts})"
                else:
                    what = f"Origin {_header(scope, b'origin')!r} is not allowed"
                    fix = f"add it to MCP_ALLOWED_ORIGINS (now: {self.allowed_origins})"
                logger.warning("HTTP: %s: %s", what, fix)
                body = _rpc_error(-32600, f"{what}: {fix}")
                await _respond(send, message["status"], body)
                return
            await send(message)

        return explained

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the SDK app; if the client goes away meanwhile, cancel the request's queries (a
        dropped request must not leave them running). The body is read first, checked as a
        JSON-RPC message, so that the connection can then be watched for `http.disconnect`,
        and replayed to the app."""
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
        if scope["method"] == "POST":
            rpc, rejection = envelope.parse(b"".join(m.get("body", b"") for m in body))
            if rejection is not None:
                envelope.log(rejection, "HTTP")
                await _respond_raw(send, 400, rejection.response())
                return
            version = _header(scope, b"mcp-protocol-version")
            if version is not None and version not in VERSIONS:
                await _respond(send, 400, self._unsupported(version, rpc.get("id")))
                return
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
    db = Database(settings.database, allow_privileged=settings.server.allow_privileged_role)
    server = build_server(settings, role_warnings, db=db)
    server.load()  # before serving, not in the first request
    gateway = Gateway(sdk_app(server, settings.server, settings.server.host), db, settings)
    gateway.on_hangup = server.on_hangup
    return gateway
