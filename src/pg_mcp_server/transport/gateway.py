"""Streamable HTTP: the SDK's stateless JSON app behind a small gateway of our own.

The SDK checks Accept (406), Content-Type, MCP-Protocol-Version (400), Host (421) and Origin
(403) and answers notifications with 202. In front of it we add what a server that hands out
database access needs: bearer tokens (compared in constant time, 401 with WWW-Authenticate),
405 for GET/DELETE on /mcp (stateless: there is no stream to open and no session to end; the
SDK would otherwise hold a GET open forever), a body read whole within a bounded time before
anything else (408 otherwise: a client that never finishes its body holds nothing), a
concurrency limit (a request above it waits a bounded time for a slot, then gets 503; a
`subscriptions/listen` stream, which lasts as long as its client listens, takes one of a
bounded pool of its own instead), cancellation of a request whose client went away (so its
query stops), the caller's identity for what is held for it (a hash of its token: held results
and the query history are its own, results/owner.py) and, with users configured (identity/),
its user (transport/callers.py: static tokens, OAuth access tokens, the protected resource
metadata), and /health for load balancers (200, or
503 when the database is unreachable). Where the SDK answers badly we answer first: malformed
JSON-RPC envelopes (envelope.py), an unsupported protocol version (which versions are), a
foreign Host or Origin (which setting to change), and `/mcp/` (served, not redirected to a host
the client did not ask for).

Its size (~420 lines): one request's path through these checks, in order, and the state they
share (slots, streams, the request's backends).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pg_mcp_server.config import ServerSettings, Settings
from pg_mcp_server.database.pool import Database, request_backends
from pg_mcp_server.errors import PgMcpError
from pg_mcp_server.identity import Identity, current_identity
from pg_mcp_server.identity.access import Access, owner_of
from pg_mcp_server.identity.oauth import TokenRejected
from pg_mcp_server.results.owner import LOCAL, caller, token_owner
from pg_mcp_server.server import with_pools
from pg_mcp_server.transport import envelope
from pg_mcp_server.transport.callers import Callers, bearer
from pg_mcp_server.transport.idscan import addressee

if TYPE_CHECKING:
    from pg_mcp_server.app import Pools
    from pg_mcp_server.configfile import ServerConfig

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
HEALTH_PATH = "/health"
HEALTH_TIMEOUT_S = 5.0
VERSIONS = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
LISTEN = "subscriptions/listen"  # its response is a stream that lasts as long as the client listens
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

    def __init__(
        self, app: ASGIApp, db: Database | Pools, settings: Settings, access: Access | None = None
    ) -> None:
        self.app = app
        self.db = db
        srv = settings.server
        self.tokens = [t.get_secret_value().encode() for t in srv.auth_tokens]
        # Users (identity/): each request is one of them, or refused; MCP_AUTH_TOKENS would
        # be callers outside every user's grants, so both at once is a configuration error.
        self.callers = Callers(access) if access is not None and access.identifies else None
        if self.callers is not None and self.tokens:
            raise ValueError(
                "MCP_AUTH_TOKENS and users: are both set: give each token to a user entry "
                "(users: ... token:) instead"
            )
        self.max_bytes = srv.max_request_bytes
        # Four requests per pooled connection: with several databases, every pool's.
        pooled = (
            sum(d.settings.pool_size for d in db.dbs.values())
            if not isinstance(db, Database)
            else settings.database.pool_size
        )
        self.limit = srv.max_concurrent_requests or 4 * pooled
        self.wait_s = settings.database.pool_timeout  # a request above the limit waits this long
        self.body_timeout = srv.request_body_timeout
        self.max_streams = srv.max_listen_streams
        self.allowed_hosts = ", ".join(srv.allowed_hosts)
        self.allowed_origins = ", ".join(srv.allowed_origins)
        # One per request whose response is not sent yet, and one per open listen stream;
        # made in the event loop, on first use.
        self._slots: anyio.Semaphore | None = None
        self._streams: anyio.Semaphore | None = None
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
        if self.callers is not None and method in ("GET", "HEAD"):
            metadata = self.callers.metadata_at(path)
            if metadata is not None:
                await _respond_raw(send, 200, metadata)
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
        found = await self._caller(scope, send)
        if found is None:
            return
        owner, identity = found
        if method in ("GET", "DELETE"):
            await _respond(
                send,
                405,
                _rpc_error(-32000, f"{method} is not supported: this server is stateless; POST"),
                {"Allow": "POST"},
            )
            return
        body = await self._read_body(receive, send)
        if body is None:
            return
        rpc: Any = None
        if method == "POST":
            rpc, rejection = envelope.parse(body)
            if rejection is not None:
                envelope.log(rejection, "HTTP")
                await _respond_raw(send, 400, rejection.response())
                return
            version = _header(scope, b"mcp-protocol-version")
            if version is not None and version not in VERSIONS:
                await _respond(send, 400, self._unsupported(version, rpc.get("id")))
                return
        request_id = rpc.get("id") if isinstance(rpc, dict) else None
        listen = isinstance(rpc, dict) and rpc.get("method") == LISTEN
        take = self._stream_slot if listen else self._slot
        slots = await take(request_id, send)
        if slots is None:
            return
        released = False

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

        # Held results and the query history belong to the caller: the SDK's task for this
        # request inherits this context, so the handlers see who it is (results/owner.py).
        # So do the caller's identity (its role and settings in the database, what it is
        # shown: identity/).
        bound = caller.set(owner)
        who = current_identity.set(identity)
        try:
            await self._serve(scope, body, receive, self._explained(scope, sent))
        finally:
            current_identity.reset(who)
            caller.reset(bound)
            release()

    async def _read_body(self, receive: Receive, send: Send) -> bytes | None:
        """The whole body, read within MCP_REQUEST_BODY_TIMEOUT before any slot is taken (a
        client that never finishes its body must not hold one); None once answered (408,
        413) or when the client went away."""
        chunks: list[bytes] = []
        size = 0
        with anyio.move_on_after(self.body_timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self.max_bytes:
                    what = f"Request body too large: over MCP_MAX_REQUEST_BYTES ({self.max_bytes})"
                    await self._refuse_body(send, 413, -32600, what, chunks)
                    return None
                if not message.get("more_body", False):
                    return b"".join(chunks)
        logger.info(
            "HTTP: a request body did not arrive within %s s (%d bytes came): 408",
            self.body_timeout,
            size,
        )
        what = f"Request body not received within {self.body_timeout} s (MCP_REQUEST_BODY_TIMEOUT)"
        await self._refuse_body(send, 408, -32000, what, chunks)
        return None

    @staticmethod
    async def _refuse_body(
        send: Send, status: int, code: int, message: str, chunks: list[bytes]
    ) -> None:
        """Answer a body that was not read whole, with its id when the part read names one,
        and close the connection: the rest of that body is not wanted."""
        answer, request_id = addressee(b"".join(chunks))
        body = _rpc_error(code, message, request_id=request_id if answer else None)
        await _respond(send, status, body, {"Connection": "close"})

    async def _slot(self, request_id: Any, send: Send) -> anyio.Semaphore | None:
        """A turn among MCP_MAX_CONCURRENT_REQUESTS, waited for up to PG_POOL_TIMEOUT; None
        once answered with 503."""
        if self._slots is None:
            self._slots = anyio.Semaphore(self.limit)
        try:
            with anyio.fail_after(self.wait_s):
                await self._slots.acquire()
        except TimeoutError:
            logger.warning(
                "HTTP: no free slot (%d requests in progress) in %s s: 503", self.limit, self.wait_s
            )
            message = f"Server busy: {self.limit} requests in progress; retry"
            await _respond(
                send, 503, _rpc_error(-32000, message, None, request_id), {"Retry-After": "1"}
            )
            return None
        return self._slots

    async def _stream_slot(self, request_id: Any, send: Send) -> anyio.Semaphore | None:
        """One of MCP_MAX_LISTEN_STREAMS, at once or not at all: a stream is held for as long
        as its client listens, so waiting for one to end would be waiting without bound."""
        if self._streams is None:
            self._streams = anyio.Semaphore(self.max_streams)
        try:
            self._streams.acquire_nowait()
        except anyio.WouldBlock:
            logger.warning("HTTP: %d listen streams open already: 503", self.max_streams)
            message = (
                f"Too many {LISTEN} streams: {self.max_streams} open (MCP_MAX_LISTEN_STREAMS); "
                "retry later"
            )
            await _respond(
                send, 503, _rpc_error(-32000, message, None, request_id), {"Retry-After": "5"}
            )
            return None
        return self._streams

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

    async def _serve(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        """Run the SDK app on the body already read; if the client goes away meanwhile, cancel
        the request's queries (a dropped request must not leave them running). The body was
        read first so that the connection can be watched for `http.disconnect`."""
        replayed = [{"type": "http.request", "body": body, "more_body": False}]
        gone = anyio.Event()

        async def replay() -> Message:
            if replayed:
                return replayed.pop(0)
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

    async def _caller(self, scope: Scope, send: Send) -> tuple[str, Identity | None] | None:
        """Who the request is for (the owner of what is held for it, and its user when users
        are configured: transport/callers.py); None once refused (401, 403 or 503)."""
        if self.callers is not None:
            try:
                identity = await self.callers.identify(scope)
            except TokenRejected as refused:
                status, said, headers = self.callers.refusal(refused)
                logger.info("HTTP: bearer token refused (%s): %d", said, status)
                await _respond(send, status, _rpc_error(-32001, said), headers)
                return None
            return owner_of(identity), identity
        owner = self._owner(scope) if self.tokens else LOCAL
        if owner is None:
            await _respond(
                send,
                401,
                _rpc_error(-32001, "Missing or invalid bearer token"),
                {"WWW-Authenticate": 'Bearer realm="pg-mcp-server"'},
            )
        return None if owner is None else (owner, None)

    def _owner(self, scope: Scope) -> str | None:
        """Who the caller is (a hash of its bearer token), or None when it is not one of
        MCP_AUTH_TOKENS."""
        token = bearer(scope)
        if token is None:
            return None
        # Compare with every token, always, so timing says nothing about which one matched.
        matches = [hmac.compare_digest(token, t) for t in self.tokens]
        return token_owner(token) if any(matches) else None

    async def _health(self, send: Send) -> None:
        try:
            with anyio.fail_after(HEALTH_TIMEOUT_S):
                await self.db.ping()
        except (PgMcpError, TimeoutError) as exc:
            reason = exc.code if isinstance(exc, PgMcpError) else "TIMEOUT"
            body = {"status": "unavailable", "database": reason}
            if isinstance(exc, PgMcpError) and exc.context and "down" in exc.context:
                if self.callers is None:
                    body["down"] = exc.context["down"]  # several databases: which (names only)
                else:
                    # /health takes no token: with users, a database's name is only for
                    # those whose grant names it (the log names it for the operator)
                    logger.warning("/health: not reachable: %s", ", ".join(exc.context["down"]))
            await _respond(send, 503, body)
            return
        await _respond(send, 200, {"status": "ok", "database": "reachable"})


def sdk_app(server: Server[Any], srv: ServerSettings, host: str) -> ASGIApp:
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


def http_app(
    settings: Settings,
    role_warnings: list[str] | None = None,
    config: ServerConfig | None = None,
    access: Access | None = None,
) -> Gateway:
    """The whole HTTP application: our gateway around the SDK's stateless JSON app.
    `access`: the users and the auth section (identity/access.py), the configuration
    file's unless given; None for none."""
    server, db = with_pools(settings, role_warnings, config, access)
    server.load()  # before serving, not in the first request
    app = sdk_app(server.server, settings.server, settings.server.host)
    gateway = Gateway(app, db, settings, server.access)
    gateway.on_hangup = server.on_hangup
    return gateway
