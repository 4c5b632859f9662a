"""build_server(settings) -> MCPServer: the only module that registers with the SDK.

`initialize` is answered before the tools, resources and prompts are made: they need the
whole database layer (SQLAlchemy, pglast, the models), which is most of the start-up's CPU.
They are made at the first request that needs them (a client's `tools/list`, sent right after
`initialize`), or at once with `PgMcpServer.load()` (the HTTP gateway, before it serves).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from functools import cached_property
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ToolsListChanged,
)
from mcp_types import (
    CallToolResult,
    Completion,
    CompletionArgument,
    CompletionContext,
    GetPromptResult,
    InputRequiredResult,
    Prompt,
    PromptReference,
    Resource,
    ResourceTemplate,
    ResourceTemplateReference,
)
from mcp_types import Tool as McpTool
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import AnyUrl

from pg_mcp_server.app import AppContext, app_context
from pg_mcp_server.config import Settings, package_version
from pg_mcp_server.middleware import bounded_errors, instructions_with_audit, unknown_tool

if TYPE_CHECKING:
    from pg_mcp_server.custom.build import Loaded
    from pg_mcp_server.custom.reload import CustomDefinitions
    from pg_mcp_server.custom.specs import Reserved
    from pg_mcp_server.database.pool.engine import Database
    from pg_mcp_server.primitives.registry import Primitives, Request
    from pg_mcp_server.tools.registry import PgTool

logger = logging.getLogger(__name__)

NOTIFY_S = 5.0  # for telling one client that lists changed

INSTRUCTIONS = """This server gives read-only access to one PostgreSQL database. Work in layers:
1. Discover: list_schemas -> list_tables(schema_name, include_columns=true for a schema map of
   every column, type, key and reference in one call) -> describe_table for the full detail;
   search_tables("customer email") finds where something lives in a large database;
   get_sample_rows shows real values. empty=true means a table has no rows for certain.
2. Relate: get_foreign_keys(table) shows a table's keys both ways; find_join_path(a, b) gives
   the shortest foreign-key route with a JOIN clause that runs as-is, and warns when a join
   multiplies rows (sums over the first table would count rows more than once).
3. Query: execute_query runs one read-only SELECT with $1, $2 parameters (pass values in
   `params`, never inline them); explain_query shows the plan and warns about slow spots.
   Anything that writes, locks or changes settings is refused.
Answers are compact JSON: keys at their default (null, false, 0, empty) are left out.
Names are case-sensitive as stored. Errors come back as JSON with a code and a suggestion
that carries the fix (the closest table, column or function names): follow it.
Clients may also attach resources (pg://system_info, pg://settings, pg://stat/activity,
pg://schemas/{schema}/tables/{table}) and offer prompts that follow these steps."""


def all_tools(settings: Settings) -> list[PgTool]:
    from pg_mcp_server.tools.query_tools import query_tools
    from pg_mcp_server.tools.relationship_tools import relationship_tools
    from pg_mcp_server.tools.schema_tools import schema_tools

    schema = settings.database.default_schema
    return [*schema_tools(schema), *relationship_tools(schema), *query_tools()]


def all_primitives(settings: Settings, custom: Loaded | None = None) -> Primitives:
    from pg_mcp_server.custom.build import Loaded
    from pg_mcp_server.primitives.prompts import builtin_prompts
    from pg_mcp_server.primitives.registry import Primitives
    from pg_mcp_server.primitives.resources import builtin_resources, builtin_templates

    custom = custom or Loaded()
    return Primitives(
        [*builtin_resources(), *custom.resources],
        [*builtin_templates(), *custom.templates],
        [*builtin_prompts(), *custom.prompts],
        default_schema=settings.database.default_schema,
    )


def reserved(settings: Settings) -> Reserved:
    """The built-in names and URIs custom definitions may not take."""
    from pg_mcp_server.custom.specs import Reserved

    builtin = all_primitives(settings)
    return Reserved(
        tools=frozenset(t.name for t in all_tools(settings)),
        prompts=frozenset(builtin.prompts),
        resources=frozenset(builtin.resources),
        templates=frozenset(builtin.templates),
    )


async def check_definitions(settings: Settings) -> None:
    """Before serving: DefinitionsError when the custom definitions file cannot be served."""
    if settings.server.custom_definitions is not None:
        from pg_mcp_server.custom.reload import check_file

        await check_file(settings, reserved(settings))


# The lifespan's AppContext for the completion/complete being served: the SDK calls that
# handler without a request context. Set by PgMcpServer._middleware.
_serving: ContextVar[AppContext] = ContextVar("serving")


def listed(tool: PgTool) -> McpTool:
    """A tool as tools/list shows it (as the SDK lists the tools it holds)."""
    return McpTool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=tool.parameters,
        output_schema=tool.output_schema,
        annotations=tool.annotations,
        icons=tool.icons,
        _meta=tool.meta,
    )


