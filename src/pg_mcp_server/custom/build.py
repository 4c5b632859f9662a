"""Custom definitions as the same values the built-ins are: `ToolDef`s (results and errors
made in tools/registry.py), and `ResourceDef`, `TemplateDef` and `PromptDef`s, served by the
one `Registry` (primitives/registry.py).

Its size (~500 lines) is one builder per kind of definition (sql and PL tools, resources,
templates, prompts with their completions), each reading the checked file the same way."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from jsonschema import Draft202012Validator
from mcp_types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    PromptMessage,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

from pg_mcp_server.app import AppContext
from pg_mcp_server.config import Settings
from pg_mcp_server.custom import plcode
from pg_mcp_server.custom.check import Checked, Described
from pg_mcp_server.custom.loader import PLACEHOLDER, SECTION
from pg_mcp_server.custom.runner import (
    Column,
    Rows,
    SessionFunctions,
    complete,
    create_function,
    fetch_rows,
    run_do,
    transaction,
    tsv,
)
from pg_mcp_server.custom.specs import (
    JSON,
    ArgumentSpec,
    Definitions,
    PromptSpec,
    ResourceSpec,
    ToolSpec,
)
from pg_mcp_server.database.catalog import Names
from pg_mcp_server.errors import DatabaseConnectionError, InvalidSqlError, ParameterError
from pg_mcp_server.primitives.registry import (
    Argument,
    Content,
    Contents,
    PromptDef,
    Request,
    ResourceDef,
    TemplateDef,
    clip,
)
from pg_mcp_server.tools.registry import READ_ONLY, ToolDef, ok_json

logger = logging.getLogger(__name__)

WRITES = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)


def _nullable(*types: str) -> dict[str, Any]:
    # anyOf rather than a type list: portable schemas (see tools/schemas.py)
    return {"anyOf": [{"type": t} for t in (*types, "null")]}


_SCHEMAS: dict[str, dict[str, Any]] = {
    # The driver decodes transaction ids and LSNs as numbers.
    **{
        name: _nullable("integer")
        for name in ("int2", "int4", "int8", "oid", "xid", "xid8", "cid", "pg_lsn")
    },
    # Geometric values come as lists of coordinates (rows/values.from_driver).
    **{
        name: _nullable("array")
        for name in ("point", "lseg", "box", "line", "circle", "path", "polygon")
    },
    # NaN, the infinities and numerics a float cannot hold exactly come as text
    **{name: _nullable("number", "string") for name in ("float4", "float8", "numeric")},
    "bool": _nullable("boolean"),
    "json": {},
    "jsonb": {},
}
_COLUMNS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "data_type": {"type": "string"}},
        "required": ["name", "data_type"],
    },
}


@dataclass(frozen=True)
class Loaded:
    """One definitions file, ready to serve."""

    path: str | None = None
    tools: list[ToolDef] = field(default_factory=list)
    resources: list[ResourceDef] = field(default_factory=list)
    templates: list[TemplateDef] = field(default_factory=list)
    prompts: list[PromptDef] = field(default_factory=list)
    checked: bool = True  # against the live database (False: it was unreachable)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def column_schema(column: Column) -> dict[str, Any]:
    typ = column.type
    if typ.kind in ("array", "multirange"):
        return _nullable("array")
    if typ.kind == "composite":
        return _nullable("object")
    return _SCHEMAS.get(typ.name, _nullable("string"))


def rows_schema(columns: list[Column] | None) -> dict[str, Any]:
    """execute_query's shape: `columns`, then each row an array of values in their order."""
    row: dict[str, Any] = {"type": "array"}
    if columns is not None:
        row["prefixItems"] = [column_schema(c) for c in columns]
        row["minItems"] = row["maxItems"] = len(columns)
    return {
        "type": "object",
        "properties": {
            "columns": _COLUMNS,
            "rows": {"type": "array", "items": row},
            "row_count": {"type": "integer"},
            "has_more": {"type": "boolean"},
            "note": {"type": "string"},
            "status": {"type": "string"},
        },
        "required": ["columns", "rows", "row_count", "has_more"],
    }


