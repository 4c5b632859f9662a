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
from mcpclient import (
    call,
    call_error,
    connect,
    execute,
    fetch,
    held_client,
    module_database,
    records,
)
from pgbed import PgServer

from pg_mcp_server.config import Settings
from pg_mcp_server.database.catalog.pages import RESERVE

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


def resource_kind(uri: str) -> str:
    """A resource's template, by its URI: pg://schemas/{schema}/tables/{table}/sample."""
    parts = uri.removeprefix("pg://").split("/")
    if parts[0] != "schemas" or len(parts) == 1:
        return uri
    names = ["{schema}", "{table}"]
    return "pg://" + "/".join(
        names.pop(0) if i in (1, 3) and names else p for i, p in enumerate(parts)
    )


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


async def text_of(
    client: Client, tool: str, arguments: dict[str, Any], *, refusals: bool = False
) -> str:
    """The answer's text; an error fails the test, but with `refusals` a guard's refusal is
    an answer too (a view whose function it cannot analyse: where contrib's tablefunc is
    missing, as in the pgserver wheel's 16, the test bed's crosstab is PL/pgSQL with EXECUTE)."""
    result = await client.call_tool(tool, arguments)
    text: str = result.content[0].text  # type: ignore[union-attr]
    refused = refusals and '"code":"WRITE_OPERATION_DENIED"' in text
    assert not result.is_error or refused, f"{tool}({arguments}): {text}"
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
            await text_of(bed.client, "get_sample_rows", arguments, refusals=True),
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
    """Every fixed resource, the schema templates on every schema, the table templates on the
    widest, longest and most connected tables (each read as a resource and through the
    read_resource tool), every prompt."""
    sizes = Sizes()
    uris = [str(r.uri) for r in (await bed.client.list_resources()).resources]
    for t in bed.tables:
        uris.append(f"pg://schemas/{t['schema']}/tables")
        uris.append(f"pg://schemas/{t['schema']}/erd")
    for t in bed.top("width", 3) + bed.top("row_bytes", 3, "rpm") + bed.top("degree", 3):
        for tail in ("", "/sample", "/erd"):
            uris.append(f"pg://schemas/{t['schema']}/tables/{t['name']}{tail}")
    for uri in dict.fromkeys(uris):
        result = await bed.client.read_resource(uri, cache_mode="bypass")
        kind = resource_kind(uri)
        sizes.add("resource " + kind, uri, result.contents[0].text)  # type: ignore[union-attr]
        sizes.add("read_resource", uri, await text_of(bed.client, "read_resource", {"uri": uri}))
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


# The hard cases: a schema of 600 tables of 10 commented columns each (every table also
# commented, and referencing one hub), a 300-column table whose comments alone are over the
# budget, with long comments, defaults and checks to cut.
HARD = """
CREATE SCHEMA many;
CREATE TABLE many.hub (id int PRIMARY KEY);
DO $$
BEGIN
  FOR t IN 1..600 LOOP
    EXECUTE format('CREATE TABLE many.%I (id int PRIMARY KEY, hub_id int REFERENCES many.hub, '
                   '%s)', 'item_' || lpad(t::text, 4, '0'),
                   (SELECT string_agg(format('attribute_%s text', c), ', ')
                    FROM generate_series(1, 8) c));
    EXECUTE format('COMMENT ON TABLE many.%I IS %L', 'item_' || lpad(t::text, 4, '0'),
                   'Item table number ' || t || ', ' || repeat('described at length ', 5));
    FOR c IN 1..8 LOOP
      EXECUTE format('COMMENT ON COLUMN many.%I.%I IS %L', 'item_' || lpad(t::text, 4, '0'),
                     'attribute_' || c, 'What attribute ' || c || ' of the item holds');
    END LOOP;
  END LOOP;
END $$;
DO $$
BEGIN
  EXECUTE 'CREATE TABLE wide300 (' || (SELECT string_agg(format('c%s varchar(200)', c), ', ')
                                       FROM generate_series(1, 300) c) || ')';
  FOR c IN 1..300 LOOP
    EXECUTE format('COMMENT ON COLUMN wide300.%I IS %L', 'c' || c,
                   'Column ' || c || ': ' || repeat('what this column holds. ', 12));
  END LOOP;
  EXECUTE format('COMMENT ON COLUMN wide300.c1 IS %L', 'long comment ' || repeat('z', 3000));
END $$;
"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def hard_dsn(pg: PgServer) -> AsyncIterator[str]:
    async with module_database(pg, "hard", HARD) as dsn:
        await execute(
            dsn,
            "ALTER TABLE wide300 ALTER COLUMN c2 SET DEFAULT '" + "d" * 2000 + "', "
            "ADD CONSTRAINT long_check CHECK (c3 <> '" + "q" * 2000 + "')",
        )
        yield dsn


async def walk(
    client: Client, tool: str, key: str | tuple[str, ...], **arguments: Any
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Every item of a paged answer, reading on with next_cursor to the end; and the answers,
    each checked against the budget."""
    items: list[Any] = []
    answers: list[dict[str, Any]] = []
    cursor = None
    while True:
        result = await client.call_tool(tool, arguments | ({"cursor": cursor} if cursor else {}))
        text = result.content[0].text  # type: ignore[union-attr]
        assert not result.is_error, text
        assert len(text.encode()) <= BUDGET, (tool, len(answers), len(text.encode()))
        out = json.loads(text)
        answers.append(out)
        print(f"PAGE {tool} {len(answers)}: {len(text.encode())} bytes, {out.get('note')}")
        for k in (key,) if isinstance(key, str) else key:
            items += out.get(k, [])
        cursor = out.get("next_cursor")
        if cursor is None:
            return items, answers
        assert "call again with cursor=next_cursor" in out["note"]
        assert len(answers) < 100, "no end"


