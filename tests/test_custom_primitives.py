"""Custom prompts, resources, resource templates and completions through an MCP client
session: {{argument}} interpolation, text/image/resource content, SQL resources as pgEdge's
TSV (or JSON), static data, templates that bind their URI parameters, completions from SQL."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from customdefs import serve
from mcp.shared.exceptions import MCPError
from mcp_types import (
    EmbeddedResource,
    PromptReference,
    ResourceTemplateReference,
    TextResourceContents,
)
from mcpclient import execute, fetch

DEFS = """
prompts:
  - name: compare-schemas
    description: Compares two database schemas
    arguments:
      - name: schema1
        description: First schema name
        required: true
      - name: schema2
        description: Second schema name
        required: true
      - name: focus
        description: What to look at
    messages:
      - role: user
        content:
          type: text
          text: |
            Compare schemas "{{schema1}}" and "{{schema2}}" ({{focus}}):
            1. Get info for {{schema1}}
      - role: assistant
        content:
          type: text
          text: I will start with {{schema2}}.
  - name: with-attachments
    arguments:
      - name: status
        required: true
        completion: SELECT unnest(enum_range(NULL::order_status))::text
      - name: verbose
        type: boolean
    messages:
      - role: user
        content:
          type: image
          data: iVBORw0KGgo=
          mimeType: image/png
      - role: user
        content:
          type: resource
          uri: custom://orders/{{status}}
      - role: user
        content:
          type: resource
          uri: custom://environment
resources:
  - uri: custom://environment
    name: Environment
    description: Current environment name
    type: static
    data: "production"
  - uri: custom://support-contact
    name: Support Contact
    type: static
    data: ["Support Team", "support@example.com", "+1-555-0123"]
  - uri: custom://maintenance-schedule
    name: Maintenance Schedule
    type: static
    data:
      - ["2025-02-01", "02:00", "04:00", "Security patches"]
      - [2025-02-15, "03:00", "05:00", "Version upgrade"]
  - uri: custom://db-config
    name: Database Configuration
    type: static
    data:
      max_connections: 100
      shared_buffers: "256MB"
  - uri: custom://runbook
    name: Runbook
    mimeType: text/markdown
    type: static
    data: |
      # On call
      Restart nothing.
  - uri: custom://order-stats
    name: Order statistics
    type: sql
    sql: SELECT status, count(*) AS orders FROM orders GROUP BY status ORDER BY status
  - uri: custom://order-stats.json
    name: Order statistics (JSON)
    type: sql
    mimeType: application/json
    sql: |
      SELECT status::text, count(*)::int AS orders FROM orders
      GROUP BY orders.status ORDER BY orders.status
  - uri: custom://orders/{status}
    name: Orders by status
    description: The latest orders in one status
    type: sql
    sql: |
      SELECT id, total_amount FROM orders WHERE status = $1::order_status
      ORDER BY placed_at DESC, id LIMIT 5
    parameters:
      - name: status
        description: An order status
        completion: |
          SELECT s::text FROM unnest(enum_range(NULL::order_status)) s
          WHERE s::text LIKE $1 || '%' ORDER BY 1
  - uri: custom://users/{user}/orders
    name: A user's orders
    type: sql
    sql: SELECT id FROM orders WHERE user_id = $1 ORDER BY id
    parameters:
      - name: user
        completion: SELECT id::text FROM users ORDER BY id
