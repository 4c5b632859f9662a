"""The MCP server: the SDK's low-level `Server`, its handlers fed by our one `Registry`.

`PgMcp` owns what serving needs besides the SDK: the registry (built-in tools, resources,
templates and prompts, plus the custom definitions file's, swapped in on a reload), the
lifespan (the pool, the start-up role audit, the definitions file's watcher) and the
list-changed notifications. Each handler is one line into the registry; the registry makes
every answer and maps every error to the wire (primitives/registry.py).

Middleware (the SDK's `Server.middleware`) does only what no handler can: `initialize` is
answered by the SDK's runner, so the handshake's instructions (with what the role audit
found) and its `listChanged` flags are set in `_handshake`, the way the SDK documents for
wrapping initialization; `prompts/get` arguments that are not strings are named in our error
before the SDK's validation refuses them with a bare "Invalid request parameters"; and
`bounded_errors` keeps the SDK's own JSON-RPC errors from echoing unbounded input. The same
pass over every request keeps a stream connection's session, to tell it of list changes.

`initialize` is answered before the tools, resources and prompts are made: they need the
whole database layer (SQLAlchemy, pglast, the models), which is most of the start-up's CPU.
They are made at the first request that needs them (a client's `tools/list`, sent right after
`initialize`), or at once with `PgMcp.load()` (the HTTP gateway, before it serves).

Its size (~560 lines) is one handler per MCP method and the lifespan (with several databases,
one lifespan per database's AppContext): the SDK's whole surface as this server uses it, read
in one place.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ToolsListChanged,
)
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    CompleteRequestParams,
    CompleteResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pg_mcp_server.app import AppContext, Hub
from pg_mcp_server.config import Settings, package_version
from pg_mcp_server.middleware import bounded_errors

if TYPE_CHECKING:
    from pg_mcp_server.app import Pools
    from pg_mcp_server.configfile import ServerConfig
    from pg_mcp_server.custom.build import Loaded
    from pg_mcp_server.custom.reload import CustomDefinitions
    from pg_mcp_server.custom.specs import Reserved
    from pg_mcp_server.database.pool import Database
    from pg_mcp_server.identity import AuthSettings
    from pg_mcp_server.identity.access import Access
    from pg_mcp_server.primitives.databases import Databases, Unit
    from pg_mcp_server.primitives.registry import Registry
    from pg_mcp_server.tools.registry import ToolDef

logger = logging.getLogger(__name__)

NOTIFY_S = 5.0  # for telling one client that lists changed
FREEZE_AFTER_S = 0.2  # after the first listing, once its answer is out


def freeze_heap() -> None:
    """What is alive once everything is loaded (modules, the models, the registry) lives as
    long as the process: `gc.freeze()` keeps the collector from walking it again at every full
    collection (measured 0.4-0.6 ms of CPU per call before: bench/README.md)."""
    gc.collect()
    gc.freeze()


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


def builtin_tools(settings: Settings) -> list[ToolDef]:
    from pg_mcp_server.tools.health_tools import health_tools
    from pg_mcp_server.tools.query_tools import query_tools
    from pg_mcp_server.tools.relationship_tools import relationship_tools
    from pg_mcp_server.tools.schema_tools import schema_tools
    from pg_mcp_server.tools.vector_tools import vector_tools

    schema = settings.database.default_schema
    return [
        *schema_tools(schema),
        *relationship_tools(schema),
        *query_tools(),
        *vector_tools(schema),
        *health_tools(),
    ]


def make_registry(
    settings: Settings, tools: list[ToolDef] | None = None, custom: Loaded | None = None
) -> Registry:
    """The built-in definitions (`tools`: already made ones) and those of `custom`."""
    from pg_mcp_server.custom.build import Loaded
    from pg_mcp_server.primitives.prompts import builtin_prompts
    from pg_mcp_server.primitives.registry import Registry
    from pg_mcp_server.primitives.resources import builtin_resources, builtin_templates

    custom = custom or Loaded()
    return Registry(
        [*(builtin_tools(settings) if tools is None else tools), *custom.tools],
        [*builtin_resources(), *custom.resources],
        [*builtin_templates(), *custom.templates],
        [*builtin_prompts(), *custom.prompts],
        default_schema=settings.database.default_schema,
    )


def reserved(settings: Settings) -> Reserved:
    """The built-in names and URIs custom definitions may not take."""
    from pg_mcp_server.custom.specs import Reserved

    builtin = make_registry(settings)
    return Reserved(
        tools=frozenset(builtin.tools),
        prompts=frozenset(builtin.prompts),
        resources=frozenset(builtin.resources),
        templates=frozenset(builtin.templates),
    )


async def check_definitions(settings: Settings) -> None:
    """Before serving: DefinitionsError when the custom definitions file cannot be served."""
    if settings.server.custom_definitions is not None:
        from pg_mcp_server.custom.reload import check_file

        await check_file(settings, reserved(settings))


SEVERAL = """
This server serves several databases: list_databases names those you may use. Pass one as
`database` to any tool; resources are pg://{database}/... (e.g. pg://sales/system_info)."""