async def test_list_tables_pages_a_schema_of_600_tables(hard_dsn: str) -> None:
    names = [f"item_{t:04}" for t in range(1, 601)] + ["hub"]
    async with connect(hard_dsn) as client:
        for include_columns in (False, True):
            tables, answers = await walk(
                client,
                "list_tables",
                "tables",
                schema_name="many",
                include_columns=include_columns,
            )
            assert [t["name"] for t in tables] == sorted(names), include_columns
            assert len(answers) > 1 and all(a["total_count"] == 601 for a in answers)
            assert answers[0]["has_more"] and "has_more" not in answers[-1]
            assert answers[0]["note"].startswith(f"tables 1-{len(answers[0]['tables'])} of 601; ")
        assert tables[0]["columns"][:2] == ["hub_id integer -> hub.id", "id integer PK"] or (
            tables[-1]["columns"][0] == "id integer PK"
        )


async def test_describe_table_pages_300_columns_and_cuts_long_texts(hard_dsn: str) -> None:
    async with connect(hard_dsn) as client:
        columns, answers = await walk(client, "describe_table", "columns", table_name="wide300")
    assert [c["name"] for c in columns] == [f"c{c}" for c in range(1, 301)]
    first, rest = answers[0], answers[1:]
    assert (
        rest
        and "constraints" in first
        and all(
            set(a) <= {"table_name", "schema_name", "columns", "note", "next_cursor"} for a in rest
        )
    )
    assert first["note"].startswith(f"columns 1-{len(first['columns'])} of 300; ")
    assert columns[0]["description"] == (
        ("long comment " + "z" * 3000)[:500] + "...[cut: 3013 chars]"
    )
    default = "'" + "d" * 2000 + "'::character varying"
    assert columns[1]["default_value"] == default[:500] + f"...[cut: {len(default)} chars]"
    (check,) = [k for k in first["constraints"] if k["name"] == "long_check"]
    assert check["definition"].endswith(" chars]") and len(check["definition"]) < 600
    # Every page between the first and the last holds as many columns as fit: the next one
    # would not have (the columns' bytes, the commas between them and RESERVE kept free).
    # (20,000 bytes: about 50 columns a page, more than the 32 `fit` sizes in one encoding)
    async with connect(hard_dsn, answer_budget_bytes=20000) as client:
        columns, answers = await walk(client, "describe_table", "columns", table_name="wide300")
    assert len(answers) > 3
    room = 20000 - RESERVE
    shown = len(answers[0]["columns"])
    for page in answers[1:-1]:
        core = {k: page[k] for k in ("table_name", "schema_name", "columns")}
        core_bytes = len(json.dumps(core, separators=(",", ":"), ensure_ascii=False).encode())
        following = columns[shown + len(page["columns"])]
        following_bytes = len(
            json.dumps(following, separators=(",", ":"), ensure_ascii=False).encode()
        )
        assert core_bytes + 1 <= room < core_bytes + following_bytes + 2, (shown, core_bytes)
        shown += len(page["columns"])


async def test_search_tables_pages_many_matches(hard_dsn: str) -> None:
    async with connect(hard_dsn) as client:
        first = await call(client, "search_tables", query="item")
        assert len(first["matches"]) == 10 and first["total_count"] == 600
        assert (
            first["note"]
            == "matching tables 1-10 of 600; 590 more: call again with cursor=next_cursor"
        )
        matches, answers = await walk(client, "search_tables", "matches", query="item", limit=50)
    assert sorted(m["table_name"] for m in matches) == [f"item_{t:04}" for t in range(1, 601)]
    assert len({m["table_name"] for m in matches}) == 600 and len(answers) >= 12


async def test_get_foreign_keys_pages_600_incoming_keys(hard_dsn: str) -> None:
    async with connect(hard_dsn) as client:
        keys, answers = await walk(
            client,
            "get_foreign_keys",
            ("outgoing", "incoming"),
            table_name="hub",
            schema_name="many",
        )
    assert sorted(k["from_table"] for k in keys) == [f"item_{t:04}" for t in range(1, 601)]
    assert len(answers) > 1 and all(a["incoming_count"] == 600 for a in answers)


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


