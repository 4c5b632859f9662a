"""The client examples (examples/*.json) have each client's shape, and their stdio entries,
pointed at this clone, start a server a real client session can use."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcpclient import call
from serverproc import ROOT, clean_env

EXAMPLES = ROOT / "examples"
PLACEHOLDER = "/path/to/pg-mcp-server"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return data


def test_each_client_gets_its_own_shape() -> None:
    desktop = load("claude_desktop_config.json")["mcpServers"]
    assert all("command" in s and "url" not in s for s in desktop.values())  # stdio only
    code = load("claude_code.mcp.json")["mcpServers"]
    assert {s["type"] for s in code.values()} == {"stdio", "http"}
    cursor = load("cursor.mcp.json")["mcpServers"]
    assert any("url" in s for s in cursor.values()) and any("command" in s for s in cursor.values())
    vscode = load("vscode.mcp.json")
    assert "servers" in vscode and "mcpServers" not in vscode
    inputs = {i["id"] for i in vscode["inputs"]}
    for server in vscode["servers"].values():
        assert server["type"] in ("stdio", "http")
        for value in [*server.get("env", {}).values(), *server.get("headers", {}).values()]:
            for used in value.split("${input:")[1:]:
                assert used.split("}")[0] in inputs
    for name in ("claude_desktop_config.json", "claude_code.mcp.json", "cursor.mcp.json"):
        for server in load(name)["mcpServers"].values():
            if "command" in server:  # never the other project's `uvx pg-mcp-server`
                assert server["args"][:2] == ["--from", PLACEHOLDER] or server["args"][1] == (
                    PLACEHOLDER + "[demo]"
                )


@pytest.mark.parametrize("entry", ["postgres", "postgres-demo"])
async def test_the_claude_desktop_entries_run_from_a_clone(demo_dsn: str, entry: str) -> None:
    server = load("claude_desktop_config.json")["mcpServers"][entry]
    assert server["command"] == "uvx"
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv is needed (uvx is `uv tool run`)"
    args = ["tool", "run", *(a.replace(PLACEHOLDER, str(ROOT)) for a in server["args"])]
    env = clean_env(**{k: demo_dsn for k in server.get("env", {})})
    env.pop("VIRTUAL_ENV", None)  # as from a desktop app, not from inside this project's venv
    params = StdioServerParameters(command=uv, args=args, env=env, cwd=os.path.expanduser("~"))
    async with Client(params) as client:
        listed = await call(client, "list_tables")
        assert "orders" in {t["name"] for t in listed["tables"]}


def test_readme_json_snippets_parse() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```json\n")[1:]]
    assert len(blocks) >= 2
    for block in blocks:
        json.loads(block)


def test_the_readme_names_no_missing_example() -> None:
    readme = (ROOT / "README.md").read_text()
    for path in Path(EXAMPLES).iterdir():
        assert f"examples/{path.name}" in readme, path.name
