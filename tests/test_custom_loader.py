"""Custom definitions files: every validation rule of pgEdge's page, with its message in
pgEdge's form plus the file and line, and ours (built-in names, no system role, unknown
fields, duplicate keys, timeouts, languages). A refused file stops the server before it
serves anything, with exit code 2."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pg_mcp_server.config import Settings
from pg_mcp_server.custom.loader import duration_ms, load
from pg_mcp_server.custom.specs import DefinitionsError
from pg_mcp_server.server import reserved

SETTINGS = Settings.load(database={"dsn": "postgresql://nobody@127.0.0.1:1/none"})
EXECUTABLE = str(Path(sys.executable).parent / "pg-mcp-server")

PROMPT = "prompts:\n  - name: p\n    messages:\n      - role: user\n        content:\n"
RESOURCE = "resources:\n  - uri: custom://r\n    name: R\n"
TOOL = "tools:\n  - name: t\n"

# (file text, a problem reported as "line: message"; the others of the same definition, if
# any, are reported with it)
CASES = [
    # --- prompts (pgEdge: name, unique name, a message, roles, content types, placeholders,
    # argument names)
    ("prompts:\n  - description: x\n    messages: []\n", "2: prompt 0: name is required"),
    (
        PROMPT + "          type: text\n          text: a\n  - name: p\n    messages: []\n",
        "8: prompt 1 (p): duplicate prompt name: p",
    ),
    (
        "prompts:\n  - name: p\n    messages: []\n",
        "3: prompt 0 (p): at least one message is required",
    ),
    (
        "prompts:\n  - name: p\n    messages:\n      - role: robot\n"
        "        content: {type: text}\n",
        '4: prompt 0 (p): message 0: invalid role "robot" (must be user or assistant)',
    ),
    (
        "prompts:\n  - name: p\n    messages:\n      - role: system\n"
        "        content: {type: text, text: a}\n",
        '4: prompt 0 (p): message 0: invalid role "system": MCP prompts have only user and '
        "assistant messages; put system instructions in a user message",
    ),
    (
        PROMPT + "          type: video\n",
        '6: prompt 0 (p): message 0: invalid content type "video" '
        "(must be text, image, or resource)",
    ),
    (
        PROMPT + "          type: text\n",
        "6: prompt 0 (p): message 0: text content requires 'text' field",
    ),
    (
        PROMPT + "          type: text\n          text: 'Hello {{who}}'\n",
        "7: prompt 0 (p): message 0: template references undefined argument: who",
    ),
    (
        "prompts:\n  - name: p\n    arguments:\n      - description: no name\n"
        "    messages:\n      - role: user\n        content: {type: text, text: a}\n",
        "4: prompt 0 (p): argument name is required",
    ),
    (
        PROMPT + "          type: image\n",
        "6: prompt 0 (p): message 0: image content requires 'data' field",
    ),
    (
        PROMPT + "          type: image\n          data: aGk=\n",
        "6: prompt 0 (p): message 0: image content requires 'mimeType' field",
    ),
    (
        PROMPT + "          type: resource\n",
        "6: prompt 0 (p): message 0: resource content requires 'uri' field",
    ),
    (
        PROMPT + "          type: resource\n          uri: custom://nowhere\n",
        "7: prompt 0 (p): message 0: resource content uri custom://nowhere is not a resource of "
        "this server",
    ),
    (
        "prompts:\n  - name: analyze-table\n    messages:\n"
        "      - role: user\n        content: {type: text, text: a}\n",
        "2: prompt 0 (analyze-table): name analyze-table is a built-in prompt",
    ),
    # --- resources (pgEdge: uri, name, type, unique uri, sql or static and what each needs)
    ("resources:\n  - name: R\n    type: sql\n", "2: resource 0 (R): uri is required"),
    ("resources:\n  - uri: custom://r\n    type: sql\n", "2: resource 0: name is required"),
    (RESOURCE, "2: resource 0 (R): type is required"),
    (
        RESOURCE + "    type: static\n    data: 1\n" + RESOURCE[11:] + "    type: static\n"
        "    data: 2\n",
        "6: resource 1 (R): duplicate resource URI: custom://r",
    ),
    (
        RESOURCE + "    type: view\n",
        '4: resource 0 (R): invalid type "view" (must be sql or static)',
    ),
    (RESOURCE + "    type: sql\n", "2: resource 0 (R): sql type requires 'sql' field"),
    (RESOURCE + "    type: static\n", "2: resource 0 (R): static type requires 'data' field"),
    (
        "resources:\n  - uri: pg://system_info\n    name: S\n    type: static\n    data: 1\n",
        "2: resource 0 (S): uri pg://system_info is a built-in resource",
    ),
    (
        "resources:\n  - uri: pg://schemas/x/tables\n    name: S\n    type: static\n    data: 1\n",
        "2: resource 0 (S): uri pg://schemas/x/tables is a built-in resource",
    ),
    (
        "resources:\n  - uri: custom://o/{status}\n    name: O\n    type: static\n    data: 1\n",
        "2: resource 0 (O): a static resource cannot have {parameters} in its uri",
    ),
    (
        RESOURCE + "    type: sql\n    sql: SELECT 1\n    mimeType: text/html\n",
        "6: resource 0 (R): sql resources are served as text/tab-separated-values (the default) or "
        "application/json, not text/html",
    ),
    (
        RESOURCE + "    type: sql\n    sql: SELEC 1\n",
        '5: resource 0 (R): sql: syntax error at or near "SELEC", at index 0',
    ),
    (
        RESOURCE + "    type: sql\n    sql: SELECT 1; SELECT 2\n",
        "5: resource 0 (R): sql holds 2 statements; one is allowed",
    ),
    # --- tools (pgEdge: name, unique name, type, input_schema, what each type needs,
    # language, returns)
    ("tools:\n  - type: sql\n    sql: SELECT 1\n", "2: tool 0: name is required"),
    (
        TOOL + "    type: sql\n    sql: SELECT 1\n  - name: t\n    type: sql\n    sql: SELECT 2\n",
        "5: tool 1 (t): duplicate tool name: t",
    ),
    (TOOL + "    sql: SELECT 1\n", "2: tool 0 (t): type is required"),
    (
        TOOL + "    type: view\n",
        '3: tool 0 (t): invalid type "view" (must be sql, pl-do, or pl-func)',
    ),
    (
        TOOL + "    type: sql\n    sql: SELECT 1\n    input_schema:\n      type: array\n",
        "6: tool 0 (t): input_schema: type must be 'object', got \"array\"",
    ),
    (
        TOOL + "    type: sql\n    sql: SELECT 1\n    input_schema:\n      type: object\n"
        "      properties:\n        when:\n          description: no type\n",
        '9: tool 0 (t): input_schema: property "when": type is required',
    ),
    (
        TOOL + "    type: sql\n    sql: SELECT 1\n    input_schema:\n      type: object\n"
        "      properties:\n        when:\n          type: date\n",
        '9: tool 0 (t): input_schema: property "when": invalid type "date" (must be string, '
        "integer, number, boolean, array, or object)",
    ),
    (
        TOOL + "    type: sql\n    sql: SELECT 1\n    input_schema:\n      type: object\n"
        "      properties:\n        a:\n          type: array\n          items:\n"
        "            type: tuple\n",
        '11: tool 0 (t): input_schema: property "a": items: invalid type "tuple" (must be string, '
        "integer, number, boolean, array, or object)",
    ),
    (
        TOOL + "    type: sql\n    sql: SELECT 1\n    input_schema:\n      type: object\n"
        "      properties: {}\n      required: [id]\n",
        '8: tool 0 (t): input_schema: required property "id" not found in properties',
    ),
    (TOOL + "    type: sql\n", "2: tool 0 (t): sql type requires 'sql' field"),
    (
        TOOL + "    type: pl-do\n    code: x\n",
        "2: tool 0 (t): pl-do type requires 'language' field",
    ),
    (
        TOOL + "    type: pl-do\n    language: plpgsql\n",
        "2: tool 0 (t): pl-do type requires 'code' field",
    ),
    (
        TOOL + "    type: pl-func\n    code: x\n    returns: int\n",
        "2: tool 0 (t): pl-func type requires 'language' field",
    ),
    (
        TOOL + "    type: pl-func\n    language: plpgsql\n    returns: int\n",
        "2: tool 0 (t): pl-func type requires 'code' field",
    ),
    (
        TOOL + "    type: pl-func\n    language: plpgsql\n    code: BEGIN RETURN 1; END\n",
        "2: tool 0 (t): pl-func type requires 'returns' field",
    ),
    (
        TOOL + "    type: pl-do\n    language: 'plpgsql; DROP'\n    code: x\n",
        '4: tool 0 (t): invalid language "plpgsql; DROP" (must be alphanumeric, for example '
        "plpgsql or plpython3u)",
    ),
    (
        TOOL + "    type: pl-func\n    language: plpgsql\n    code: BEGIN RETURN 1; END\n"
        "    returns: \"int LANGUAGE c AS 'evil' --\"\n",
        "6: tool 0 (t): invalid returns \"int LANGUAGE c AS 'evil' --\" (must be an SQL type such "
        "as jsonb, text or TABLE(name text, n bigint))",
    ),
    (
        TOOL + "    type: pl-func\n    language: plpgsql\n    code: BEGIN RETURN 1; END\n"
        "    returns: int; DROP TABLE users\n",
        '6: tool 0 (t): invalid returns "int; DROP TABLE users" (must be an SQL type such as '
        "jsonb, text or TABLE(name text, n bigint))",
    ),
    # --- ours
    (
        "tools:\n  - name: execute_query\n    type: sql\n    sql: SELECT 1\n",
        "2: tool 0 (execute_query): name execute_query is a built-in tool",
    ),
    (
        "tools:\n  - name: two words\n    type: sql\n    sql: SELECT 1\n",
        '2: tool 0 (two words): invalid name "two words" (letters, digits, _, - and . only, '
        "at most 128)",
    ),
    (
        TOOL + "    type: pl-do\n    language: plpython3u\n    code: mcp_return(1)\n",
        "4: tool 0 (t): language plpython3u is not allowed (MCP_ALLOWED_PL_LANGUAGES is plpgsql)",
    ),
    (
        TOOL + "    type: pl-do\n    language: plpgsql\n    code: BEGIN nope := 1; END;\n",
        '5: tool 0 (t): code: "nope" is not a known variable',
    ),
    (
        TOOL + "    type: sql\n    sql: SELECT 1\n    timeout: 30\n",
        '5: tool 0 (t): invalid timeout "30" (use a duration such as 30s, 1m or 500ms)',
    ),
    (
        TOOL + "    type: sql\n    sql: SELECT 1\n    allow_writes: yes please\n",
        "5: tool 0 (t): allow_writes must be true or false",
    ),
    (
        TOOL + "    type: sql\n    desciption: typo\n    sql: SELECT 1\n",
        "4: tool 0 (t): unknown field 'desciption' (expected one of allow_writes, code, "
        "description, input_schema, language, name, returns, sql, timeout, title, type)",
    ),
    (TOOL + "    type: sql\n    type: pl-do\n", "4: duplicate key 'type'"),
    ("tool:\n  - name: t\n", "1: unknown field 'tool' (expected one of prompts, resources, tools)"),
]


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "defs.yaml"
    path.write_text(text)
    with pytest.raises(DefinitionsError) as caught:
        load(str(path), SETTINGS.server, reserved(SETTINGS))
    return [p.removeprefix(f"{path}:") for p in caught.value.problems]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_each_rule_is_reported_with_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in problems(tmp_path, text)


def test_a_yaml_syntax_error_has_its_line(tmp_path: Path) -> None:
    # (libyaml and PyYAML's own parser word it differently)
    (problem,) = problems(tmp_path, "tools:\n  - name: t\n    type: [unclosed\n")
    assert problem.startswith("4: invalid YAML: ") and "','" in problem


def test_every_problem_of_every_definition_is_reported_at_once(tmp_path: Path) -> None:
    text = textwrap.dedent("""\
        tools:
          - name: a
          - name: b
            type: sql
            sql: SELECT 1
          - name: c
            type: pl-do
            timeout: soon
            input_schema:
              type: object
              properties:
                n: {type: date}
              required: [m]
        resources:
          - uri: custom://x
        prompts:
          - name: p
            descripton: typo
            arguments:
              - name: who
            messages:
              - role: robot
                content: {type: text, text: "Hi {{whom}} {{#who}}again"}
    """)
    assert problems(tmp_path, text) == [
        "2: tool 0 (a): type is required",
        "6: tool 2 (c): pl-do type requires 'language' field",
        "6: tool 2 (c): pl-do type requires 'code' field",
        '8: tool 2 (c): invalid timeout "soon" (use a duration such as 30s, 1m or 500ms)',
        '12: tool 2 (c): input_schema: property "n": invalid type "date" (must be string, '
        "integer, number, boolean, array, or object)",
        '13: tool 2 (c): input_schema: required property "m" not found in properties',
        "15: resource 0: name is required",
        "15: resource 0: type is required",
        "18: prompt 0 (p): unknown field 'descripton' (expected one of arguments, description, "
        "messages, name, title)",
        '22: prompt 0 (p): message 0: invalid role "robot" (must be user or assistant)',
        "23: prompt 0 (p): message 0: template references undefined argument: whom",
        "23: prompt 0 (p): message 0: section {{#who}} is not closed ({{#name}}...{{/name}})",
    ]


def test_the_file_must_be_yaml(tmp_path: Path) -> None:
    path = tmp_path / "defs.json"
    path.write_text("{}")
    with pytest.raises(DefinitionsError, match=r"must end in \.yaml or \.yml"):
        load(str(path), SETTINGS.server, reserved(SETTINGS))


def test_all_sections_are_optional(tmp_path: Path) -> None:
    for text in ("", "prompts: []\n", "tools:\n"):
        path = tmp_path / "defs.yml"
        path.write_text(text)
        defs = load(str(path), SETTINGS.server, reserved(SETTINGS))
        assert (defs.prompts, defs.resources, defs.tools) == ([], [], [])


def test_durations() -> None:
    assert [duration_ms(t) for t in ("30s", "1m30s", "500ms", "1.5h", "2s500ms")] == [
        30000,
        90000,
        500,
        5400000,
        2500,
    ]
    for bad in ("", "30", "30 s", "-1s", "1d", "s", "0.1us"):
        with pytest.raises(ValueError):
            duration_ms(bad)


def test_a_bad_file_stops_the_server_with_exit_code_2(tmp_path: Path, demo_dsn: str) -> None:
    path = tmp_path / "defs.yaml"
    path.write_text("tools:\n  - name: t\n")
    started = subprocess.run(
        [EXECUTABLE, "--dsn", demo_dsn, "--custom-definitions", str(path)],
        input=b"",
        capture_output=True,
        timeout=60,
    )
    assert started.returncode == 2
    assert started.stdout == b""  # nothing served
    assert f"{path}:2: tool 0 (t): type is required" in started.stderr.decode()


def test_a_start_reports_every_problem_of_the_file_at_once(tmp_path: Path, demo_dsn: str) -> None:
    """The file's own problems and what the database says of its SQL, in one error."""
    path = tmp_path / "defs.yaml"
    path.write_text(
        textwrap.dedent("""\
            tools:
              - name: a
              - name: typo
                type: sql
                sql: SELECT * FROM orderz
              - name: c
                type: sql
                sql: SELECT 1
                timeout: soon
            resources:
              - uri: custom://r
                name: R
                type: sql
                sql: SELECT nope FROM users
            prompts:
              - name: p
                messages: []
        """)
    )
    started = subprocess.run(
        [EXECUTABLE, "--dsn", demo_dsn, "--custom-definitions", str(path)],
        input=b"",
        capture_output=True,
        timeout=60,
    )
    assert started.returncode == 2
    assert started.stdout == b""  # nothing served
    reported = [
        line.removeprefix(f"{path}:")
        for line in started.stderr.decode().splitlines()
        if line.startswith(f"{path}:")
    ]
    assert reported == [
        "2: tool 0 (a): type is required",
        '3: tool 1 (typo): sql: relation "orderz" does not exist (line 1 of the sql)',
        '9: tool 2 (c): invalid timeout "soon" (use a duration such as 30s, 1m or 500ms)',
        '11: resource 0 (R): sql: column "nope" does not exist (line 1 of the sql)',
        "17: prompt 0 (p): at least one message is required",
    ]
