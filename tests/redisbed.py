"""Test bed for the shared result store: a real `redis-server` (Debian's package) per use.

`start_redis()` runs one on a free loopback port, without persistence (nothing is written to
disk), optionally with a password, and returns once it answers PING; `RedisServer.stop()`
ends it (the fixtures call it even when a test failed). .ci/run installs the package when
missing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import redis
from eventually import wait_for

BINARY = shutil.which("redis-server") or "/usr/bin/redis-server"


def available() -> bool:
    return Path(BINARY).is_file()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RedisServer:
    port: int
    password: str | None
    proc: subprocess.Popen[bytes] = field(repr=False)
    log: Path = field(repr=False)

    def url(self, database: int = 0) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/{database}"

    def answers(self) -> bool:
        """Whether it answers PING (a server still loading or not yet listening does not)."""
        assert self.proc.poll() is None, f"redis-server exited: {self.log.read_text()[-2000:]}"
        client = redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=1
        )
        try:
            return bool(client.ping())
        except redis.exceptions.RedisError:
            return False
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.unlink(missing_ok=True)


def start_redis(password: str | None = None, port: int | None = None) -> RedisServer:
    """A new redis-server on 127.0.0.1 at `port` (else a free one), answering PING."""
    port = port or free_port()
    log = Path(tempfile.mkstemp(prefix="pgmcp-redis-", suffix=".log")[1])
    argv = [BINARY, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--logfile", str(log), "--dir", tempfile.gettempdir()]
    if password:
        argv += ["--requirepass", password]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    server = RedisServer(port, password, proc, log)
    try:
        if not wait_for(server.answers, timeout=30):
            raise RuntimeError(f"redis-server did not answer: {log.read_text()[-2000:]}")
    except BaseException:
        server.stop()
        raise
    return server


def restart(server: RedisServer) -> RedisServer:
    """A new, empty redis-server where `server` (stopped) was: same port, same password."""
    assert server.proc.poll() is not None, "stop it first"
    return start_redis(server.password, server.port)
