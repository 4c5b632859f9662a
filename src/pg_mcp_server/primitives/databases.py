"""Several databases in one server: what the client sees is one list of tools, resources,
templates and prompts; each call is served by one database's own registry and AppContext.

Each database (`Unit`) has the registry a one-database server would have: the built-in
definitions made with its settings (its default schema, its budgets) and its own custom
definitions file. `Databases` stands where that registry stands in server.py and routes:

- a built-in tool takes `database` (an enum of the names the caller may use; required when
  none is the default); a custom tool belongs to the database whose file defines it;
- a `pg://` resource is `pg://{database}/...` (the database's own URI after the name), and
  each database's templates are listed with its name in place;
- a prompt takes `database` as an argument; a completion follows the one in its context.

A database the caller may not use (identity's grant) answers exactly as an unknown one, so
that names do not leak. Routing is a dict lookup: no round trip, nothing parsed but the name.

Its size (~420 lines) is the registry's whole surface once more (lists, calls, reads,
prompts, completions), each routed by database, and list_databases.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any

import anyio
from mcp_types import (
    CallToolResult,
    Completion,
    GetPromptResult,
    Prompt as McpPrompt,
    PromptArgument as McpPromptArgument,
    PromptReference,
    ReadResourceResult,
    Resource as McpResource,
    ResourceTemplate as McpResourceTemplate,
    ResourceTemplateReference,
    Tool as McpTool,
)

from pg_mcp_server.app import AppContext
from pg_mcp_server.configfile import RESERVED_NAMES, DatabaseEntry, ServerConfig
from pg_mcp_server.errors import ParameterError, PgMcpError, closest, did_you_mean, to_pg_error
from pg_mcp_server.identity import current_identity
from pg_mcp_server.identity.access import shown
from pg_mcp_server.models.compact import Compact
from pg_mcp_server.primitives.registry import Registry, _answered, clip
from pg_mcp_server.tools.registry import ToolDef, error_result, make_tool, ok, ok_json

if TYPE_CHECKING:
    from pg_mcp_server.custom.build import Loaded
    from pg_mcp_server.custom.reload import CustomDefinitions

logger = logging.getLogger(__name__)

SCHEME = "pg://"
# What every database shares (the result store, the query history): these URIs, as
# execute_query's answers give them, are read without a database's name.
SHARED = ("pg://results/", "pg://queries/")
DATABASE_ARGUMENT = "database"
PING_S = 3.0  # list_databases: a database that does not answer within this is unreachable


def _any(names: list[str]) -> str | None:
    return names[0] if names else None


def _renamed(result: CallToolResult, uri: str) -> CallToolResult:
    """read_resource's answer with the URI as the caller gave it (with its database)."""
    body = result.structured_content
    if result.is_error or not isinstance(body, dict):
        return result
    return ok_json({**body, "uri": uri})


class DatabaseInfo(Compact):
    name: str
    description: str | None = None
    default: bool = False
    reachable: bool = False
    error: str | None = None  # why not (a PRD code), when it is not reachable


class DatabasesOutput(Compact):
    databases: list[DatabaseInfo]


class Unit:
    """One database's definitions: a one-database server's registry, made with its settings."""

    def __init__(
        self, entry: DatabaseEntry, on_change: Callable[[Loaded, Loaded], Awaitable[None]]
    ) -> None:
        from pg_mcp_server.server import reserved

        self.name = entry.name
        self.entry = entry
        self.settings = entry.settings
        self.custom: CustomDefinitions | None = None
        if self.settings.server.custom_definitions is not None:
            from pg_mcp_server.custom.reload import CustomDefinitions

            self.custom = CustomDefinitions(self.settings, reserved(self.settings), on_change)

    @cached_property
    def tools(self) -> list[ToolDef]:
        from pg_mcp_server.server import builtin_tools

        return builtin_tools(self.settings)

    @cached_property
    def registry(self) -> Registry:
        from pg_mcp_server.server import make_registry

        custom = self.custom.current if self.custom is not None else None
        return make_registry(self.settings, self.tools, custom)

    def custom_tools(self) -> list[str]:
        return [t.name for t in self.custom.current.tools] if self.custom is not None else []

    def custom_prompts(self) -> set[str]:
        return {p.name for p in self.custom.current.prompts} if self.custom is not None else set()


def _visible(tool: str, names: frozenset[str] | None) -> bool:
    return names is None or tool in names or tool == "list_databases"


