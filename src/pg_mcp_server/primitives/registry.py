"""The one registry: every tool, resource, resource template and prompt the server serves
(built-in and from the definitions file), and the one way each is listed, found, run,
completed, and turned into a protocol answer or error.

Tools are `ToolDef`s (tools/registry.py: a tool's failure is a result with `isError`, as the
spec asks). Built-in resources and prompts (`primitives/resources.py`,
`primitives/prompts.py`) and the YAML-defined ones are small values of the classes below. A
read or a render gets a `Request` (the lifespan's AppContext and this registry: a resource
that shows a tool's answer runs the tool's definition directly, never through the protocol);
a completion gets the AppContext.

Every failure of a read, a render or a completion becomes a JSON-RPC error here, with one
bounded log line: -32602 (invalid params) when the caller named something that does not exist
or gave a bad argument (an unknown URI, as SEP-2164 standardises, an unknown prompt, a missing
or invalid argument, a table that is not there), -32603 for a database failure or a bug.
`data` carries what was asked for (`uri` or `prompt`, cut to ECHO_CHARS) and the same `error`
object the tools return (PRD code, message, suggestion, context). Nothing the caller sent is
echoed or logged unbounded.

Its size (~460 lines) is the one registry: listing, running, reading, rendering and completing
every kind of definition, and their one error path.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import UriTemplate
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolResult,
    Completion,
    GetPromptResult,
    Prompt as McpPrompt,
    PromptArgument as McpPromptArgument,
    PromptMessage,
    PromptReference,
    ReadResourceResult,
    Resource as McpResource,
    ResourceTemplate as McpResourceTemplate,
    ResourceTemplateReference,
    TextContent,
    TextResourceContents,
    Tool as McpTool,
)

from pg_mcp_server.app import AppContext
from pg_mcp_server.database.catalog import names
from pg_mcp_server.errors import (
    ConnectionLostError,
    InternalError,
    ParameterError,
    PgMcpError,
    closest,
    did_you_mean,
    to_pg_error,
)
from pg_mcp_server.identity.access import shown
from pg_mcp_server.tools.registry import ToolDef, error_result

NAME_ECHO = 100  # characters of an unknown tool's name repeated in the answer

logger = logging.getLogger(__name__)

ECHO_CHARS = 300  # of a URI, prompt or argument name echoed in an error or a log line
MAX_TEXT = 2000  # characters of a free-text argument (a question, a topic)
JSON = "application/json"
# PRD codes that mean "what you asked for is not there / not valid": the caller's mistake.
_CALLER_CODES = {
    "SCHEMA_NOT_FOUND",
    "TABLE_NOT_FOUND",
    "COLUMN_NOT_FOUND",
    "PARAMETER_ERROR",
    "RESULT_EXPIRED",
}

T = TypeVar("T")
Kind = Literal["schema", "table", "text"]


@dataclass(frozen=True)
class Contents:
    """A resource's text with `_meta` for the read (for example, that rows were cut)."""

    text: str
    meta: dict[str, Any] | None = None


Content = str | dict[str, Any] | list[Any] | Contents


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@dataclass(frozen=True)
class Argument:
    """A prompt argument or a URI template parameter. `kind` decides what it may hold and
    how it completes: a schema or table name (PostgreSQL's 63-byte limit, completed from the
    catalog; a table completes within the schema given as `schema_argument`, else the default
    schema), or free text (at most MAX_TEXT characters, not completed)."""

    name: str
    description: str
    kind: Kind = "text"
    required: bool = False
    schema_argument: str = "schema"
    # Values to offer for what was typed so far, instead of the catalog's names (a custom
    # definition's completion query).
    complete: Callable[[AppContext, str], Awaitable[names.Names]] | None = None

    def check(self, value: str) -> str:
        """The value to use; raises PARAMETER_ERROR naming this argument."""
        if self.kind == "text":
            if len(value) > MAX_TEXT:
                raise _bad(self.name, f"is {len(value)} characters long; at most {MAX_TEXT}")
            return value
        if not value or "\0" in value:
            raise _bad(self.name, f"must be a {self.kind} name")
        if len(value.encode()) > names.NAME_BYTES:
            raise _bad(self.name, f"is longer than PostgreSQL's {names.NAME_BYTES}-byte names")
        return value


def _bad(argument: str, problem: str) -> ParameterError:
    return ParameterError(
        f"Argument '{clip(argument, 80)}' {problem}.",
        suggestion="prompts/list and resources/templates/list describe every argument.",
        context={"argument": clip(argument, 80)},
    )