"""


async def read(client: Any, uri: str) -> tuple[str, str, Any]:
    result = await client.read_resource(uri, cache_mode="bypass")
    (content,) = result.contents
    assert str(content.uri) == uri
    return content.mime_type, content.text, content.meta


async def test_custom_prompts_are_listed_and_interpolated(demo_dsn: str, tmp_path: Path) -> None:
    async with serve(demo_dsn, tmp_path, DEFS) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert {"compare-schemas", "with-attachments", "analyze-table"} <= set(prompts)
        listed = prompts["compare-schemas"]
        assert listed.description == "Compares two database schemas"
        assert [(a.name, a.required) for a in listed.arguments or []] == [
            ("schema1", True),
            ("schema2", True),
            ("focus", False),
        ]
        got = await client.get_prompt("compare-schemas", {"schema1": "a", "schema2": "b"})
        assert [m.role for m in got.messages] == ["user", "assistant"]
        texts = [m.content.text for m in got.messages]  # type: ignore[union-attr]
        assert texts == [
            'Compare schemas "a" and "b" ():\n1. Get info for a\n',
            "I will start with b.",
        ]
        focused = await client.get_prompt(
            "compare-schemas", {"schema1": "a", "schema2": "{{schema1}}", "focus": "indexes"}
        )
        # A value is put in once, never read for placeholders again.
        assert focused.messages[1].content.text == "I will start with {{schema1}}."  # type: ignore[union-attr]
        for arguments, problem in (
            ({"schema1": "a"}, "Argument 'schema2' is required"),
            ({"schema1": "a", "schema2": "b", "other": "c"}, "is not an argument of this prompt"),
        ):
            with pytest.raises(MCPError) as caught:
                await client.get_prompt("compare-schemas", arguments)
            assert caught.value.error.code == -32602 and problem in caught.value.error.message


SECTIONS = """
prompts:
  - name: review
    arguments:
      - {name: who, required: true}
      - {name: focus}
    messages:
      - role: user
        content:
          type: text
          text: >-
            Review {{who}}{{#focus}}, focusing on
            {{focus}}{{/focus}}{{^focus}} as a whole{{/focus}}.
"""


async def test_sections_render_an_optional_argument_only_when_given(
    demo_dsn: str, tmp_path: Path
) -> None:
    async with serve(demo_dsn, tmp_path, SECTIONS) as client:
        rendered = []
        for arguments in (
            {"who": "ada"},
            {"who": "ada", "focus": ""},
            {"who": "ada", "focus": "refunds"},
            # a value is never read for tags
            {"who": "{{#focus}}x{{/focus}}", "focus": "{{^focus}}y{{/focus}}"},
        ):
            got = await client.get_prompt("review", arguments)
            rendered.append(got.messages[0].content.text)  # type: ignore[union-attr]
        assert rendered == [
            "Review ada as a whole.",
            "Review ada as a whole.",
            "Review ada, focusing on refunds.",
            "Review {{#focus}}x{{/focus}}, focusing on {{^focus}}y{{/focus}}.",
        ]


async def test_prompt_images_and_embedded_resources(demo_dsn: str, tmp_path: Path) -> None:
    async with serve(demo_dsn, tmp_path, DEFS) as client:
        got = await client.get_prompt("with-attachments", {"status": "paid", "verbose": "true"})
        image, orders, environment = (m.content for m in got.messages)
        assert image.type == "image" and image.mime_type == "image/png"
        assert base64.b64decode(image.data) == b"\x89PNG\r\n\x1a\n"
        assert isinstance(orders, EmbeddedResource) and isinstance(environment, EmbeddedResource)
        assert isinstance(orders.resource, TextResourceContents)
        assert isinstance(environment.resource, TextResourceContents)
        assert str(orders.resource.uri) == "custom://orders/paid"
        mime, text, _ = await read(client, "custom://orders/paid")
        assert orders.resource.text == text and orders.resource.mime_type == mime
        assert environment.resource.text == '"production"'
        with pytest.raises(MCPError) as caught:
            await client.get_prompt("with-attachments", {"status": "paid", "verbose": "maybe"})
        assert "must be true or false" in caught.value.error.message
        with pytest.raises(MCPError) as caught:
            await client.get_prompt("with-attachments", {"status": "lost"})
        assert caught.value.error.code == -32602  # not an order status: the read says so


async def test_static_resources(demo_dsn: str, tmp_path: Path) -> None:
    async with serve(demo_dsn, tmp_path, DEFS) as client:
        listed = {str(r.uri): r for r in (await client.list_resources()).resources}
        assert listed["custom://environment"].name == "Environment"
        assert listed["custom://environment"].description == "Current environment name"
        assert listed["custom://order-stats"].mime_type == "text/tab-separated-values"
        expected = {
            "custom://environment": "production",
            "custom://support-contact": ["Support Team", "support@example.com", "+1-555-0123"],
            "custom://maintenance-schedule": [
                ["2025-02-01", "02:00", "04:00", "Security patches"],
                ["2025-02-15", "03:00", "05:00", "Version upgrade"],  # a YAML date, as text
            ],
            "custom://db-config": {"max_connections": 100, "shared_buffers": "256MB"},
        }
        for uri, value in expected.items():
            mime, text, _ = await read(client, uri)
            assert mime == "application/json" and json.loads(text) == value
        mime, text, _ = await read(client, "custom://runbook")
        assert (mime, text) == ("text/markdown", "# On call\nRestart nothing.\n")


async def test_sql_resources_as_tsv_and_json(demo_dsn: str, tmp_path: Path) -> None:
    async with serve(demo_dsn, tmp_path, DEFS) as client:
        mime, text, meta = await read(client, "custom://order-stats")
        rows = await fetch(
            demo_dsn, "SELECT status, count(*) FROM orders GROUP BY status ORDER BY status"
        )
        assert mime == "text/tab-separated-values" and meta is None
        assert text == "status\torders\n" + "".join(f"{r[0]}\t{r[1]}\n" for r in rows)
        mime, text, _ = await read(client, "custom://order-stats.json")
        assert mime == "application/json"
        assert json.loads(text) == [{"status": r[0], "orders": r[1]} for r in rows]


async def test_tsv_escapes_like_copy(demo_dsn: str, tmp_path: Path) -> None:
    text = r"""
    resources:
      - uri: custom://awkward
        name: Awkward values
        type: sql
        sql: |
          SELECT E'a\tb' AS "tab\there", E'line\nbreak\r' AS text, E'back\\slash' AS bs,
                 NULL::text AS nothing, '' AS empty, true AS yes, '{"k": [1]}'::jsonb AS doc,
                 1.50::numeric AS n
    """
    async with serve(demo_dsn, tmp_path, text) as client:
        _, got, _ = await read(client, "custom://awkward")
    header, row, end = got.split("\n")
    assert end == ""
    assert header.split("\t") == [
        "tab\\\\there",
        "text",
        "bs",
        "nothing",
        "empty",
        "yes",
        "doc",
        "n",
    ]
    assert row.split("\t") == [
        "a\\tb",
        "line\\nbreak\\r",
        "back\\\\slash",
        "\\N",
        "",
        "true",
        '{"k":[1]}',
        "1.5",
    ]


async def test_a_cut_resource_says_so(demo_dsn: str, tmp_path: Path) -> None:
    text = """
    resources:
      - uri: custom://series
        name: Series
        type: sql
        sql: SELECT g AS n FROM generate_series(1, 10) g
    """
    async with serve(demo_dsn, tmp_path, text, max_rows=3) as client:
        _, got, meta = await read(client, "custom://series")
    assert got == "n\n1\n2\n3\n"
    assert meta == {"truncated": True, "note": "cut at 3 rows (MCP_MAX_ROWS)"}


async def test_templates_bind_their_parameters(demo_dsn: str, tmp_path: Path) -> None:
    async with serve(demo_dsn, tmp_path, DEFS) as client:
        templates = {
            t.uri_template: t for t in (await client.list_resource_templates()).resource_templates
        }
        assert templates["custom://orders/{status}"].name == "Orders by status"
        assert "custom://users/{user}/orders" in templates
        _, text, _ = await read(client, "custom://orders/shipped")
        rows = await fetch(
            demo_dsn,
            "SELECT id, total_amount FROM orders WHERE status = 'shipped' "
            "ORDER BY placed_at DESC, id LIMIT 5",
        )
        assert text == "id\ttotal_amount\n" + "".join(f"{r[0]}\t{r[1]}\n" for r in rows)
        _, text, _ = await read(client, "custom://users/1/orders")
        mine = await fetch(demo_dsn, "SELECT id FROM orders WHERE user_id = 1 ORDER BY id")
        assert text == "id\n" + "".join(f"{r[0]}\n" for r in mine)
        for uri in ("custom://orders/lost", "custom://users/one/orders", "custom://nothing/here"):
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri, cache_mode="bypass")
            assert caught.value.error.code == -32602, uri
        injected = "custom://orders/paid'%20OR%20'1'%3D'1"
        with pytest.raises(MCPError):
            await client.read_resource(injected, cache_mode="bypass")


async def test_completions_from_sql(demo_dsn: str, tmp_path: Path) -> None:
    async with serve(demo_dsn, tmp_path, DEFS) as client:
        ref = ResourceTemplateReference(type="ref/resource", uri="custom://orders/{status}")
        got = await client.complete(ref, {"name": "status", "value": "p"})
        assert got.completion.values == ["paid", "pending"]
        assert got.completion.total == 2 and got.completion.has_more is False
        # A query without $1: filtered here, by prefix.
        ref = ResourceTemplateReference(type="ref/resource", uri="custom://users/{user}/orders")
        got = await client.complete(ref, {"name": "user", "value": "1"})
        ids = [r[0] for r in await fetch(demo_dsn, "SELECT id::text FROM users ORDER BY id")]
        assert got.completion.values == [i for i in ids if i.startswith("1")][:100]
        prompt = PromptReference(type="ref/prompt", name="with-attachments")
        got = await client.complete(prompt, {"name": "status", "value": "DEL"})
        assert got.completion.values == ["delivered"]  # filtered here: any case
        got = await client.complete(prompt, {"name": "status", "value": ""})
        assert got.completion.values[:2] == ["pending", "paid"]
        got = await client.complete(prompt, {"name": "verbose", "value": ""})
        assert got.completion.values == []


async def test_resources_only_read(scratch_dsn: str, tmp_path: Path) -> None:
    await execute(scratch_dsn, "CREATE TABLE t (id int); INSERT INTO t VALUES (1);")
    text = """
    resources:
      - uri: custom://purge
        name: Purge
        type: sql
        sql: DELETE FROM t RETURNING id
    """
    async with serve(scratch_dsn, tmp_path, text, allow_write_tools=True) as client:
        with pytest.raises(MCPError) as caught:
            await client.read_resource("custom://purge", cache_mode="bypass")
    data = caught.value.error.data
    assert isinstance(data, dict) and data["error"]["code"] == "WRITE_OPERATION_DENIED"
    assert await fetch(scratch_dsn, "SELECT id FROM t") == [(1,)]
