"""pgEdge's own examples (tests/pgedge/, copied from its "Creating Custom Definitions" page)
load and run unchanged: the PL/pgSQL and SQL ones everywhere, those in other languages where
the test server has the language (skipped, saying so, where it does not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from customdefs import write
from mcpclient import call, connect, execute, fetch, records

from pg_mcp_server.config import Settings
from pg_mcp_server.custom.specs import DefinitionsError
from pg_mcp_server.server import check_definitions

EXAMPLES = Path(__file__).parent / "pgedge"
AWKWARD = "välue ✓ 'quoted' \"double\" $$ \\ end"


async def test_the_pgedge_examples_load_and_run(demo_dsn: str) -> None:
    async with connect(demo_dsn, custom_definitions=str(EXAMPLES / "examples.yaml")) as client:
        stats = await call(client, "get_database_stats")
        (db,) = await fetch(demo_dsn, "SELECT current_database()")
        assert [r["database_name"] for r in records(stats)] == [db[0]]
        assert {c["name"] for c in stats["columns"]} >= {"active_connections", "database_size"}
        assert records(await call(client, "get_database_stats", database_name="nope")) == []

        bloat = await call(client, "analyze_table_bloat", schema_name="public")
        tables = await fetch(
            demo_dsn, "SELECT relname FROM pg_stat_user_tables WHERE schemaname = 'public'"
        )
        assert {t["table"] for t in bloat["result"]} == {r[0] for r in tables}
        assert all(
            set(t) == {"schema", "table", "dead_tuples", "live_tuples"} for t in bloat["result"]
        )

        counts = await call(client, "get_table_row_counts")
        (orders,) = await fetch(demo_dsn, "SELECT count(*) FROM orders")
        row = {"schema_name": "public", "table_name": "orders", "row_count": orders[0]}
        assert row in records(counts)
        assert await call(client, "plpgsql_do_args", key_name=AWKWARD) == {
            "result": {"value": AWKWARD}
        }
        assert await call(client, "plpgsql_func_args", key_name=AWKWARD) == {"result": AWKWARD}

        prompt = await client.get_prompt("analyze-table-pgedge", {"table_name": "users"})
        text = prompt.messages[0].content.text  # type: ignore[union-attr]
        assert 'get_schema_info(table_name="users")' in text and "FROM users LIMIT 5" in text
        assert (await client.get_prompt("security-audit")).description == (
            "Performs a security audit of the database"
        )
        compared = await client.get_prompt("compare-schemas", {"schema1": "a", "schema2": "b"})
        assert compared.messages[0].content.text.startswith('Compare schemas "a" and "b":')  # type: ignore[union-attr]

        users = await client.read_resource("custom://active-users", cache_mode="bypass")
        header, *rows = users.contents[0].text.splitlines()  # type: ignore[union-attr]
        assert header == "username\tis_superuser\tvalid_until"
        names = await fetch(demo_dsn, "SELECT usename FROM pg_user ORDER BY usename")
        assert [r.split("\t")[0] for r in rows] == [r[0] for r in names]
        config = await client.read_resource("custom://db-config", cache_mode="bypass")
        assert json.loads(config.contents[0].text)["max_connections"] == 100  # type: ignore[union-attr]


async def test_pgedge_analyze_table_prompt_meets_the_builtin(demo_dsn: str, tmp_path: Path) -> None:
    text = (EXAMPLES / "examples.yaml").read_text().replace("analyze-table-pgedge", "analyze-table")
    path = write(tmp_path, text)
    settings = Settings.load(database={"dsn": demo_dsn}, server={"custom_definitions": str(path)})
    refused = r"prompt 0 \(analyze-table\): name analyze-table is a built-in prompt"
    with pytest.raises(DefinitionsError, match=refused):
        await check_definitions(settings)


@pytest.mark.parametrize("language", ["plpython3u", "plv8", "plperlu", "plperl"])
async def test_pgedge_language_conventions(scratch_dsn: str, language: str) -> None:
    available = await fetch(
        scratch_dsn, "SELECT 1 FROM pg_available_extensions WHERE name = $1", language
    )
    if not available:
        pytest.skip(f"{language} is not available on the test PostgreSQL server")
    await execute(
        scratch_dsn,
        f"CREATE EXTENSION {language}; CREATE TABLE measures (v numeric);"
        "INSERT INTO measures SELECT g / 4.0 FROM generate_series(1, 10) g;",
    )
    async with connect(
        scratch_dsn,
        custom_definitions=str(EXAMPLES / f"{language}.yaml"),
        allowed_pl_languages=language,
    ) as client:
        assert await call(client, "lang_do", key_name=AWKWARD) == {"result": {"result": AWKWARD}}
        # Trusted PL/Perl returns the value itself (text); the others return it as JSON.
        expected = AWKWARD if language == "plperl" else {"result": AWKWARD}
        assert await call(client, "lang_func", key_name=AWKWARD) == {"result": expected}
        if language == "plpython3u":
            stats = await call(
                client, "calculate_column_stats", table_name="measures", column_name="v"
            )
            assert stats["result"] == {
                "table": "measures",
                "column": "v",
                "count": 10,
                "mean": 1.375,
                "min": 0.25,
                "max": 2.5,
            }
