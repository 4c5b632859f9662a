"""pin(): every function, operator, type and collation of a statement of ours looked up in
pg_catalog, and the spelled-out constructs give what the originals give, on real PostgreSQL."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import asyncpg
import pytest
from mcpclient import fetch
from pgbed import PgServer

from pg_mcp_server.database.catalog import tables as catalog
from pg_mcp_server.database.pool import audit
from pg_mcp_server.database.sql import pinned
from pg_mcp_server.database.sql.pinned import (
    PINNED_FILE,
    UnpinnableSqlError,
    generate,
    generated,
    pin,
    statement,
    statements,
    unpinned,
)

ROWS = "(VALUES (1, 1, 1), (2, 1, 2), (3, NULL, 1), (4, 1, NULL), (5, NULL, NULL), (6, 3, 2))"
# Constructs PostgreSQL resolves by operator name, each with the NULLs that tell them apart.
EXPRESSIONS = [
    "a IN (1, 3)",
    "a NOT IN (1, 3)",
    "a IN (1, NULL)",
    "a NOT IN (1, NULL)",
    "a BETWEEN b AND 3",
    "a NOT BETWEEN b AND 3",
    "NULLIF(a, b)",
    "a IS DISTINCT FROM b",
    "a IS NOT DISTINCT FROM b",
    "CASE a WHEN 1 THEN 'one' WHEN 3 THEN 'three' ELSE 'other' END",
    "CASE a WHEN b THEN 'same' END",
    "a::text LIKE '1%'",
    "a::text NOT LIKE '1%'",
    "a::text ILIKE '1%'",
    "a::text NOT ILIKE '1%'",
    "a::text SIMILAR TO '(1|3)'",
    "a::text NOT SIMILAR TO '1'",
    "b IN (SELECT 1)",
    "b NOT IN (SELECT 1 UNION SELECT NULL)",
    "a = ANY (ARRAY[1, 2])",
    "a < ALL (ARRAY[2, 3])",
    "(a, b) < (1, 2)",
    "a || '/' || b",
    "greatest(a, b) - least(a, 1)",
    "lower(a::text COLLATE \"C\") >= '1'",
    "x IS DISTINCT FROM a OR a IN (3) OR a IS NULL",
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
async def test_pinned_gives_what_the_original_gives(pg: PgServer, expression: str) -> None:
    sql = (
        f"SELECT array_agg(({expression})::text ORDER BY n) FROM {ROWS} t(n, a, b), (SELECT 1) s(x)"
    )
    pinned = pin(sql)
    assert unpinned(pinned) == []
    assert unpinned(sql) != []
    want = (await fetch(pg.admin_dsn, sql))[0][0]
    got = (await fetch(pg.admin_dsn, pinned))[0][0]
    assert got == want
    assert len(set(want)) > 1, "the rows tell the cases apart"


@pytest.mark.parametrize(
    "expression",
    [
        "a IS DISTINCT FROM $1",
        "$1 IS NOT DISTINCT FROM a",
        "NULLIF(a, $1)",
        "a IN ($1, 3)",
        "a NOT BETWEEN $1 AND 3",
        "CASE a WHEN $1 THEN 'x' END",
        "a::text LIKE $1",
    ],
)
async def test_parameters_keep_their_types(pg: PgServer, expression: str) -> None:
    """A parameter still gets its type from what it is compared with, and the answers for
    a value and for NULL are the same."""
    sql = f"SELECT array_agg(({expression})::text ORDER BY n) FROM {ROWS} t(n, a, b)"
    conn = await asyncpg.connect(pg.admin_dsn)
    try:
        original, pinned = await conn.prepare(sql), await conn.prepare(pin(sql))
        types = [t.name for t in original.get_parameters()]
        assert [t.name for t in pinned.get_parameters()] == types
        value = "1%" if types == ["text"] else 1
        for arg in (value, None):
            assert await pinned.fetchval(arg) == await original.fetchval(arg)
    finally:
        await conn.close()


def test_pin_names_what_it_pins() -> None:
    sql = (
        "SELECT count(*), x::text, y COLLATE \"C\", z >= 0, w = ANY ($1), v LIKE 'a', "
        "u IN (SELECT 1) FROM t"
    )
    assert unpinned(sql) == [
        "AEXPR_LIKE (~~)",
        "collation C",
        "function count",
        "operator =",
        "operator >=",
        "type text",
    ]
    pinned = pin(sql)
    assert unpinned(pinned) == []
    assert "pg_catalog.count(*)" in pinned and "OPERATOR(pg_catalog.~~)" in pinned
    assert pin(pinned) == pinned
    assert pin(sql) is pinned  # once per statement


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 FROM a JOIN b USING (id)",
        "SELECT 1 FROM a NATURAL JOIN b",
        "SELECT 1 FROM a ORDER BY x USING <",
        "SELECT 1 FROM a TABLESAMPLE SYSTEM (1)",
        "SELECT f(x) IN (1, 2)",
        "SELECT CASE f(x) WHEN 1 THEN 2 END",
        "SELECT x BETWEEN SYMMETRIC 1 AND 2",
    ],
)
def test_what_cannot_be_pinned_is_refused(sql: str) -> None:
    with pytest.raises(UnpinnableSqlError):
        pin(sql)


# Every statement of ours, name -> SQL as written (each module that registers one imported).
STATEMENTS = statements()


def test_the_registry_holds_our_statements() -> None:
    """The registry is filled from every part that sends SQL of its own."""
    parts = {name.rsplit(".", 1)[0] for name in STATEMENTS}
    assert {"catalog.tables", "guard.state", "guard.facts", "pool.engine", "custom.resolve"} <= (
        parts
    )
    sent = catalog.DESCRIBE_TABLE
    assert sent == generated()["catalog.tables.DESCRIBE_TABLE"][1]


@pytest.mark.parametrize("name", STATEMENTS)
def test_our_statements_are_sent_pinned(name: str) -> None:
    """What the server sends for each statement is pinned (nothing in it is looked up on the
    search path) and is what pin() makes of the SQL as written (pinned_sql.json is current)."""
    text = generated()[name][1]
    assert unpinned(text) == []
    assert text == pin(STATEMENTS[name]), "run python -m pg_mcp_server.database.sql.pinned --write"
    assert pin(text) == text


def test_pinned_sql_is_what_the_generator_writes() -> None:
    """pinned_sql.json, as checked in, is exactly what --write makes: no statement missing,
    none stale, none left over."""
    assert PINNED_FILE.read_text() == generate()
    assert pinned.main(["--check"]) == 0


def test_a_changed_statement_is_pinned_at_import_not_sent_stale(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQL as written that pinned_sql.json was not made from is pinned where it is registered
    (slowly, and said in the log): the stale text is never what is sent."""
    monkeypatch.setattr(pinned, "_WRITTEN", dict(STATEMENTS))  # the real registry untouched
    name = "catalog.names.SCHEMA_EXISTS"
    changed = STATEMENTS[name].replace("SELECT 1", "SELECT 2")
    assert changed != STATEMENTS[name]
    with pytest.raises(ValueError, match="two statements"):
        statement(name, changed)
    sent = statement("test.CHANGED", changed)
    assert sent == pin(changed) and "changed since pinned_sql.json" in caplog.text


