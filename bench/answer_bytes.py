"""What execute_query's default answer costs for issue 22's case: `SELECT * FROM big` on 1,000
rows of 2,000-character values. Prints the bytes of the text content (what a client that reads
`content` shows the model), of the structured content as JSON (what Claude Code shows it
instead), and of the whole JSON-RPC result (what crosses the wire: both, plus the envelope).

The server runs in process (as profile_call.py) on a throwaway PostgreSQL 18. Run it on two
commits to compare (PYTHONPATH=<other checkout>/src runs another one's server):

    uv run python bench/answer_bytes.py
"""

from __future__ import annotations

import asyncio
import json

import asyncpg
from common import SUPERUSER_OK, header
from mcp import Client

from pg_mcp_server.config import Settings
from pg_mcp_server.embedded import EmbeddedPostgres
from pg_mcp_server.server import build_server

SETUP = """
CREATE TABLE big (id integer PRIMARY KEY, body text NOT NULL);
INSERT INTO big SELECT g, repeat(chr(97 + g % 26), 2000) FROM generate_series(1, 1000) g;
ANALYZE big;
"""


async def measure(dsn: str) -> None:
    settings = Settings.load(database={"dsn": dsn}, server=SUPERUSER_OK)
    async with Client(build_server(settings)) as client:
        result = await client.call_tool("execute_query", {"sql": "SELECT * FROM big"})
    text = result.content[0].text  # type: ignore[union-attr]
    structured = json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False)
    wire = result.model_dump_json(by_alias=True, exclude_none=True)
    out = json.loads(text)
    print("| rows in the answer | text content | structuredContent | JSON-RPC result |")
    print("|---|---|---|---|")
    print(
        f"| {out['row_count']} of {out.get('total_rows', out['row_count'])} | "
        f"{len(text.encode()):,} | {len(structured.encode()):,} | {len(wire.encode()):,} |"
    )


async def prepare(pg: EmbeddedPostgres) -> str:
    dsn = pg.create_database("answer_bytes")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SETUP)
    finally:
        await conn.close()
    return dsn


def main() -> None:
    with EmbeddedPostgres() as pg:
        dsn = asyncio.run(prepare(pg))
        print(f"\n{header()}\n")
        asyncio.run(measure(dsn))


if __name__ == "__main__":
    main()