class ToolFailed(Exception):
    """A tool a read ran returned its structured error; it is passed on as is."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message", ""))
        self.error = error


@dataclass(frozen=True)
class Request:
    """What a read or a render gets."""

    app: AppContext
    registry: Registry

    async def tool_text(self, tool: str, arguments: dict[str, Any]) -> str:
        """The tool's answer exactly as `tools/call` gives it (the JSON text of its
        structured output); its error is raised as ToolFailed."""
        result = await self.registry.tools[tool].run(self.app, arguments)
        body = result.structured_content or {}
        if result.is_error:
            raise ToolFailed(body.get("error") or _detail(InternalError(f"{tool} failed.")))
        text = result.content[0]
        assert isinstance(text, TextContent)
        return text.text

    async def read_resource(self, uri: str) -> TextResourceContents:
        """Another resource, exactly as resources/read gives it (a prompt embeds one)."""
        contents = (await self.registry.read(uri, self.app)).contents[0]
        assert isinstance(contents, TextResourceContents), "our resources are text"
        return contents


@dataclass(frozen=True)
class ResourceDef:
    uri: str
    name: str
    title: str
    description: str
    read: Callable[[Request], Awaitable[Content]]
    mime_type: str = JSON
    tool: str | None = None  # the tool whose answer it is: shown with it (identity.access.shown)

    def shown(self, names: frozenset[str]) -> bool:
        return self.uri in names or self.tool in names


@dataclass(frozen=True)
class TemplateDef:
    uri_template: str
    name: str
    title: str
    description: str
    parameters: list[Argument]
    read: Callable[[Request, dict[str, str]], Awaitable[Content]]
    mime_type: str = JSON
    tool: str | None = None  # (as ResourceDef's)
    parsed: UriTemplate = field(init=False, repr=False)

    def shown(self, names: frozenset[str]) -> bool:
        return self.uri_template in names or self.tool in names

    def __post_init__(self) -> None:
        parsed = UriTemplate.parse(self.uri_template)
        declared = {p.name for p in self.parameters}
        if set(parsed.variable_names) != declared:
            raise ValueError(
                f"resource template {self.uri_template!r}: its variables "
                f"{sorted(parsed.variable_names)} are not its parameters {sorted(declared)}"
            )
        object.__setattr__(self, "parsed", parsed)


@dataclass(frozen=True)
class PromptDef:
    name: str
    title: str
    description: str
    arguments: list[Argument]
    render: Callable[[Request, dict[str, str]], Awaitable[list[PromptMessage]]]


class Registry:
    """The definitions the server serves, and the one way to list, run, read, render and
    complete them."""

    def __init__(
        self,
        tools: list[ToolDef],
        resources: list[ResourceDef],
        templates: list[TemplateDef],
        prompts: list[PromptDef],
        default_schema: str,
    ) -> None:
        from pg_mcp_server.primitives.reading import read_resource_tool

        # read_resource serves these resources as a tool, for clients that show the model
        # tools only; it is made here because it reads from this registry
        tools = [*tools, read_resource_tool(self)]
        self.tools: dict[str, ToolDef] = _unique(tools, lambda t: t.name, "tool")
        self.resources = _unique(resources, lambda r: r.uri, "resource URI")
        self.templates = _unique(templates, lambda t: t.uri_template, "resource template")
        self.prompts = _unique(prompts, lambda p: p.name, "prompt")
        self.default_schema = default_schema

    # --- what tools/list, resources/list, resources/templates/list and prompts/list return

    # A caller with a `tools:` list (identity.access.shown) is shown only what it names, and
    # what it is not shown is answered exactly as what does not exist.

    def _tools(self) -> dict[str, ToolDef]:
        names = shown()
        return self.tools if names is None else {n: t for n, t in self.tools.items() if n in names}

    def _resources(self) -> dict[str, ResourceDef]:
        names = shown()
        if names is None:
            return self.resources
        return {u: r for u, r in self.resources.items() if r.shown(names)}

    def _templates(self) -> dict[str, TemplateDef]:
        names = shown()
        if names is None:
            return self.templates
        return {u: t for u, t in self.templates.items() if t.shown(names)}

    def _prompts(self) -> dict[str, PromptDef]:
        names = shown()
        if names is None:
            return self.prompts
        return {n: p for n, p in self.prompts.items() if n in names}

    def tool(self, name: str) -> ToolDef | None:
        """The tool `name`, if the caller may see it."""
        return self._tools().get(name)

    def tool_list(self) -> list[McpTool]:
        return [tool.listed() for tool in self._tools().values()]

    def resource_list(self) -> list[McpResource]:
        return [
            McpResource(
                uri=r.uri,
                name=r.name,
                title=r.title,
                description=r.description,
                mime_type=r.mime_type,
            )
            for r in self._resources().values()
        ]

    def template_list(self) -> list[McpResourceTemplate]:
        return [
            McpResourceTemplate(
                uri_template=t.uri_template,
                name=t.name,
                title=t.title,
                description=t.description,
                mime_type=t.mime_type,
            )
            for t in self._templates().values()
        ]

    def prompt_list(self) -> list[McpPrompt]:
        return [
            McpPrompt(
                name=p.name,
                title=p.title,
                description=p.description,
                arguments=[
                    McpPromptArgument(name=a.name, description=a.description, required=a.required)
                    for a in p.arguments
                ],
            )
            for p in self._prompts().values()
        ]

    # --- tools/call, resources/read, prompts/get, completion/complete

    async def call_tool(
        self, name: str, arguments: dict[str, Any], app: AppContext
    ) -> CallToolResult:
        tools = self._tools()
        tool = tools.get(name)
        if tool is not None:
            return await tool.run(app, arguments)
        echo = name if len(name) <= NAME_ECHO else name[:NAME_ECHO] + "..."
        error = ParameterError(
            f"There is no tool named {echo!r}.",
            suggestion=did_you_mean(
                closest(name[:NAME_ECHO], tools),
                f"Tools: {', '.join(sorted(tools))}.",
            ),
        )
        logger.info("tool %s -> %s", clip(name, NAME_ECHO), error.code)
        return error_result(error, echo, arguments)

    async def read(self, uri: str, app: AppContext) -> ReadResourceResult:
        with _answered("resource", {"uri": clip(uri)}):
            content, mime_type = await self.content(uri, app)
        meta = content.meta if isinstance(content, Contents) else None
        text = TextResourceContents(uri=uri, text=text_of(content), mime_type=mime_type, _meta=meta)
        return ReadResourceResult(contents=[text])

    async def content(self, uri: str, app: AppContext) -> tuple[Content, str]:
        """A resource's content and MIME type, for resources/read and the read_resource
        tool; raises what its read raised (ToolFailed for a tool's structured error)."""
        request = Request(app, self)
        fixed = self._resources().get(uri)
        if fixed is not None:
            return await _again_if_lost(lambda: fixed.read(request)), fixed.mime_type
        template, values = self._match(uri)
        return await _again_if_lost(lambda: template.read(request, values)), template.mime_type

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None, app: AppContext
    ) -> GetPromptResult:
        request = Request(app, self)
        with _answered("prompt", {"prompt": clip(name)}):
            prompts = self._prompts()
            prompt = prompts.get(name)
            if prompt is None:
                raise _not_found("prompt", name, list(prompts), "prompts/list")
            values = _arguments(prompt.arguments, dict(arguments or {}))
            messages = await _again_if_lost(lambda: prompt.render(request, values))
        return GetPromptResult(description=prompt.description, messages=messages)

    def check_prompt_request(self, params: Mapping[str, Any] | None) -> None:
        """Raw prompts/get params, before the SDK validates them: an argument that is not a
        string is refused here, by name (prompt arguments are strings)."""
        name = (params or {}).get("name")
        arguments = (params or {}).get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return  # the SDK's validation answers these
        with _answered("prompt", {"prompt": clip(name)}):
            for key, value in arguments.items():
                if not isinstance(value, str):
                    raise _bad(str(key), f"must be a string, not {type(value).__name__}")

    async def complete(
        self,
        ref: PromptReference | ResourceTemplateReference,
        argument: str,
        value: str,
        context: Mapping[str, str],
        app: AppContext,
    ) -> Completion:
        subject = {"ref": clip(ref.name if isinstance(ref, PromptReference) else ref.uri)}
        with _answered("completion", subject | {"argument": clip(argument)}):
            arg = self._completed_argument(ref, argument)
            if arg.kind == "text" and arg.complete is None:
                return Completion(values=[], total=0, has_more=False)
            schema = context.get(arg.schema_argument) or self.default_schema

            async def lookup() -> names.Names:
                if arg.complete is not None:
                    return await arg.complete(app, value)
                async with app.db.session() as conn:
                    if arg.kind == "schema":
                        return await names.schema_names(conn, value)
                    return await names.table_names(conn, schema, value)

            found = await _again_if_lost(lookup)
            return Completion(values=found.values, total=found.total, has_more=found.has_more)

    def _match(self, uri: str) -> tuple[TemplateDef, dict[str, str]]:
        for template in self._templates().values():
            matched = template.parsed.match(uri)
            if matched is None:
                continue
            values = {k: v for k, v in matched.items() if isinstance(v, str)}
            return template, {p.name: p.check(values.get(p.name, "")) for p in template.parameters}
        raise ParameterError(
            f"Resource not found: {clip(uri)}",
            suggestion="resources/list gives the fixed resources and resources/templates/list "
            "the URI templates (for example pg://schemas/public/tables/orders).",
        )

    def _completed_argument(
        self, ref: PromptReference | ResourceTemplateReference, argument: str
    ) -> Argument:
        declared: list[Argument]
        if isinstance(ref, PromptReference):
            prompts = self._prompts()
            prompt = prompts.get(ref.name)
            if prompt is None:
                raise _not_found("prompt", ref.name, list(prompts), "prompts/list")
            declared = prompt.arguments
        else:
            templates = self._templates()
            template = templates.get(ref.uri)
            if template is None:
                known = list(templates)
                raise _not_found("resource template", ref.uri, known, "resources/templates/list")
            declared = template.parameters
        for arg in declared:
            if arg.name == argument:
                return arg
        raise _bad(argument, f"is not one of {[a.name for a in declared]}")


