"""Read and validate a definitions file: pgEdge's rules and messages, plus the file and line.

Every definition is checked and every problem of every one reported, so one start shows all
there is to fix: `defs.yaml:12: tool 0: type is required`. Nothing here touches the
database; check.check() then checks the SQL of the definitions that passed against it.

Its size (~700 lines) is pgEdge's rules for each kind of definition and their messages, in
the order of pgEdge's page; one reader keeps file and line for every message.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import pglast
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp.shared.uri_template import UriTemplate
from pglast import ast
from pglast.visitors import Visitor

from pg_mcp_server.config import ServerSettings
from pg_mcp_server.custom import plcode
from pg_mcp_server.custom.specs import (
    JSON,
    TSV,
    ArgumentSpec,
    Definitions,
    DefinitionsError,
    MessageSpec,
    PromptSpec,
    Reserved,
    ResourceSpec,
    ToolSpec,
    ToolType,
    Where,
)
from pg_mcp_server.custom.yamlfile import (
    Located,
    LocatedList,
    YamlProblem,
    load as load_yaml,
    to_plain,
)

T = TypeVar("T")

PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")  # pgEdge's {{argument}}
# (extension) {{#argument}}...{{/argument}}: text kept only when the argument is given, and
# {{^argument}}...{{/argument}} only when it is not (Mustache's sections).
SECTION = re.compile(r"\{\{([#^])(\w+)\}\}(.*?)\{\{/\2\}\}", re.DOTALL)
_TAG = re.compile(r"\{\{[#^/](\w*)\}\}")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # what MCP clients accept
_LANGUAGE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_PROPERTY_TYPES = ("string", "integer", "number", "boolean", "array", "object")
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}

_PROMPT_FIELDS = {"name", "title", "description", "arguments", "messages"}
_ARGUMENT_FIELDS = {"name", "description", "required", "type", "completion"}
_MESSAGE_FIELDS = {"role", "content"}
_CONTENT_FIELDS = {"type", "text", "data", "mimeType", "uri"}
_RESOURCE_FIELDS = {"uri", "name", "title", "description", "mimeType", "type", "sql", "data"}
_RESOURCE_FIELDS |= {"parameters"}
_PARAMETER_FIELDS = {"name", "description", "completion"}
_TOOL_FIELDS = {"name", "title", "description", "type", "language", "returns", "timeout"}
_TOOL_FIELDS |= {"input_schema", "sql", "code", "allow_writes"}


class _Bad(Exception):
    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.more: list[_Bad] = []  # further problems found by the same look


class _Entry:
    """One mapping of the file, read field by field with the type each must have."""

    def __init__(self, value: Any, what: str, line: int) -> None:
        if not isinstance(value, Located):
            raise _Bad(f"{what} must be a mapping of fields", line)
        self.value = value

    def line(self, key: str | None = None) -> int:
        return self.value.lines.get(key, self.value.line) if key else self.value.line

    def only(self, allowed: set[str]) -> None:
        unknown = [
            _Bad(
                f"unknown field '{key}' (expected one of {', '.join(sorted(allowed))})",
                self.value.keys_at[key],
            )
            for key in self.value
            if key not in allowed
        ]
        if unknown:
            unknown[0].more = unknown[1:]
            raise unknown[0]

    def text(self, key: str) -> str:
        value = self.value.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise _Bad(f"{key} must be a string", self.line(key))
        return value

    def flag(self, key: str) -> bool:
        value = self.value.get(key, False)
        if not isinstance(value, bool):
            raise _Bad(f"{key} must be true or false", self.line(key))
        return value

    def items(self, key: str) -> list[tuple[Any, int]]:
        value = self.value.get(key)
        if value is None:
            return []
        if not isinstance(value, LocatedList):
            raise _Bad(f"{key} must be a list", self.line(key))
        return list(zip(value, value.lines, strict=True))


def duration_ms(text: str) -> int:
    """A Go-style duration ("30s", "1m30s", "500ms") in milliseconds; ValueError if not."""
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _MS[match.group(2)]
        pos = match.end()
    if not text or pos != len(text):
        raise ValueError(f'invalid timeout "{text}" (use a duration such as 30s, 1m or 500ms)')
    if total < 1:
        raise ValueError(f'timeout "{text}" is under a millisecond')
    return int(total)


class _Writes(Visitor):
    """The first data-modifying statement in a tree (a CTE's too), by its command."""

    COMMANDS: tuple[tuple[type, str], ...] = (
        (ast.InsertStmt, "INSERT"),
        (ast.UpdateStmt, "UPDATE"),
        (ast.DeleteStmt, "DELETE"),
        (ast.MergeStmt, "MERGE"),
    )

    def __init__(self) -> None:
        super().__init__()
        self.command = ""

    def visit(self, ancestors: Any, node: Any) -> None:
        for kind, command in self.COMMANDS:
            if isinstance(node, kind) and not self.command:
                self.command = command


def check_statement(sql: str, what: str, line: int) -> str:
    """One SQL statement, as PostgreSQL's parser reads it (check.py describes it later): the
    command it writes with (INSERT, UPDATE, DELETE, MERGE), or "" when it only reads."""
    try:
        statements = pglast.parse_sql(sql)
    except pglast.parser.ParseError as exc:
        raise _Bad(f"{what}: {exc}", line) from None
    if len(statements) != 1:
        raise _Bad(f"{what} holds {len(statements)} statements; one is allowed", line)
    writes = _Writes()
    writes(statements[0])
    return str(writes.command)


class _Loader:
    def __init__(self, path: str, settings: ServerSettings, reserved: Reserved) -> None:
        self.path = path
        self.settings = settings
        self.reserved = reserved
        self.problems: list[tuple[int, str]] = []  # (line, problem), from every definition
        self.found: list[_Bad] = []  # the problems of the definition being read
        self.templates = {t: UriTemplate.parse(t) for t in reserved.templates}

    @contextmanager
    def noted(self) -> Iterator[None]:
        """A problem found in the block is noted and the reading goes on, so that one start
        shows every problem of a definition, not only its first."""
        try:
            yield
        except _Bad as bad:
            self.found += [bad, *bad.more]

    def each(
        self, kind: str, section: tuple[Any, int] | None, read: Callable[[Any, Where], T]
    ) -> list[T]:
        """Every definition of a section, read; every problem of each is recorded, and only
        the definitions without one are kept."""
        out: list[T] = []
        items = section[0] if section else []
        lines = items.lines if isinstance(items, LocatedList) else []
        for index, value in enumerate(items):
            name = value.get("name") if isinstance(value, Located) else None
            where = Where(kind, index, lines[index], name if isinstance(name, str) else "")
            self.found = []
            read_one: T | None = None
            with self.noted():
                read_one = read(value, where)
            if not self.found and read_one is not None:
                out.append(read_one)
            for bad in self.found:
                line = bad.line or where.line
                self.problems.append((line, f"{self.path}:{line}: {where}: {bad.message}"))
        return out

    def unique(self, seen: set[str], key: str, message: str, line: int) -> None:
        with self.noted():
            if key in seen:
                raise _Bad(message, line)
            seen.add(key)

    def named(
        self, value: Any, kind: str, where: Where, fields: set[str], seen: set[str]
    ) -> tuple[_Entry, str]:
        """A prompt's or tool's fields, and its name: there, and not taken by another."""
        entry = _Entry(value, f"a {kind}", where.line)
        with self.noted():
            entry.only(fields)
        name = ""
        with self.noted():
            name = entry.text("name")
            if not name:
                raise _Bad("name is required")
        if name:
            self.unique(seen, name, f"duplicate {kind} name: {name}", entry.line("name"))
        return entry, name

    def argument(self, value: Any, line: int, fields: set[str]) -> ArgumentSpec:
        entry = _Entry(value, "an argument", line)
        with self.noted():
            entry.only(fields)
        name = entry.text("name")
        if not name:
            raise _Bad("argument name is required", entry.line())
        kind = entry.text("type") or "string"
        with self.noted():
            if kind not in ("string", "boolean"):
                raise _Bad(
                    f'argument {name}: invalid type "{kind}" (must be string or boolean)',
                    entry.line("type"),
                )
        completion = entry.text("completion") or None
        if completion is not None:
            with self.noted():
                what = f"argument {name}: completion"
                check_statement(completion, what, entry.line("completion"))
        required = True
        if "required" in fields:
            with self.noted():
                required = entry.flag("required")
        return ArgumentSpec(
            name=name,
            description=entry.text("description"),
            required=required,
            completion=completion,
            boolean=kind == "boolean",
        )

    # --- prompts

    def prompt(
        self, value: Any, where: Where, seen: set[str], uris: Callable[[str], bool]
    ) -> PromptSpec:
        entry, name = self.named(value, "prompt", where, _PROMPT_FIELDS, seen)
        with self.noted():
            if name in self.reserved.prompts:
                raise _Bad(f"name {name} is a built-in prompt", entry.line("name"))
        messages: list[tuple[Any, int]] = []
        with self.noted():
            messages = entry.items("messages")
            if not messages:
                raise _Bad("at least one message is required", entry.line("messages"))
        arguments = []
        with self.noted():
            for v, line in entry.items("arguments"):
                with self.noted():
                    arguments.append(self.argument(v, line, _ARGUMENT_FIELDS))
        names: set[str] = set()
        for argument in arguments:
            self.unique(
                names,
                argument.name,
                f"duplicate argument name: {argument.name}",
                entry.line("arguments"),
            )
        read = []
        for j, (message, line) in enumerate(messages):
            before = len(self.found)
            with self.noted():
                read.append(self.message(message, line, names, uris))
            self.found[before:] = [
                _Bad(f"message {j}: {bad.message}", bad.line or line) for bad in self.found[before:]
            ]
        return PromptSpec(
            where, name, entry.text("title"), entry.text("description"), arguments, read
        )

    def message(
        self, value: Any, line: int, arguments: set[str], uris: Callable[[str], bool]
    ) -> MessageSpec:
        entry = _Entry(value, "a message", line)
        with self.noted():
            entry.only(_MESSAGE_FIELDS)
        role = entry.text("role")
        with self.noted():
            if role == "system":
                raise _Bad(
                    'invalid role "system": MCP prompts have only user and assistant '
                    "messages; put system instructions in a user message",
                    entry.line("role"),
                )
            if role not in ("user", "assistant"):
                raise _Bad(f'invalid role "{role}" (must be user or assistant)', entry.line("role"))
        content = _Entry(entry.value.get("content"), "content", entry.line("content"))
        with self.noted():
            content.only(_CONTENT_FIELDS)
        kind = content.text("type")
        text, data, mime, uri = (content.text(k) for k in ("text", "data", "mimeType", "uri"))
        if kind == "text":
            if not text:
                raise _Bad("text content requires 'text' field", content.line())
            self.placeholders(text, arguments, content.line("text"))
        elif kind == "image":
            if not data:
                raise _Bad("image content requires 'data' field", content.line())
            if not mime:
                raise _Bad("image content requires 'mimeType' field", content.line())
            try:
                base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise _Bad("image content 'data' is not base64", content.line("data")) from None
        elif kind == "resource":
            if not uri:
                raise _Bad("resource content requires 'uri' field", content.line())
            self.placeholders(uri, arguments, content.line("uri"))
            if not PLACEHOLDER.search(uri) and not uris(uri):
                raise _Bad(
                    f"resource content uri {uri} is not a resource of this server",
                    content.line("uri"),
                )
        else:
            raise _Bad(
                f'invalid content type "{kind}" (must be text, image, or resource)',
                content.line("type"),
            )
        return MessageSpec(
            cast(Literal["user", "assistant"], role),
            cast(Literal["text", "image", "resource"], kind),
            text=text,
            data=data,
            mime_type=mime,
            uri=uri,
        )

    @staticmethod
    def placeholders(text: str, arguments: set[str], line: int) -> None:
        names = []
        while (section := SECTION.search(text)) is not None:
            names.append(section.group(2))
            text = text[: section.start()] + section.group(3) + text[section.end() :]
        bad = [
            _Bad(f"template references undefined argument: {name}", line)
            for name in dict.fromkeys([*names, *PLACEHOLDER.findall(text)])
            if name not in arguments
        ]
        bad += [
            _Bad(f"section {tag.group(0)} is not closed ({{{{#name}}}}...{{{{/name}}}})", line)
            for tag in _TAG.finditer(text)
        ]
        if bad:
            bad[0].more = bad[1:]
            raise bad[0]

    # --- resources

    def resource(self, value: Any, where: Where, seen: set[str]) -> ResourceSpec:
        entry = _Entry(value, "a resource", where.line)
        with self.noted():
            entry.only(_RESOURCE_FIELDS)
        uri, name, kind = entry.text("uri"), entry.text("name"), entry.text("type")
        for field, given in (("uri", uri), ("name", name), ("type", kind)):
            with self.noted():
                if not given:
                    raise _Bad(f"{field} is required")
        if uri:
            self.unique(seen, uri, f"duplicate resource URI: {uri}", entry.line("uri"))
        if kind and kind not in ("sql", "static"):
            raise _Bad(f'invalid type "{kind}" (must be sql or static)', entry.line("type"))
        mime = entry.text("mimeType") or (TSV if kind == "sql" else JSON)
        if kind == "sql":
            with self.noted():
                if not entry.text("sql").strip():
                    raise _Bad("sql type requires 'sql' field")
                check_statement(entry.text("sql"), "sql", entry.line("sql"))
            with self.noted():
                if mime not in (TSV, JSON):
                    raise _Bad(
                        f"sql resources are served as {TSV} (the default) or {JSON}, not {mime}",
                        entry.line("mimeType"),
                    )
        elif kind and ("data" not in entry.value or entry.value["data"] is None):
            with self.noted():
                raise _Bad("static type requires 'data' field")
        parameters: list[ArgumentSpec] = []
        if uri:
            with self.noted():
                parameters = self.template(entry, uri, kind)
        return ResourceSpec(
            where,
            uri,
            name,
            entry.text("title"),
            entry.text("description"),
            cast(Literal["sql", "static"], kind),
            mime,
            sql=entry.text("sql"),
            data=to_plain(entry.value.get("data")),
            parameters=parameters,
        )

    def template(self, entry: _Entry, uri: str, kind: str) -> list[ArgumentSpec]:
        """A template's parameters (none for a fixed URI), checked against the built-ins."""
        line = entry.line("uri")
        if "://" not in uri:
            raise _Bad(f"uri {uri} needs a scheme, such as custom://{uri}", line)
        try:
            parsed = UriTemplate.parse(uri)
        except ValueError as exc:
            raise _Bad(f"invalid uri template {uri}: {exc}", line) from None
        variables = list(parsed.variable_names)
        if not variables:
            if uri in self.reserved.resources or any(
                t.match(uri) is not None for t in self.templates.values()
            ):
                raise _Bad(f"uri {uri} is a built-in resource", line)
            if entry.value.get("parameters") is not None:
                raise _Bad("parameters are for a uri with {parameters}", entry.line("parameters"))
            return []
        if uri in self.reserved.templates:
            raise _Bad(f"uri {uri} is a built-in resource template", line)
        if kind != "sql":
            raise _Bad("a static resource cannot have {parameters} in its uri", line)
        given = {}
        for value, at in entry.items("parameters"):
            with self.noted():
                parameter = self.argument(value, at, _PARAMETER_FIELDS)
                if parameter.name not in variables:
                    raise _Bad(f"parameter {parameter.name} is not in the uri {uri}", at)
                given[parameter.name] = parameter
        optional = set(parsed.query_variable_names)
        return [
            ArgumentSpec(v, given[v].description, v not in optional, given[v].completion)
            if v in given
            else ArgumentSpec(v, "", v not in optional)
            for v in variables
        ]

    # --- tools

    def tool(self, value: Any, where: Where, seen: set[str]) -> ToolSpec:
        entry, name = self.named(value, "tool", where, _TOOL_FIELDS, seen)
        with self.noted():
            if name and not _TOOL_NAME.fullmatch(name):
                raise _Bad(
                    f'invalid name "{name}" (letters, digits, _, - and . only, at most 128)',
                    entry.line("name"),
                )
            if name in self.reserved.tools:
                raise _Bad(f"name {name} is a built-in tool", entry.line("name"))
        schema: dict[str, Any] = {}
        with self.noted():
            schema = self.input_schema(entry)
        timeout = entry.value.get("timeout")
        timeout_ms = None
        with self.noted():
            try:
                timeout_ms = None if timeout is None else duration_ms(str(timeout))
            except ValueError as exc:
                raise _Bad(str(exc), entry.line("timeout")) from None
        allow_writes = False
        with self.noted():
            allow_writes = entry.flag("allow_writes")
        kind = entry.text("type")
        if not kind:
            raise _Bad("type is required")
        if kind not in ("sql", "pl-do", "pl-func"):
            raise _Bad(
                f'invalid type "{kind}" (must be sql, pl-do, or pl-func)', entry.line("type")
            )
        sql, language, code, returns = (
            entry.text(k) for k in ("sql", "language", "code", "returns")
        )
        returns_set, statement, writes = False, "", ""
        if kind == "sql":
            if not sql.strip():
                raise _Bad("sql type requires 'sql' field")
            writes = check_statement(sql, "sql", entry.line("sql"))
        if kind != "sql":
            for field, given in (("language", language), ("code", code)):
                with self.noted():
                    if not given.strip():
                        raise _Bad(f"{kind} type requires '{field}' field")
            with self.noted():
                if kind == "pl-func" and not returns.strip():
                    raise _Bad("pl-func type requires 'returns' field")
            if language:
                with self.noted():
                    self.language(language, entry.line("language"))
            if language and code.strip() and (kind != "pl-func" or returns.strip()):
                returns_set, statement = self.code(kind, language, returns, code, entry)
        return ToolSpec(
            where,
            name,
            entry.text("title"),
            entry.text("description"),
            cast(ToolType, kind),
            schema,
            sql=sql,
            language=language,
            code=code,
            returns=returns,
            returns_set=returns_set,
            statement=statement,
            function=plcode.function_name(language, returns, code) if kind == "pl-func" else "",
            timeout_ms=timeout_ms,
            allow_writes=allow_writes,
            writes=writes,
        )

    def input_schema(self, entry: _Entry) -> dict[str, Any]:
        line = entry.line("input_schema")
        raw = entry.value.get("input_schema")
        if raw is None:  # pgEdge accepts a tool without one: it takes no arguments
            return {"type": "object", "properties": {}}
        schema = _Entry(raw, "input_schema", line)
        kind = schema.value.get("type", "object")
        if kind != "object":
            raise _Bad(f"input_schema: type must be 'object', got \"{kind}\"", line)
        properties = schema.value.get("properties") or Located()
        if not isinstance(properties, Located):
            raise _Bad("input_schema: properties must be a mapping", line)
        before = len(self.found)
        for name, prop in properties.items():
            with self.noted():
                self.property(prop, f'input_schema: property "{name}"', properties.lines[name])
        required = schema.value.get("required") or []
        if not isinstance(required, list):
            raise _Bad("input_schema: required must be a list", schema.line("required"))
        for name in required:
            with self.noted():
                if name not in properties:
                    raise _Bad(
                        f'input_schema: required property "{name}" not found in properties',
                        schema.line("required"),
                    )
        if len(self.found) > before:
            return {}
        plain: dict[str, Any] = to_plain(schema.value)
        plain.setdefault("type", "object")
        plain.setdefault("properties", {})
        try:
            Draft202012Validator.check_schema(plain)
        except SchemaError as exc:
            raise _Bad(f"input_schema: {exc.message}", line) from None
        return plain

    def property(self, prop: Any, what: str, line: int) -> None:
        if not isinstance(prop, Located):
            raise _Bad(f"{what}: must be a mapping", line)
        kind = prop.get("type")
        if not kind:
            raise _Bad(f"{what}: type is required", line)
        if kind not in _PROPERTY_TYPES:
            raise _Bad(
                f'{what}: invalid type "{kind}" (must be string, integer, number, '
                "boolean, array, or object)",
                prop.lines.get("type", line),
            )
        if kind == "array" and prop.get("items") is not None:
            self.property(prop["items"], f"{what}: items", prop.lines["items"])

    def language(self, language: str, line: int) -> None:
        if not _LANGUAGE.fullmatch(language):
            raise _Bad(
                f'invalid language "{language}" (must be alphanumeric, for example '
                "plpgsql or plpython3u)",
                line,
            )
        if language.lower() in ("c", "internal"):
            raise _Bad(f"language {language} runs compiled code, not code of this file", line)
        allowed = self.settings.allowed_pl_languages
        if "*" not in allowed and language not in allowed:
            raise _Bad(
                f"language {language} is not allowed (MCP_ALLOWED_PL_LANGUAGES is "
                f"{','.join(allowed) or 'empty'})",
                line,
            )

    @staticmethod
    def code(kind: str, language: str, returns: str, code: str, entry: _Entry) -> tuple[bool, str]:
        """Check what can be checked without the database. Whether the function returns rows,
        and the statement (DO or CREATE FUNCTION) that runs the code."""
        returns_set = False
        if kind == "pl-func":
            try:
                returns_set = plcode.returns_set(returns)
            except ValueError:
                raise _Bad(
                    f'invalid returns "{returns}" (must be an SQL type such as jsonb, '
                    "text or TABLE(name text, n bigint))",
                    entry.line("returns"),
                ) from None
        try:
            if kind == "pl-do":
                statement = plcode.do_block(language, code)
                if language == "plpgsql":
                    plcode.check_plpgsql(code)
            else:
                statement = plcode.create_function(language, returns, code)
        except ValueError as exc:
            raise _Bad(f"code: {exc}", entry.line("code")) from None
        return returns_set, statement


def load(path: str, settings: ServerSettings, reserved: Reserved) -> Definitions:
    """The validated definitions of the file at `path`; DefinitionsError lists every problem."""
    defs, problems = read(path, settings, reserved)
    if problems:
        raise DefinitionsError(problems)
    return defs


def read(path: str, settings: ServerSettings, reserved: Reserved) -> tuple[Definitions, list[str]]:
    """The definitions of the file at `path` that are valid, and every problem of the others
    (in the order of their lines); DefinitionsError when the file itself cannot be read."""
    if Path(path).suffix.lower() not in (".yaml", ".yml"):
        raise DefinitionsError([f"{path}: a definitions file must end in .yaml or .yml"])
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DefinitionsError([f"{path}: cannot read the file: {exc}"]) from None
    try:
        document = load_yaml(text) if text.strip() else Located()
    except YamlProblem as problem:
        raise DefinitionsError([f"{path}:{problem.line}: {problem.message}"]) from None
    return parse(path, document, settings, reserved)


def parse(
    path: str, document: Any, settings: ServerSettings, reserved: Reserved
) -> tuple[Definitions, list[str]]:
    top = _Loader(path, settings, reserved)
    if document is None:
        document = Located()
    try:
        entry = _Entry(document, "the file", 1)
        entry.only({"prompts", "resources", "tools"})
        sections = {
            k: (entry.value.get(k) or LocatedList(), entry.line(k))
            for k in ("prompts", "resources", "tools")
        }
        for key, (value, line) in sections.items():
            if not isinstance(value, list):
                raise _Bad(f"{key} must be a list", line)
    except _Bad as bad:
        raise DefinitionsError(
            [f"{path}:{b.line or 1}: {b.message}" for b in (bad, *bad.more)]
        ) from None
    # Resources first: a prompt's resource content must name one of them (or one of the
    # file's that has problems of its own, so that a prompt is not reported for those).
    seen: set[str] = set()
    resources = top.each("resource", sections["resources"], lambda v, w: top.resource(v, w, seen))
    fixed = {r.uri for r in resources if not r.is_template} | reserved.resources
    fixed |= {v["uri"] for v in sections["resources"][0] if isinstance(v, Located) and "uri" in v}
    templates = [UriTemplate.parse(r.uri) for r in resources if r.is_template]
    templates += list(top.templates.values())

    def served(uri: str) -> bool:
        return uri in fixed or any(t.match(uri) is not None for t in templates)

    names: set[str] = set()
    prompts = top.each("prompt", sections["prompts"], lambda v, w: top.prompt(v, w, names, served))
    tool_names: set[str] = set()
    tools = top.each("tool", sections["tools"], lambda v, w: top.tool(v, w, tool_names))
    problems = [problem for _, problem in sorted(top.problems, key=lambda p: p[0])]
    return Definitions(path, prompts, resources, tools), problems