def _result_schema(value: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"result": value}, "required": ["result"]}


def _decoded(rows: Rows) -> Rows:
    """json and jsonb values as JSON rather than their text."""
    for column in rows.columns:
        if column.type.name in ("json", "jsonb"):
            for row in rows.rows:
                if isinstance(row[column.name], str):
                    row[column.name] = json.loads(row[column.name])
    return rows


def _same_shape(rows: Rows, described: Described | None, name: str) -> None:
    """A result must still fit the output schema made at start; a table altered since is
    reported, not sent (clients check results against the schema)."""
    if described is None:
        return
    now = [(c.name, c.type.oid) for c in rows.columns]
    then = [(c.name, c.type.oid) for c in described.columns]
    if now != then:
        raise InvalidSqlError(
            f"The result of {name} has changed since the definitions were loaded "
            f"(now {[c.name for c in rows.columns]}).",
            suggestion="The server's operator reloads the definitions (SIGHUP, or saving the "
            "file) so the tool's output schema follows the database.",
        )


class _FunctionLost(InvalidSqlError):
    """The session no longer had the tool's function: made again, and the call run again."""


def _checked(sql: str, checked: Checked | None) -> str:
    """`sql` as it runs: qualified at the check. Unchecked SQL is never run (its names would
    not resolve on the restricted path, or resolve to what nobody checked)."""
    if checked is None or sql not in checked.sql:
        raise DatabaseConnectionError(
            "The custom definitions have not been checked against the database yet (it "
            "could not be reached); they are checked again every few seconds.",
        )
    return checked.sql[sql]


def _left_out(checked: Checked | None) -> tuple[str, ...]:
    """The open schemas custom SQL runs without (none known before the check)."""
    return checked.left_out if checked is not None else ()


def _pl_path(checked: Checked | None) -> str:
    if checked is None:
        raise DatabaseConnectionError(
            "The custom definitions have not been checked against the database yet (it "
            "could not be reached); they are checked again every few seconds.",
        )
    return checked.pl_path


def _arguments(
    validator: Draft202012Validator, spec: ToolSpec, given: dict[str, Any]
) -> dict[str, Any]:
    """The arguments checked against the input schema, with the schema's defaults filled in."""
    problems = [
        {
            "parameter": ".".join(str(p) for p in e.absolute_path) or "(arguments)",
            "problem": clip(e.message),
        }
        for e in sorted(validator.iter_errors(given), key=lambda e: list(e.absolute_path))
    ]
    properties: dict[str, Any] = spec.input_schema.get("properties", {})
    if "additionalProperties" not in spec.input_schema:
        problems += [
            {"parameter": clip(k, 80), "problem": f"is not an argument of {spec.name}"}
            for k in given
            if k not in properties
        ]
    if problems:
        first = problems[0]
        raise ParameterError(
            f"Invalid value for '{first['parameter']}': {first['problem']}",
            suggestion=f"{spec.name} takes {', '.join(properties) or 'no arguments'}; its "
            "input schema gives each one's type.",
            context={"errors": problems},
        )
    defaults = {k: p["default"] for k, p in properties.items() if "default" in p}
    return defaults | given


def _refused(spec: ToolSpec, path: str) -> str:
    if spec.allow_writes:
        return (
            f"{spec.name} is marked allow_writes in {path}, but the server does not allow "
            "writes: its operator sets MCP_ALLOW_WRITE_TOOLS=true for that."
        )
    return (
        f"{spec.name} runs read-only: to let it write, its operator marks it allow_writes: true "
        f"in {path} and sets MCP_ALLOW_WRITE_TOOLS=true."
    )


