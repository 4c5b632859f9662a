"""Serve a custom definitions file to an in-process MCP client session."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcpclient import connect


def write(directory: Path, text: str, name: str = "defs.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


@asynccontextmanager
async def serve(dsn: str, directory: Path, text: str, **server: Any) -> AsyncIterator[Client]:
    """A session on a server that serves `text` (dedented) as its definitions file."""
    path = write(directory, text)
    async with connect(dsn, custom_definitions=str(path), **server) as client:
        yield client
