"""A throwaway PostgreSQL cluster from any directory of server binaries.

Used for the majors the embedded wheel does not ship: Debian's ``postgresql-15`` package and the
``pgserver`` wheel's PostgreSQL 16 (see ``pgbed.start_server``). Each cluster lives in a fresh
temporary directory, listens on a unix socket in that directory only (no TCP port to collide
with), and belongs to a reaper: a small process that waits for its stdin to close, then stops
the server and deletes the directory. The test process holds the other end of that pipe, so the
cluster goes away however the test process ends: a normal close, Ctrl-C, SIGTERM or SIGKILL.

PostgreSQL refuses to run as root, so as root the server runs as the unprivileged ``postgres``
user (Debian's packages create it); otherwise as the current user.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

SERVER_USER = "postgres"  # the OS user a root test process runs the server as
_PORT = 5432  # names the socket file only: there is no TCP listener
# A throwaway cluster never needs to survive a crash: skip the flushes.
_SETTINGS = """
listen_addresses = ''
unix_socket_directories = '{socket_dir}'
port = {port}
fsync = off
full_page_writes = off
"""


def _run_as(user: pwd.struct_passwd | None) -> dict[str, Any]:
    """subprocess keyword arguments that drop root for the server's own binaries."""
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _server_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise RuntimeError(
            f"running as root, and PostgreSQL refuses root: create an unprivileged "
            f"{SERVER_USER!r} user (Debian's postgresql packages do), or run as another user"
        ) from None


def _binary_major(bindir: Path) -> int:
    """The major version of ``bindir/postgres``, e.g. 15 from "postgres (PostgreSQL) 15.18"."""
    out = subprocess.run(
        [str(bindir / "postgres"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"\) (\d+)", out)
    if match is None:
        raise RuntimeError(f"{bindir / 'postgres'}: cannot read the version from {out!r}")
    return int(match[1])


class LocalCluster:
    """initdb + pg_ctl in a fresh temporary directory; :meth:`stop` ends and removes it."""

    def __init__(self, bindir: Path, settings: str = "") -> None:
        """`settings`: postgresql.conf lines added to ours (shared_preload_libraries, say)."""
        missing = [
            n for n in ("initdb", "pg_ctl", "postgres", "psql") if not (bindir / n).is_file()
        ]
        if missing:
            raise RuntimeError(f"no PostgreSQL server in {bindir}: {', '.join(missing)} missing")
        self.bindir = bindir
        self.major = _binary_major(bindir)
        user = _server_user()
        self.root = Path(tempfile.mkdtemp(prefix=f"pgmcp-pg{self.major}-"))
        data = self.root / "data"
        # A new session: Ctrl-C in a terminal reaches the test process, not the reaper, which
        # must outlive it to clean up.
        self._reaper: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, __file__, str(bindir), str(self.root), user.pw_name if user else ""],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            if user is not None:
                os.chown(self.root, user.pw_uid, user.pw_gid)
            self._command(
                user,
                "initdb",
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
                "--no-instructions",
            )
            with (data / "postgresql.conf").open("a") as conf:
                conf.write(_SETTINGS.format(socket_dir=self.root, port=_PORT) + settings)
            log = self.root / "server.log"
            try:
                self._command(user, "pg_ctl", "-D", str(data), "-l", str(log), "-w", "start")
            except RuntimeError as exc:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"{exc}\n{tail}") from exc
        except BaseException:
            self.stop()
            raise

    def _command(self, user: pwd.struct_passwd | None, name: str, *args: str) -> None:
        failed = f"{name} (PostgreSQL {self.major}) failed"
        if user is not None:
            failed += f" as OS user {user.pw_name} (can it read {self.bindir}?)"
        try:
            result = subprocess.run(
                [str(self.bindir / name), *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                check=False,
                **_run_as(user),
            )
        except OSError as exc:  # not even executed
            raise RuntimeError(f"{failed}: {exc}") from exc
        if result.returncode != 0:
            raise RuntimeError(f"{failed}: {result.stderr.strip()[-2000:]}")

    @property
    def psql_path(self) -> Path:
        return self.bindir / "psql"

    def dsn(self, database: str = "postgres") -> str:
        host = quote(str(self.root), safe="/")
        return f"postgresql://postgres@/{quote(database, safe='')}?host={host}&port={_PORT}"

    def stop(self) -> None:
        """Stop the server and delete its directory (the reaper's work). Safe to call twice."""
        reaper, self._reaper = self._reaper, None
        if reaper is None:
            return
        assert reaper.stdin is not None
        reaper.stdin.close()
        if reaper.wait(timeout=120) != 0:
            raise RuntimeError(f"stopping PostgreSQL {self.major} in {self.root} failed")


def _reap(bindir: Path, root: Path, username: str) -> int:
    """Wait until the test process closes our stdin (or dies), then stop and remove the cluster."""
    sys.stdin.buffer.read()
    data = root / "data"
    stopped = True
    if (data / "postmaster.pid").exists():
        user = pwd.getpwnam(username) if username else None
        stopped = (
            subprocess.run(
                [str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                check=False,
                **_run_as(user),
            ).returncode
            == 0
        )
    shutil.rmtree(root, ignore_errors=True)
    return 0 if stopped and not root.exists() else 1


if __name__ == "__main__":
    sys.exit(_reap(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