def allowed(names: list[str]) -> list[str]:
    """The databases the current caller may use (every one without an identity)."""
    identity = current_identity.get()
    if identity is None:
        return names
    return [n for n in names if identity.user.grant(n) is not None]


class Databases:
    """Routes every request to one database's registry (see the module docstring)."""

    def __init__(self, config: ServerConfig, units: dict[str, Unit]) -> None:
        self.config = config
        self.units = units
        self.names = list(units)
        self.default = config.default
        self.first = units[self.default or self.names[0]]
        # Custom tools, resources and prompts belong to the database whose file defines them.
        self.bound: dict[str, str] = {}
        for unit in units.values():
            for name in unit.custom_tools():
                other = self.bound.setdefault(name, unit.name)
                if other != unit.name:
                    logger.warning(
                        "custom tool %s is defined for databases %s and %s: %s's is served",
                        name,
                        other,
                        unit.name,
                        other,
                    )
        first = self.first.registry.tools.values()
        builtin = {t.name: t for t in first if t.name not in self.bound}
        builtin["list_databases"] = self._list_tool()
        self.builtin = builtin
        self._listed: dict[tuple[tuple[str, ...], frozenset[str] | None], list[McpTool]] = {}

    # --- which database

    def resolve(self, given: Any) -> str:
        """The database a call names (or the default); PARAMETER_ERROR otherwise."""
        usable = allowed(self.names)
        if given is None or given == "":
            if self.default is not None and self.default in usable:
                return self.default
            raise ParameterError(
                "Several databases are configured and this call names none.",
                suggestion=f"Pass database, one of: {', '.join(usable)}.",
                context={"databases": usable},
            )
        if not isinstance(given, str):
            raise ParameterError(
                "Invalid value for 'database': must be a string.",
                suggestion=f"One of: {', '.join(usable)}.",
            )
        if given in usable:
            return given
        shown = clip(given, 80)
        raise ParameterError(
            f"There is no database named {shown!r}.",
            suggestion=did_you_mean(closest(shown, usable), f"Databases: {', '.join(usable)}."),
            context={"databases": usable},
        )

    def _split(self, uri: str) -> tuple[str, str] | None:
        """`pg://sales/x` -> ("sales", "pg://x"); None when `uri` names no database first (the
        name is not checked: resolve() does)."""
        if not uri.startswith(SCHEME):
            return None
        name, slash, rest = uri[len(SCHEME) :].partition("/")
        # Any name but a built-in URI's first word, so that a database the caller may not
        # use and one that is not there get the same answer (resolve's), naming neither.
        if not slash or name in RESERVED_NAMES:
            return None
        return name, SCHEME + rest

    def _owner_of(self, uri: str) -> str | None:
        """A custom resource outside pg:// (its URI is as its file gives it)."""
        if uri.startswith(SCHEME):
            return None
        for name in allowed(self.names):
            registry = self.units[name].registry
            if uri in registry.resources or any(
                t.parsed.match(uri) for t in registry.templates.values()
            ):
                return name
        return None

    def _owner_of_tool(self, name: str) -> str | None:
        """The database a custom tool belongs to, when the caller may use it (else the tool
        is unknown to this caller, and so is its database's name)."""
        owner = self.bound.get(name)
        return owner if owner is not None and owner in allowed(self.names) else None

    # --- lists

    def tool_list(self) -> list[McpTool]:
        usable = tuple(allowed(self.names))
        names = shown()  # a caller's `tools:` list (list_databases is everyone's)
        key = (usable, names)
        listed = self._listed.get(key)
        if listed is None:
            listed = [
                self._with_database(t, list(usable)).listed()
                for t in self.builtin.values()
                if _visible(t.name, names)
            ]
            for unit in self.units.values():
                if unit.name in usable and unit.custom is not None:
                    listed += [
                        t.listed()
                        for t in unit.custom.current.tools
                        if self.bound.get(t.name) == unit.name and _visible(t.name, names)
                    ]
            self._listed[key] = listed
        return listed

    def tool(self, name: str) -> ToolDef | None:
        """The tool `name`, if the caller may see it (a hidden one is unknown)."""
        if name in self.bound and self._owner_of_tool(name) is None:
            return None
        return self.tools.get(name) if _visible(name, shown()) else None

    @cached_property
    def tools(self) -> dict[str, ToolDef]:
        """Input schemas by tool name (the SDK's header validation)."""
        found = {name: self._with_database(t, self.names) for name, t in self.builtin.items()}
        for name, db in self.bound.items():
            found[name] = self.units[db].registry.tools[name]
        return found

    def _with_database(self, tool: ToolDef, names: list[str]) -> ToolDef:
        if tool.name == "list_databases":
            return tool
        # the default is named (and `database` optional) only for a caller who may use it
        default = self.default if self.default in names else None
        schema = dict(tool.input_schema)
        properties = dict(schema.get("properties") or {})
        properties[DATABASE_ARGUMENT] = {
            "type": "string",
            "enum": names,
            "description": "Which database (list_databases describes them)"
            + (f"; default {default}" if default else ""),
        }
        schema["properties"] = properties
        if default is None:
            schema["required"] = [*schema.get("required", []), DATABASE_ARGUMENT]
        return ToolDef(
            tool.name,
            tool.title,
            tool.description,
            schema,
            tool.output_schema,
            tool.handler,
            tool.annotations,
        )

    def resource_list(self) -> list[McpResource]:
        found: list[McpResource] = []
        for name in allowed(self.names):
            for r in self.units[name].registry.resource_list():
                uri = str(r.uri)
                if uri.startswith(SCHEME):
                    uri = f"{SCHEME}{name}/{uri[len(SCHEME) :]}"
                found.append(r.model_copy(update={"uri": uri, "name": f"{name}/{r.name}"}))
        return found

    def template_list(self) -> list[McpResourceTemplate]:
        found: list[McpResourceTemplate] = []
        for name in allowed(self.names):
            for t in self.units[name].registry.template_list():
                uri = t.uri_template
                if uri.startswith(SCHEME):
                    uri = f"{SCHEME}{name}/{uri[len(SCHEME) :]}"
                found.append(t.model_copy(update={"uri_template": uri, "name": f"{name}/{t.name}"}))
        return found

    def prompt_list(self) -> list[McpPrompt]:
        usable = allowed(self.names)
        argument = McpPromptArgument(
            name=DATABASE_ARGUMENT,
            description="Which database: " + ", ".join(usable),
            required=self.default not in usable,
        )
        found = [
            p.model_copy(update={"arguments": [*(p.arguments or []), argument]})
            for p in self.first.registry.prompt_list()
            if p.name in self.builtin_prompts
        ]
        known = {p.name for p in found}
        for name in allowed(self.names):
            for p in self.units[name].registry.prompt_list():
                if p.name not in known:
                    known.add(p.name)
                    found.append(p)
        return found

    @cached_property
    def builtin_prompts(self) -> frozenset[str]:
        """The built-in prompts (every database's): the first registry's, less its file's."""
        return frozenset(self.first.registry.prompts) - self.first.custom_prompts()

    def database_of(self, tool: str, arguments: dict[str, Any]) -> str | None:
        """For the audit line: the database a call was for, as it named it."""
        chosen = arguments.get(DATABASE_ARGUMENT)
        if tool == "read_resource" and (split := self._split(str(arguments.get("uri")))):
            return split[0]
        if tool in self.bound:
            return self.bound[tool]
        return chosen if isinstance(chosen, str) else self.default

    # --- calls

    async def call_tool(
        self, name: str, arguments: dict[str, Any], app: AppContext
    ) -> CallToolResult:
        hub = app.hub
        assert hub is not None, "several databases have a hub"
        given = dict(arguments)
        owner = self._owner_of_tool(name)
        chosen = None
        if owner is None:
            chosen = given.pop(DATABASE_ARGUMENT, None)
        try:
            if owner is not None:
                # a custom tool's arguments are its own (it may take one named `database`)
                target = self.resolve(owner)
            elif name == "list_databases":
                return await self.builtin[name].run(app, given)
            elif name == "read_resource" and (split := self._split(str(given.get("uri")))):
                target = self.resolve(split[0])
                given["uri"] = split[1]
                result = await self.units[target].registry.call_tool(
                    name, given, self._app(app, target)
                )
                return _renamed(result, str(arguments["uri"]))
            elif chosen is None and name == "execute_query" and given.get("cursor"):
                # a page of a held result: the store is every database's
                target = self.resolve(_any(allowed(self.names)))
            elif (
                name == "read_resource"
                and chosen is None
                and (held := self._owner_of(str(given.get("uri")))) is not None
            ):
                target = self.resolve(held)  # a custom resource's URI, as resources/read
            elif name == "read_resource" and str(given.get("uri")).startswith(SHARED):
                target = self.resolve(chosen or _any(allowed(self.names)))
            else:
                target = self.resolve(chosen)
        except PgMcpError as exc:
            logger.info("tool %s -> %s", clip(name, 100), exc.code)
            return error_result(exc, clip(name, 100), arguments)
        return await self.units[target].registry.call_tool(name, given, hub.apps[target])

    async def read(self, uri: str, app: AppContext) -> ReadResourceResult:
        target, inner = self._target_of(uri, app)
        result = await self.units[target].registry.read(inner, self._app(app, target))
        contents = [c.model_copy(update={"uri": uri}) for c in result.contents]
        return result.model_copy(update={"contents": contents})

    def _target_of(self, uri: str, app: AppContext) -> tuple[str, str]:
        with _answered("resource", {"uri": clip(uri)}):
            split = self._split(uri)
            if split is not None:
                return self.resolve(split[0]), split[1]
            if uri.startswith(SHARED):
                return self.resolve(_any(allowed(self.names))), uri
            owner = self._owner_of(uri)
            if owner is not None:
                return self.resolve(owner), uri
            raise ParameterError(
                f"Resource not found: {clip(uri)}",
                suggestion="With several databases a resource's URI names its database first: "
                f"pg://{{database}}/..., for example pg://{_any(allowed(self.names))}/system_info "
                "(resources/list gives them all).",
            )
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _app(app: AppContext, name: str) -> AppContext:
        assert app.hub is not None, "several databases have a hub"
        return app.hub.apps[name]

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None, app: AppContext
    ) -> GetPromptResult:
        given = dict(arguments or {})
        chosen = given.pop(DATABASE_ARGUMENT, None)
        with _answered("prompt", {"prompt": clip(name)}):
            usable = allowed(self.names)
            owner = next((n for n in usable if name in self.units[n].registry.prompts), None)
            builtin = name in self.builtin_prompts
            target = self.resolve(chosen if builtin or chosen else owner)
        # a prompt of a database the caller may not use gets the target's not-found answer
        registry = self.units[target].registry
        return await registry.get_prompt(name, given, self._app(app, target))

    def check_prompt_request(self, params: Mapping[str, Any] | None) -> None:
        self.first.registry.check_prompt_request(params)

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
            if isinstance(ref, ResourceTemplateReference):
                split = self._split(ref.uri)
                target = self.resolve(split[0] if split else self._owner_of(ref.uri))
                inner = ref.model_copy(update={"uri": split[1] if split else ref.uri})
                return await self.units[target].registry.complete(
                    inner, argument, value, context, self._app(app, target)
                )
            if argument == DATABASE_ARGUMENT:
                usable = [n for n in allowed(self.names) if n.startswith(value)]
                return Completion(values=usable, total=len(usable), has_more=False)
            target = self.resolve(context.get(DATABASE_ARGUMENT))
        return await self.units[target].registry.complete(
            ref, argument, value, context, self._app(app, target)
        )

    # --- list_databases

    def _list_tool(self) -> ToolDef:
        async def list_databases(app: AppContext) -> Annotated[CallToolResult, DatabasesOutput]:
            names = allowed(self.names)
            found: dict[str, str | None] = {}

            async def ping(name: str) -> None:
                try:
                    with anyio.fail_after(PING_S):
                        await self._app(app, name).db.ping()
                    found[name] = None
                except TimeoutError:
                    found[name] = "TIMEOUT"
                except Exception as exc:
                    found[name] = to_pg_error(exc, "unreachable").code

            async with anyio.create_task_group() as tasks:
                for name in names:
                    tasks.start_soon(ping, name)
            infos = [
                DatabaseInfo(
                    name=n,
                    description=self.units[n].entry.description,
                    default=n == self.default,
                    reachable=found.get(n) is None,
                    error=found.get(n),
                )
                for n in names
            ]
            return ok(DatabasesOutput(databases=infos))

        return make_tool(
            list_databases,
            name="list_databases",
            title="List databases",
            description="The databases this server serves that you may use: name, description, "
            "whether it is the default (used when a call names none) and whether it answers "
            "now. Pass a name as `database` to any other tool. Example: list_databases() -> "
            '{"databases":[{"name":"sales","description":"Orders","default":true,'
            '"reachable":true}]}',
        )
