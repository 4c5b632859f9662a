"""The statements execute_query ran, per caller, newest first (`pg://queries/recent`).

Held in this process's memory: each replica behind a load balancer knows only the statements
it ran. Bounded twice: RECENT entries per caller (the oldest goes), OWNERS callers (the one
heard from least recently goes), and each statement's text cut at SQL_CHARS characters.
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict, deque
from typing import Any

RECENT = 50
OWNERS = 1000
SQL_CHARS = 2000


class History:
    def __init__(self, recent: int = RECENT, owners: int = OWNERS) -> None:
        self._recent = recent
        self._owners = owners
        self._by_owner: OrderedDict[str, deque[dict[str, Any]]] = OrderedDict()

    def add(
        self,
        owner: str,
        sql: str,
        query_hash: str,
        *,
        row_count: int | None = None,
        has_more: bool | None = None,
        execution_time_ms: float | None = None,
        error: str | None = None,
    ) -> None:
        entries = self._by_owner.get(owner)
        if entries is None:
            entries = self._by_owner[owner] = deque(maxlen=self._recent)
            if len(self._by_owner) > self._owners:
                self._by_owner.popitem(last=False)
        else:
            self._by_owner.move_to_end(owner)
        entry: dict[str, Any] = {
            "sql": sql if len(sql) <= SQL_CHARS else sql[:SQL_CHARS] + "...",
            "query_hash": query_hash,
            "at": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        }
        if error is None:
            entry |= {
                "row_count": row_count,
                "has_more": has_more,
                "execution_time_ms": execution_time_ms,
            }
        else:
            entry["error"] = error
        entries.append(entry)

    def recent(self, owner: str) -> list[dict[str, Any]]:
        """The caller's statements, newest first."""
        return list(reversed(self._by_owner.get(owner, ())))
