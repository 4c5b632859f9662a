"""The stdio transport: the SDK's own, behind a thin layer that owns the process's stdin and stdout.

The SDK's transport reads stdin in a worker thread that nothing but end-of-input stops (so
Ctrl-C waited for EOF), drops malformed messages without an answer, and cancels requests still
running when input ends. So before it claims fd 0 and 1, both are moved behind pipes of ours:

    client --stdin-->  [each line checked; malformed ones answered]  --pipe-->  SDK (fd 0)
    client <--stdout-- [whole lines only, our answers between them]  <--pipe--  SDK (fd 1)

To stop the server we close the SDK's input pipe: it sees end-of-input and ends the session as if
the client had gone, without a thread left blocked on the real stdin. Requests still unanswered
get a short grace, then an error answer of ours, so every request with an id is answered.
Reading the real stdin needs no thread (it is waited on in the event loop), except for a
regular file, which never blocks. A line longer than the limit is not kept: it is read through
for its id (idscan.py), wherever in the line the id is, and answered with -32600.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import queue
import re
import select
import struct
import termios
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import ErrorData, JSONRPCError

from pg_mcp_server import envelope
from pg_mcp_server.idscan import Addressee
from pg_mcp_server.signals import Signals

logger = logging.getLogger(__name__)

GRACE_S = 0.5  # how long requests still running may take to answer once the server stops
STOP_S = 2.0  # how long the SDK session may take to end after that
SHUTDOWN = -32000  # implementation-defined JSON-RPC error: answered by nobody else
CHUNK = 65536
PIPE_SIZE = 1 << 20  # the most an unprivileged process may ask for (fs.pipe-max-size)

# The SDK writes a response as {"jsonrpc":"2.0","id":...,"result"|"error":...}: its id is read
# from the first bytes instead of parsing a result that can be megabytes long.
_RESPONSE_ID = re.compile(rb'\{"jsonrpc":"2\.0","id":(-?\d+|"(?:[^"\\]|\\.)*"),"(?:result|error)":')


def _key(request_id: int | str) -> tuple[type, int | str]:
    return (type(request_id), request_id)


def _response_id(line: bytes) -> int | str | None:
    match = _RESPONSE_ID.match(line)
    if match is not None:
        value: int | str = json.loads(match.group(1))
        return value
    if b'"id"' not in line:
        return None
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if isinstance(message, dict) and ("result" in message or "error" in message):
        found = message.get("id")
        return found if isinstance(found, int | str) and not isinstance(found, bool) else None
    return None


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
                os.write(self._fd, data)
            except OSError:
                self.broken = True
                self._on_broken()
            return
        with self._lock:
            self.pending += len(data)
        self._queue.put(data)

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            view = memoryview(data)
            while view and not self.broken:
                try:
                    view = view[os.write(self._fd, view) :]
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
        self.out_rest = b""  # SDK output after its last newline so far

    # -- client -> SDK ------------------------------------------------------------------
    async def pump_in(self, sdk_in: int) -> None:
        try:
            with self.reading:
                await self._pump_in(sdk_in)
        finally:
            self.read_done.set()
        self.stop.set()

    async def _pump_in(self, sdk_in: int) -> None:
        buffer = b""
        # Inside a line longer than max_line: it is not kept, only read for whom to answer.
        too_long: Addressee | None = None
        async for chunk in _read(self.wire_in):
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
                await self._line(line, sdk_in)
            if len(buffer) > self.max_line:
                too_long = Addressee()
                too_long.feed(buffer)
                buffer = b""
        if too_long is not None:
            self._too_long(too_long)
        elif buffer.strip():
            await self._line(buffer, sdk_in)
        logger.debug("stdin: end of input")

    async def _line(self, line: bytes, sdk_in: int) -> None:
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
        if "method" in message and "id" in message:
            self.pending[_key(message["id"])] += 1
        await _write_all(sdk_in, line + b"\n")

    def _too_long(self, scan: Addressee) -> None:
        self._reject(envelope.too_long(self.max_line, *scan.verdict()))

    def _reject(self, rejection: envelope.Rejection) -> None:
        envelope.log(rejection, "stdio")
        if rejection.answer:
            self.writer.put(rejection.response() + b"\n")

    # -- SDK -> client ------------------------------------------------------------------
    async def pump_out(self, sdk_out: int) -> None:
        while True:
            await anyio.wait_readable(sdk_out)
            self.out_rest = self._forward(self.out_rest + _read_available(sdk_out))

    def drain(self, sdk_out: int) -> None:
        """What the SDK wrote before it returned, forwarded (its session has ended)."""
        rest = self._forward(self.out_rest + _read_available(sdk_out))
        if rest:
            self._forward(rest + b"\n")
        self.out_rest = b""

    def _forward(self, data: bytes) -> bytes:
        *lines, rest = data.split(b"\n")
        for line in lines:
            request_id = _response_id(line)
            if request_id is not None and self.pending[_key(request_id)] > 0:
                self.pending[_key(request_id)] -= 1
                self.answered.set()
            self.writer.put(line + b"\n")
        return rest

    # -- stopping -----------------------------------------------------------------------
    def unanswered(self) -> int:
        return sum(self.pending.values())

    async def settle(self, timeout: float) -> None:
        """Give requests still running `timeout` seconds to answer."""
        with anyio.move_on_after(timeout):
            while self.unanswered():
                self.answered = anyio.Event()
                await self.answered.wait()

    def answer_the_rest(self) -> None:
        for (_, request_id), count in self.pending.items():
            for _ in range(count):
                error = ErrorData(
                    code=SHUTDOWN, message="The server stopped before it could answer."
                )
                reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
                line = reply.model_dump_json(by_alias=True, exclude_unset=True).encode()
                self.writer.put(line + b"\n")
        self.pending.clear()


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


def _read_available(fd: int) -> bytes:
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while data := os.read(fd, CHUNK):
            chunks.append(data)
    return b"".join(chunks)


async def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await anyio.wait_writable(fd)


class _Pipes:
    """fd 0 and 1 moved behind pipes of ours, for the SDK's transport to claim: `wire_in` and
    `wire_out` are the client's stdin and stdout, `sdk_in` what the SDK reads, `sdk_out` what
    it writes (both ours, so non-blocking)."""

    def __init__(self) -> None:
        self.wire_in, self.wire_out = os.dup(0), os.dup(1)
        sdk_reads, self.sdk_in = os.pipe()
        self.sdk_out, sdk_writes = os.pipe()
        os.dup2(sdk_reads, 0)
        os.dup2(sdk_writes, 1)
        os.close(sdk_reads)
        os.close(sdk_writes)
        os.set_blocking(self.sdk_in, False)
        os.set_blocking(self.sdk_out, False)
        # Room for a large answer in one write (a 100-row result is ~100 KB; a pipe holds 64 KB
        # by default): fewer hand-offs to the writer thread and wake-ups of the SDK's.
        for fd in (self.sdk_out, self.wire_out):
            with contextlib.suppress(OSError, AttributeError):  # not a pipe, or not Linux
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)

    def end_sdk_input(self) -> None:
        """The SDK reads end-of-input and ends its session as if the client had gone."""
        os.close(self.sdk_in)
        self.sdk_in = -1

    def restore(self) -> None:
        """The client's descriptors back on fd 0 and 1. (`wire_out` stays open: the writer
        thread may still be writing to it.)"""
        os.dup2(self.wire_in, 0)
        os.dup2(self.wire_out, 1)
        for fd in (self.wire_in, self.sdk_in, self.sdk_out):
            if fd >= 0:
                os.close(fd)


async def serve(server: MCPServer[Any], signals: Signals, max_line: int) -> None:
    """Serve `server` on this process's stdin and stdout until end of input or a stop signal."""
    loop = asyncio.get_running_loop()
    stop = anyio.Event()

    def request_stop(*_: object) -> None:  # from a signal handler or the writer thread
        loop.call_soon_threadsafe(stop.set)

    pipes = _Pipes()
    writer = _Writer(pipes.wire_out, request_stop)
    session = _Session(pipes.wire_in, writer, max_line, stop)
    try:
        async with anyio.create_task_group() as tasks, signals.serving(request_stop):
            run = anyio.CancelScope()

            async def supervise() -> None:
                await stop.wait()
                signals.stopping()
                await session.settle(GRACE_S)
                session.reading.cancel()
                await session.read_done.wait()  # nothing writes to sdk_in any more
                pipes.end_sdk_input()
                run.deadline = anyio.current_time() + STOP_S

            tasks.start_soon(session.pump_in, pipes.sdk_in)
            tasks.start_soon(session.pump_out, pipes.sdk_out)
            tasks.start_soon(supervise)
            with run:
                await server.run_stdio_async()
            if run.cancelled_caught:
                logger.warning("the MCP session did not end within %s s; cut short", STOP_S)
            tasks.cancel_scope.cancel()
        session.drain(pipes.sdk_out)
        session.answer_the_rest()
        await writer.drained(1.0)
    finally:
        signals.stopping()
        writer.close()
        pipes.restore()
