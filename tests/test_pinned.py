"""pin(): every function, operator, type and collation of a statement of ours looked up in
pg_catalog, and the spelled-out constructs give what the originals give, on real PostgreSQL."""

from __future__ import annotations

import asyncpg
import pytest
from mcpclient import fetch
from pgbed import PgServer

from pg_mcp_server.custom import check
from pg_mcp_server.database.catalog import keys as relationships
from pg_mcp_server.database.catalog import names, search, server_info
from pg_mcp_server.database.catalog import tables as catalog
from pg_mcp_server.database.explain import plans
from pg_mcp_server.database.guard import facts as safety
from pg_mcp_server.database.guard import state as freshness
from pg_mcp_server.database.pool import audit
from pg_mcp_server.database.rows import hints
from pg_mcp_server.database.sql.pinned import UnpinnableSqlError, pin, unpinned

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


STATEMENTS = {
    f"{module.__name__.rsplit('.', 1)[1]}.{name}": getattr(module, name)
    for module, names_ in (
        (catalog, "LIST_SCHEMAS LIST_TABLES DESCRIBE_TABLE TABLE_SHAPE NEAR_NAMES"),
        (names, "TABLE_NAMES SCHEMA_NAMES SCHEMA_EXISTS TABLE_EXISTS"),
        (server_info, "SYSTEM_INFO SETTINGS ACTIVITY REPLICATION"),
        (search, "SEARCH"),
        (relationships, "FOREIGN_KEYS_OF FAN_OUT GRAPH"),
        (hints, "COLUMNS_OF FUNCTIONS_NEAR"),
        (plans, "RELATION_ROWS"),
        (safety, "CATALOG RELATIONS"),
        (freshness, "QUICK CHECK SEARCH_PATH"),
        (check, "LANGUAGES AVAILABLE"),
    )
    for name in names_.split()
}


@pytest.mark.parametrize("name", STATEMENTS)
def test_our_statements_pin(name: str) -> None:
    """Each constant pins (the trap and recording tests in test_pinned_traps.py show that
    the pinned text is what is sent, and that it answers as before)."""
    assert unpinned(pin(STATEMENTS[name])) == []


def test_the_audit_is_written_pinned() -> None:
    """The start-up audit runs before pglast is imported: its statement is pinned by hand."""
    assert unpinned(audit.AUDIT) == []
