"""The view-replacement race of test_guard_races.py (issue 19, finding 1) on the other reading
paths: the real transports, the built-in prompts, completions and catalog resources, and
custom definitions.

- **Transports.** A spawned server, spoken to over streamable HTTP on 127.0.0.1 and over
  stdio, in session and transaction pool modes, is held to the same verdict as the
  in-process one: `execute_query`, `explain_query` with analyze and `get_sample_rows` on a
  view replaced while the call waits are refused, and the attacker's function never runs
  (no XID taken, no NOTIFY).
- **Built-in prompts and completions cannot be raced**: they read the catalog only.
  `explore-database` and `analyze-table` check that the schema or table exists
  (`names.require_schema` / `require_table`), and schema and table completions list names
  (`names.schema_names` / `table_names`), all with pinned statements over pg_catalog, which
  never open a user relation: no lock on one is taken, no view is expanded, no user
  function is called. `write-query`, `generate-report` and `find-data` read nothing; no
  built-in prompt embeds a resource. The same holds for the catalog resources
  (`pg://schemas`, `.../tables`, `.../tables/{table}`, `pg://system_info`, `pg://settings`,
  `pg://stat/...`): a view's definition is only ever read as text, and not at all while
  another session holds the view (describe_table says it left it out). The test
  proves it: each one answers while the attacker holds ACCESS EXCLUSIVE on the view (no
  wait at all, so no window to race), and nothing of the attacker's runs. The one resource
  that reads rows, `.../sample`, is raced in test_guard_races.py.
- **Custom definitions are not guarded**: their SQL is the operator's and runs without the
  guard's check (docs/custom-definitions.md). A custom SQL tool, resource or completion
  query reading a view whose owner is not trusted therefore runs whatever that owner makes
  the view run, and no race is needed: a replacement committed between two calls does the
  same. What holds is the call's `BEGIN READ ONLY` transaction, always rolled back: the
  attacker's function runs as the server's role, but its NOTIFY is never delivered. The
  tests pin that down, and the warning the start logs for each such definition (silenced
  by trusting the owner with MCP_TRUSTED_ROLES); the remedy is the operator's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from customdefs import serve as serve_custom
from mcp import Client, StdioServerParameters
from mcp_types import PromptReference, ResourceTemplateReference
from mcpclient import call, call_error, fetch, records
from serverproc import EXECUTABLE, clean_env, http_server as serve_http
from test_guard_races import (
    REPLACE_VIEW,
    Bed,
    assert_refused,
    bed,
    held_while,
    race,
    server as server_in_process,
)

from pg_mcp_server.config import APPLICATION_NAME

__all__ = ["bed"]  # the fixture, shared with test_guard_races.py

SQL = "SELECT id, v FROM atk.v ORDER BY id"
SAMPLE = {"schema_name": "atk", "table_name": "v"}


@asynccontextmanager
async def over_http(dsn: str, pool_mode: str, trusted: str) -> AsyncIterator[Client]:
    with serve_http(dsn, PG_POOL_MODE=pool_mode, MCP_TRUSTED_ROLES=trusted) as running:
        async with Client(running.mcp) as client:
            yield client


@asynccontextmanager
async def over_stdio(dsn: str, pool_mode: str, trusted: str) -> AsyncIterator[Client]:
    parameters = StdioServerParameters(
        command=EXECUTABLE,
        args=["--dsn", dsn, "--log-format", "text"],
        env=clean_env(PG_POOL_MODE=pool_mode, MCP_TRUSTED_ROLES=trusted),
    )
    async with Client(parameters) as client:
        yield client


TRANSPORTS = {"http": over_http, "stdio": over_stdio}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("execute_query", {"sql": SQL}),
    ("explain_query", {"sql": SQL, "analyze": True}),
    ("get_sample_rows", SAMPLE),
]


@pytest.mark.parametrize("pool_mode", ["session", "transaction"])
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_a_view_replaced_while_a_spawned_server_waits_is_refused(
    bed: Bed, transport: str, pool_mode: str
) -> None:
    async with TRANSPORTS[transport](bed.reader, pool_mode, bed.owner_role) as client:
        for tool, arguments in CALLS:
            await call(client, tool, **arguments)  # the plan is known: locks go with BEGIN
            body = await race(bed, REPLACE_VIEW, partial(call_error, client, tool, **arguments))
            assert_refused(body)
            # Put the harmless view back for the next tool (the attacker's own session).
            attacker = await asyncpg.connect(bed.changer)
            try:
                await attacker.execute("CREATE OR REPLACE VIEW atk.v AS SELECT id, v FROM atk.t")
            finally:
                await attacker.close()


async def server_lock_waits(bed: Bed) -> int:
    rows = await fetch(
        bed.admin,
        "SELECT count(*) AS n FROM pg_catalog.pg_stat_activity WHERE datname = $1 "
        "AND application_name = $2 AND wait_event_type = 'Lock'",
        bed.database,
        APPLICATION_NAME,
    )
    n: int = rows[0]["n"]
    return n


async def test_catalog_paths_never_wait_on_a_view_being_replaced(bed: Bed) -> None:
    """Every built-in prompt, completion and catalog resource answers while the attacker holds
    the view's ACCESS EXCLUSIVE lock: none opens the view, so there is no window to race (a
    path that did open it would wait here, and the bounded wait below would fail)."""
    analyze = PromptReference(type="ref/prompt", name="analyze-table")
    explore = PromptReference(type="ref/prompt", name="explore-database")
    sample = ResourceTemplateReference(
        type="ref/resource", uri="pg://schemas/{schema}/tables/{table}/sample"
    )
    async with server_in_process(bed.reader, bed.owner_role) as client:
        paths: dict[str, Callable[[], Awaitable[Any]]] = {
            "analyze-table": lambda: client.get_prompt(
                "analyze-table", {"schema": "atk", "table": "v"}
            ),
            "explore-database": lambda: client.get_prompt("explore-database", {"schema": "atk"}),
            **{
                name: partial(client.get_prompt, name, {arg: "atk.v"})
                for name, arg in (
                    ("write-query", "question"),
                    ("generate-report", "topic"),
                    ("find-data", "description"),
                )
            },
            "complete table (prompt)": lambda: client.complete(
                analyze, {"name": "table", "value": "v"}, {"schema": "atk"}
            ),
            "complete schema (prompt)": lambda: client.complete(
                explore, {"name": "schema", "value": "at"}
            ),
            "complete table (template)": lambda: client.complete(
                sample, {"name": "table", "value": ""}, {"schema": "atk"}
            ),
            **{
                uri: partial(client.read_resource, uri, cache_mode="bypass")
                for uri in (
                    "pg://schemas",
                    "pg://schemas/atk/tables",
                    "pg://schemas/atk/tables/v",
                    "pg://system_info",
                    "pg://settings",
                    "pg://stat/activity",
                )
            },
        }
        for attempt in paths.values():  # warm: plans and caches as a later call finds them
            await attempt()

        async def every_path() -> dict[str, Any]:
            # A transaction that ends after the attacker's began puts it in every snapshot
            # taken from now on: no answer kept from the warm-up (see SnapshotCache) is still
            # good, so each path reads the catalog again, as under any load.
            await fetch(bed.admin, "SELECT pg_catalog.txid_current()")
            answers = {}
            for name, attempt in paths.items():
                answers[name] = await asyncio.wait_for(attempt(), 10)
                assert await server_lock_waits(bed) == 0, name
            return answers

        answers = await hold_then_commit(bed, every_path)
        completed = answers["complete table (prompt)"].completion.values
        assert completed == ["v"], completed
        described = json.loads(answers["pg://schemas/atk/tables/v"].contents[0].text)
        # Its definition is not read while the attacker holds the view (that would wait): the
        # answer says why it is left out.
        assert described["table_name"] == "v", described
        assert "view_definition" not in described, described
        assert "another session is changing this view" in described["note"], described


async def hold_then_commit(bed: Bed, attempt: Callable[[], Awaitable[Any]]) -> Any:
    """Run `attempt` to its end while the attacker holds the view's replacement uncommitted,
    then commit; check that nothing of the attacker's ran as the server's role."""
    listener = await asyncpg.connect(bed.admin)
    heard: list[str] = []
    await listener.add_listener("atk", lambda *args: heard.append(args[-1]))
    attacker = await asyncpg.connect(bed.changer)
    try:
        since = await bed.next_xid()
        await attacker.execute("BEGIN")
        await attacker.execute(REPLACE_VIEW)
        try:
            outcome = await attempt()
        finally:
            await attacker.execute("COMMIT")
        await listener.execute("SELECT 1")
        assert bed.reader_role not in heard, "the attacker's function ran: its NOTIFY arrived"
        assert await bed.burnt_xids(since) == [], "the attacker's function took an XID"
        return outcome
    finally:
        await attacker.close()
        await listener.close()


CUSTOM = """
prompts:
  - name: pick_v
    description: Offers the values of atk.v as completions.
    arguments:
      - name: v
        completion: SELECT v FROM atk.v ORDER BY id
    messages:
      - role: user
        content:
          type: text
          text: Look at {{v}}.
