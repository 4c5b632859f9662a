"""`--workers N`: N uvicorn worker processes, each listening on a socket of its own.

uvicorn's own multi-process mode gives every worker the same listening socket, and whichever
worker wakes first accepts every connection that is waiting: a client that opens its
keep-alive connections in a burst can land all of them on one worker (measured: 32 of 32,
bench/HTTP.md). Here each worker binds the port with SO_REUSEPORT, so the kernel spreads new
connections over the workers. Where SO_REUSEPORT does not exist (Windows), the CLI uses
uvicorn's mode instead.

The workers build their app from the settings the parent resolved (`gateway.worker_app`).
A worker that dies after it has served for a while is replaced; one that dies during its
first seconds stops the server (it would only die again: a port in use, say).
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import time
from typing import Any

logger = logging.getLogger(__name__)

APP = "pg_mcp_server.gateway:worker_app"
STARTUP_S = 10.0  # a worker that exits sooner than this after its start is a failed start-up
STOP_S = 20.0  # how long stopping workers may take before they are killed


class WorkerStartFailed(Exception):
    pass


def available() -> bool:
    return hasattr(socket, "SO_REUSEPORT")


def _listen(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


def _worker(host: str, port: int, uvicorn_options: dict[str, Any]) -> None:
    """One worker process: its own listening socket, then uvicorn serving the worker app."""
    import uvicorn

    sock = _listen(host, port)
    config = uvicorn.Config(APP, factory=True, host=host, port=port, **uvicorn_options)
    uvicorn.Server(config).run(sockets=[sock])


def _free_port(host: str) -> int:
    """A port for `--port 0`: every worker must bind the same one."""
    with _listen(host, 0) as sock:
        port: int = sock.getsockname()[1]
        return port


def serve(workers: int, host: str, port: int, uvicorn_options: dict[str, Any]) -> None:
    """Run `workers` worker processes until SIGINT, SIGTERM or SIGHUP, then stop them all."""
    if port == 0:
        port = _free_port(host)
    spawn = multiprocessing.get_context("spawn")
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    # SIGHUP too: left at its default it would end this process and orphan the workers.
    signals = [signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)]
    previous = {sig: signal.signal(sig, stop) for sig in signals if sig is not None}

    def start() -> tuple[multiprocessing.process.BaseProcess, float]:
        process = spawn.Process(target=_worker, args=(host, port, uvicorn_options))
        process.start()
        return process, time.monotonic()

    running = [start() for _ in range(workers)]
    try:
        while not stopping:
            time.sleep(0.2)
            for i, (process, started) in enumerate(running):
                if process.is_alive() or stopping:
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
        for sig, handler in previous.items():
            signal.signal(sig, handler)
