"""Between the server and PostgreSQL: a counting TCP relay, and PgBouncer in front of it.

`Relay` forwards a local TCP port to PostgreSQL (its unix socket or host) and counts flights:
a flight starts when the client writes after having read (or for the first time), so a flight
is one round trip on the wire whatever the number of protocol messages in it.

`PgBouncer` runs Debian's `pgbouncer` (transaction mode) in front of a relay: as a non-root
user when the tests run as root (it refuses root), which is also why it reaches PostgreSQL
through the relay's TCP port rather than a unix socket in a directory only root may enter.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from eventually import eventually


@dataclass
class Target:
    """Where PostgreSQL listens, and who we are there, from a postgresql:// URI."""

    host: str
    port: int
    user: str
    password: str | None

    @classmethod
    def of(cls, dsn: str) -> Target:
        parts = urlsplit(dsn)
        query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
        host = unquote(query.get("host") or parts.hostname or "localhost")
        port = int(query.get("port") or parts.port or 5432)
        password = unquote(parts.password) if parts.password else None
        return cls(host, port, unquote(parts.username or "postgres"), password)


@dataclass
class Relay:
    target: Target
    port: int = 0
    flights: int = 0
    trace: list[bytes] | None = None  # when a list: the start of each flight's first write
    _server: asyncio.Server | None = field(default=None, repr=False)

    def dsn(self, database: str, user: str | None = None) -> str:
        return f"postgresql://{user or self.target.user}@127.0.0.1:{self.port}/{database}"

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.target.host.startswith("/"):
            path = f"{self.target.host}/.s.PGSQL.{self.target.port}"
            return await asyncio.open_unix_connection(path)
        return await asyncio.open_connection(self.target.host, self.target.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state = {"client_turn": True}
        try:
            up_reader, up_writer = await self._open()
        except OSError:
            writer.close()
            return

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            try:
                while data := await src.read(65536):
                    if up and state["client_turn"]:
                        self.flights += 1
                        state["client_turn"] = False
                        if self.trace is not None:
                            self.trace.append(data[:80])
                    elif not up:
                        state["client_turn"] = True
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()


@asynccontextmanager
async def relay(dsn: str) -> AsyncIterator[Relay]:
    running = Relay(Target.of(dsn))
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


def _as_user() -> list[str]:
    """How to drop root for pgbouncer: run it as `postgres` (or `nobody`)."""
    if os.geteuid() != 0:
        return []
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return [
            "setpriv",
            f"--reuid={name}",
            f"--regid={pwd.getpwnam(name).pw_gid}",
            "--init-groups",
        ]
    raise RuntimeError("no unprivileged user to run pgbouncer as")


@dataclass
class PgBouncer:
    relay: Relay
    directory: Path  # holds its unix socket, as well as its configuration and log

    def dsn(self, database: str) -> str:
        user = self.relay.target.user
        return f"postgresql://{user}@/{database}?host={self.directory}&port={PGBOUNCER_PORT}"


PGBOUNCER_PORT = 6432  # only names the socket file, in a directory of its own


@asynccontextmanager
async def pgbouncer(
    dsn: str, *, pool_size: int = 2, shared: dict[str, str] | None = None
) -> AsyncIterator[PgBouncer]:
    """PgBouncer in transaction mode in front of the server of `dsn`; `shared` maps extra
    database names to real ones served by a single server connection (pool_size=1)."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        raise RuntimeError("pgbouncer is not installed (apt-get install -y pgbouncer)")
    async with relay(dsn) as upstream:
        target = upstream.target
        directory = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        socket_path = directory / f".s.PGSQL.{PGBOUNCER_PORT}"
        password = target.password or ""
        (directory / "users.txt").write_text(f'"{target.user}" "{password}"\n')
        extra = "".join(
            f"{alias} = host=127.0.0.1 port={upstream.port} dbname={real} pool_size=1\n"
            for alias, real in (shared or {}).items()
        )
        (directory / "pgbouncer.ini").write_text(
            "[databases]\n" + extra + f"* = host=127.0.0.1 port={upstream.port}\n"
            "[pgbouncer]\n"
            f"listen_addr =\nlisten_port = {PGBOUNCER_PORT}\nunix_socket_dir = {directory}\n"
            f"auth_type = trust\nauth_file = {directory}/users.txt\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\n"
            "max_client_conn = 200\nserver_reset_query =\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {directory}/pgbouncer.log\npidfile = {directory}/pgbouncer.pid\n"
        )
        user = _as_user()
        if user:
            uid = pwd.getpwnam(user[1].split("=", 1)[1]).pw_uid
            for path in (directory, *directory.iterdir()):
                os.chown(path, uid, -1)
        proc = subprocess.Popen(
            [*user, binary, str(directory / "pgbouncer.ini")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

        async def listening() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {proc.stderr.read().decode()[-500:]}")  # type: ignore[union-attr]
            return socket_path.exists()

        try:
            await eventually(listening, what="pgbouncer listening", seconds=10)
            yield PgBouncer(upstream, directory)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            shutil.rmtree(directory, ignore_errors=True)
