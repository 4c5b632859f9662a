"""The query corpus (tests/corpus.py) against a real database, through the MCP client.

Every attack is followed by a check that nothing changed: the canary table and its digest,
two sequences, the catalog (relations, functions, schemas, roles and their settings,
databases, extensions, replication slots, prepared transactions, config file entries), locks,
large objects, a file on the server, sessions left idle in a transaction, an idle victim
session and its notifications, and the settings of the server's own pooled connection (the
pool holds one connection, so the probe after an attack runs where the attack ran).

Tests run as a superuser: the worst case for the guard, which is the point.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import math
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from corpus import (
    ATTACKS,
    DBLINK,
    DBLINK_STANDIN,
    EXPLAINS,
    LEGIT,
    PARAMETER_TYPES,
    PWNED,
    SETUP,
    TABLEFUNC,
    TABLEFUNC_STANDIN,
    VICTIM,
    WHERE_CLAUSES,
    Attack,
    Legit,
)
from mcp import Client
from mcpclient import call, call_error, execute, fetch, held_client, records
from pgbed import PgServer

# What a leaked session change on the server's pooled connection would show.
PROBE = """
SELECT current_setting('statement_timeout') AS statement_timeout,
       current_setting('search_path') AS search_path,
       current_user AS current_user_name,
       session_user AS session_user_name,
       current_setting('role') AS role,
       current_setting('application_name') AS application_name,
       current_setting('default_transaction_read_only') AS default_read_only,
       current_setting('transaction_read_only') AS read_only,
       current_setting('TimeZone') AS time_zone,
       (SELECT count(*) FROM pg_listening_channels()) AS listening,
       (SELECT count(*) FROM pg_cursors WHERE is_holdable) AS held_cursors,
       (SELECT count(*) FROM pg_prepared_statements WHERE from_sql) AS prepared,
       (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory')
           AS own_advisory_locks
"""

STATE = f"""
SELECT (SELECT count(*) FROM canary) AS canary_rows,
       (SELECT md5(string_agg(c::text, ',' ORDER BY id)) FROM canary c) AS canary_digest,
       (SELECT md5(string_agg(l::text, ',' ORDER BY id)) FROM ledger l) AS ledger_digest,
       (SELECT last_value FROM corpus_seq) AS seq_last_value,
       (SELECT is_called FROM corpus_seq) AS seq_is_called,
       (SELECT last_value FROM canary_id_seq) AS serial_last_value,
       (SELECT n FROM corpus_mv) AS matview_rows,
       (SELECT count(*) FROM pg_class) AS relations,
       (SELECT count(*) FROM pg_proc) AS functions,
       (SELECT count(*) FROM pg_namespace) AS schemas,
       (SELECT count(*) FROM pg_roles) AS roles,
       (SELECT md5(string_agg(rolname || rolsuper || rolcanlogin, ',' ORDER BY rolname))
          FROM pg_roles) AS roles_digest,
       (SELECT count(*) FROM pg_db_role_setting) AS role_settings,
       (SELECT count(*) FROM pg_database) AS databases,
       (SELECT count(*) FROM pg_extension) AS extensions,
       (SELECT count(*) FROM pg_description) AS comments,
       (SELECT count(*) FROM pg_replication_slots) AS replication_slots,
       (SELECT count(*) FROM pg_prepared_xacts) AS prepared_xacts,
       (SELECT count(*) FROM pg_file_settings) AS config_file_entries,
       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory') AS advisory_locks,
       (SELECT count(*) FROM pg_locks l JOIN pg_class r ON r.oid = l.relation
          WHERE r.relname = 'canary' AND l.pid <> pg_backend_pid()) AS canary_locks,
       (SELECT count(*) FROM pg_largeobject_metadata) AS large_objects,
       (SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND state LIKE 'idle in transaction%')
          AS idle_in_transaction,
       (SELECT count(*) FROM pg_stat_activity WHERE application_name = '{VICTIM}') AS victims,
       pg_stat_file('{PWNED}', true) IS NULL AS no_file_written
"""


@dataclass
class Victim:
    """An idle session, listening on channel "corpus": nothing may end it or notify it."""

    dsn: str
    conn: asyncpg.Connection | None = None
    heard: list[str] = field(default_factory=list)

    def _listen(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.heard.append(payload)

    async def alive(self) -> bool:
        if self.conn is None or self.conn.is_closed():
            return False
        try:
            await self.conn.fetchval("SELECT 1")  # also reads any pending notification
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            return False
        return True

    async def ensure(self) -> None:
        """(Re)connect, so one case that killed the victim does not fail every later one."""
        if not await self.alive():
            self.conn = await asyncpg.connect(
                self.dsn, server_settings={"application_name": VICTIM}
            )
            await self.conn.add_listener("corpus", self._listen)

    async def close(self) -> None:
        if self.conn is not None and not self.conn.is_closed():
            await self.conn.close()


@dataclass
class Corpus:
    dsn: str
    victim: Victim
    client: Client
    probe: dict[str, Any]  # the pooled connection's settings before any attack


async def probe(client: Client) -> dict[str, Any]:
    out = await call(client, "execute_query", sql=PROBE)
    (row,) = records(out)
    return row


async def state(corpus: Corpus) -> dict[str, Any]:
    conn = await asyncpg.connect(corpus.dsn)
    try:
        row = await conn.fetchrow(STATE)
    finally:
        await conn.close()
    assert row is not None
    return {
        **dict(row),
        "victim_alive": await corpus.victim.alive(),
        "victim_notified": list(corpus.victim.heard),
    }


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def corpus_dsn(pg: PgServer) -> AsyncIterator[str]:
    db = await pg.create_database("corpus")
    try:
        await execute(db.dsn, SETUP)
        for extension, standin in ((DBLINK, DBLINK_STANDIN), (TABLEFUNC, TABLEFUNC_STANDIN)):
            try:
                await execute(db.dsn, extension)
            except asyncpg.PostgresError:
                await execute(db.dsn, standin)
        yield db.dsn
    finally:
        await pg.drop_database(db.name)
        # A case that got through may have written PWNED (visible here on a local server).
        with contextlib.suppress(OSError):
            os.remove(PWNED)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def corpus(corpus_dsn: str) -> AsyncIterator[Corpus]:
    victim = Victim(corpus_dsn)
    await victim.ensure()
    try:
        async with held_client(corpus_dsn, pool_size=1) as client:
            yield Corpus(corpus_dsn, victim, client, await probe(client))
    finally:
        await victim.close()


# --- attacks ---------------------------------------------------------------------------


def _diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {
        k: (before.get(k), after.get(k)) for k in before | after if before.get(k) != after.get(k)
    }


@pytest.mark.parametrize("attack", [pytest.param(a, id=a.id) for a in ATTACKS])
async def test_attack_is_refused_and_leaves_no_trace(corpus: Corpus, attack: Attack) -> None:
    await corpus.victim.ensure()
    before = await state(corpus)
    problems: list[str] = []

    if attack.codes is None:
        out = await call(corpus.client, attack.tool, **attack.arguments)
        if attack.rows is not None and records(out) != attack.rows:
            problems.append(f"rows: expected {attack.rows}, got {records(out)}")
    elif attack.may_run:
        result = await corpus.client.call_tool(attack.tool, attack.arguments)
        body = result.structured_content or {}
        if result.is_error and body.get("error", {}).get("code") not in attack.codes:
            problems.append(f"code: expected one of {sorted(attack.codes)}, got {body}")
    else:
        try:
            body = await call_error(corpus.client, attack.tool, **attack.arguments)
        except AssertionError as exc:  # served: still check what it did to the database
            problems.append(f"not refused: {exc}")
        else:
            error = body["error"]
            if error["code"] not in attack.codes:
                problems.append(f"code: expected one of {sorted(attack.codes)}, got {error}")
            said = json.dumps([error["message"], error["context"]])
            if attack.mentions is not None and attack.mentions not in said:
                problems.append(f"the error does not name {attack.mentions!r}: {error}")

    # The server still serves, and its pooled connection carries nothing over.
    settings = await probe(corpus.client)
    if settings != corpus.probe:
        problems.append(f"pooled connection changed: {_diff(corpus.probe, settings)}")
    changed = _diff(before, await state(corpus))
    if changed:
        problems.append(f"database state changed: {changed}")
    assert not problems, "\n".join(problems)


def test_the_corpus_covers_every_attack_family_with_over_100_cases() -> None:
    families = {a.family for a in ATTACKS}
    assert families >= {
        "stacking",
        "transaction",
        "do_block",
        "writable_cte",
        "select_into",
        "locking",
        "copy",
        "side_effect_function",
        "function_position",
        "session_role",
        "comment_quoting",
        "explain_analyze",
        "parameter_abuse",
        "where_clause",
    }
    assert len(ATTACKS) >= 100
    assert len({a.id for a in ATTACKS}) == len(ATTACKS)
    legit = len(LEGIT) + len(PARAMETER_TYPES) + len(EXPLAINS) + len(WHERE_CLAUSES)
    assert legit >= 50


async def test_the_harness_sees_a_change(corpus: Corpus) -> None:
    """The state check is not vacuous: a real change made beside the server shows up."""
    await corpus.victim.ensure()
    before = await state(corpus)
    await execute(corpus.dsn, "SELECT pg_advisory_lock(4240); SELECT setval('corpus_seq', 999)")
    try:
        after = await state(corpus)
    finally:
        await execute(corpus.dsn, "SELECT setval('corpus_seq', 100)")
    assert set(_diff(before, after)) == {"seq_last_value"}  # that session's lock died with it
    conn = await asyncpg.connect(corpus.dsn)
    try:
        await conn.execute("SELECT pg_advisory_lock(4240)")
        assert _diff(before, await state(corpus)) == {"advisory_locks": (0, 1)}
        await conn.execute("NOTIFY corpus, 'x'")
        assert (await state(corpus))["victim_notified"] == [*before["victim_notified"], "x"]
    finally:
        await conn.close()
    corpus.victim.heard.clear()


# --- legitimate reads ------------------------------------------------------------------


def expected_value(value: Any, type_name: str) -> Any:
    """What the PRD says execute_query returns for a driver value (PRD 8.4)."""
    if type_name in ("json", "jsonb") and isinstance(value, str):
        return json.loads(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Decimal):
        if not value.is_finite():
            return "NaN" if value.is_nan() else ("Infinity" if value > 0 else "-Infinity")
        exact = Decimal(repr(float(value))) == value
        return float(value) if exact else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, list):
        element = type_name.removesuffix("[]")
        return [expected_value(v, element) for v in value]
    return str(value)


async def direct(dsn: str, sql: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Column names and rows of `sql` run directly, in the shape execute_query returns."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.set_type_codec(
            "interval", schema="pg_catalog", encoder=str, decoder=str, format="text"
        )
        stmt = await conn.prepare(sql)
        records = await stmt.fetch()
        attributes = stmt.get_attributes()
    finally:
        await conn.close()
    names = [a.name for a in attributes]
    rows = [
        {a.name: expected_value(v, a.type.name) for a, v in zip(attributes, r, strict=True)}
        for r in records
    ]
    return names, rows


def _canonical(rows: list[dict[str, Any]]) -> list[str]:
    # JSON has one kind of number: PostgreSQL writes the double 115 as 115, Python as 115.0.
    def number(v: Any) -> Any:
        return int(v) if isinstance(v, float) and v.is_integer() else v

    return sorted(json.dumps({k: number(v) for k, v in r.items()}, sort_keys=True) for r in rows)


async def check_legit(client: Client, dsn: str, case: Legit) -> None:
    if case.since and int((await fetch(dsn, "SHOW server_version_num"))[0][0]) < case.since:
        body = await call_error(client, "execute_query", sql=case.sql)
        assert body["error"]["code"] == "INVALID_SQL", body
        assert body["error"]["context"]["sqlstate"] == "42601"  # the server's syntax error
        return
    out = await call(client, "execute_query", sql=case.sql)
    names, rows = await direct(dsn, case.sql)
    assert [c["name"] for c in out["columns"]] == names
    assert out["row_count"] == len(rows) == len(out["rows"])
    assert out["has_more"] is False
    if case.exact:
        assert _canonical(records(out)) == _canonical(rows)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in LEGIT if c.db == "corpus"])
async def test_legitimate_read_is_served(corpus: Corpus, case: Legit) -> None:
    await check_legit(corpus.client, corpus.dsn, case)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pagila(datasets: dict[str, str]) -> AsyncIterator[tuple[Client, str]]:
    dsn = datasets["pagila"]
    async with held_client(dsn) as client:
        yield client, dsn


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in LEGIT if c.db == "pagila"])
async def test_legitimate_pagila_read_is_served(pagila: tuple[Client, str], case: Legit) -> None:
    await check_legit(*pagila, case)


@pytest.mark.parametrize(
    ("sql", "value", "expected"),
    [pytest.param(sql, v, e, id=name) for name, sql, v, e in PARAMETER_TYPES],
)
async def test_parameter_type_round_trips(
    corpus: Corpus, sql: str, value: Any, expected: Any
) -> None:
    out = await call(corpus.client, "execute_query", sql=sql, params=[value])
    assert records(out) == [{"v": expected}]


@pytest.mark.parametrize(("arguments"), [pytest.param(a, id=n) for n, a in EXPLAINS])
async def test_legitimate_explain_is_served(corpus: Corpus, arguments: dict[str, Any]) -> None:
    out = await call(corpus.client, "explain_query", **arguments)
    fmt = arguments.get("format", "text")
    assert out["format"] == fmt
    assert isinstance(out["plan"], list | dict) if fmt == "json" else isinstance(out["plan"], str)
    assert out["plan"]
    assert isinstance(out["estimated_cost"], int | float) and out["estimated_cost"] >= 0
    assert isinstance(out["estimated_rows"], int)
    if arguments.get("analyze"):
        assert isinstance(out["actual_time_ms"], int | float)
    else:
        assert out["actual_time_ms"] is None


@pytest.mark.parametrize(("clause", "count"), WHERE_CLAUSES)
async def test_legitimate_where_clause_is_served(corpus: Corpus, clause: str, count: int) -> None:
    out = await call(
        corpus.client, "get_sample_rows", table_name="canary", where_clause=clause, limit=100
    )
    assert out["row_count"] == count
