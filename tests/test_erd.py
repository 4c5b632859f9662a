"""Entity-relationship diagrams (issue 23): the Mermaid text's entities and relationships are
the catalog's, on the four sample databases and on a schema built with the hard cases (a NOT
VALID key with orphans, a two-column key, nullable and one-to-one keys, names Mermaid cannot
take bare, a table outside the schema)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcpclient import call, connect, fetch, held_client, module_database
from pgbed import PgServer

from pg_mcp_server.database.catalog.erd import MAX_ENTITIES

ENTITY = re.compile(r'^    (\w+)(?:\["([^"]*)"\])? \{$')
RELATION = re.compile(r'^    (\w+) ([|}][o|])(--|\.\.)([|o][|]) (\w+) : "([^"]*)"$')

SETUP = """
CREATE SCHEMA other;
CREATE TABLE other.region (code text PRIMARY KEY);
CREATE TABLE customer (id int PRIMARY KEY, name text, region text REFERENCES other.region);
COMMENT ON COLUMN customer.name IS 'Full "legal" name, as on the contract';
CREATE TABLE airport (faa text PRIMARY KEY);
CREATE TABLE weather (origin text, time_hour timestamptz, temp real,
                      PRIMARY KEY (origin, time_hour));
CREATE TABLE flight (id int PRIMARY KEY, dest text NOT NULL, origin text NOT NULL,
                     time_hour timestamptz NOT NULL, customer_id int);
INSERT INTO airport VALUES ('JFK');
INSERT INTO flight VALUES (1, 'JFK', 'JFK', now(), NULL), (2, 'XXX', 'JFK', now(), NULL);
ALTER TABLE flight ADD CONSTRAINT flight_dest_fkey FOREIGN KEY (dest) REFERENCES airport
  NOT VALID;
ALTER TABLE flight ADD CONSTRAINT flight_weather_fkey FOREIGN KEY (origin, time_hour)
  REFERENCES weather NOT VALID;
ALTER TABLE flight ADD CONSTRAINT flight_customer_fkey FOREIGN KEY (customer_id)
  REFERENCES customer;
CREATE TABLE passport (customer_id int NOT NULL UNIQUE REFERENCES customer, number text);
CREATE TABLE "Odd Name" (id int PRIMARY KEY, flight_id int REFERENCES flight);
CREATE TABLE e0 (id int PRIMARY KEY);
"""

CATALOG_KEYS = """
SELECT k.conname, c.relname AS child, cn.nspname AS child_schema,
       p.relname AS parent, pn.nspname AS parent_schema
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace cn ON cn.oid = c.relnamespace
JOIN pg_class p ON p.oid = k.confrelid JOIN pg_namespace pn ON pn.oid = p.relnamespace
WHERE k.contype = 'f' AND cn.nspname = $1 AND NOT c.relispartition
"""

CATALOG_TABLES = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition
"""


@pytest_asyncio.fixture(scope="module")
async def dsn(pg: PgServer) -> AsyncIterator[str]:
    async with module_database(pg, "erd", SETUP) as made:
        yield made


@pytest_asyncio.fixture(scope="module")
async def client(dsn: str) -> AsyncIterator[Client]:
    async with held_client(dsn) as held:
        yield held


async def markdown(client: Client, uri: str) -> str:
    result = await client.read_resource(uri, cache_mode="bypass")
    content = result.contents[0]
    assert content.mime_type == "text/markdown" and hasattr(content, "text")
    text: str = content.text
    return text


def parse(text: str) -> tuple[dict[str, list[str]], list[tuple[str, ...]]]:
    """The diagram's entities (shown name -> attribute lines) and relationships."""
    body = text.split("```mermaid\n", 1)[1].split("\n```", 1)[0].split("\n")
    assert body[0] == "erDiagram"
    entities: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    relations: list[tuple[str, ...]] = []
    current: list[str] | None = None
    for line in body[1:]:
        if current is not None:
            if line == "    }":
                current = None
            else:
                current.append(line.strip())
            continue
        if found := ENTITY.match(line):
            ident, label = found.groups()
            names[ident] = label or ident
            current = entities.setdefault(names[ident], [])
        elif found := RELATION.match(line):
            child, child_end, style, parent_end, parent, label = found.groups()
            relations.append((names[child], child_end, style, parent_end, names[parent], label))
        else:
            assert line.startswith("    %%"), line
    return entities, relations