async def _again_if_lost(work: Callable[[], Awaitable[T]]) -> T:
    """`work()`, run once more if a pooled connection turned out dead (a server restart, a
    terminated backend): it is out of the pool now, and all of this only reads
    (`Database.run` does the same for a tool's call)."""
    try:
        return await work()
    except ConnectionLostError:
        return await work()


def _unique(items: list[Any], key: Callable[[Any], str], what: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in items:
        if key(item) in found:
            raise ValueError(f"two definitions of {what} {key(item)!r}")
        found[key(item)] = item
    return found


def text_of(content: Content) -> str:
    if isinstance(content, Contents):
        return content.text
    if isinstance(content, str):
        return content
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)


def _arguments(declared: list[Argument], given: dict[str, str]) -> dict[str, str]:
    """Checked values of the declared arguments; an empty optional one counts as absent
    (clients send empty form fields)."""
    known = {a.name for a in declared}
    unknown = [k for k in given if k not in known]
    if unknown:
        raise _bad(unknown[0], f"is not an argument of this prompt (it takes {sorted(known)})")
    values: dict[str, str] = {}
    for arg in declared:
        value = given.get(arg.name, "")
        if value.strip():
            values[arg.name] = arg.check(value.strip())
        elif arg.required:
            raise _bad(arg.name, "is required")
    return values