def tool(spec: ToolSpec, checked: Checked | None, settings: Settings, path: str) -> ToolDef:
    validator = Draft202012Validator(spec.input_schema)
    write = spec.allow_writes and settings.server.allow_write_tools
    refused = _refused(spec, path)
    described = checked.described.get(f"tool {spec.name}") if checked else None
    columns = described.columns if described else None
    plfunc = spec.type == "pl-func"
    # A read-only tool's function lives on in each session (see runner.py).
    kept = (
        SessionFunctions(spec.statement, checked.pl_path)
        if plfunc and not write and checked is not None
        else None
    )

    async def once(app: AppContext, args: dict[str, Any]) -> Rows | Any:
        session = kept if kept is not None and app.db.pooled is False else None
        async with transaction(
            app.db,
            spec.timeout_ms,
            write=write,
            refused=refused,
            creates=plfunc and session is None,
            before=session.ensure if session is not None else None,
            left_out=_left_out(checked),
        ) as conn:
            if spec.type == "pl-do":
                return await run_do(conn, spec.statement, args, _pl_path(checked))
            path = None
            if spec.type == "sql":
                values = [args.get(p) for p in spec.properties]
                sql, names, status = _checked(spec.sql, checked), spec.properties, write
                path = checked.path(spec.sql) if checked else None
            else:
                if session is None:
                    await create_function(conn, spec.statement, _pl_path(checked), write=write)
                sql = plcode.call_function(spec.function)
                values, names, status = [json.dumps(args)], [], False
            try:
                rows = await fetch_rows(
                    app.reader, conn, sql, values, names, status=status, path=path
                )
            except asyncpg.UndefinedFunctionError:
                if session is None:
                    raise
                session.lost(conn)
                raise _FunctionLost("The tool's function was gone from its session.") from None
            _same_shape(rows, described, spec.name)  # before a write tool commits
            if plfunc and write:  # committed, the function would outlive the call
                await conn.execute(plcode.drop_function(spec.function))
        return rows

    async def run(app: AppContext, arguments: dict[str, Any]) -> CallToolResult:
        """The arguments are checked against the tool's own input schema before any SQL."""
        args = _arguments(validator, spec, arguments)
        try:
            got = await once(app, args)
        except _FunctionLost:
            got = await once(app, args)
        if spec.type == "pl-do":
            return ok_json({"result": got})
        rows = _decoded(got)
        if spec.type == "pl-func" and not spec.returns_set:
            first = rows.rows[0] if rows.rows else {}
            value = next(iter(first.values())) if len(first) == 1 else (first or None)
            return ok_json({"result": value})
        return ok_json(rows.structured())

    if spec.type == "pl-do":
        output = _result_schema({})
    elif spec.type == "pl-func" and not spec.returns_set:
        one = columns is not None and len(columns) == 1
        output = _result_schema(column_schema(columns[0]) if columns and one else {})
    else:
        output = rows_schema(columns)
    return ToolDef(
        name=spec.name,
        title=spec.title or spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=output,
        handler=run,
        annotations=WRITES if write else READ_ONLY,
    )


def _completer(
    sql: str | None, checked: Checked | None
) -> Callable[[AppContext, str], Awaitable[Names]] | None:
    if sql is None:
        return None

    async def lookup(app: AppContext, value: str) -> Names:
        refused = "Completion queries run read-only."
        text = _checked(sql, checked)
        path = checked.path(sql) if checked else None
        async with transaction(
            app.db, None, write=False, refused=refused, left_out=_left_out(checked)
        ) as conn:
            return await complete(conn, text, value, path)

    return lookup


def _argument(spec: ArgumentSpec, checked: Checked | None) -> Argument:
    return Argument(
        spec.name,
        spec.description,
        required=spec.required,
        complete=_completer(spec.completion, checked),
    )


def _reader(
    spec: ResourceSpec, checked: Checked | None
) -> Callable[[Request, list[Any]], Awaitable[Content]]:
    async def read(request: Request, values: list[Any]) -> Content:
        refused = "Resources always run read-only."
        sql = _checked(spec.sql, checked)
        left_out = _left_out(checked)
        async with transaction(
            request.app.db, None, write=False, refused=refused, left_out=left_out
        ) as conn:
            rows = await fetch_rows(
                request.app.reader,
                conn,
                sql,
                values,
                [p.name for p in spec.parameters],
                path=checked.path(spec.sql) if checked else None,
            )
        meta = {"truncated": True, "note": "; ".join(rows.notes)} if rows.has_more else None
        if spec.mime_type == JSON:
            return Contents(_json(_decoded(rows).rows), meta)
        return Contents(tsv(rows), meta)

    return read


