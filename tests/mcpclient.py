"""Drive the server the way an agent does: through an MCP client session."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import asyncpg
from mcp import Client

from pg_mcp_server.config import Settings
from pg_mcp_server.server import build_server

if TYPE_CHECKING:
    from pgbed import PgServer


@asynccontextmanager
async def connect(dsn: str, **server: Any) -> AsyncIterator[Client]:
    """An in-process client session on a server built for `dsn` (server settings overridable)."""
    settings = Settings.load(database={"dsn": dsn}, server=server)
    async with Client(build_server(settings)) as client:
        yield client


@asynccontextmanager
async def held_client(
    dsn: str, pool_size: int | None = None, **server: Any
) -> AsyncIterator[Client]:
    """A client session for a whole module. anyio wants a session entered and left by one
    task, and pytest-asyncio sets a fixture up and tears it down in different tasks, so a
    task of its own holds the session open. `pool_size` (PG_POOL_SIZE while the server reads
    its settings) of 1 makes every call share one pooled connection; `server`: settings, as
    for `connect`."""
    ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def hold() -> None:
        try:
            async with connect(dsn, **server) as client:
                ready.set_result(client)
                await done.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    old = os.environ.get("PG_POOL_SIZE")
    if pool_size is not None:
        os.environ["PG_POOL_SIZE"] = str(pool_size)
    try:
        task = asyncio.create_task(hold())
        client = await ready
    finally:
        if old is None:
            os.environ.pop("PG_POOL_SIZE", None)
        else:
            os.environ["PG_POOL_SIZE"] = old
    try:
        yield client
    finally:
        done.set()
        await task


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A successful call's structured result (the text content must say the same)."""
    result = await client.call_tool(tool, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    assert isinstance(result.structured_content, dict)
    assert json.loads(text) == result.structured_content
    return result.structured_content


def records(out: dict[str, Any]) -> list[dict[str, Any]]:
    """A result's rows as one dict per row, from arrays under a columns header (names, or
    objects with a name) or rows that are dicts already."""
    names = [c if isinstance(c, str) else c["name"] for c in out["columns"]]
    return [
        row if isinstance(row, dict) else dict(zip(names, row, strict=True)) for row in out["rows"]
    ]


async def call_error(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A failed call's PRD error body (ErrorResponse), checked for shape."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"expected an error from {tool}({arguments})"
    body = result.structured_content
    assert isinstance(body, dict)
    assert json.loads(result.content[0].text) == body  # type: ignore[union-attr]
    assert body["tool_name"] == tool
    assert set(body["error"]) == {"code", "message", "suggestion", "context"}
    assert body["error"]["suggestion"], "every error carries a suggestion"
    return body


async def fetch(dsn: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    """Rows from a direct (non-MCP) connection: the tests' own view of the database."""
    conn = await asyncpg.connect(dsn)
    try:
        rows: list[asyncpg.Record] = await conn.fetch(sql, *args)
        return rows
    finally:
        await conn.close()


@asynccontextmanager
async def module_database(pg: PgServer, name: str, setup: str) -> AsyncIterator[str]:
    """A database made with `setup` and dropped afterwards: one a module's tests share."""
    db = await pg.create_database(name)
    try:
        await execute(db.dsn, setup)
        yield db.dsn
    finally:
        await pg.drop_database(db.name)


async def execute(dsn: str, script: str) -> None:
    """Run a setup script (several statements) on a direct connection."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(script)
    finally:
        await conn.close()