def _not_found(what: str, name: str, known: list[str], listing: str) -> ParameterError:
    similar = closest(clip(name, 80), known)
    return ParameterError(
        f"Unknown {what}: {clip(name, 80)}",
        suggestion=did_you_mean(similar, f"{listing} gives them all: {', '.join(known)}."),
        context={"similar": similar} if similar else None,
    )


@contextmanager
def _answered(what: str, subject: dict[str, str]) -> Iterator[None]:
    """Turn what a read, render or completion raised into its JSON-RPC error (see the module
    docstring); one log line each, a traceback only for a bug."""
    try:
        yield
    except MCPError:
        raise
    except ToolFailed as exc:
        logger.info("%s %s -> %s", what, next(iter(subject.values())), exc.error.get("code"))
        _raise(exc.error, subject)
    except Exception as exc:
        error = to_pg_error(exc, f"The {what} failed unexpectedly.")
        logger.info("%s %s -> %s", what, next(iter(subject.values())), error.code)
        _raise(_detail(error), subject)


def _detail(exc: PgMcpError) -> dict[str, Any]:
    return {
        "code": exc.code,
        "message": exc.message,
        "suggestion": exc.suggestion,
        "context": exc.context,
    }


def _raise(error: dict[str, Any], subject: dict[str, str]) -> None:
    code = INVALID_PARAMS if error.get("code") in _CALLER_CODES else INTERNAL_ERROR
    message = clip(str(error.get("message") or "Request failed"), 2 * ECHO_CHARS)
    raise MCPError(code=code, message=message, data=subject | {"error": error}) from None
