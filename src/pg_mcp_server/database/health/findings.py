"""What every check gives: findings (a severity, the object, the numbers behind it, the
statement that fixes it) and how a check's statement is run and read.

Nothing here runs a fix: `fix` is text for the user. Identifiers in it are quoted always
(guard's quote_ident), so mixed case and reserved words survive a copy and paste.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from pg_mcp_server.database.guard import quote_ident

SEVERITIES = ("critical", "warning", "info")
RANK = {name: rank for rank, name in enumerate(SEVERITIES)}

GIB = 1024**3
MIB = 1024**2


@dataclass
class Finding:
    check: str
    severity: str
    object: str
    numbers: dict[str, Any]
    fix: str = ""


@dataclass
class Outcome:
    """One check's result: its findings (the most severe first, at most the check's share),
    how many it found in all, and what limited it (a note: rows hidden from this role) or why
    it could not run (`error`)."""

    check: str
    findings: list[Finding] = field(default_factory=list)
    found: int = 0
    note: str = ""
    error: str = ""


Check = Callable[[asyncpg.Connection, int], Awaitable[Outcome]]


def qualified(schema: str, name: str) -> str:
    """A relation's name as the user types it in a fix."""
    return f"{quote_ident(schema)}.{quote_ident(name)}"


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def seconds(value: Any) -> float | None:
    return None if value is None else round(float(value), 1)


def decoded(value: Any) -> Any:
    """A json column: pooled connections decode it (SQLAlchemy's dialect), others do not."""
    return json.loads(value) if isinstance(value, str) else value


def worst_first(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: RANK[f.severity])