def _sent_constants() -> dict[str, str]:
    """The constant statements the server passes a driver call (`conn.fetch(NAME, ...)` or
    `conn.execute("...")`; aliases such as `self.x = NAME` aside): where -> text."""
    out: dict[str, str] = {}
    package = Path(pinned.__file__).parents[2]
    for path in package.rglob("*.py"):
        module = importlib.import_module(
            ".".join(("pg_mcp_server", *path.relative_to(package).with_suffix("").parts))
        )
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _DRIVER_CALLS
                and node.args
            ):
                continue
            first = node.args[0]
            if isinstance(first, ast.Name) and isinstance(
                value := getattr(module, first.id, None), str
            ):
                out[f"{module.__name__}.{first.id}"] = value
            elif isinstance(first, ast.Constant) and isinstance(first.value, str):
                out[f"{module.__name__}:{node.lineno}"] = first.value
    return out


_DRIVER_CALLS = {"fetch", "fetchrow", "fetchval", "execute", "prepare", "executemany"}


def test_every_constant_statement_sent_is_pinned() -> None:
    """Every constant the server hands the driver as a statement is pinned: a registered
    statement's text, or one written pinned by hand (that names no function, operator or
    type to look up, or names them in pg_catalog); and nothing pins at run time but the
    custom definitions' SQL (which is not ours)."""
    sent = _sent_constants()
    assert "pg_mcp_server.database.pool.engine._DETECT" in sent  # written pinned by hand
    assert "pg_mcp_server.database.guard.state.CHECK" in sent, "the scan finds our statements"
    assert {name: unpinned(text) for name, text in sent.items() if unpinned(text)} == {}
    package = Path(pinned.__file__).parents[2]
    calls = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "pin"
    }
    assert calls == {"database/sql/pinned.py", "custom/resolve.py"}


def test_the_audit_is_written_pinned() -> None:
    """The start-up audit runs before pglast is imported: its statement is pinned by hand."""
    assert unpinned(audit.AUDIT) == []
