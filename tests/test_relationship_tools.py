"""Layer 2 against the sample databases: keys equal the catalog's, paths are shortest and run."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

import asyncpg
import pytest
from mcpclient import call, call_error, connect, execute, fetch

DATASETS = ["pagila", "chinook", "northwind", "adventureworks"]

# The test's own reading of pg_constraint: (conrelid's root, confrelid's root, column pairs),
# partitions folded onto their partitioned root as the issue asks.
TRUTH_KEYS = """
SELECT k.conname, k.confupdtype::text AS upd, k.confdeltype::text AS del,
       sn.nspname AS from_schema, src.relname AS from_table,
       dn.nspname AS to_schema, dst.relname AS to_table,
       ARRAY(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY u(n, o)
             JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.o)
           AS from_columns,
       ARRAY(SELECT a.attname FROM unnest(k.confkey) WITH ORDINALITY u(n, o)
             JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n ORDER BY u.o)
           AS to_columns
FROM pg_constraint k
JOIN pg_class src ON src.oid = coalesce(pg_partition_root(k.conrelid), k.conrelid)
JOIN pg_namespace sn ON sn.oid = src.relnamespace
JOIN pg_class dst ON dst.oid = coalesce(pg_partition_root(k.confrelid), k.confrelid)
JOIN pg_namespace dn ON dn.oid = dst.relnamespace
WHERE k.contype = 'f' AND k.conparentid = 0
"""

TRUTH_TABLES = """
SELECT n.nspname AS schema, c.relname AS name
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
"""

Key = tuple[str, str, str, tuple[str, ...], tuple[str, ...]]
RULES = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


def walk_steps(
    keys: list[dict[str, Any]], start: tuple[str, str], steps: list[str]
) -> list[tuple[str, str]]:
    """The tables a path's steps (constraint names) lead through from `start`, each step a
    key of the catalog that joins the table reached so far to the next, either way."""
    tables = [start]
    for name in steps:
        here = tables[-1]
        ends = [
            ((k["from_schema"], k["from_table"]), (k["to_schema"], k["to_table"]))
            for k in keys
            if k["conname"] == name
        ]
        following = [b if a == here else a for a, b in ends if here in (a, b)]
        assert following, (here, name)
        tables.append(following[0])
    return tables


def shortest(keys: list[dict[str, Any]], start: tuple[str, str], goal: tuple[str, str]) -> int:
    """Breadth-first search over the catalog's keys, written independently of the server."""
    graph: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    for k in keys:
        a = (str(k["from_schema"]), str(k["from_table"]))
        b = (str(k["to_schema"]), str(k["to_table"]))
        graph[a].add(b)
        graph[b].add(a)
    dist = {start: 0}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in graph[node]:
            if nxt not in dist:
                dist[nxt] = dist[node] + 1
                queue.append(nxt)
    return dist.get(goal, -1)


@pytest.mark.parametrize("name", DATASETS)
async def test_foreign_keys_of_every_table_match_the_catalog(
    datasets: dict[str, str], name: str
) -> None:
    dsn = datasets[name]
    keys = [dict(r) for r in await fetch(dsn, TRUTH_KEYS)]
    tables = await fetch(dsn, TRUTH_TABLES)

    def signature(k: dict[str, Any]) -> tuple[object, ...]:
        return (
            k["from_schema"],
            k["from_table"],
            tuple(k["from_columns"]),
            k["to_schema"],
            k["to_table"],
            tuple(k["to_columns"]),
            # Left out of the answer when NO ACTION.
            k.get("on_update", RULES.get(k.get("upd", ""))) or "NO ACTION",
            k.get("on_delete", RULES.get(k.get("del", ""))) or "NO ACTION",
        )

    async with connect(dsn) as client:
        for t in tables:
            out = await call(
                client, "get_foreign_keys", table_name=t["name"], schema_name=t["schema"]
            )
            here = (t["schema"], t["name"])
            want_out = {signature(k) for k in keys if (k["from_schema"], k["from_table"]) == here}
            want_in = {signature(k) for k in keys if (k["to_schema"], k["to_table"]) == here}
            assert {signature(k) for k in out["outgoing"]} == want_out, here
            assert {signature(k) for k in out["incoming"]} == want_in, here
            assert out["outgoing_count"] == len(out["outgoing"]) == len(want_out)
            assert out["incoming_count"] == len(out["incoming"]) == len(want_in)


