"""PG_PASSWORD_COMMAND: a password that is not stored, fetched for every new connection.

Short-lived credentials (an RDS IAM token lives 15 minutes, a vault lease as long as its TTL)
cannot sit in PG_PASSWORD: the command prints a fresh one each time the pool opens a
connection. It runs without a shell (shlex splits it, so no pipes, globs or `$VAR`s), with
stdin closed, in a process group of its own that is killed when it overruns its timeout, and
with an environment that holds none of our secrets. Its output is the password and is never
logged; one line of its error output is, when it fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal

from pg_mcp_server.errors import DatabaseConnectionError

logger = logging.getLogger(__name__)

_MAX_STDOUT = 64 * 1024  # an IAM token is ~1.5 KB; anything past this is not a password
_MAX_STDERR = 8 * 1024
_MAX_LOGGED = 300  # characters of the error output's line in the log


def argv(command: str) -> list[str]:
    """The command's words; raises ValueError when it cannot be split (or is empty)."""
    words = shlex.split(command)
    if not words:
        raise ValueError("PG_PASSWORD_COMMAND is empty")
    return words


def child_environment(hidden: frozenset[str]) -> dict[str, str]:
    """This process's environment without `hidden`, the variables that hold our secrets
    (DatabaseSettings.hidden_variables)."""
    return {name: value for name, value in os.environ.items() if name not in hidden}


async def _drain(stream: asyncio.StreamReader | None, limit: int) -> bytes:
    """Up to `limit` bytes of `stream`, reading it to the end so the child never blocks."""
    kept = bytearray()
    if stream is None:
        return b""
    while chunk := await stream.read(65536):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept)


def _kill(process: asyncio.subprocess.Process) -> None:
    # The whole group: `aws` and vault wrappers start children of their own.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def password(command: str, timeout: float, hidden: frozenset[str]) -> str:
    """Run `command` and return the first line it printed, stripped; raises
    DatabaseConnectionError naming the command's first word (never its output). `hidden`:
    the environment variables the command is not given."""
    words = argv(command)
    name = words[0]
    try:
        process = await asyncio.create_subprocess_exec(
            *words,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=child_environment(hidden),
            start_new_session=True,
        )
    except OSError as exc:
        raise DatabaseConnectionError(
            f"PG_PASSWORD_COMMAND could not run {name!r}: {exc.strerror or exc}.",
            suggestion="Give the command's full path, or check that it is installed and "
            "executable for the server's OS user (it runs without a shell).",
            context={"command": name},
        ) from None
    try:
        async with asyncio.timeout(timeout):
            out, err, status = await asyncio.gather(
                _drain(process.stdout, _MAX_STDOUT),
                _drain(process.stderr, _MAX_STDERR),
                process.wait(),
            )
    except TimeoutError:
        _kill(process)
        await process.wait()
        raise DatabaseConnectionError(
            f"PG_PASSWORD_COMMAND ({name}) did not finish within {timeout:g} s and was killed.",
            suggestion="Run the command yourself as the server's OS user to see where it "
            "waits, or raise PG_PASSWORD_COMMAND_TIMEOUT.",
            context={"command": name},
        ) from None
    except BaseException:  # cancelled: the connection attempt was abandoned
        _kill(process)
        raise
    if status != 0:
        _log_failure(name, status, err)
        how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
        raise DatabaseConnectionError(
            f"PG_PASSWORD_COMMAND ({name}) {how}.",
            suggestion="Its error output is in the server's log; run the command yourself as "
            "the server's OS user to see why.",
            context={"command": name, "status": status},
        )
    first = out.split(b"\n", 1)[0].strip()
    try:
        secret = first.decode()
    except UnicodeDecodeError:
        secret = ""
    if not secret:
        _log_failure(name, status, err)
        raise DatabaseConnectionError(
            f"PG_PASSWORD_COMMAND ({name}) printed no password (its first line of output is "
            "empty, or not UTF-8).",
            suggestion="The command must print the password on its first line of output.",
            context={"command": name, "status": status},
        )
    return secret


def _log_failure(name: str, status: int, err: bytes) -> None:
    lines = [line.strip() for line in err.decode(errors="replace").splitlines() if line.strip()]
    # The last line: where tools put the error that ended them.
    said = lines[-1][:_MAX_LOGGED] if lines else "(no error output)"
    logger.warning("PG_PASSWORD_COMMAND (%s) failed, status %s: %s", name, status, said)