def _lists(loaded: Loaded) -> dict[str, list[Any]]:
    """What custom definitions add to tools/list, resources/list (and templates) and
    prompts/list, to compare before and after a reload."""
    from pg_mcp_server.primitives.registry import Primitives

    only = Primitives(loaded.resources, loaded.templates, loaded.prompts, "")
    return {
        "tools": [listed(t) for t in loaded.tools.values()],
        "resources": [*only.resource_list(), *only.template_list()],
        "prompts": only.prompt_list(),
    }


class PgMcpServer(MCPServer[AppContext]):
    """The SDK's server, serving our tools, and resources, templates, prompts and completions
    from one `Primitives` (built-in now, YAML-defined later), all made on first use. The
    SDK's own managers are not used: they take their tools when the server is made (so
    before `initialize`), a static resource gets no request context there (so no database),
    and an unknown prompt becomes an unbounded error message with a logged traceback."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        # Ours, to publish list changes to 2026-07-28 clients (subscriptions/listen).
        self.bus = InMemorySubscriptionBus()
        super().__init__(subscriptions=self.bus, **kwargs)
        self.config = settings  # (`settings` is the SDK's)
        self.custom: CustomDefinitions | None = None
        if settings.server.custom_definitions is not None:
            from pg_mcp_server.custom.reload import CustomDefinitions

            self.custom = CustomDefinitions(settings, reserved(settings), self._definitions_changed)
        # Clients on a stream transport (stdio), by connection, to tell of list changes.
        self._listeners: dict[int, ServerSession] = {}
        self.middleware.append(self._middleware)
        self.completion()(self._complete)  # type: ignore[no-untyped-call]  # SDK: untyped

    @cached_property
    def tools(self) -> dict[str, PgTool]:
        return {tool.name: tool for tool in all_tools(self.config)}

    @cached_property
    def primitives(self) -> Primitives:
        return all_primitives(self.config)

    def load(self) -> None:
        """Make the tools, resources and prompts now rather than at the first request."""
        _ = self.tools, self.primitives

    def serves_tool(self, name: str) -> bool:
        """Whether `name` is one of our tools (built-in or, as now loaded, custom)."""
        return name in self.tools or (self.custom is not None and name in self.custom.current.tools)

    async def list_tools(self) -> list[McpTool]:
        custom = self.custom.current.tools.values() if self.custom else ()
        return [
            *(listed(tool) for tool in self.tools.values()),
            *(listed(tool) for tool in custom),
            *await super().list_tools(),
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[AppContext, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tool = self.tools.get(name)
        if tool is None and self.custom is not None:
            tool = self.custom.current.tools.get(name)
        if tool is None:  # one added to the SDK's own manager (server.tool()), or none
            return await super().call_tool(name, arguments, context)
        if context is None:
            raise ToolError(f"{name} needs a request context")
        result: CallToolResult | InputRequiredResult = await tool.run(
            arguments, context, convert_result=True
        )
        return result

    async def _middleware(
        self, ctx: ServerRequestContext[AppContext, Any], call_next: CallNext
    ) -> HandlerResult:
        """Runs before the SDK validates a request's params."""
        if self.custom is not None:
            self._listen(ctx)
        if ctx.method == "prompts/get":
            # A non-string argument would get the SDK's bare "Invalid request parameters".
            self.primitives.check_prompt_request(ctx.params)
        if ctx.method in ("initialize", "server/discover"):
            return self._advertise(await call_next(ctx))
        if ctx.method != "completion/complete":
            return await call_next(ctx)
        token = _serving.set(ctx.lifespan_context)
        try:
            return await call_next(ctx)
        finally:
            _serving.reset(token)

    def _advertise(self, result: HandlerResult) -> HandlerResult:
        """listChanged in the capabilities exactly when a definitions file is served (the
        lists change only when it is reloaded)."""
        capabilities = result.get("capabilities") if isinstance(result, dict) else None
        for kind in ("tools", "resources", "prompts"):
            entry = capabilities.get(kind) if isinstance(capabilities, dict) else None
            if isinstance(entry, dict):
                entry["listChanged"] = self.custom is not None
        return result

    def _listen(self, ctx: ServerRequestContext[AppContext, Any]) -> None:
        """Keep a stream connection's session to notify (HTTP is stateless, and 2026-07-28
        clients listen through subscriptions/listen instead)."""
        client = ctx.session.client_params
        stream = ctx.request is None and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        if stream and client is not None:
            self._listeners[id(client)] = ctx.session

    async def _definitions_changed(self, old: Loaded, new: Loaded) -> None:
        before, after = _lists(old), _lists(new)
        self.primitives = all_primitives(self.config, new)
        changed = [kind for kind in before if before[kind] != after[kind]]
        for kind in changed:
            await self.bus.publish(
                ToolsListChanged()
                if kind == "tools"
                else ResourcesListChanged()
                if kind == "resources"
                else PromptsListChanged()
            )
        for key, session in list(self._listeners.items()):
            try:
                with anyio.fail_after(NOTIFY_S):
                    for kind in changed:
                        await {
                            "tools": session.send_tool_list_changed,
                            "resources": session.send_resource_list_changed,
                            "prompts": session.send_prompt_list_changed,
                        }[kind]()
            except Exception as exc:  # a client gone meanwhile is not told
                logger.debug("list_changed not sent: %s", type(exc).__name__)
                self._listeners.pop(key, None)

    def on_hangup(self) -> bool:
        """The SIGHUP hook: True when it reloads the custom definitions (a service with a
        definitions file), False when SIGHUP should end the server (a closed terminal)."""
        return self.custom is not None and self.custom.on_hangup()

    def _request(self, context: Context[AppContext, Any] | None) -> Request:
        from pg_mcp_server.primitives.registry import Request

        assert context is not None, "resources and prompts are served within a request"

        async def call_tool(name: str, arguments: dict[str, Any]) -> CallToolResult:
            result = await self.call_tool(name, arguments, context)
            assert isinstance(result, CallToolResult)
            return result

        async def read_resource(uri: str) -> list[ReadResourceContents]:
            return await self.primitives.read(uri, request)

        request = Request(app_context(context), call_tool, read_resource)
        return request

    async def list_resources(self) -> list[Resource]:
        return self.primitives.resource_list()

    async def list_resource_templates(self) -> list[ResourceTemplate]:
        return self.primitives.template_list()

    async def list_prompts(self) -> list[Prompt]:
        return self.primitives.prompt_list()

    async def read_resource(
        self, uri: AnyUrl | str, context: Context[AppContext, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        return await self.primitives.read(str(uri), self._request(context))

    async def get_prompt(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        context: Context[AppContext, Any] | None = None,
    ) -> GetPromptResult | InputRequiredResult:
        return await self.primitives.get_prompt(name, arguments, self._request(context))

    async def _complete(
        self,
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion:
        given = (context.arguments if context else None) or {}
        return await self.primitives.complete(
            ref, argument.name, argument.value, given, _serving.get()
        )


def instructions(role_warnings: list[str]) -> str:
    if not role_warnings:
        return INSTRUCTIONS
    return (
        INSTRUCTIONS
        + "\nNote: the database role has more rights than reading ("
        + "; ".join(role_warnings)
        + "). Queries are still refused unless read-only, but be careful with what you run."
    )


def build_server(
    settings: Settings, role_warnings: list[str] | None = None, db: Database | None = None
) -> PgMcpServer:
    """The MCP server. Pass `db` to share a pool with something else (the HTTP gateway's
    /health); its owner disposes it. Otherwise the lifespan opens and disposes its own.
    Without `role_warnings` (the start-up audit's findings), the lifespan runs the audit in the
    background and the instructions carry what it finds (middleware.py)."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[AppContext]) -> AsyncIterator[AppContext]:
        audit = None
        if role_warnings is None:
            from pg_mcp_server.database.pool.audit import RoleAudit

            audit = RoleAudit()
        app = AppContext(settings, db, sensitive=settings.server.sensitive_regex(), audit=audit)
        try:
            if server.custom is not None:
                await server.custom.start(app.db)
            async with anyio.create_task_group() as background:
                if audit is not None:
                    background.start_soon(audit.run_alone, settings.database)
                yield app
                background.cancel_scope.cancel()
        finally:
            if server.custom is not None:
                await server.custom.stop()
            await app.close()

    server = PgMcpServer(
        settings,
        name="pg-mcp-server",
        title="PostgreSQL MCP server",
        version=package_version(),
        instructions=instructions(role_warnings or []),
        lifespan=lifespan,
        log_level=settings.server.log_level,
    )
    server.middleware.extend(
        [
            bounded_errors,
            instructions_with_audit(instructions),
            unknown_tool(server, server.serves_tool),
        ]
    )
    return server