async def test_the_hard_cases_are_drawn_as_the_catalog_has_them(client: Client) -> None:
    entities, relations = parse(await markdown(client, "pg://schemas/public/erd"))
    assert set(entities) == {"customer", "airport", "weather", "flight", "passport", "Odd Name"} | {
        "e0",
        "other.region",
    }
    drawn = {(r[0], r[4]): (*r[1:4], r[5]) for r in relations}
    # NOT VALID keys dashed and labelled; the two-column key is one relationship, both columns
    assert drawn["flight", "airport"] == ("}o", "..", "||", "dest (NOT VALID)")
    assert drawn["flight", "weather"] == ("}o", "..", "||", "origin, time_hour (NOT VALID)")
    # a nullable key: zero or one parent; a unique key: one to one
    assert drawn["flight", "customer"] == ("}o", "--", "o|", "customer_id")
    assert drawn["passport", "customer"] == ("|o", "--", "||", "customer_id")
    assert drawn["Odd Name", "flight"] == ("}o", "--", "o|", "flight_id")
    assert drawn["customer", "other.region"] == ("}o", "--", "o|", "region")
    assert len(relations) == 6
    assert "text faa PK" in entities["airport"]
    assert "integer customer_id FK" in entities["flight"]
    assert "text origin PK,FK" not in entities["flight"]  # flight's origin is no key of its own
    assert "text origin FK" in entities["flight"]
    assert "text name \"Full 'legal' name, as on the contract\"" in entities["customer"]


async def test_a_table_is_drawn_with_every_table_its_keys_join(client: Client) -> None:
    entities, relations = parse(await markdown(client, "pg://schemas/public/tables/customer/erd"))
    # customer references other.region; flight and passport reference customer
    assert set(entities) == {"customer", "other.region", "flight", "passport"}
    assert {(r[0], r[4]) for r in relations} == {
        ("customer", "other.region"),
        ("flight", "customer"),
        ("passport", "customer"),
    }


async def test_unknown_schema_and_table_are_the_tools_errors(client: Client) -> None:
    for uri, code in (
        ("pg://schemas/publik/erd", "SCHEMA_NOT_FOUND"),
        ("pg://schemas/public/tables/flights/erd", "TABLE_NOT_FOUND"),
    ):
        with pytest.raises(MCPError) as caught:
            await client.read_resource(uri, cache_mode="bypass")
        data: Any = caught.value.error.data
        assert data["error"]["code"] == code and "'" in data["error"]["suggestion"], uri
    through_tool = await call(client, "read_resource", uri="pg://schemas/public/erd")
    assert through_tool["mime_type"] == "text/markdown"
    assert through_tool["contents"].startswith("# Schema public")


@pytest.mark.parametrize("name", ["pagila", "chinook", "northwind", "adventureworks"])
async def test_sample_databases_are_drawn_as_their_catalogs_hold_them(
    datasets: dict[str, str], name: str
) -> None:
    dsn = datasets[name]
    schemas = [
        r["nspname"]
        for r in await fetch(
            dsn,
            "SELECT DISTINCT n.nspname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname !~ '^pg_toast' ORDER BY 1",
        )
    ]
    async with connect(dsn) as client:
        for schema in schemas:
            text = await markdown(client, f"pg://schemas/{schema}/erd")
            entities, relations = parse(text)
            own = {r["relname"] for r in await fetch(dsn, CATALOG_TABLES, schema)}
            keys = await fetch(dsn, CATALOG_KEYS, schema)

            def shown(table: str, in_schema: str, schema: str = schema) -> str:
                return table if in_schema == schema else f"{in_schema}.{table}"

            every = own | {shown(k["parent"], k["parent_schema"]) for k in keys}
            left_out = set()
            if len(every) > MAX_ENTITIES:
                assert "more tables are not drawn" in text
                left_out = every - set(entities)
                assert len(entities) == MAX_ENTITIES
            assert set(entities) | left_out == every, schema
            expected = sorted(
                (k["child"], shown(k["parent"], k["parent_schema"]))
                for k in keys
                if k["child"] not in left_out
                and shown(k["parent"], k["parent_schema"]) not in left_out
            )
            assert sorted((r[0], r[4]) for r in relations) == expected, schema


async def test_find_join_path_draws_the_paths_tables_on_request(client: Client) -> None:
    plain = await call(client, "find_join_path", from_table="Odd Name", to_table="customer")
    assert "diagram" not in plain
    found = await call(
        client, "find_join_path", from_table="Odd Name", to_table="customer", diagram=True
    )
    entities, relations = parse(f"```mermaid\n{found['diagram']}\n```")
    assert set(entities) == {"Odd Name", "flight", "customer"}
    assert {(r[0], r[4], r[5]) for r in relations} == {
        ("Odd Name", "flight", "flight_id"),
        ("flight", "customer", "customer_id"),
    }
    assert found["paths"][0]["steps"] == ["Odd Name_flight_id_fkey", "flight_customer_fkey"]
