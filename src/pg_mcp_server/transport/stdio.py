"""The stdio transport: the process's stdin and stdout, read and written from the event loop,
carrying messages to and from the SDK's low-level `Server.run` over in-memory streams.

    client --stdin-->  [each line checked; malformed ones answered]  --stream-->  Server.run
    client <--stdout-- [whole lines only, our answers between them]  <--stream--  Server.run

The SDK's own stdio transport reads stdin in a worker thread that nothing but end-of-input
stops (so Ctrl-C waited for EOF), drops malformed messages without an answer, cancels requests
still running when input ends, and hops threads twice per message (most of a small call's
CPU: bench/README.md). Here stdin is waited on in the event loop (no thread, except for a
regular file, which never blocks); stdout is written at once when the pipe has room, else by a
writer thread (a client that reads slowly must not block the loop). While serving, fd 0 reads
the null device and fd 1 goes to stderr, so children and stray prints never touch the wire.

To stop, the server's input stream is closed: it ends the session as if the client had gone.
Requests still unanswered get a short grace, then an error answer of ours, so every request
with an id is answered; one read after the stop (also one the client sent just before it, still
in the pipe) gets that answer at once, without being run. One the client cancelled gets none.
A line longer than the limit is not kept: it is read through for its id (idscan.py), wherever
in the line the id is, and answered with -32600.

Its size (~400 lines): reading, writing and stopping share the one session's state (what is
unanswered, what the writer holds), so they stay together.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import queue
import select
import struct
import sys
import termios
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    ErrorData,
    JSONRPCError,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from pg_mcp_server.identity.access import enter_stdio
from pg_mcp_server.signals import Signals
from pg_mcp_server.transport import envelope
from pg_mcp_server.transport.idscan import Addressee

if TYPE_CHECKING:
    from pg_mcp_server.server import PgMcp

logger = logging.getLogger(__name__)

GRACE_S = 0.5  # how long requests still running may take to answer once the server stops
STOP_S = 2.0  # how long the SDK session may take to end after that
SHUTDOWN = -32000  # implementation-defined JSON-RPC error: answered by nobody else
CHUNK = 65536
PIPE_SIZE = 1 << 20  # the most an unprivileged process may ask for (fs.pipe-max-size)


def _key(request_id: int | str) -> tuple[type, int | str]:
    return (type(request_id), request_id)


def _room(fd: int) -> int:
    """Bytes a write to `fd` surely takes without blocking: a whole empty pipe's capacity
    (Linux), or PIPE_BUF when it is writable at all."""
    try:
        queued = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
        if queued == 0:
            capacity: int = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
            return capacity
    except (OSError, AttributeError):  # not a pipe (a terminal, a file), or not Linux
        pass
    return select.PIPE_BUF if select.select([], [fd], [], 0)[1] else 0


class _Writer:
    """The client's stdout, written by a thread of its own: a client that reads slowly (or
    not at all) must not block the event loop. Whole lines in, whole lines out, in order."""

    def __init__(self, fd: int, on_broken: Callable[[], None]) -> None:
        self._fd = fd
        self._on_broken = on_broken
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.pending = 0
        self.broken = False
        self._thread = threading.Thread(target=self._run, name="stdout writer", daemon=True)
        self._thread.start()

    def put(self, data: bytes) -> None:
        # Nothing queued before it and room for all of it in the pipe: written at once, which
        # cannot block. Waking the thread for every message cost up to a millisecond per round
        # trip (bench/README.md, "Earlier findings"); it stays for large answers and slow readers.
        if not self.pending and not self.broken and len(data) <= _room(self._fd):
            try:
                written = os.write(self._fd, data)
            except BlockingIOError:  # never expected (there was room): the thread waits
                written = 0
            except OSError:
                self.broken = True
                self._on_broken()
                return
            if written == len(data):
                return
            data = data[written:]
        with self._lock:
            self.pending += len(data)
        self._queue.put(data)

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            view = memoryview(data)
            while view and not self.broken:
                try:
                    view = view[os.write(self._fd, view) :]
                except BlockingIOError:
                    # The client's pipe is in non-blocking mode (the mode is the pipe's, shared
                    # with the client): wait for it to read, as a blocking write would.
                    select.select([], [self._fd], [])
                except OSError:  # the client closed its end (EPIPE), or the terminal (EIO)
                    self.broken = True
                    self._on_broken()
            with self._lock:
                self.pending -= len(data)

    async def drained(self, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            while self.pending and not self.broken:
                await anyio.sleep(0.005)

    def close(self) -> None:
        self._queue.put(None)


Inbound = MemoryObjectSendStream[SessionMessage | Exception]


class _Session:
    def __init__(self, wire_in: int, writer: _Writer, max_line: int, stop: anyio.Event) -> None:
        self.wire_in = wire_in
        self.writer = writer
        self.max_line = max_line
        self.stop = stop
        self.pending: Counter[tuple[type, int | str]] = Counter()
        self.answered = anyio.Event()  # set whenever a response goes out
        self.reading = anyio.CancelScope()
        self.read_done = anyio.Event()
        self.written = anyio.Event()  # the server's output has ended
        self.refusing = False  # stopping: requests read from now on are answered, not run
        self.idle = True  # every line read so far is handled; waiting for more input

    # -- client -> server ---------------------------------------------------------------
    async def pump_in(self, inbound: Inbound) -> None:
        try:
            with self.reading:
                await self._pump_in(inbound)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            logger.debug("stdin: the server stopped reading")
        finally:
            self.read_done.set()
        self.stop.set()

    async def _pump_in(self, inbound: Inbound) -> None:
        buffer = b""
        # Inside a line longer than max_line: it is not kept, only read for whom to answer.
        too_long: Addressee | None = None
        async for chunk in self._chunks():
            if too_long is not None:
                end = chunk.find(b"\n")
                too_long.feed(chunk if end < 0 else chunk[:end])
                if end < 0:
                    continue
                self._too_long(too_long)
                too_long, chunk = None, chunk[end + 1 :]
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                line, buffer = buffer[:end], buffer[end + 1 :]
                await self._line(line, inbound)
            if len(buffer) > self.max_line:
                too_long = Addressee()
                too_long.feed(buffer)
                buffer = b""
        if too_long is not None:
            self._too_long(too_long)
        elif buffer.strip():
            await self._line(buffer, inbound)
        logger.debug("stdin: end of input")

    async def _chunks(self) -> AsyncIterator[bytes]:
        async for chunk in _read(self.wire_in):
            self.idle = False
            yield chunk
            self.idle = True

    async def _line(self, line: bytes, inbound: Inbound) -> None:
        if not line.strip():
            return
        if len(line) > self.max_line:  # completed by the chunk that took it over the limit
            scan = Addressee()
            scan.feed(line)
            self._too_long(scan)
            return
        message, rejection = envelope.parse(line)
        if rejection is not None:
            self._reject(rejection)
            return
        request_id = message.get("id") if "method" in message else None
        try:
            parsed = jsonrpc_message_adapter.validate_python(message, by_name=False)
        except ValidationError:
            # The envelope was sound (envelope.py), so only a bad member is left.
            problem = "The message is not a valid JSON-RPC request, notification or response."
            bad = envelope.Rejection(INVALID_REQUEST, problem, request_id, request_id is not None)
            self._reject(bad)
            return
        if request_id is None:
            await inbound.send(SessionMessage(parsed))
            return
        if self.refusing:
            self._stopped(request_id)
            return
        key = _key(request_id)
        self.pending[key] += 1
        # The SDK calls this hook when a request settles with no answer (the client cancelled
        # it): JSON-RPC wants none, so none of ours at the end either, and no grace waited on.
        settled = ServerMessageMetadata(on_request_unanswered=lambda: self._unanswered(key))
        await inbound.send(SessionMessage(parsed, metadata=settled))

    async def _unanswered(self, key: tuple[type, int | str]) -> None:
        if self.pending[key] > 0:
            self.pending[key] -= 1
            self.answered.set()

    def _too_long(self, scan: Addressee) -> None:
        self._reject(envelope.too_long(self.max_line, *scan.verdict()))

    def _reject(self, rejection: envelope.Rejection) -> None:
        envelope.log(rejection, "stdio")
        if rejection.answer:
            self.writer.put(rejection.response() + b"\n")

    # -- server -> client ---------------------------------------------------------------
    async def pump_out(self, outbound: MemoryObjectReceiveStream[SessionMessage]) -> None:
        try:
            async for sent in outbound:
                message = sent.message
                line = message.model_dump_json(by_alias=True, exclude_unset=True).encode()
                if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
                    key = _key(message.id)
                    if self.pending[key] > 0:
                        self.pending[key] -= 1
                        self.answered.set()
                self.writer.put(line + b"\n")
        finally:
            self.written.set()

    # -- stopping -----------------------------------------------------------------------
    def unanswered(self) -> int:
        return sum(self.pending.values())

    async def caught_up(self, timeout: float) -> None:
        """Read what the client sent before the stop (requests get our error, not run): one
        waiting in the pipe was never read, so never answered."""
        with anyio.move_on_after(timeout):
            while not self.read_done.is_set() and not (self.idle and not _readable(self.wire_in)):
                await anyio.sleep(0.005)

    async def settle(self, timeout: float) -> None:
        """Give requests still running `timeout` seconds to answer."""
        with anyio.move_on_after(timeout):
            while self.unanswered():
                self.answered = anyio.Event()
                await self.answered.wait()

    def answer_the_rest(self) -> None:
        for (_, request_id), count in self.pending.items():
            for _ in range(count):
                self._stopped(request_id)
        self.pending.clear()

    def _stopped(self, request_id: int | str) -> None:
        error = ErrorData(code=SHUTDOWN, message="The server stopped before it could answer.")
        reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
        line = reply.model_dump_json(by_alias=True, exclude_unset=True).encode()
        self.writer.put(line + b"\n")


def _readable(fd: int) -> bool:
    """Whether `fd` has input (or its end) to read now."""
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


async def _read(fd: int) -> AsyncIterator[bytes]:
    """Chunks of `fd` until its end (or an error such as a closed terminal's EIO)."""
    try:
        await anyio.wait_readable(fd)
        pollable = True
    except OSError:  # a regular file or /dev/null: epoll refuses it, and reading never blocks
        pollable = False
    while True:
        try:
            if pollable:
                await anyio.wait_readable(fd)
                data = os.read(fd, CHUNK)
            else:
                data = await anyio.to_thread.run_sync(os.read, fd, CHUNK)
        except OSError as exc:
            if exc.errno not in (errno.EIO, errno.EBADF):
                logger.info("stdin: read failed (%s): treating it as end of input", exc.strerror)
            return
        if not data:
            return
        yield data


class _Wires:
    """The client's stdin and stdout (`wire_in`, `wire_out`) on descriptors of ours; fd 0
    reads the null device and fd 1 writes to stderr while serving."""

    def __init__(self) -> None:
        self.wire_in, self.wire_out = os.dup(0), os.dup(1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        # Room for a large answer in one write (a 100-row result is ~100 KB; a pipe holds 64 KB
        # by default): fewer hand-offs to the writer thread.
        with contextlib.suppress(OSError, AttributeError):  # not a pipe, or not Linux
            fcntl.fcntl(self.wire_out, fcntl.F_SETPIPE_SZ, PIPE_SIZE)

    def restore(self) -> None:
        """The client's descriptors back on fd 0 and 1. (`wire_out` stays open: the writer
        thread may still be writing to it.)"""
        # What was printed while serving is still in Python's buffer (stdout, a pipe, is
        # block-buffered): it goes where fd 1 pointed then (stderr), not to the client.
        if sys.stdout is not None:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()
        os.dup2(self.wire_in, 0)
        os.dup2(self.wire_out, 1)
        os.close(self.wire_in)


async def serve(server: PgMcp, signals: Signals, max_line: int) -> None:
    """Serve `server` on this process's stdin and stdout until end of input or a stop signal."""
    enter_stdio(server.access)
    loop = asyncio.get_running_loop()
    stop = anyio.Event()

    def request_stop(*_: object) -> None:  # from a signal handler or the writer thread
        loop.call_soon_threadsafe(stop.set)

    wires = _Wires()
    writer = _Writer(wires.wire_out, request_stop)
    session = _Session(wires.wire_in, writer, max_line, stop)
    inbound, server_in = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_out, outbound = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tasks, signals.serving(request_stop):
            run = anyio.CancelScope()

            async def supervise() -> None:
                await stop.wait()
                signals.stopping()
                session.refusing = True
                server.stopping()  # listen streams end with their result, not the grace
                await session.settle(GRACE_S)
                await session.caught_up(GRACE_S)
                session.reading.cancel()
                await session.read_done.wait()  # nothing is sent to the server any more
                await inbound.aclose()  # the server sees the end of input
                run.deadline = anyio.current_time() + STOP_S

            tasks.start_soon(session.pump_in, inbound)
            tasks.start_soon(session.pump_out, outbound)
            tasks.start_soon(supervise)
            with run:
                await server.server.run(server_in, server_out, server.initialization_options())
            if run.cancelled_caught:
                logger.warning("the MCP session did not end within %s s; cut short", STOP_S)
            await server_out.aclose()
            with anyio.move_on_after(STOP_S):
                await session.written.wait()  # what the server wrote before it returned
            tasks.cancel_scope.cancel()
        session.answer_the_rest()
        await writer.drained(1.0)
    finally:
        signals.stopping()
        writer.close()
        wires.restore()