def resource(spec: ResourceSpec, checked: Checked | None) -> ResourceDef | TemplateDef:
    title = spec.title or spec.name
    if spec.type == "static":
        text = spec.data if isinstance(spec.data, str) and spec.mime_type != JSON else None
        data = _json(spec.data) if text is None else text

        async def constant(request: Request) -> Content:
            return data

        return ResourceDef(spec.uri, spec.name, title, spec.description, constant, spec.mime_type)
    read = _reader(spec, checked)
    if not spec.is_template:
        return ResourceDef(
            spec.uri,
            spec.name,
            title,
            spec.description,
            lambda request: read(request, []),
            spec.mime_type,
        )
    order = [p.name for p in spec.parameters]
    return TemplateDef(
        spec.uri,
        spec.name,
        title,
        spec.description,
        [_argument(p, checked) for p in spec.parameters],
        lambda request, values: read(request, [values.get(n) for n in order]),
        spec.mime_type,
    )


def _filled(text: str, values: dict[str, str]) -> str:
    """Sections first (kept or dropped by whether their argument was given), then the
    values: a value is never read for tags."""
    while (section := SECTION.search(text)) is not None:
        given = bool(values.get(section.group(2)))
        kept = section.group(3) if given == (section.group(1) == "#") else ""
        text = text[: section.start()] + kept + text[section.end() :]
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), ""), text)


def prompt(spec: PromptSpec, checked: Checked | None) -> PromptDef:
    booleans = [a.name for a in spec.arguments if a.boolean]

    async def render(request: Request, values: dict[str, str]) -> list[PromptMessage]:
        for name in booleans:
            if values.get(name, "false").lower() not in ("true", "false"):
                raise ParameterError(
                    f"Argument '{name}' must be true or false.", context={"argument": name}
                )
        messages = []
        for message in spec.messages:
            content: TextContent | ImageContent | EmbeddedResource
            if message.type == "text":
                content = TextContent(type="text", text=_filled(message.text, values))
            elif message.type == "image":
                content = ImageContent(type="image", data=message.data, mime_type=message.mime_type)
            else:
                content = await _embedded(request, _filled(message.uri, values))
            messages.append(PromptMessage(role=message.role, content=content))
        return messages

    return PromptDef(
        spec.name,
        spec.title or spec.name,
        spec.description,
        [_argument(a, checked) for a in spec.arguments],
        render,
    )


async def _embedded(request: Request, uri: str) -> EmbeddedResource:
    contents = await request.read_resource(uri)
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(uri=uri, text=contents.text, mime_type=contents.mime_type),
    )


def withheld(spec: ToolSpec, settings: Settings) -> str | None:
    """Why a tool cannot run under these settings (so it is not offered), or None."""
    if spec.allow_writes and not settings.server.allow_write_tools:
        return "it is marked allow_writes: true and MCP_ALLOW_WRITE_TOOLS is not true"
    if spec.writes and not spec.allow_writes:
        return (
            f"its sql writes ({spec.writes}) and it is not marked allow_writes: true, so it "
            "would always be refused"
        )
    return None


def build(
    defs: Definitions, checked: Checked | None, settings: Settings, *, quiet: bool = False
) -> Loaded:
    made = [resource(r, checked) for r in defs.resources]
    served = []
    for spec in defs.tools:
        why = withheld(spec, settings)
        if why is None:
            served.append(spec)
        elif not quiet:  # listed, it would be offered to agents only to fail at every call
            logger.warning(
                "custom definitions: %s:%d: %s is not served: %s",
                defs.path,
                spec.where.line,
                spec.where,
                why,
            )
    return Loaded(
        path=defs.path,
        tools=[tool(t, checked, settings, defs.path) for t in served],
        resources=[r for r in made if isinstance(r, ResourceDef)],
        templates=[r for r in made if isinstance(r, TemplateDef)],
        prompts=[prompt(p, checked) for p in defs.prompts],
        checked=checked is not None,
    )