tools:
  - name: read_v
    description: Reads the view atk.v, which a role that is not trusted owns.
    type: sql
    sql: SELECT id, v FROM atk.v ORDER BY id
resources:
  - uri: custom://v
    name: The view atk.v
    type: sql
    sql: SELECT id, v FROM atk.v ORDER BY id
"""


async def custom_race(bed: Bed, attempt: Callable[[], Awaitable[Any]]) -> tuple[Any, list[str]]:
    """`attempt` raced against the view's replacement as in test_guard_races.race, but
    custom SQL is not guarded: what it returned and the NOTIFYs heard, for the test to judge."""
    return await held_while(bed, REPLACE_VIEW, attempt)


@pytest.mark.parametrize("kind", ["tool", "resource", "completion"])
async def test_custom_sql_runs_a_replaced_view_only_in_a_rolled_back_read_only_transaction(
    bed: Bed, tmp_path: Path, kind: str
) -> None:
    """Custom SQL is the operator's and is not guarded: the replaced view's function does run
    (its XID is in the answer), as the server's role, but in the call's read-only
    transaction, which is rolled back, so its NOTIFY is never delivered."""
    async with serve_custom(bed.reader, tmp_path, CUSTOM) as client:

        async def attempt() -> list[dict[str, Any]]:
            if kind == "tool":
                return records(await call(client, "read_v"))
            if kind == "completion":
                ref = PromptReference(type="ref/prompt", name="pick_v")
                done = await client.complete(ref, {"name": "v", "value": ""})
                return [{"v": v} for v in done.completion.values]
            result = await client.read_resource("custom://v", cache_mode="bypass")
            text = result.contents[0].text  # type: ignore[union-attr]
            header, *lines = text.splitlines()
            return [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]

        assert [r["v"] for r in await attempt()] == ["a", "b"]
        since = await bed.next_xid()
        rows, heard = await custom_race(bed, attempt)
        ran = [str(r["v"]) for r in rows]
        assert len(ran) == 2 and all(v[0] in "ab" and v[1:].isdigit() for v in ran), ran
        assert heard == [], "a NOTIFY of the attacker's function was delivered"
        burnt = await bed.burnt_xids(since)
        assert [int(v[1:]) for v in ran[:1]] == burnt[:1], (ran, burnt)


async def test_custom_sql_needs_no_race_to_run_a_view_owners_code(
    bed: Bed, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Why a lock would not help custom SQL: a replacement committed between two calls is run
    by the next one just the same. Trust is the operator's choice of what the SQL reads, so
    the start warns, per definition, about what it uses of a role that is not trusted."""
    async with serve_custom(bed.reader, tmp_path, CUSTOM) as client:
        warned = [r.getMessage() for r in caplog.records if "MCP_TRUSTED_ROLES" in r.getMessage()]
        assert len(warned) == 3, warned  # the tool, the resource and the completion
        assert all(" uses relation atk.v, whose owner (neither trusted" in w for w in warned), (
            warned
        )
        assert [r["v"] for r in records(await call(client, "read_v"))] == ["a", "b"]
        attacker = await asyncpg.connect(bed.changer)
        try:
            await attacker.execute(REPLACE_VIEW)
        finally:
            await attacker.close()
        ran = [str(r["v"]) for r in records(await call(client, "read_v"))]
        assert all(v[0] in "ab" and v[1:].isdigit() for v in ran), ran
    caplog.clear()
    async with serve_custom(bed.reader, tmp_path, CUSTOM, trusted_roles=[bed.owner_role]):
        assert not [r for r in caplog.records if "MCP_TRUSTED_ROLES" in r.getMessage()]


async def test_a_guarded_call_after_the_same_replacement_is_still_refused(bed: Bed) -> None:
    """The contrast: execute_query on the replaced view, committed, is refused outright."""
    attacker = await asyncpg.connect(bed.changer)
    try:
        await attacker.execute(REPLACE_VIEW)
    finally:
        await attacker.close()
    async with server_in_process(bed.reader, bed.owner_role) as client:
        with pytest.raises(AssertionError):
            await call(client, "execute_query", sql=SQL)
        assert_refused(await call_error(client, "execute_query", sql=SQL))