async def test_a_cursor_is_checked(hard_dsn: str) -> None:
    async with connect(hard_dsn) as client:
        first = await call(client, "list_tables", schema_name="many")
        cursor = first["next_cursor"]
        for tool, arguments, says in [
            ("list_tables", {"schema_name": "many", "cursor": "not a cursor"}, "not one this"),
            ("list_tables", {"schema_name": "many", "cursor": cursor[:-7]}, "not one this"),
            ("list_tables", {"schema_name": "many", "cursor": b64("[" * 100_000)}, "not one this"),
            ("list_tables", {"schema_name": "many", "cursor": b64('{"t": 1}')}, "not one this"),
            ("list_tables", {"schema_name": "many", "cursor": "x" * 5000}, "not one this"),
            ("describe_table", {"table_name": "hub", "cursor": cursor}, "continues list_tables"),
            ("list_tables", {"schema_name": "public", "cursor": cursor}, "other arguments"),
            ("list_tables", {"schema_name": "many", "cursor": cursor, "offset": 3}, "not both"),
        ]:
            body = await call_error(client, tool, **arguments)
            assert body["error"]["code"] == "PARAMETER_ERROR"
            assert says in body["error"]["message"], body
            assert says == "not both" or "without cursor" in body["error"]["suggestion"]


async def test_a_cursor_says_when_the_catalog_changed(hard_dsn: str) -> None:
    """A table added before the cursor's position shifts the listing: the next page says so
    (and the one after, cut from the new listing, does not)."""
    async with connect(hard_dsn) as client:
        first = await call(client, "list_tables", schema_name="many")
        await execute(hard_dsn, "CREATE TABLE many.item_0000 (id int)")
        try:
            second = await call(
                client, "list_tables", schema_name="many", cursor=first["next_cursor"]
            )
            assert "changed since the cursor was made" in second["note"]
            assert second["total_count"] == 602
            if "next_cursor" in second:
                third = await call(
                    client, "list_tables", schema_name="many", cursor=second["next_cursor"]
                )
                assert "changed" not in third["note"]
        finally:
            await execute(hard_dsn, "DROP TABLE many.item_0000")


async def test_sample_rows_keep_to_the_budget(hard_dsn: str) -> None:
    """100 rows of 300 long values each: the rows that fit the budget, and a note."""
    await execute(
        hard_dsn,
        "INSERT INTO wide300 (c1, c2) SELECT repeat('v', 200), NULL FROM generate_series(1, 100); "
        "UPDATE wide300 SET c4 = c1, c5 = c1, c6 = c1, c7 = c1, c8 = c1",
    )
    async with connect(hard_dsn) as client:
        result = await client.call_tool("get_sample_rows", {"table_name": "wide300", "limit": 100})
    text = result.content[0].text  # type: ignore[union-attr]
    out = json.loads(text)
    assert len(text.encode()) <= BUDGET and 0 < out["row_count"] < 100
    assert out["note"].endswith(
        f"{out['row_count']} of 100 rows fit the {BUDGET}-byte answer budget: ask for fewer "
        "rows or columns"
    )


async def test_schema_resources_of_600_tables(hard_dsn: str) -> None:
    """The schema's resources: its tables (list_tables' first page, within the budget) and
    its diagram."""
    async with connect(hard_dsn) as client:
        sizes = Sizes()
        for uri in ("pg://schemas/many/tables", "pg://schemas/many/erd"):
            result = await client.read_resource(uri, cache_mode="bypass")
            sizes.add(resource_kind(uri), uri, result.contents[0].text)  # type: ignore[union-attr]
    check(sizes, "hard")


async def test_budget_follows_the_setting_and_describe_pages_say_when_columns_changed(
    hard_dsn: str,
) -> None:
    """With MCP_ANSWER_BUDGET_BYTES at 8,000, a 60-column table takes several pages; a column
    dropped between two of them is said in the next page's note."""
    columns = ", ".join(f"col_{c} text" for c in range(1, 61))
    comments = "; ".join(
        f"COMMENT ON COLUMN shifting.col_{c} IS '{'what this column holds ' * 5}'"
        for c in range(1, 61)
    )
    await execute(hard_dsn, f"CREATE TABLE shifting ({columns}); {comments}")
    try:
        async with connect(hard_dsn, answer_budget_bytes=8000) as client:
            first = await client.call_tool("describe_table", {"table_name": "shifting"})
            text = first.content[0].text  # type: ignore[union-attr]
            out = json.loads(text)
            assert len(text.encode()) <= 8000 and out["next_cursor"]
            shown = len(out["columns"])
            assert out["note"] == (
                f"columns 1-{shown} of 60; {60 - shown} more: call again with cursor=next_cursor"
            )
            await execute(hard_dsn, "ALTER TABLE shifting DROP COLUMN col_1")
            second = await call(
                client, "describe_table", table_name="shifting", cursor=out["next_cursor"]
            )
        assert second["note"].startswith("the columns changed since the cursor was made")
        assert second["columns"][0]["name"] == f"col_{shown + 2}"  # one skipped, and said
    finally:
        await execute(hard_dsn, "DROP TABLE shifting")
