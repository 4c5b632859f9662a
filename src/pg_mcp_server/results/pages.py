"""A result cut into pages, and one page as execute_query answers it.

execute_query reads its whole result (up to `limit` rows and MCP_MAX_RESULT_BYTES) with one
statement; the rows that fit the answer budget are answered at once, and when others remain,
every page is put in the result store (results/store.py), page 1 included, so that
`pg://results/{id}/1` reads the start again. A page is held as bytes: a header line (the
columns' JSON, as PostgreSQL's description gave it, and what the answer says of the whole
result) and the page's rows as one JSON array text, so that answering it decodes one page and
encodes nothing again but its envelope.

A cursor is `<result id>.<page number>` (1-based, as in the resource's URI): opaque to the
caller, who passes it back as it came.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pg_mcp_server.errors import ParameterError

URI_PREFIX = "pg://results/"
_SEP = b"\n"  # never in compact JSON text


@dataclass(frozen=True)
class Header:
    """What every page of a result says of the whole result."""

    columns_json: str
    first: int  # rows before this page
    rows: int  # rows on this page
    total: int  # rows the result holds
    more: bool  # rows beyond those held (the row limit, the byte cap)
    notes: tuple[str, ...]
    execution_time_ms: float
    query_hash: str

    def encode(self) -> bytes:
        fields = {
            "first": self.first,
            "rows": self.rows,
            "total": self.total,
            "more": self.more,
            "notes": list(self.notes),
            "ms": self.execution_time_ms,
            "hash": self.query_hash,
        }
        text = '{"columns":' + self.columns_json + "," + _dumps(fields)[1:]
        return text.encode()

    @classmethod
    def decode(cls, data: bytes) -> Header:
        raw = json.loads(data)
        return cls(
            columns_json=_dumps(raw["columns"]),
            first=raw["first"],
            rows=raw["rows"],
            total=raw["total"],
            more=raw["more"],
            notes=tuple(raw["notes"]),
            execution_time_ms=raw["ms"],
            query_hash=raw["hash"],
        )


def cut(
    first_json: str, first_rows: int, rest: list[str], page_bytes: int
) -> list[tuple[int, bytes]]:
    """The result's pages as (rows, their JSON array): the first as PostgreSQL cut it, then
    the `rest` packed in order, each page within `page_bytes` (a row bigger than that is a
    page of its own)."""
    pages: list[tuple[int, bytes]] = [(first_rows, first_json.encode())]
    parts: list[bytes] = []
    size = 2
    for row in rest:
        data = row.encode()
        if parts and size + len(data) + 1 > page_bytes:
            pages.append((len(parts), b"[" + b",".join(parts) + b"]"))
            parts, size = [], 2
        parts.append(data)
        size += len(data) + 1
    if parts:
        pages.append((len(parts), b"[" + b",".join(parts) + b"]"))
    return pages


def holding(
    cut: list[tuple[int, bytes]],
    columns_json: str,
    *,
    more: bool,
    notes: Sequence[str],
    execution_time_ms: float,
    query_hash: str,
    max_bytes: int,
) -> tuple[list[bytes], Header]:
    """The pages as the store holds them (each its header and its rows), and the first page's
    header. The reader keeps the rows within the store's bytes; if the headers take the total
    over, the last pages go (and the answer says the result was cut)."""
    notes = list(notes)
    overhead = len(columns_json.encode()) + 300 + sum(len(n.encode()) for n in notes)
    if len(cut) > 1 and sum(len(r) for _, r in cut) + len(cut) * overhead > max_bytes:
        while len(cut) > 1 and sum(len(r) for _, r in cut) + len(cut) * overhead > max_bytes:
            cut = cut[:-1]
        more = True
        notes.append(f"cut at {max_bytes} bytes held (MCP_RESULT_STORE_BYTES)")
    total = sum(rows for rows, _ in cut)
    held: list[bytes] = []
    headers: list[Header] = []
    first = 0
    for rows, rows_json in cut:
        header = Header(
            columns_json, first, rows, total, more, tuple(notes), execution_time_ms, query_hash
        )
        headers.append(header)
        held.append(header.encode() + _SEP + rows_json)
        first += rows
    return held, headers[0]


def split(page: bytes) -> tuple[Header, str]:
    head, _, rows = page.partition(_SEP)
    return Header.decode(head), rows.decode()


def cursor(result_id: str, page: int) -> str:
    return f"{result_id}.{page}"


def uri(result_id: str, page: int) -> str:
    return f"{URI_PREFIX}{result_id}/{page}"


def parse_cursor(text: str) -> tuple[str, int]:
    """The result id and page number of a cursor; PARAMETER_ERROR for what no answer gave."""
    result_id, _, page = text.strip().rpartition(".")
    if not result_id or not page.isdigit() or int(page) < 1 or len(text) > 200:
        raise ParameterError(
            "Invalid value for 'cursor': not a cursor this server gave.",
            suggestion="Pass next_cursor exactly as an execute_query answer gave it.",
            context={"parameter": "cursor"},
        )
    return result_id, int(page)


def answer(
    header: Header, rows_json: str, rows: list[Any], page: int, pages: int, result_id: str | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Page `page` of `pages` as execute_query answers it (the ExecuteQueryOutput fields), and
    the JSON text already made for some of them (see tools/registry.ok_json)."""
    last = page >= pages
    out: dict[str, Any] = {
        "columns": json.loads(header.columns_json),
        "rows": rows,
        "row_count": header.rows,
        "has_more": header.more or not last,
        "execution_time_ms": header.execution_time_ms,
        "query_hash": header.query_hash,
    }
    notes: list[str] = []
    if result_id is not None:
        out["total_rows"] = header.total
        span = f"rows {header.first + 1}-{header.first + header.rows}" if header.rows else "no rows"
        notes.append(f"{span} of {header.total} (page {page} of {pages})")
        if not last:
            next_cursor = cursor(result_id, page + 1)
            out["next_cursor"] = next_cursor
            notes.append(
                f'next page: execute_query(cursor="{next_cursor}") or resources/read '
                f"{uri(result_id, page + 1)}"
            )
    notes.extend(header.notes)
    if notes:
        out["note"] = "; ".join(notes)
    return out, {"columns": header.columns_json, "rows": rows_json}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
