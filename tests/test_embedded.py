"""EmbeddedPostgres and start_demo: connectable, quiet on stdout, and leave nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
from eventually import wait_for

from pg_mcp_server.embedded import EmbeddedPostgres


def _alive(pid: int) -> bool:
    """True if ``pid`` runs; a zombie awaiting its reaper counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    try:
        return "\nState:\tZ" not in status.read_text()
    except OSError:
        return False  # vanished between the two checks (or no /proc: trust os.kill)


async def test_lifecycle_psql_asyncpg_and_idempotent_stop() -> None:
    with EmbeddedPostgres() as server:
        dsn = server.create_database("odd name")  # needs quoting in SQL and in the URI
        psql = subprocess.run(
            [str(server.psql_path), "-X", "-A", "-t", "-d", dsn, "-c", "SELECT current_database()"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert psql.stdout.strip() == "odd name"
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval("SHOW server_version_num") >= "180000"
        finally:
            await conn.close()
        data_dir, pid = server.data_dir, server.pid
        assert data_dir.is_dir() and _alive(pid)
    assert not server.running
    assert not data_dir.exists()
    assert not _alive(pid)
    server.stop()  # second stop is a no-op


def test_stop_without_waiting_has_stopped_postgresql_and_hands_the_files_on() -> None:
    server = EmbeddedPostgres()
    data_dir, pid = server.data_dir, server.pid
    server.stop(wait=False)
    assert not server.running
    assert not _alive(pid)  # the postmaster has exited when stop() returns
    # Deleted by a process of its own, which outlives ours.
    assert wait_for(lambda: not data_dir.exists(), 30), f"{data_dir} was not deleted"


_SIGTERM_CHILD = """
import sys, time
from pg_mcp_server.embedded import EmbeddedPostgres
server = EmbeddedPostgres()
print(server.data_dir, server.pid, flush=True)
time.sleep(60)
"""


def test_sigterm_stops_server_and_removes_files() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _SIGTERM_CHILD], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    data_dir, pid = child.stdout.readline().split()
    assert _alive(int(pid))
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM  # still dies "by SIGTERM" for its parent
    assert not Path(data_dir).exists()
    assert not _alive(int(pid))


_DEMO_CHILD = """
import asyncio, sys
import asyncpg
from pg_mcp_server.demo import start_demo

async def count(dsn):
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT count(*) FROM orders")
    finally:
        await conn.close()

with start_demo() as dsn:
    print(asyncio.run(count(dsn)), file=sys.stderr)
"""


def test_start_demo_keeps_stdout_clean() -> None:
    # stdout is the MCP stdio transport in --demo mode: not one byte may leak onto it.
    done = subprocess.run(
        [sys.executable, "-c", _DEMO_CHILD], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == "1500"
