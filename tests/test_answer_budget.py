"""Every tool's default answer fits a model (issue 22): on the four sample databases, each
built-in tool called with its default arguments on the inputs that make its biggest answers,
every resource read and every prompt rendered, stays within MCP_ANSWER_BUDGET_BYTES of text
(content[0].text, UTF-8). The inputs are found in the catalog, not listed by hand: every
schema, every table, the tables with the most columns, keys and longest values.

Run with `-s` to see the largest answer of each tool on each database.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from mcp import Client
from mcpclient import call, connect, fetch, held_client, module_database, records
from pgbed import PgServer

from pg_mcp_server.config import Settings

BUDGET = Settings.load(database={"dsn": "postgresql://x@localhost/x"}).server.answer_budget_bytes
DATASETS = ("pagila", "chinook", "northwind", "adventureworks")
# Where execute_query's default answer was over the budget before it paged (pagila's film,
# northwind's orders, adventureworks' productphoto: 362 KB, 118 KB, 3.9 MB).
WORDS = ("name", "id", "date", "customer", "product", "order", "address", "price")

# The user tables and views with their schema, column count, foreign-key degree, and how
# wide their rows are on disk (bytes per row: where the long values are).
TABLES = """
SELECT n.nspname AS schema, c.relname AS name, c.relkind::text AS kind,
       (SELECT count(*) FROM pg_attribute a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS width,
       (SELECT count(*) FROM pg_constraint k
        WHERE k.contype = 'f' AND (k.conrelid = c.oid OR k.confrelid = c.oid)) AS degree,
       CASE WHEN c.reltuples > 0
            THEN pg_total_relation_size(c.oid) / c.reltuples ELSE 0 END AS row_bytes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
  AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
ORDER BY n.nspname, c.relname
"""


@dataclass
class Sizes:
    """The largest answer of each tool, and every answer over the budget."""

    largest: dict[str, tuple[int, str]] = field(default_factory=dict)
    over: list[str] = field(default_factory=list)

    def add(self, tool: str, label: str, text: str) -> None:
        size = len(text.encode())
        if size > self.largest.get(tool, (-1, ""))[0]:
            self.largest[tool] = (size, label)
        if size > BUDGET:
            self.over.append(f"{tool} {label}: {size} bytes")

    def report(self, dataset: str) -> None:
        for tool, (size, label) in sorted(self.largest.items()):
            print(f"SIZE {dataset:15} {tool:22} {size:8} {label}")


@dataclass
class Bed:
    client: Client
    tables: list[dict[str, Any]]

    def top(self, key: str, n: int, kinds: str = "rpvmf") -> list[dict[str, Any]]:
        tables = [t for t in self.tables if t["kind"] in kinds]
        return sorted(tables, key=lambda t: -float(t[key]))[:n]


@pytest_asyncio.fixture(scope="module", loop_scope="session", params=DATASETS)
async def bed(request: pytest.FixtureRequest, datasets: dict[str, str]) -> AsyncIterator[Bed]:
    dsn = datasets[request.param]
    tables = [dict(r) for r in await fetch(dsn, TABLES)]
    async with held_client(dsn) as client:
        yield Bed(client, tables)


async def text_of(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    text: str = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, f"{tool}({arguments}): {text}"
    return text


def label(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, separators=(",", ":"))


def check(sizes: Sizes, dataset: str) -> None:
    sizes.report(dataset)
    assert not sizes.over, f"over the {BUDGET}-byte budget: " + "; ".join(sizes.over)


def dataset_of(request: pytest.FixtureRequest) -> str:
    name: str = request.node.callspec.params["bed"]
    return name


async def test_catalog_tools_fit_the_budget(bed: Bed, request: pytest.FixtureRequest) -> None:
    """list_schemas, list_tables (with and without columns) on every schema, describe_table
    and get_foreign_keys on every table, search_tables on common words, find_join_path
    between the most connected tables."""
    sizes = Sizes()
    calls: list[tuple[str, dict[str, Any]]] = [("list_schemas", {})]
    for schema in sorted({t["schema"] for t in bed.tables}):
        calls.append(("list_tables", {"schema_name": schema}))
        calls.append(("list_tables", {"schema_name": schema, "include_columns": True}))
    for t in bed.tables:
        target = {"table_name": t["name"], "schema_name": t["schema"]}
        calls.append(("describe_table", target))
        calls.append(("get_foreign_keys", target))
    calls += [("search_tables", {"query": word}) for word in WORDS]
    hubs = bed.top("degree", 3, "rp")
    for a in hubs:
        for b in hubs:
            if a is not b:
                calls.append(
                    (
                        "find_join_path",
                        {
                            "from_table": a["name"],
                            "from_schema": a["schema"],
                            "to_table": b["name"],
                            "to_schema": b["schema"],
                        },
                    )
                )
    for tool, arguments in calls:
        sizes.add(tool, label(arguments), await text_of(bed.client, tool, arguments))
    check(sizes, dataset_of(request))


async def test_sample_rows_fit_the_budget(bed: Bed, request: pytest.FixtureRequest) -> None:
    """get_sample_rows on every table, and on the widest rows with its largest limit."""
    sizes = Sizes()
    for t in bed.tables:
        arguments: dict[str, Any] = {"table_name": t["name"], "schema_name": t["schema"]}
        sizes.add(
            "get_sample_rows",
            label(arguments),
            await text_of(bed.client, "get_sample_rows", arguments),
        )
    check(sizes, dataset_of(request))


async def test_explain_fits_the_budget(bed: Bed, request: pytest.FixtureRequest) -> None:
    """explain_query (text, then analyzed JSON) on a join of the most connected tables."""
    sizes = Sizes()
    a, b = bed.top("degree", 2, "rp")
    found = json.loads(
        await text_of(
            bed.client,
            "find_join_path",
            {
                "from_table": a["name"],
                "from_schema": a["schema"],
                "to_table": b["name"],
                "to_schema": b["schema"],
            },
        )
    )
    sql = "SELECT * " + found["paths"][0]["sql_example"]
    for arguments in ({"sql": sql}, {"sql": sql, "analyze": True, "format": "json"}):
        sizes.add(
            "explain_query", label(arguments), await text_of(bed.client, "explain_query", arguments)
        )
    check(sizes, dataset_of(request))


async def test_resources_and_prompts_fit_the_budget(
    bed: Bed, request: pytest.FixtureRequest
) -> None:
    """Every fixed resource, the templates on the widest and longest tables, every prompt."""
    sizes = Sizes()
    uris = [str(r.uri) for r in (await bed.client.list_resources()).resources]
    for t in bed.tables:
        uris.append(f"pg://schemas/{t['schema']}/tables")
    for t in bed.top("width", 3) + bed.top("row_bytes", 3, "rpm"):
        uris.append(f"pg://schemas/{t['schema']}/tables/{t['name']}")
        uris.append(f"pg://schemas/{t['schema']}/tables/{t['name']}/sample")
    for uri in dict.fromkeys(uris):
        result = await bed.client.read_resource(uri, cache_mode="bypass")
        sizes.add("resource " + uri.split("/")[2], uri, result.contents[0].text)  # type: ignore[union-attr]
    hub = bed.top("degree", 1, "rp")[0]
    prompts = {
        "explore-database": {"schema": hub["schema"]},
        "analyze-table": {"table": hub["name"], "schema": hub["schema"]},
        "write-query": {"question": "Which customers spent the most last month?"},
        "generate-report": {"topic": "sales by month"},
        "find-data": {"description": "customer addresses"},
    }
    listed = {p.name for p in (await bed.client.list_prompts()).prompts}
    assert listed == set(prompts)
    for name, arguments in prompts.items():
        rendered = await bed.client.get_prompt(name, arguments)
        text = "\n".join(m.content.text for m in rendered.messages)  # type: ignore[union-attr]
        sizes.add("prompt " + name, label(arguments), text)
    check(sizes, dataset_of(request))


async def test_execute_query_fits_the_budget(bed: Bed, request: pytest.FixtureRequest) -> None:
    """execute_query `SELECT *` from the widest table and the one with the longest rows."""
    sizes = Sizes()
    for t in bed.top("width", 2, "rpm") + bed.top("row_bytes", 2, "rpm"):
        sql = f'SELECT * FROM "{t["schema"]}"."{t["name"]}"'
        sizes.add("execute_query", sql, await text_of(bed.client, "execute_query", {"sql": sql}))
    check(sizes, dataset_of(request))


LONG_VALUES = """
CREATE TABLE longs (id int PRIMARY KEY, t text, v varchar(3000), b bytea, j jsonb,
                    a int[], n numeric, short text);
INSERT INTO longs VALUES (
    1, repeat('x', 2000), repeat('é', 2000), decode(repeat('ab', 2000), 'hex'),
    jsonb_build_object('k', repeat('y', 2000)), array_fill(7, ARRAY[1000]),
    12345678901234567890.5, 'short');
"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def longs_dsn(pg: PgServer) -> AsyncIterator[str]:
    async with module_database(pg, "longs", LONG_VALUES) as dsn:
        yield dsn


async def test_sample_rows_cut_long_values_visibly(longs_dsn: str) -> None:
    """Text, varchar, bytea, json and arrays longer than MCP_MAX_VALUE_CHARS are cut, each
    marked with its whole length; numbers and short values stay exact."""
    async with connect(longs_dsn) as client:
        out = await call(client, "get_sample_rows", table_name="longs")
    (row,) = records(out)
    assert row["t"] == "x" * 500 + "...[cut: 2000 chars]"
    assert row["v"] == "é" * 500 + "...[cut: 2000 chars]"
    kept = base64.b64encode(bytes.fromhex("ab" * 375)).decode()
    assert row["b"] == kept + "...[cut: 2000 bytes]"
    whole_json = json.dumps({"k": "y" * 2000}, separators=(", ", ": "))
    assert row["j"] == whole_json[:500] + f"...[cut: {len(whole_json)} chars]"
    assert row["a"] == ("[" + ",".join(["7"] * 1000) + "]")[:500] + "...[cut: 2001 chars]"
    assert row["n"] == "12345678901234567890.5" and row["short"] == "short"
    assert row["id"] == 1
    assert "values longer than 500 characters are cut" in out["note"]


async def test_value_budget_follows_the_setting(longs_dsn: str) -> None:
    async with connect(longs_dsn, max_value_chars=100) as client:
        out = await call(client, "get_sample_rows", table_name="longs", columns=["t", "short"])
    (row,) = records(out)
    assert row == {"t": "x" * 100 + "...[cut: 2000 chars]", "short": "short"}
    assert "values longer than 100 characters are cut" in out["note"]
