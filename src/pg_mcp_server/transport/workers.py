"""Serving Streamable HTTP: in this process, or in `--workers N` worker processes.

uvicorn's own multi-process mode gives every worker the same listening socket, and whichever
worker wakes first accepts every connection that is waiting: a client that opens its
keep-alive connections in a burst can land all of them on one worker (measured: 32 of 32,
bench/README.md). Here each worker binds the port with SO_REUSEPORT, so the kernel spreads new
connections over the workers. Where SO_REUSEPORT does not exist (Windows), this process binds
one socket and every worker accepts on it.

A worker gets the settings this process resolved (flags, environment, `.env`, a --demo DSN) as
an argument of its process, pickled over the pipe multiprocessing opens to it; never through
the environment, from which the secrets were removed before any worker started. A worker that
dies after it has served for a while is replaced; one that dies during its first seconds stops
the server (it would only die again: a port in use, say). A stop signal here (signals.py)
unwinds the supervising loop, which then stops every worker.
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
import signal
import socket
import time
from typing import TYPE_CHECKING, Any

from pg_mcp_server.config import Settings
from pg_mcp_server.logs import configure_logging

if TYPE_CHECKING:
    from pg_mcp_server.configfile import ServerConfig
    from pg_mcp_server.signals import Signals

logger = logging.getLogger(__name__)

STARTUP_S = 10.0  # a worker that exits sooner than this after its start is a failed start-up
STOP_S = 20.0  # how long stopping workers may take before they are killed


class WorkerStartFailed(Exception):
    pass


class PortInUse(Exception):
    """The HTTP address is taken (another server, or another pg-mcp-server): exit code 4."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"cannot serve HTTP: port {port} on {host} is already in use (another "
            "pg-mcp-server?); stop what holds it, or choose another port with --port or "
            "MCP_PORT"
        )


def reuse_port() -> bool:
    return hasattr(socket, "SO_REUSEPORT")


def _listen(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


def _uvicorn(
    settings: Settings,
    role_warnings: list[str] | None,
    sock: socket.socket | None,
    signals: Signals | None = None,
    served: ServerConfig | None = None,
) -> None:
    """Serve the HTTP app with uvicorn until it is told to stop (SIGINT/SIGTERM, which uvicorn
    handles itself; SIGHUP through `signals`)."""
    import uvicorn

    from pg_mcp_server.server import freeze_heap
    from pg_mcp_server.transport.gateway import http_app

    srv = settings.server
    app = http_app(settings, role_warnings, served)
    freeze_heap()  # everything the app needs is loaded (see PgMcp.load)
    config = uvicorn.Config(
        app,
        host=srv.host,
        port=srv.port,
        log_config=None,  # ours (logs.py)
        log_level=srv.log_level.lower(),
        access_log=False,  # one line per request is a log the size of the traffic
    )
    server = uvicorn.Server(config)
    sockets = [sock] if sock is not None else None
    if signals is None:
        server.run(sockets=sockets)
        return
    signals.on_hangup = app.on_hangup  # (one worker: SIGHUP reaches this process)
    with signals.forwarding(lambda signum: server.handle_exit(signum, None)):
        server.run(sockets=sockets)


def _worker(
    settings: Settings,
    role_warnings: list[str] | None,
    sock: socket.socket | None,
    served: ServerConfig | None = None,
) -> None:
    """One worker process: its own listening socket (or the shared one), then uvicorn."""
    # A closed terminal signals the whole process group; the parent stops the workers.
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    configure_logging(settings.server.log_level, settings.server.log_format)
    srv = settings.server
    sock = sock or _listen(srv.host, srv.port, reuse_port=True)
    _uvicorn(settings, role_warnings, sock, served=served)


def _bind(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    try:
        return _listen(host, port, reuse_port=reuse_port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(host, port) from None
        raise


def serve_http(
    settings: Settings,
    role_warnings: list[str] | None,
    signals: Signals,
    served: ServerConfig | None = None,
) -> None:
    srv = settings.server
    # Bound here, before the line that says it serves: a port in use is one line of ours
    # (PortInUse), not uvicorn's error after a "serving" line. Without SO_REUSEPORT even for
    # the workers' probe, so a port another server shares with SO_REUSEPORT counts as taken.
    first = _bind(srv.host, srv.port, reuse_port=False)
    if srv.workers > 1 and reuse_port():
        first.close()  # each worker binds its own (SO_REUSEPORT)
    logger.info(
        "serving Streamable HTTP on http://%s:%s/mcp (auth %s, %d worker%s)",
        srv.host,
        srv.port,
        "on" if srv.auth_tokens else "off",
        srv.workers,
        "" if srv.workers == 1 else "s",
    )
    if srv.workers == 1:
        try:
            _uvicorn(settings, role_warnings, first, signals, served)
        finally:
            first.close()
        return
    shared = None if reuse_port() else first
    try:
        _supervise(srv.workers, settings, role_warnings, shared, served)
    finally:
        if shared is not None:
            shared.close()


def _supervise(
    count: int,
    settings: Settings,
    role_warnings: list[str] | None,
    sock: socket.socket | None,
    served: ServerConfig | None = None,
) -> None:
    spawn = multiprocessing.get_context("spawn")

    def start() -> tuple[Any, float]:
        process = spawn.Process(target=_worker, args=(settings, role_warnings, sock, served))
        process.start()
        return process, time.monotonic()

    running = [start() for _ in range(count)]
    try:
        while True:  # until a stop signal raises out of the sleep (signals.py)
            time.sleep(0.2)
            for i, (process, started) in enumerate(running):
                if process.is_alive():
                    continue
                if time.monotonic() - started < STARTUP_S:
                    raise WorkerStartFailed(
                        f"a worker exited with code {process.exitcode} while starting"
                    )
                logger.warning(
                    "worker %s exited with code %s; starting another", process.pid, process.exitcode
                )
                running[i] = start()
    finally:
        for process, _ in running:
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes what is in flight
        deadline = time.monotonic() + STOP_S
        for process, _ in running:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
