"""completion/complete for template parameters and prompt arguments, compared with what
pg_class says: prefix, case-insensitive, at most 100 values, total and hasMore."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import Completion, PromptReference, ResourceTemplateReference
from mcpclient import connect, execute, fetch
from pgbed import PgServer

from pg_mcp_server.config import Settings
from pg_mcp_server.server import build_server

TABLE = ResourceTemplateReference(uri="pg://schemas/{schema}/tables/{table}")
SAMPLE = ResourceTemplateReference(uri="pg://schemas/{schema}/tables/{table}/sample")
ANALYZE = PromptReference(name="analyze-table")

# Names that test the edges: case, LIKE wildcards, quotes, non-ASCII, a view, a partitioned
# table and its partitions (which completions leave out, as list_tables does), an index and a
# sequence (never offered).
FIXTURE = """
CREATE SCHEMA shop; CREATE SCHEMA "Shop Archive"; CREATE SCHEMA other;
CREATE TABLE shop.orders (id int PRIMARY KEY);
CREATE TABLE shop."Order_Items" (id int);
CREATE TABLE shop."ORDERS_2023" (id int);
CREATE TABLE shop."order%weird" (id int);
CREATE TABLE shop."Ölkännchen" (id int);
CREATE TABLE shop."quote""d" (id int);
CREATE VIEW shop.order_totals AS SELECT 1 AS n;
CREATE TABLE shop.events (at date) PARTITION BY RANGE (at);
CREATE TABLE shop.events_2024 PARTITION OF shop.events
    FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE INDEX order_idx ON shop.orders (id);
CREATE SEQUENCE shop.order_seq;
CREATE TABLE other.orders_elsewhere (id int);
CREATE TABLE "Shop Archive".old_orders (id int);
DO $$ BEGIN FOR i IN 1..150 LOOP
    EXECUTE format('CREATE TABLE shop.%I ()', 'bulk_' || lpad(i::text, 3, '0'));
END LOOP; END $$;
"""

NAMES = """
SELECT c.relname::text AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
"""


async def truth(dsn: str, schema: str, prefix: str) -> list[str]:
    """The schema's tables and views starting with `prefix` ignoring case, in code-point (C)
    order: worked out here, not by the server's SQL."""
    names = [r["name"] for r in await fetch(dsn, NAMES, schema)]
    return sorted(n for n in names if n.lower().startswith(prefix.lower()))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def shop_dsn(pg: PgServer) -> AsyncIterator[str]:
    """One database with FIXTURE for this module's tests, which only read it."""
    db = await pg.create_database("completions")
    await execute(db.dsn, FIXTURE)
    yield db.dsn
    await pg.drop_database(db.name)


async def complete(
    client: Client,
    ref: ResourceTemplateReference | PromptReference,
    name: str,
    value: str,
    **context: str,
) -> Completion:
    result = await client.complete(ref, {"name": name, "value": value}, context or None)
    return result.completion


# Beyond its first two letters a prefix is matched with ILIKE in the database's collation,
# which may fold only ASCII letters ("C"): the non-ASCII prefixes stay within two letters.
@pytest.mark.parametrize(
    "prefix", ["", "ord", "ORD", "Ord", "order_", "order%", "öl", "ÖL", 'quote"', "bulk_1", "x"]
)
async def test_table_prefixes_match_the_catalog(shop_dsn: str, prefix: str) -> None:
    expected = await truth(shop_dsn, "shop", prefix)
    async with connect(shop_dsn) as client:
        for ref in (TABLE, SAMPLE):
            got = await complete(client, ref, "table", prefix, schema="shop")
            assert got.values == expected[:100]
            # total only when every match is in the answer: counting them all would cost more
            # than the completion (see database/catalog/names.py).
            assert got.total == (len(expected) if len(expected) <= 100 else None)
            assert got.has_more is (len(expected) > 100)


async def test_a_table_completes_within_the_chosen_schema(shop_dsn: str) -> None:
    settings = Settings.load(database={"dsn": shop_dsn, "default_schema": "other"})
    async with Client(build_server(settings)) as client:
        in_shop = await complete(client, TABLE, "table", "ord", schema="shop")
        assert "orders" in in_shop.values and "orders_elsewhere" not in in_shop.values
        # No schema chosen yet: the server's default schema, as the tools use.
        default = await complete(client, TABLE, "table", "ord")
        assert default.values == ["orders_elsewhere"]
        spaced = await complete(client, TABLE, "table", "OLD", schema="Shop Archive")
        assert spaced.values == ["old_orders"]
        missing = await complete(client, TABLE, "table", "", schema="no_such_schema")
        assert (missing.values, missing.total, missing.has_more) == ([], 0, False)


async def test_a_prefix_that_matches_nothing(shop_dsn: str) -> None:
    async with connect(shop_dsn) as client:
        for ref, name in ((TABLE, "table"), (TABLE, "schema"), (ANALYZE, "table")):
            got = await complete(client, ref, name, "zzz_nothing", schema="shop")
            assert (got.values, got.total, got.has_more) == ([], 0, False)
        # Longer than any PostgreSQL name can be: nothing, without asking the database.
        got = await complete(client, TABLE, "table", "o" * 64, schema="shop")
        assert (got.values, got.total) == ([], 0)


async def test_schemas_complete_and_hide_system_ones_until_asked(shop_dsn: str) -> None:
    async with connect(shop_dsn) as client:
        everything = await complete(client, TABLE, "schema", "")
        assert {"shop", "Shop Archive", "other", "public"} <= set(everything.values)
        assert not [s for s in everything.values if s.startswith("pg_")]
        assert "information_schema" not in everything.values
        shop = await complete(client, TABLE, "schema", "SHOP")
        assert shop.values == ["Shop Archive", "shop"] and shop.total == 2
        system = await complete(client, TABLE, "schema", "pg_c")
        assert system.values == ["pg_catalog"]
        toast = await complete(client, TABLE, "schema", "pg_t")
        assert toast.values == []


async def test_prompt_arguments_complete(shop_dsn: str) -> None:
    async with connect(shop_dsn) as client:
        got = await complete(client, ANALYZE, "table", "order_t", schema="shop")
        assert got.values == ["order_totals"]
        schemas = await complete(client, ANALYZE, "schema", "oth")
        assert schemas.values == ["other"]
        explore = await complete(client, PromptReference(name="explore-database"), "schema", "s")
        assert explore.values == ["Shop Archive", "shop"]
        # Free text has nothing to complete.
        question = await complete(client, PromptReference(name="write-query"), "question", "how")
        assert (question.values, question.total) == ([], 0)


async def _error(client: Client, ref: Any, name: str) -> dict[str, Any]:
    with pytest.raises(MCPError) as caught:
        await client.complete(ref, {"name": name, "value": "x"})
    assert caught.value.error.code == -32602
    data = caught.value.error.data
    assert isinstance(data, dict)
    return data


async def test_unknown_references_are_invalid_params(demo_dsn: str) -> None:
    async with connect(demo_dsn) as client:
        data = await _error(client, PromptReference(name="analyse-table"), "table")
        assert "'analyze-table'" in data["error"]["suggestion"]
        data = await _error(client, ResourceTemplateReference(uri="pg://nope/{x}"), "x")
        assert "resources/templates/list" in data["error"]["suggestion"]
        data = await _error(client, TABLE, "column")
        assert "'column'" in data["error"]["message"]
        assert "schema" in data["error"]["message"] and "table" in data["error"]["message"]