def instructions(role_warnings: list[str], *, several: bool = False) -> str:
    text = INSTRUCTIONS
    if several:
        text = text.replace("one PostgreSQL database", "several PostgreSQL databases", 1) + SEVERAL
    if not role_warnings:
        return text
    return (
        text
        + "\nNote: the database role has more rights than reading ("
        + "; ".join(role_warnings)
        + "). Queries are still refused unless read-only, but be careful with what you run."
    )


def _lists(loaded: Loaded) -> dict[str, list[Any]]:
    """What custom definitions add to tools/list, resources/list (and templates) and
    prompts/list, to compare before and after a reload."""
    from pg_mcp_server.primitives.registry import Registry

    registry = Registry(loaded.tools, loaded.resources, loaded.templates, loaded.prompts, "")
    return {
        "tools": registry.tool_list(),
        "resources": [*registry.resource_list(), *registry.template_list()],
        "prompts": registry.prompt_list(),
    }


class PgMcp:
    """One server: the SDK's low-level `server`, and what its handlers serve."""

    def __init__(
        self,
        settings: Settings,
        role_warnings: list[str] | None = None,
        db: Database | None = None,
        config: ServerConfig | None = None,
        dbs: Mapping[str, Database] | None = None,
        access: Access | None = None,
    ) -> None:
        """Pass `db` to share a pool with something else (the HTTP gateway's /health); its
        owner disposes it. Otherwise the lifespan opens and disposes its own. Without
        `role_warnings` (the start-up audit's findings), the lifespan runs the audit in the
        background and the handshake's instructions carry what it finds. `config` (the
        configuration file, configfile.py) with several databases serves each through its
        own registry and AppContext (primitives/databases.py); `dbs` are their shared pools,
        as `db` is for one. `access` (identity/access.py: who callers are, what each is
        shown) is the configuration file's users and auth section unless given."""
        self.config = config
        # None without a configuration file: then configfile.py is not imported (start-up)
        self.several = config is not None and config.several
        self.database_name = next(iter(config.databases)) if config is not None else "default"
        self.settings = settings
        self.role_warnings = role_warnings
        self.db = db
        self.dbs = dict(dbs or {})
        if access is None and config is not None:
            access = config.access()
        self.access = access
        # A served process (not a test's in-process server) freezes its heap once loaded.
        self.freeze_when_loaded = False
        self.custom: CustomDefinitions | None = None
        self.units: dict[str, Unit] = {}
        if config is not None and config.several:
            from pg_mcp_server.primitives.databases import Unit

            self.units = {
                name: Unit(entry, self._definitions_changed)
                for name, entry in config.databases.items()
            }
        elif settings.server.custom_definitions is not None:
            from pg_mcp_server.custom.reload import CustomDefinitions

            self.custom = CustomDefinitions(settings, reserved(settings), self._definitions_changed)
        if config is not None:
            self.audit_calls = config.audit
            self.audit_parameters = config.auth.audit_parameters
        else:
            self.audit_calls = bool(settings.server.audit_log)
            self.audit_parameters = False
        # Lists change only when a definitions file is reloaded.
        reloads = self.custom is not None or any(u.custom is not None for u in self.units.values())
        self.reloads = reloads
        self.notifications = NotificationOptions(
            prompts_changed=reloads,
            resources_changed=reloads,
            tools_changed=reloads,
        )
        # 2026-07-28 clients hear of list changes on subscriptions/listen streams.
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        # Clients on a stream transport (stdio), by connection, to tell of list changes.
        self._listeners: dict[int, ServerSession] = {}
        self.server: Server[AppContext] = Server(
            "pg-mcp-server",
            version=package_version(),
            title="PostgreSQL MCP server",
            instructions=instructions(role_warnings or [], several=self.several),
            lifespan=self._lifespan,
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_completion=self._complete,
            on_subscriptions_listen=self.listen,
        )
        self.server.middleware.extend([bounded_errors, self._handshake, self._every_request])

    @property
    def auth(self) -> AuthSettings | None:
        """Which settings carry a caller's name and claims (None: the defaults)."""
        return self.access.auth if self.access is not None else None

    # --- what is served

    @cached_property
    def tools(self) -> list[ToolDef]:
        """The built-in tools, made once (a reload makes only the custom ones again)."""
        return builtin_tools(self.settings)

    @cached_property
    def registry(self) -> Registry | Databases:
        """Made again after a reload, at the first request that needs it."""
        made: Registry | Databases
        if self.units:
            from pg_mcp_server.primitives.databases import Databases

            assert self.config is not None, "several databases come from a file"
            made = Databases(self.config, self.units)
        else:
            custom = self.custom.current if self.custom is not None else None
            made = make_registry(self.settings, self.tools, custom)
        if self.freeze_when_loaded:
            self.freeze_when_loaded = False
            asyncio.get_running_loop().call_later(FREEZE_AFTER_S, freeze_heap)
        return made

    def load(self) -> None:
        """Make the tools, resources and prompts now rather than at the first request."""
        _ = self.registry

    def initialization_options(self) -> InitializationOptions:
        """For a transport that runs the server itself (stdio)."""
        return self.server.create_initialization_options(self.notifications)

    def stopping(self) -> None:
        """The server is about to stop: open subscriptions/listen streams end now, each with
        its `SubscriptionsListenResult` (the spec's graceful end), instead of being cut."""
        self.listen.close()

    def on_hangup(self) -> bool:
        """The SIGHUP hook: True when it reloads the custom definitions (a service with a
        definitions file), False when SIGHUP should end the server (a closed terminal)."""
        if self.units:
            customs = [u.custom for u in self.units.values() if u.custom is not None]
            return bool(customs) and all([c.on_hangup() for c in customs])
        return self.custom is not None and self.custom.on_hangup()

    @asynccontextmanager
    async def _lifespan(self, _server: Server[AppContext]) -> AsyncIterator[AppContext]:
        if self.units:
            async with self._several() as app:
                yield app
            return
        audit = None
        if self.role_warnings is None:
            from pg_mcp_server.database.pool import RoleAudit

            audit = RoleAudit()
        app = AppContext(
            self.settings,
            self.db,
            sensitive=self.settings.server.sensitive_regex(),
            audit=audit,
            name=self.database_name,
            auth=self.auth,
        )
        _ = app.results  # opened now: a store that cannot be opened stops the start
        try:
            if self.custom is not None:
                await self.custom.start(app.db)
            async with anyio.create_task_group() as background:
                if audit is not None:
                    background.start_soon(audit.run_alone, self.settings.database)
                if self.access is not None and self.access.identifies:
                    from pg_mcp_server.identity.access import warn_unusable_roles

                    background.start_soon(warn_unusable_roles, app.db, self.access)
                yield app
                background.cancel_scope.cancel()
        finally:
            self.stopping()
            if self.custom is not None:
                await self.custom.stop()
            await app.close()

    @asynccontextmanager
    async def _several(self) -> AsyncIterator[AppContext]:
        """The lifespan with several databases: an AppContext each (pools opened at first
        use), every definitions file started, every role audit in the background. A database
        that does not answer stops nothing: its calls get CONNECTION_ERROR."""
        from pg_mcp_server.database.pool import RoleAudit

        sensitive = {n: u.settings.server.sensitive_regex() for n, u in self.units.items()}
        apps = {
            name: AppContext(
                unit.settings,
                self.dbs.get(name),
                sensitive=sensitive[name],
                audit=RoleAudit() if self.role_warnings is None else None,
                name=name,
                auth=self.auth,
            )
            for name, unit in self.units.items()
        }
        hub = Hub(apps)
        try:
            for name, unit in self.units.items():
                if unit.custom is not None:
                    await unit.custom.start(apps[name].db)
            async with anyio.create_task_group() as background:
                for app in apps.values():
                    if app.audit is not None:
                        background.start_soon(app.audit.run_alone, app.settings.database)
                    if self.access is not None and self.access.identifies:
                        from pg_mcp_server.identity.access import warn_unusable_roles

                        background.start_soon(warn_unusable_roles, app.db, self.access)
                yield hub.first
                background.cancel_scope.cancel()
        finally:
            self.stopping()
            for unit in self.units.values():
                if unit.custom is not None:
                    await unit.custom.stop()
            await hub.close()

    # --- handlers: one call each into the registry

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        tool = self.registry.tool(name)  # (a tool hidden from the caller is unknown)
        return None if tool is None else tool.input_schema

    async def _list_tools(
        self, ctx: ServerRequestContext[AppContext], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=self.registry.tool_list())

    async def _call_tool(
        self, ctx: ServerRequestContext[AppContext], params: CallToolRequestParams
    ) -> CallToolResult:
        arguments = params.arguments or {}
        if not self.audit_calls:
            return await self.registry.call_tool(params.name, arguments, ctx.lifespan_context)
        from pg_mcp_server.audit import log_call

        started = time.perf_counter()
        result = await self.registry.call_tool(params.name, arguments, ctx.lifespan_context)
        log_call(
            params.name,
            self._database_of(params.name, arguments),
            arguments,
            result,
            time.perf_counter() - started,
            parameters=self.audit_parameters,
        )
        return result

    def _database_of(self, tool: str, arguments: dict[str, Any]) -> str | None:
        """For the audit line: the database a call was for (as it named it)."""
        from pg_mcp_server.primitives.databases import Databases

        registry = self.registry
        if not isinstance(registry, Databases):
            return self.database_name
        return registry.database_of(tool, arguments)

    async def _list_resources(
        self, ctx: ServerRequestContext[AppContext], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        return ListResourcesResult(resources=self.registry.resource_list())

    async def _list_templates(
        self, ctx: ServerRequestContext[AppContext], params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(resource_templates=self.registry.template_list())

    async def _read_resource(
        self, ctx: ServerRequestContext[AppContext], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        return await self.registry.read(str(params.uri), ctx.lifespan_context)

    async def _list_prompts(
        self, ctx: ServerRequestContext[AppContext], params: PaginatedRequestParams | None
    ) -> ListPromptsResult:
        return ListPromptsResult(prompts=self.registry.prompt_list())

    async def _get_prompt(
        self, ctx: ServerRequestContext[AppContext], params: GetPromptRequestParams
    ) -> GetPromptResult:
        return await self.registry.get_prompt(params.name, params.arguments, ctx.lifespan_context)

    async def _complete(
        self, ctx: ServerRequestContext[AppContext], params: CompleteRequestParams
    ) -> CompleteResult:
        given = (params.context.arguments if params.context else None) or {}
        argument = params.argument
        completion = await self.registry.complete(
            params.ref, argument.name, argument.value, given, ctx.lifespan_context
        )
        return CompleteResult(completion=completion)

    # --- middleware (see the module docstring)

    async def _handshake(
        self, ctx: ServerRequestContext[AppContext], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method not in ("initialize", "server/discover") or not isinstance(result, dict):
            return result
        capabilities = result.get("capabilities")
        for kind in ("tools", "resources", "prompts"):
            entry = capabilities.get(kind) if isinstance(capabilities, dict) else None
            if isinstance(entry, dict):
                entry["listChanged"] = self.reloads
        app = ctx.lifespan_context
        found: list[str] = []
        apps = app.hub.apps if app.hub is not None else {"": app}
        names = [""]
        if app.hub is not None:
            # (imported only here: one database's initialize needs no database layer)
            from pg_mcp_server.primitives.databases import allowed

            names = allowed(list(apps))
        for name in names:
            # only the caller's own databases: another's name is not to be known
            one = apps[name]
            if one.audit is not None:
                found += [f"{name}: {w}" if name else w for w in await one.audit.wait()]
        if found:
            result = {**result, "instructions": instructions(found, several=self.several)}
        return result

    async def _every_request(
        self, ctx: ServerRequestContext[AppContext], call_next: CallNext
    ) -> HandlerResult:
        """The connection kept to tell of list changes; prompts/get arguments checked before
        the SDK's validation refuses a non-string one without naming it."""
        self._listen(ctx)
        if ctx.method == "prompts/get":
            self.registry.check_prompt_request(ctx.params)
        return await call_next(ctx)

    # --- list changes

    def _listen(self, ctx: ServerRequestContext[AppContext]) -> None:
        """Keep a stream connection's session to notify (HTTP is stateless, and 2026-07-28
        clients listen through subscriptions/listen instead)."""
        if not self.reloads:
            return
        client = ctx.session.client_params
        stream = ctx.request is None and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        if stream and client is not None:
            self._listeners[id(client)] = ctx.session

    async def _definitions_changed(self, old: Loaded, new: Loaded) -> None:
        vars(self).pop("registry", None)  # `self.custom.current` is `new` now
        for unit in self.units.values():
            vars(unit).pop("registry", None)
        before, after = _lists(old), _lists(new)
        changed = [kind for kind in before if before[kind] != after[kind]]
        events: dict[str, ToolsListChanged | ResourcesListChanged | PromptsListChanged] = {
            "tools": ToolsListChanged(),
            "resources": ResourcesListChanged(),
            "prompts": PromptsListChanged(),
        }
        for kind in changed:
            await self.bus.publish(events[kind])
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


def with_pools(
    settings: Settings,
    role_warnings: list[str] | None,
    config: ServerConfig | None,
    access: Access | None = None,
) -> tuple[PgMcp, Database | Pools]:
    """A server and the pools it shares with the HTTP gateway (its /health, cancellation
    and disposal): one Database, or with several databases one each behind `Pools`.
    `access`: the users and auth section, the configuration file's unless given."""
    from pg_mcp_server.app import Pools
    from pg_mcp_server.database.pool import Database

    if access is None and config is not None:
        access = config.access()
    auth = access.auth if access is not None else None
    if config is not None and config.several:
        dbs = {
            name: Database(
                entry.settings.database,
                name=name,
                allow_privileged=entry.settings.server.allow_privileged_role,
                auth=auth,
            )
            for name, entry in config.databases.items()
        }
        server = PgMcp(settings, role_warnings, config=config, dbs=dbs, access=access)
        return server, Pools(dbs)
    name = next(iter(config.databases)) if config is not None else "default"
    db = Database(
        settings.database,
        name=name,
        allow_privileged=settings.server.allow_privileged_role,
        auth=auth,
    )
    return PgMcp(settings, role_warnings, db=db, config=config, access=access), db


def build_server(
    settings: Settings,
    role_warnings: list[str] | None = None,
    db: Database | None = None,
    config: ServerConfig | None = None,
    access: Access | None = None,
) -> Server[AppContext]:
    """The SDK server of a `PgMcp` (what `mcp.Client(...)` connects to in process)."""
    return PgMcp(settings, role_warnings, db, config, access=access).server
