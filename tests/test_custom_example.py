"""examples/custom-definitions.yaml loads against the demo database, and every prompt,
resource, template and tool in it answers."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from mcp_types import ResourceTemplateReference
from mcpclient import call, call_error, connect, fetch

EXAMPLE = Path(__file__).parents[1] / "examples" / "custom-definitions.yaml"


async def test_the_example_file_serves_every_kind(demo_dsn: str) -> None:
    defined = yaml.safe_load(EXAMPLE.read_text())
    async with connect(demo_dsn, custom_definitions=str(EXAMPLE)) as client:
        (email,) = await fetch(
            demo_dsn,
            "SELECT u.email FROM users u JOIN payments p ON p.user_id = u.id ORDER BY u.id LIMIT 1",
        )
        arguments = {
            "review-customer": {"email": email[0]},
            "order-status-briefing": {"status": "paid"},
            "logo": {},
        }
        for prompt in defined["prompts"]:
            got = await client.get_prompt(prompt["name"], arguments[prompt["name"]])
            assert [m.content.type for m in got.messages] == [
                m["content"]["type"] for m in prompt["messages"]
            ]
        for resource in defined["resources"]:
            uri = resource["uri"].replace("{status}", "shipped")
            read = await client.read_resource(uri, cache_mode="bypass")
            text = read.contents[0].text  # type: ignore[union-attr]
            assert text, uri
            if read.contents[0].mime_type == "application/json":
                json.loads(text)
        ref = ResourceTemplateReference(type="ref/resource", uri="custom://orders/{status}")
        offered = await client.complete(ref, {"name": "status", "value": "d"})
        assert offered.completion.values == ["delivered"]

        orders = await call(client, "customer_orders", email=email[0])
        mine = await fetch(
            demo_dsn,
            "SELECT o.id FROM orders o JOIN users u ON u.id = o.user_id WHERE u.email = $1 "
            "ORDER BY o.placed_at DESC, o.id LIMIT 20",
            email[0],
        )
        assert [r["id"] for r in orders["rows"]] == [r[0] for r in mine]
        mix = await call(client, "payment_mix", days=100000)
        assert abs(sum(mix["result"].values()) - 100) < 1
        sales = await call(client, "product_sales", category="office")
        (office,) = await fetch(demo_dsn, "SELECT count(*) FROM products WHERE category = 'office'")
        assert sales["row_count"] == office[0] > 0
        assert all(set(r) == {"sku", "name", "units", "revenue"} for r in sales["rows"])
        value = await call(client, "customer_lifetime_value", email=email[0])
        assert value["result"] > 0
        # The demo server does not allow writes: the write tool is refused, and nothing changes.
        (pending,) = await fetch(demo_dsn, "SELECT id FROM orders WHERE status = 'pending' LIMIT 1")
        body = await call_error(client, "cancel_order", order_id=pending[0])
        assert body["error"]["code"] == "WRITE_OPERATION_DENIED"
        assert "MCP_ALLOW_WRITE_TOOLS=true" in body["error"]["suggestion"]
        (still,) = await fetch(demo_dsn, "SELECT status FROM orders WHERE id = $1", pending[0])
        assert still[0] == "pending"
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {t["name"] for t in defined["tools"]} <= tools
