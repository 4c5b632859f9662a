"""execute_query's answer costs a model little more than the rows themselves (issue 14 goal 1):
100 pagila film rows as text content within 1.2x the same rows as TSV (COPY ... TO STDOUT)."""

from __future__ import annotations

import io
import json

import asyncpg
from mcpclient import connect

ROWS = "SELECT * FROM film ORDER BY film_id LIMIT 100"


async def test_100_film_rows_cost_at_most_1_2x_their_tsv(datasets: dict[str, str]) -> None:
    dsn = datasets["pagila"]
    async with connect(dsn) as client:
        result = await client.call_tool("execute_query", {"sql": ROWS, "limit": 100})
    text = result.content[0].text  # type: ignore[union-attr]
    assert json.loads(text)["row_count"] == 100 and not result.is_error
    conn = await asyncpg.connect(dsn)
    try:
        tsv = io.BytesIO()
        await conn.copy_from_query(ROWS, output=tsv)
    finally:
        await conn.close()
    ratio = len(text.encode()) / len(tsv.getvalue())
    assert ratio <= 1.2, f"{len(text.encode())} bytes of JSON for {len(tsv.getvalue())} of TSV"
