"""examples/custom-definitions.yaml loads against the demo database, and every prompt,
resource, template and tool it offers answers with data: nothing is offered that cannot run
under the server's settings."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from mcp import Client
from mcp_types import ResourceTemplateReference
from mcpclient import call, connect, fetch, records

EXAMPLE = Path(__file__).parents[1] / "examples" / "custom-definitions.yaml"
DEFINED = yaml.safe_load(EXAMPLE.read_text())
WRITERS = {t["name"] for t in DEFINED["tools"] if t.get("allow_writes")}
STATUS = "shipped"  # what the template custom://orders/{status} is read with


async def _customer(demo_dsn: str) -> str:
    """A customer with orders and payments."""
    (row,) = await fetch(
        demo_dsn,
        "SELECT u.email FROM users u JOIN payments p ON p.user_id = u.id ORDER BY u.id LIMIT 1",
    )
    return str(row[0])


def _arguments(email: str) -> dict[str, dict[str, Any]]:
    """What each tool the example offers on the demo is called with (every listed tool must
    be here: a tool added to the example is added here too)."""
    return {
        "customer_orders": {"email": email},
        "payment_mix": {},  # its default window, as an agent would call it first
        "product_sales": {"category": "office"},
        "customer_lifetime_value": {"email": email},
    }


def _has_data(answer: dict[str, Any]) -> bool:
    if "rows" in answer:
        return bool(answer["rows"]) and answer["row_count"] == len(answer["rows"])
    return answer.get("result") not in (None, {}, [], "", 0)


def _text_has_data(text: str, mime: str | None) -> bool:
    if mime == "application/json":
        return json.loads(text) not in (None, {}, [], "")
    if mime == "text/tab-separated-values":
        return len(text.splitlines()) > 1  # a header and at least one row
    return bool(text.strip())


async def _tools(client: Client) -> dict[str, Any]:
    return {t.name: t for t in (await client.list_tools()).tools}


async def test_every_tool_offered_answers_with_data(demo_dsn: str) -> None:
    email = await _customer(demo_dsn)
    async with connect(demo_dsn, custom_definitions=str(EXAMPLE)) as client:
        tools = await _tools(client)
        custom = {t["name"] for t in DEFINED["tools"]} & set(tools)
        # Writes are off: a tool that needs them is not offered; every other one is, read-only.
        assert WRITERS and not WRITERS & set(tools)
        assert custom == {t["name"] for t in DEFINED["tools"]} - WRITERS
        arguments = _arguments(email)
        assert custom == set(arguments)
        for name in sorted(custom):
            annotations = tools[name].annotations
            assert annotations and annotations.read_only_hint and not annotations.destructive_hint
            answer = await call(client, name, **arguments[name])
            assert _has_data(answer), (name, answer)

        # What the answers say, against the database's own view of the same data.
        orders = await call(client, "customer_orders", email=email)
        assert all(isinstance(row, list) for row in orders["rows"])  # execute_query's shape
        mine = await fetch(
            demo_dsn,
            "SELECT o.id FROM orders o JOIN users u ON u.id = o.user_id WHERE u.email = $1 "
            "ORDER BY o.placed_at DESC, o.id LIMIT 20",
            email,
        )
        assert [r["id"] for r in records(orders)] == [r[0] for r in mine]
        mix = await call(client, "payment_mix")
        assert abs(sum(mix["result"].values()) - 100) < 1
        (methods,) = await fetch(
            demo_dsn,
            "SELECT count(DISTINCT method) FROM payments "
            "WHERE paid_at >= (SELECT max(paid_at) FROM payments) - interval '365 days'",
        )
        assert len(mix["result"]) == methods[0] > 0
        sales = await call(client, "product_sales", category="office")
        (office,) = await fetch(demo_dsn, "SELECT count(*) FROM products WHERE category = 'office'")
        assert sales["row_count"] == office[0] > 0
        assert [c["name"] for c in sales["columns"]] == ["sku", "name", "units", "revenue"]
        value = await call(client, "customer_lifetime_value", email=email)
        assert value["result"] > 0


async def test_a_write_tool_is_offered_as_one_where_writes_are_allowed(demo_dsn: str) -> None:
    async with connect(demo_dsn, custom_definitions=str(EXAMPLE), allow_write_tools=True) as client:
        tools = await _tools(client)
        for name in WRITERS:  # (not called: the demo database is shared by the tests)
            annotations = tools[name].annotations
            assert annotations and annotations.read_only_hint is False
            assert annotations.destructive_hint is True


async def test_every_resource_and_template_reads_data(demo_dsn: str) -> None:
    async with connect(demo_dsn, custom_definitions=str(EXAMPLE)) as client:
        listed = {r.uri for r in (await client.list_resources()).resources}
        offered = (await client.list_resource_templates()).resource_templates
        templates = {t.uri_template for t in offered}
        for resource in DEFINED["resources"]:
            uri = resource["uri"]
            assert uri in (templates if "{" in uri else listed), uri
            read = await client.read_resource(uri.replace("{status}", STATUS), cache_mode="bypass")
            (content,) = read.contents
            text = content.text  # type: ignore[union-attr]
            assert _text_has_data(text, content.mime_type), (uri, text)
        ref = ResourceTemplateReference(type="ref/resource", uri="custom://orders/{status}")
        completed = await client.complete(ref, {"name": "status", "value": "d"})
        assert completed.completion.values == ["delivered"]


def _prompt_calls(prompt: dict[str, Any], email: str) -> list[dict[str, str]]:
    """The prompt's arguments: the required ones only, and every one."""
    values = {"email": email, "status": STATUS, "focus": "refunds"}
    arguments = prompt.get("arguments", [])
    required = {a["name"]: values[a["name"]] for a in arguments if a.get("required")}
    every = {a["name"]: values[a["name"]] for a in arguments}
    return [required] if required == every else [required, every]


async def test_every_prompt_renders_with_and_without_its_optional_arguments(
    demo_dsn: str,
) -> None:
    email = await _customer(demo_dsn)
    async with connect(demo_dsn, custom_definitions=str(EXAMPLE)) as client:
        listed = {p.name for p in (await client.list_prompts()).prompts}
        assert {p["name"] for p in DEFINED["prompts"]} <= listed
        for prompt in DEFINED["prompts"]:
            for given in _prompt_calls(prompt, email):
                got = await client.get_prompt(prompt["name"], given)
                kinds = [m.content.type for m in got.messages]
                assert kinds == [m["content"]["type"] for m in prompt["messages"]]
                for message in got.messages:
                    content: Any = message.content
                    if content.type == "text":
                        # every placeholder filled, nothing left of an absent argument
                        assert content.text.strip() and "{{" not in content.text
                        assert not re.search(r"\(\s*\)|\"\"", content.text), content.text
                    elif content.type == "resource":
                        resource = content.resource
                        assert _text_has_data(resource.text, resource.mime_type), resource.uri
                    else:
                        assert content.data
        # The optional argument reads as part of the sentence when given, and leaves no
        # trace when it is not.
        without = await client.get_prompt("review-customer", {"email": email})
        first: Any = without.messages[0].content
        assert first.text.startswith(f"Review the customer {email}: call")
        focused = await client.get_prompt("review-customer", {"email": email, "focus": "refunds"})
        first = focused.messages[0].content
        assert first.text.startswith(f"Review the customer {email}, focusing on refunds: call")
