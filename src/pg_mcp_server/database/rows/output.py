"""What a read answers: the budget its rows are cut to, and the output dict.

Every tool that returns rows is bounded by the same two settings, MCP_MAX_ROWS and
MCP_MAX_RESULT_BYTES (a `Budget`), reads at most one row more than it keeps, and says
`has_more` when rows were left out, with a `note` saying why. Rows are read one of two ways
(reader.py), so the budget is applied one of two ways, both from here:
- rows whose JSON PostgreSQL makes (execute_query, get_sample_rows) are cut by PostgreSQL
  inside the wrapper (rewrite.py), to `limit` rows and `bytes`, so nothing over the budget is
  sent; `notes` says what was cut;
- rows the driver decoded (custom SQL, which may be a write with RETURNING) are cut here,
  by `cut`.
The notes are worded as each tool has always worded them (tests and clients read them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# An answer's fields besides its columns and rows: counts, timing, hash, cursor, the note.
ENVELOPE_BYTES = 1024


@dataclass(frozen=True)
class Budget:
    rows: int  # MCP_MAX_ROWS
    bytes: int  # MCP_MAX_RESULT_BYTES

    def limit(self, asked: int | None) -> int:
        """The caller's row limit, never above the server's."""
        return min(asked or self.rows, self.rows)

    def notes(self, *, read: int, kept: int, limit: int, cut_by_size: bool) -> list[str]:
        """What PostgreSQL cut from execute_query's rows: `read` rows it produced (at most
        limit + 1), `kept` of them sent."""
        notes: list[str] = []
        if read > limit:
            notes.append(
                f"more rows exist beyond the limit of {limit}; raise limit (up to {self.rows}) "
                "or narrow the query"
            )
        if cut_by_size:
            cut = f"cut after {kept} rows at" if kept else "the first row alone is over"
            notes.append(f"{cut} the {self.bytes}-byte result limit; select fewer columns or rows")
        return notes

    def cut(self, rows: list[Any]) -> tuple[list[Any], list[str]]:
        """Rows of JSON values cut to the budget (the first row is always kept), and the notes
        saying why; no notes when nothing was cut."""
        notes: list[str] = []
        if len(rows) > self.rows:
            rows = rows[: self.rows]
            notes.append(f"cut at {self.rows} rows (MCP_MAX_ROWS)")
        size = 2
        for n, row in enumerate(rows):
            size += len(json.dumps(row, separators=(",", ":"), ensure_ascii=False)) + 1
            if size > self.bytes and n > 0:
                rows = rows[:n]
                notes.append(f"cut at {self.bytes} bytes of rows (MCP_MAX_RESULT_BYTES)")
                break
        return rows, notes


def page_size(answer_bytes: int, columns_json: str) -> int:
    """The bytes of rows' JSON one answer of `answer_bytes` holds: what is left once the
    columns and the other fields are in (the note may name columns again: redacted ones),
    and never less than a quarter of the answer."""
    return max(answer_bytes - 2 * len(columns_json.encode()) - ENVELOPE_BYTES, answer_bytes // 4)


class Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def data_type(self) -> str: ...


def answer(
    columns: Sequence[Named],
    rows: list[list[Any]],
    has_more: bool,
    notes: Sequence[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    """The rows as execute_query gives them (PRD 6.3.1), and custom SQL tools alike:
    `columns`, then each row an array of values in their order; `extra` fields (timing, a
    write's status) come before the `note`, which is there only when there is something
    to say."""
    out: dict[str, Any] = {
        "columns": [{"name": c.name, "data_type": c.data_type} for c in columns],
        "rows": rows,
        "row_count": len(rows),
        "has_more": has_more,
        **{k: v for k, v in extra.items() if v is not None},
    }
    if notes:
        out["note"] = "; ".join(notes)
    return out