async def test_partition_keys_are_reported_on_the_parent(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        out = await call(client, "get_foreign_keys", table_name="payment")
        targets = sorted(k["to_table"] for k in out["outgoing"])
        assert targets == ["customer", "rental", "staff"]
        assert all(k["from_table"] == "payment" for k in out["outgoing"])
        rental = await call(client, "get_foreign_keys", table_name="rental")
        assert "payment" in {k["from_table"] for k in rental["incoming"]}


async def test_self_reference_is_both_outgoing_and_incoming(datasets: dict[str, str]) -> None:
    async with connect(datasets["chinook"]) as client:
        out = await call(client, "get_foreign_keys", table_name="employee")
    self_refs = [k for k in out["outgoing"] if k["to_table"] == "employee"]
    assert [k["from_columns"] for k in self_refs] == [["reports_to"]]
    assert self_refs[0]["constraint_name"] in {k["constraint_name"] for k in out["incoming"]}


PAIRS: dict[str, list[tuple[str, str, str, str, int | None]]] = {
    "pagila": [
        ("public", "film", "public", "actor", 2),
        ("public", "payment", "public", "film", 3),
        ("public", "film", "public", "category", 2),
        ("public", "rental", "public", "staff", 1),
        ("public", "language", "public", "actor", 3),
        ("public", "customer", "public", "customer", 0),
    ],
    "chinook": [
        ("public", "invoice_line", "public", "artist", 3),
        ("public", "employee", "public", "customer", 1),
        ("public", "employee", "public", "employee", 0),
        ("public", "invoice", "public", "employee", 2),
        ("public", "playlist", "public", "genre", 3),
    ],
    "northwind": [
        ("public", "order_details", "public", "customers", 2),
        ("public", "employees", "public", "territories", 2),
        ("public", "employees", "public", "region", 3),
    ],
    "adventureworks": [
        ("sales", "salesorderdetail", "production", "product", 2),
        ("humanresources", "employee", "person", "person", 1),
        ("purchasing", "purchaseorderdetail", "production", "product", 1),
        ("sales", "salesorderheader", "person", "address", 1),
        ("production", "productreview", "sales", "customer", None),
    ],
}


@pytest.mark.parametrize("name", DATASETS)
async def test_join_paths_are_shortest_and_run(datasets: dict[str, str], name: str) -> None:
    dsn = datasets[name]
    keys = [dict(r) for r in await fetch(dsn, TRUTH_KEYS)]
    async with connect(dsn) as client:
        for fs, ft, ts, tt, expected in PAIRS[name]:
            depth = shortest(keys, (fs, ft), (ts, tt))
            if expected is not None:
                assert depth == expected, (ft, tt)
            if depth < 0 or depth > 6:
                body = await call_error(
                    client,
                    "find_join_path",
                    from_table=ft,
                    to_table=tt,
                    from_schema=fs,
                    to_schema=ts,
                    max_depth=6,
                )
                assert body["error"]["code"] == "PATH_NOT_FOUND"
                continue
            out = await call(
                client,
                "find_join_path",
                from_table=ft,
                to_table=tt,
                from_schema=fs,
                to_schema=ts,
            )
            assert out["paths"][0]["depth"] == depth, (ft, tt)
            assert {p["depth"] for p in out["paths"]} == {depth}  # the shortest only
            assert out["paths_found"] >= len(out["paths"])
            for path in out["paths"]:
                assert len(path["steps"]) == path["depth"]
                assert walk_steps(keys, (fs, ft), path["steps"])[-1] == (ts, tt)
                # The example runs as-is after a select list.
                (row,) = await fetch(dsn, "SELECT count(*) " + path["sql_example"])
                assert row[0] >= 0


async def test_composite_keys_join_on_every_column(datasets: dict[str, str]) -> None:
    dsn = datasets["adventureworks"]
    async with connect(dsn) as client:
        out = await call(
            client,
            "find_join_path",
            from_table="salesorderdetail",
            from_schema="sales",
            to_table="specialofferproduct",
            to_schema="sales",
            max_depth=1,
        )
    (path,) = out["paths"]
    (key,) = await fetch(
        dsn,
        "SELECT conname FROM pg_constraint WHERE conrelid = 'sales.salesorderdetail'::regclass "
        "AND confrelid = 'sales.specialofferproduct'::regclass",
    )
    assert path["steps"] == [key["conname"]]
    sql = path["sql_example"]
    assert sql.count(" AND ") == 1 and " LEFT " not in sql
    assert sql == (
        "FROM sales.salesorderdetail sa JOIN sales.specialofferproduct sp "
        "ON sa.specialofferid = sp.specialofferid AND sa.productid = sp.productid"
    )
    (row,) = await fetch(dsn, "SELECT count(*) " + sql)
    (total,) = await fetch(dsn, "SELECT count(*) FROM sales.salesorderdetail")
    assert row[0] == total[0]  # NOT NULL composite key followed forward: a JOIN keeps every row


async def test_depth_limit_and_same_table(datasets: dict[str, str]) -> None:
    async with connect(datasets["pagila"]) as client:
        body = await call_error(
            client, "find_join_path", from_table="payment", to_table="film", max_depth=2
        )
        assert body["error"]["code"] == "PATH_NOT_FOUND"
        assert body["error"]["context"]["shortest_depth"] == 3
        assert "max_depth=3" in body["error"]["suggestion"]
        same = await call(client, "find_join_path", from_table="film", to_table="film")
        assert same["paths"] == [{"depth": 0, "sql_example": "FROM film f", "steps": []}]
        for bad in (0, 7):
            body = await call_error(
                client, "find_join_path", from_table="film", to_table="actor", max_depth=bad
            )
            assert body["error"]["code"] == "PARAMETER_ERROR"
        body = await call_error(client, "find_join_path", from_table="flim", to_table="actor")
        assert body["error"]["code"] == "TABLE_NOT_FOUND"
        assert "'film'" in body["error"]["suggestion"]
        body = await call_error(client, "find_join_path", from_table="film", to_table="actr")
        assert body["error"]["context"]["requested_table"] == "actr"
        body = await call_error(client, "get_foreign_keys", table_name="films")
        assert body["error"]["code"] == "TABLE_NOT_FOUND"


GRAPH_SCHEMA = """
CREATE TABLE "Customer Accounts" ("AccountID" int PRIMARY KEY, name text);
CREATE TABLE "order" ("id" int PRIMARY KEY, "AccountID" int REFERENCES "Customer Accounts");
CREATE TABLE lonely (id int PRIMARY KEY);
CREATE TABLE also_lonely (id int PRIMARY KEY, lonely_id int);
INSERT INTO "Customer Accounts" VALUES (1, 'a'), (2, 'b');
INSERT INTO "order" VALUES (10, 1), (11, NULL);
"""


async def test_quoting_no_path_and_schema_changes(scratch_dsn: str) -> None:
    await execute(scratch_dsn, GRAPH_SCHEMA)
    async with connect(scratch_dsn) as client:
        out = await call(client, "find_join_path", from_table="order", to_table="Customer Accounts")
        sql = out["paths"][0]["sql_example"]
        assert (
            sql
            == 'FROM "order" o LEFT JOIN "Customer Accounts" ca ON o."AccountID" = ca."AccountID"'
        )
        (row,) = await fetch(scratch_dsn, "SELECT count(*) " + sql)
        assert row[0] == 2  # nullable key: LEFT JOIN keeps the order without an account

        body = await call_error(client, "find_join_path", from_table="lonely", to_table="order")
        assert body["error"]["code"] == "PATH_NOT_FOUND"
        assert body["error"]["context"]["to_related"] == ["public.Customer Accounts"]

        # The cached graph notices new keys and renamed columns in the same session.
        await execute(
            scratch_dsn,
            "ALTER TABLE also_lonely ADD FOREIGN KEY (lonely_id) REFERENCES lonely;"
            'ALTER TABLE "order" RENAME COLUMN "AccountID" TO account_id;',
        )
        out = await call(client, "find_join_path", from_table="also_lonely", to_table="lonely")
        assert out["paths"][0]["depth"] == 1
        out = await call(client, "find_join_path", from_table="order", to_table="Customer Accounts")
        assert 'o.account_id = ca."AccountID"' in out["paths"][0]["sql_example"]


async def test_a_key_committed_after_the_graph_was_cached_is_seen(scratch_dsn: str) -> None:
    """The cache is rechecked only when the database snapshot moves; a DDL transaction that
    was still open when the graph was cached must count as a move once it commits."""
    await execute(
        scratch_dsn,
        "CREATE TABLE hub (id int PRIMARY KEY); CREATE TABLE spoke (id int, hub_id int);",
    )
    ddl = await asyncpg.connect(scratch_dsn)
    try:
        async with connect(scratch_dsn) as client:
            await ddl.execute("BEGIN; ALTER TABLE spoke ADD FOREIGN KEY (hub_id) REFERENCES hub")
            for _ in range(2):  # cached, then served from the cache with the same snapshot
                body = await call_error(
                    client, "find_join_path", from_table="spoke", to_table="hub"
                )
                assert body["error"]["code"] == "PATH_NOT_FOUND"
            await ddl.execute("COMMIT")
            out = await call(client, "find_join_path", from_table="spoke", to_table="hub")
            assert out["paths"][0]["depth"] == 1
            keys = await call(client, "get_foreign_keys", table_name="hub")
            assert [k["from_table"] for k in keys["incoming"]] == ["spoke"]
    finally:
        await ddl.close()


SHADOWS = """
CREATE TABLE hub (id int PRIMARY KEY);
CREATE TABLE spoke (id int PRIMARY KEY, hub_id int NOT NULL REFERENCES hub);
CREATE FUNCTION public.unnest(a int2[]) RETURNS SETOF int2 LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'shadowing unnest(int2[]) was called'; END $$;
CREATE FUNCTION public.array_agg(a oid) RETURNS oid[] LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'shadowing array_agg was called'; END $$;
CREATE FUNCTION public.cat(a bigint, b text) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'shadowing || was called'; END $$;
CREATE OPERATOR public.|| (LEFTARG = bigint, RIGHTARG = text, FUNCTION = public.cat);
"""


async def test_functions_shadowed_on_the_search_path_are_not_called(scratch_dsn: str) -> None:
    """Our catalog SQL names pg_catalog's functions, so a role that can create objects in a
    schema on our search path cannot slip its own code into our statements."""
    await execute(scratch_dsn, SHADOWS)
    async with connect(scratch_dsn) as client:
        described = await call(client, "describe_table", table_name="spoke")
        assert described["columns"][1]["foreign_key"]["referenced_table"] == "hub"
        keys = await call(client, "get_foreign_keys", table_name="hub")
        assert [k["from_table"] for k in keys["incoming"]] == ["spoke"]
        path = await call(client, "find_join_path", from_table="spoke", to_table="hub")
        assert path["paths"][0]["depth"] == 1
        # asyncpg's own type lookup (run for unfamiliar result types) would pick the shadowing
        # array_agg(oid): the guard refuses queries while it is there, naming it.
        body = await call_error(client, "execute_query", sql="SELECT count(*) AS n FROM spoke")
        assert "asyncpg" in body["error"]["message"], body
        assert body["error"]["context"]["culprit"].startswith("function public.array_agg("), body
